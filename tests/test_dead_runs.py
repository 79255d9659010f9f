"""Dead runs found (issue 21): a run records its host, process and a heartbeat; the next run (and
`gradexp compare`) on the store marks KILLED a RUNNING run whose process is gone on this host, or
whose heartbeat is older than tracking.stale_after; `trainer.resume` restarts a run killed before
its first checkpoint from epoch 0, as a new run. Real processes where the crash is the point,
real MLflow sqlite stores."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import conftest
from conftest import empty_store, finish, spawn_cli
from gradexp.tag_keys import HEARTBEAT_TAG, HOST_TAG, PID_TAG, REASON_TAG


def run(store: str, *overrides: str, tmp_path: Path, quiet: bool = True):
    return conftest.run(store, "gradcheck=off", "tracking.log_model=false", *overrides,
                        launch_dir=tmp_path, quiet=quiet)


def running_run(client, *, host: str, pid: int, minutes_ago: float | None,
                parent: str | None = None, experiment: str = "gradexp") -> str:
    """A RUNNING run as another gradexp process would have left it."""
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    tags = {HOST_TAG: host, PID_TAG: str(pid)}
    if minutes_ago is not None:
        beat = datetime.now(timezone.utc) - timedelta(minutes=minutes_ago)
        tags[HEARTBEAT_TAG] = beat.isoformat(timespec="seconds")
    if parent:
        tags["mlflow.parentRunId"] = parent
    return client.create_run(experiment_id, tags=tags).info.run_id


def gone_pid() -> int:
    """The id of a process that ran on this host and has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def status(client, run_id: str) -> str:
    return client.get_run(run_id).info.status


# ---------------------------------------------------------------- the judging, in-process
def test_a_stale_heartbeat_elsewhere_is_marked_killed_and_a_fresh_one_is_not(store, client,
                                                                              tmp_path, capsys):
    started = time.time()
    stale = running_run(client, host="node-17", pid=4242, minutes_ago=25)
    fresh = running_run(client, host="node-18", pid=4242, minutes_ago=1)
    unknown = running_run(client, host="node-19", pid=4242, minutes_ago=None)  # not gradexp's
    # a sweep parent elsewhere: its own heartbeat is old, a child of it beats
    parent = running_run(client, host="login-1", pid=77, minutes_ago=60)
    child = running_run(client, host="node-20", pid=88, minutes_ago=0.5, parent=parent)
    result = run(store, "trainer.epochs=3", tmp_path=tmp_path)

    assert status(client, stale) == "KILLED"
    reason = client.get_run(stale).data.tags[REASON_TAG]
    # 25 minutes, or a minute more when a loaded machine took that long to get here
    minutes = int(re.fullmatch(r"marked KILLED: no heartbeat for (\d+) minutes", reason)[1])
    assert 25 <= minutes <= 25 + (time.time() - started) / 60 + 1
    assert f"marked run {stale} {reason[len('marked '):]}" in capsys.readouterr().err
    for alive in (fresh, unknown, parent, child):
        assert status(client, alive) == "RUNNING", alive
    # its end is when it was last heard of, not when it was found
    assert client.get_run(stale).info.end_time < time.time() * 1000 - 24 * 60_000
    tags = client.get_run(result.run_id).data.tags  # and this run says where it runs
    assert tags[HOST_TAG] == socket.gethostname() and tags[PID_TAG] == str(os.getpid())
    assert datetime.fromisoformat(tags[HEARTBEAT_TAG]) > datetime.now(timezone.utc) - \
        timedelta(minutes=5)


def test_tracking_stale_after_sets_how_old_a_heartbeat_may_be(store, client, tmp_path):
    quiet = running_run(client, host="node-17", pid=4242, minutes_ago=25)
    run(store, "trainer.epochs=3", "tracking.stale_after=30", tmp_path=tmp_path)
    assert status(client, quiet) == "RUNNING"
    run(store, "trainer.epochs=3", "tracking.stale_after=20", tmp_path=tmp_path)
    assert status(client, quiet) == "KILLED"


