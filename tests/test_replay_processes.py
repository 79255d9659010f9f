"""hydra.launcher.processes: a packed sweep's jobs replayed by helper processes beside the
launcher's own (gradexp.packed.replay_processes), each recorded as one process records it."""

from __future__ import annotations

import math
import signal
import time

import pytest
from mlflow import MlflowClient

import gradexp
from conftest import artifact_paths, empty_store, finish, run_cli, spawn_cli
from gradexp.tag_keys import REASON_TAG

# Three optimizers x three seeds, checks on as by default: six jobs packed, and three that run
# sequentially (rmsprop has no stateless update), which a helper may take as well
SWEEP = ("hydra/launcher=packed", "optimizer=sgd,adam,rmsprop", "seed=0,1,2",
         "trainer.epochs=30", "tracking.log_model=false")
# What differs between any two runs whatever recorded them
PER_RUN_TAGS = {"mlflow.runName", "mlflow.source.name", "mlflow.source.type", "mlflow.user",
                "gradexp.host", "gradexp.pid", "gradexp.heartbeat", "mlflow.parentRunId",
                "gradexp.checkpoints", "gradexp.packed_drift"}


def children(store: str) -> dict[tuple[str, str], object]:
    """A sweep's child runs by (optimizer, seed)."""
    runs = MlflowClient(store).search_runs(["1"])
    return {(run.data.params["optimizer.name"], run.data.params["seed"]): run
            for run in runs if "mlflow.parentRunId" in run.data.tags}


@pytest.mark.slow
def test_jobs_replayed_in_two_processes_record_what_one_process_records(tmp_path):
    two, one = tmp_path / "two", tmp_path / "one"
    # the default store (mlflow.db in the launch folder) in both: the same tracking.uri param
    helped = empty_store(two)
    done = run_cli("-m", "hydra.launcher.processes=2", *SWEEP, cwd=two)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _helpers_running_in(two) == []  # the one started as the sweep began, ended with it
    alone = empty_store(one)
    gradexp.sweep(*SWEEP, launch_dir=one)  # gradexp.sweep replays in its own process

    replayed, expected = children(helped), children(alone)
    assert sorted(replayed) == sorted(expected) and len(expected) == 9
    # both processes recorded jobs: the helper always gets the last one
    assert len({run.data.tags["gradexp.pid"] for run in replayed.values()}) == 2
    for key, run in replayed.items():
        reference = expected[key]
        assert run.info.status == reference.info.status == "FINISHED"
        assert run.data.params == reference.data.params
        assert set(run.data.metrics) == set(reference.data.metrics)
        for name, value in reference.data.metrics.items():
            assert math.isclose(run.data.metrics[name], value, rel_tol=1e-6, abs_tol=1e-9), \
                (key, name, run.data.metrics[name], value)
        assert {k: v for k, v in run.data.tags.items() if k not in PER_RUN_TAGS} == \
            {k: v for k, v in reference.data.tags.items() if k not in PER_RUN_TAGS}
        assert artifact_paths(MlflowClient(helped), run.info.run_id) == \
            artifact_paths(MlflowClient(alone), reference.info.run_id)
    (parent,) = [run for run in MlflowClient(helped).search_runs(["1"])
                 if run.data.tags.get("gradexp.sweep") == "true"]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["gradexp.best_run_id"] in {r.info.run_id for r in replayed.values()}


@pytest.mark.slow
def test_sigterm_stops_the_helpers_jobs_too(tmp_path):
    # SIGTERM reaches the launcher only (`kill PID`, a scheduler): it stops its helper, whose
    # running job ends KILLED as the launcher's own does; no run is left RUNNING
    store = empty_store(tmp_path)
    process = spawn_cli("-m", "hydra.launcher.processes=2", f"tracking.uri={store}",
                        "hydra/launcher=packed", "optimizer=sgd,adam", "trainer.seed=range(0,12)",
                        "trainer.epochs=200", cwd=tmp_path)
    client = MlflowClient(store)
    deadline = time.monotonic() + 240
    pids: set[str] = set()
    # until the helper (which starts first: it plans while the launcher imports TensorFlow) has
    # opened a child run: the launcher may be importing or running its own job
    while not pids - {str(process.pid)} and process.poll() is None \
            and time.monotonic() < deadline:
        try:
            pids = {r.data.tags.get("gradexp.pid") for r in client.search_runs(["1"])
                    if "mlflow.parentRunId" in r.data.tags}
        except Exception:  # noqa: BLE001 - the store is being written
            pass
        time.sleep(0.05)  # polling, not waiting for a fixed time
    if not pids - {str(process.pid)}:
        code = process.poll()
        process.kill()
        raise AssertionError(f"the helper never ran a job (exit {code}); its "
                             f"stderr:\n{process.communicate()[1][-3000:]}")
    process.send_signal(signal.SIGTERM)
    done = finish(process, timeout=180)
    assert done.returncode == 143, done.stderr[-3000:]
    runs = client.search_runs(["1"])
    assert "RUNNING" not in {run.info.status for run in runs}
    assert len([run for run in runs if "mlflow.parentRunId" in run.data.tags]) < 24