@pytest.mark.slow
def test_on_this_host_the_process_decides(store, client, tmp_path, capsys):
    here = socket.gethostname()
    pid = gone_pid()
    dead = running_run(client, host=here, pid=pid, minutes_ago=0)  # fresh, but its process is gone
    mine = running_run(client, host=here, pid=os.getpid(), minutes_ago=120)  # this process's
    alive = running_run(client, host=here, pid=os.getppid(), minutes_ago=120)  # a live process
    # a parent whose process is gone, but whose child (another process, alive) still trains
    parent = running_run(client, host=here, pid=pid, minutes_ago=30)
    child = running_run(client, host=here, pid=os.getppid(), minutes_ago=0, parent=parent)
    # a packed group: children of one process, gone; their parent's process gone too
    group = running_run(client, host=here, pid=pid, minutes_ago=0)
    packed = [running_run(client, host=here, pid=pid, minutes_ago=0, parent=group)
              for _ in range(2)]
    # a process killed but not yet reaped by its parent (a zombie) runs no more
    zombie = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    zombie.kill()
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # it ended; not reaped
    undead = running_run(client, host=here, pid=zombie.pid, minutes_ago=0)
    try:
        run(store, "trainer.epochs=3", tmp_path=tmp_path)
    finally:
        zombie.wait()

    err = capsys.readouterr().err
    for run_id, gone in ((dead, pid), (group, pid), *((p, pid) for p in packed),
                         (undead, zombie.pid)):
        assert status(client, run_id) == "KILLED", run_id
        assert f"marked run {run_id} KILLED: its process {gone} on {here} is gone" in err
    for run_id in (mine, alive, parent, child):
        assert status(client, run_id) == "RUNNING", run_id


@pytest.mark.heavy  # ~3 s
def test_gradexp_compare_marks_dead_runs_too(store, client, tmp_path, capsys):
    from gradexp.compare import main

    run(store, "trainer.epochs=3", tmp_path=tmp_path)
    stale = running_run(client, host="node-17", pid=4242, minutes_ago=11, experiment="other")
    assert main(["--tracking-uri", store]) == 0
    assert status(client, stale) == "KILLED"
    assert f"marked run {stale} KILLED: no heartbeat for 11 minutes" in capsys.readouterr().err


def test_the_heartbeat_is_refreshed_at_most_every_30_seconds(store, client):
    from gradexp.mlflow_store import MlflowTracker

    tracker = MlflowTracker(store, "gradexp", "beating")
    old = "2020-01-01T00:00:00+00:00"
    client.set_tag(tracker.run_id, HEARTBEAT_TAG, old)
    tracker.heartbeat()  # at a stretch end: less than 30 s since the last, nothing written
    tracker.wait()
    assert client.get_run(tracker.run_id).data.tags[HEARTBEAT_TAG] == old
    tracker._last_heartbeat -= 30  # as if 30 s had passed
    tracker.heartbeat()
    tracker.end("FINISHED")
    beat = datetime.fromisoformat(client.get_run(tracker.run_id).data.tags[HEARTBEAT_TAG])
    assert beat > datetime.now(timezone.utc) - timedelta(minutes=5)


def test_tracking_stale_after_must_be_positive(store, tmp_path):
    from gradexp.schema import ConfigError

    with pytest.raises(ConfigError,
                       match=r"tracking.stale_after=0(\.0)?: must be a number of minutes > 0"):
        run(store, "tracking.stale_after=0", tmp_path=tmp_path)


# ---------------------------------------------------------------- resume: the line, the count
@pytest.mark.heavy  # ~3 s
def test_a_resumed_run_says_where_it_resumes_and_counts_the_checks_of_both_parts(
        store, client, tmp_path, capsys):
    checks = ("gradcheck=default", "gradcheck.every_n_epochs=10", "trainer.checkpoint_every=10")
    first = run(store, "trainer.epochs=40", *checks, tmp_path=tmp_path)  # checks at 0, 10, .. 40
    capsys.readouterr()
    again = run(store, f"trainer.resume={first.run_id}", "trainer.epochs=80", tmp_path=tmp_path,
                quiet=False)  # checks at 50, 60, 70 and 80
    out = capsys.readouterr().out
    checkpoint = tmp_path / "checkpoints" / first.run_id / "ckpt-40"
    assert f"resuming run {first.run_id} from epoch 40 (checkpoint {checkpoint})" in out
    assert again.run_id == first.run_id
    assert re.search(r"gradient check\s*│\s*passed \(9 checks;", out), out[-2000:]
    steps = sorted(m.step for m in client.get_metric_history(first.run_id, "gradcheck/passed"))
    assert steps == [0, 10, 20, 30, 40, 50, 60, 70, 80]  # what the 9 counts


# ---------------------------------------------------------------- kill -9, for real
def wait_until_training(client, experiment: str, process, timeout: float = 180) -> str:
    """The run id, once the child's run is in the store as RUNNING with loss points: it
    trains (its config.yaml, which a restart reads, went in before)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = client.get_experiment_by_name(experiment)
        if found is not None:
            runs = client.search_runs([found.experiment_id],
                                      filter_string="attributes.status = 'RUNNING'")
            if runs and "loss" in runs[0].data.metrics:
                return runs[0].info.run_id
        assert process.poll() is None, "the run ended before it was seen RUNNING"
        time.sleep(0.05)
    raise AssertionError("no RUNNING run appeared")


@pytest.mark.slow
def test_kill_9_before_the_first_checkpoint_is_found_marked_and_restarted(tmp_path, capsys):
    from mlflow import MlflowClient

    store = empty_store(tmp_path)  # made before the run starts, so only one process creates it
    client = MlflowClient(store)
    crashed = spawn_cli("trainer.epochs=100000", "gradcheck=off", "tracking.log_model=false",
                        "trainer.checkpoint_every=99999", cwd=tmp_path)
    killed = wait_until_training(client, "gradexp", crashed)
    crashed.send_signal(signal.SIGKILL)
    finish(crashed, 30)
    assert status(client, killed) == "RUNNING"  # kill -9: nothing could end it
    assert not list(tmp_path.glob("checkpoints/*/ckpt-*"))  # before its first checkpoint

    run(store, "trainer.epochs=3", tmp_path=tmp_path)  # the next run on the store finds it
    reason = f"its process {crashed.pid} on {socket.gethostname()} is gone"
    assert f"marked run {killed} KILLED: {reason}" in capsys.readouterr().err
    assert status(client, killed) == "KILLED"
    assert client.get_run(killed).data.tags[REASON_TAG] == f"marked KILLED: {reason}"
    points = client.get_metric_history(killed, "loss")
    assert points

    restarted = run(store, f"trainer.resume={killed}", tmp_path=tmp_path)
    err = capsys.readouterr().err
    assert f"run {killed} was killed before its first checkpoint: restarting it from epoch 0 " \
           f"as run {restarted.run_id}" in err
    assert restarted.run_id != killed and restarted.epochs == 100000
    new = client.get_run(restarted.run_id)
    assert new.info.status == "FINISHED"
    assert new.data.tags["gradexp.restart_of"] == killed
    assert "gradexp.resumed_from_epoch" not in new.data.tags  # from epoch 0, not resumed
    assert min(m.step for m in client.get_metric_history(restarted.run_id, "loss")) == 1
    assert new.data.params["trainer.epochs"] == "100000"  # the killed run's config
    assert new.data.params["trainer.resume"] == "None"  # the same params as the killed run's
    # the killed run keeps what it had
    assert status(client, killed) == "KILLED"
    assert len(client.get_metric_history(killed, "loss")) == len(points)


def test_a_sweeps_jobs_in_one_process_search_for_dead_runs_once_a_heartbeat_period(
        store, client, monkeypatch):
    """A sweep's first job marks the dead runs; its later jobs in the same process skip the
    search of the store (~30 ms a job) until HEARTBEAT_SECONDS have passed."""
    from gradexp import liveness

    first = running_run(client, host="node-17", pid=4242, minutes_ago=25)
    assert liveness.mark_dead_in_experiment(store, "gradexp", 10, parent_run_id="p1") == [first]
    later = running_run(client, host="node-17", pid=4243, minutes_ago=25)
    assert liveness.mark_dead_in_experiment(store, "gradexp", 10, parent_run_id="p1") == []
    assert status(client, later) == "RUNNING"
    # another sweep, or a run on its own, searches as before
    assert liveness.mark_dead_in_experiment(store, "gradexp", 10, parent_run_id="p2") == [later]
    again = running_run(client, host="node-17", pid=4244, minutes_ago=25)
    assert liveness.mark_dead_in_experiment(store, "gradexp", 10) == [again]
    monkeypatch.setattr(liveness, "HEARTBEAT_SECONDS", 0.0)  # the period over
    last = running_run(client, host="node-17", pid=4245, minutes_ago=25)
    assert liveness.mark_dead_in_experiment(store, "gradexp", 10, parent_run_id="p1") == [last]