@pytest.mark.slow
def test_a_helper_that_dies_stops_the_sweep_in_one_line(tmp_path):
    # e.g. the system's OOM killer: nothing in the helper can say it, so the launcher does
    import os

    store = empty_store(tmp_path)
    process = spawn_cli("-m", "hydra.launcher.processes=2", f"tracking.uri={store}",
                        "hydra/launcher=packed", "optimizer=sgd,adam", "trainer.seed=range(0,12)",
                        "trainer.epochs=200", cwd=tmp_path)
    client = MlflowClient(store)
    deadline = time.monotonic() + 240
    pids: set[str] = set()
    # until both processes have opened a child run (the helper starts first: it plans while the
    # launcher imports TensorFlow), so the launcher has runs of its own to keep
    while len(pids) < 2 and process.poll() is None and time.monotonic() < deadline:
        try:
            pids = {r.data.tags.get("gradexp.pid") for r in client.search_runs(["1"])
                    if "mlflow.parentRunId" in r.data.tags}
        except Exception:  # noqa: BLE001 - the store is being written
            pass
        time.sleep(0.05)  # polling, not waiting for a fixed time
    helper = next((pid for pid in pids if pid != str(process.pid)), None)
    assert len(pids) == 2 and helper is not None, process.communicate()[1][-3000:]
    os.kill(int(helper), signal.SIGKILL)
    done = finish(process, timeout=180)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1].startswith(
        "error: a replay process (hydra.launcher.processes) ended before its jobs did (EOFError")
    assert "Traceback" not in done.stderr
    runs = client.search_runs(["1"])
    (parent,) = [run for run in runs if run.data.tags.get("gradexp.sweep") == "true"]
    # a failure, not an interrupt: FAILED, with the line that stopped it as its reason
    assert parent.info.status == "FAILED"
    assert parent.data.tags[REASON_TAG].startswith(
        "the sweep stopped before its end: a replay process (hydra.launcher.processes) ended")
    ours = {run.info.status for run in runs if run.data.tags.get("gradexp.pid") == str(process.pid)
            and "mlflow.parentRunId" in run.data.tags}
    assert ours == {"FINISHED"}  # the launcher's own runs, stored before it stopped


@pytest.mark.heavy  # ~3 s
def test_processes_below_one_is_one_line_before_any_run(tmp_path, store):
    with pytest.raises(gradexp.GradexpError) as raised:
        gradexp.sweep(f"tracking.uri={store}", "hydra/launcher=packed",
                      "hydra.launcher.processes=0", "optimizer=sgd,adam", "trainer.epochs=2",
                      launch_dir=tmp_path)
    assert str(raised.value) == (
        "hydra.launcher.processes=0: the processes that run a packed sweep's jobs, this one "
        "included, are 1 or more (1, the default: this one alone)")
    assert MlflowClient(store).search_runs(["0", "1"]) == []


@pytest.mark.heavy  # ~5 s
def test_gradexp_sweep_runs_every_job_in_its_own_process_and_says_so(tmp_path, store, capsys):
    results = gradexp.sweep(f"tracking.uri={store}", "hydra/launcher=packed",
                            "hydra.launcher.processes=2", "optimizer=sgd,adam",
                            "trainer.epochs=3", "gradcheck=off", "tracking.log_model=false",
                            launch_dir=tmp_path)
    assert len(results) == 2  # every job's result, none left in another process
    assert "note: hydra.launcher.processes=2: every job runs in this process: gradexp.sweep " \
           "runs every job in its own process, so its list holds every result" \
           in capsys.readouterr().err


def _helpers_running_in(folder) -> list[int]:
    """The replay helper processes whose working folder is `folder` (a sweep launched there)."""
    import os
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes()
            here = os.path.realpath(entry / "cwd")
        except OSError:  # not a process, or one that ended meanwhile
            continue
        if b"gradexp.packed.replay_processes" in command and here == os.path.realpath(folder):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_a_sweep_refused_at_a_jobs_check_leaves_no_helper_running(tmp_path):
    # The helpers start as the sweep begins, before every job is checked (their start
    # overlaps the checks): a job refused there stops them with the sweep. A guard: before
    # that, no helper had started by then.
    store = empty_store(tmp_path)
    done = run_cli("-m", "hydra.launcher.processes=2", f"tracking.uri={store}",
                   "hydra/launcher=packed", "optimizer.learning_rate=0.1,-1", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1].startswith("error: optimizer.learning_rate=-1")
    assert _helpers_running_in(tmp_path) == []
    assert MlflowClient(store).search_runs(["0"]) == []
