"""`trainer.resume` after QA (training controls): a run still training is not resumed by a second
process; a run killed before its first checkpoint is restarted once; a model builder changed
since the run, and a raised trainer.epochs under a schedule that spans the run, are refused in one
line; a resume's overrides are judged against the run's recorded config, not the default one."""

from __future__ import annotations

import os
import socket
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import conftest
from conftest import finish, run_cli, spawn_cli, user_modules
from gradexp.schema import ConfigError
from gradexp.tag_keys import HEARTBEAT_TAG, HOST_TAG, PID_TAG, RESTART_OF_TAG


def run(store: str, *overrides: str, tmp_path: Path):
    return conftest.run(store, "gradcheck=off", "tracking.log_model=false", *overrides,
                        launch_dir=tmp_path)


def points(client, run_id: str, key: str = "loss") -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def gradexp_run(store: str, *overrides: str, tmp_path: Path):
    """gradexp.run, as the command line: its GradexpError carries the line and exit code."""
    import gradexp

    return gradexp.run(f"tracking.uri={store}", "gradcheck=off", "tracking.log_model=false",
                       *overrides, launch_dir=tmp_path)


# ---------------------------------------------------------------- a run still training
def as_if_running(client, run_id: str, host: str, pid: int, minutes_ago: float) -> None:
    """The run RUNNING, as a process `pid` on `host` that beat `minutes_ago` leaves it."""
    beat = datetime.now(timezone.utc) - timedelta(minutes=minutes_ago)
    client.update_run(run_id, "RUNNING")
    for key, value in {HOST_TAG: host, PID_TAG: str(pid),
                       HEARTBEAT_TAG: beat.isoformat(timespec="seconds")}.items():
        client.set_tag(run_id, key, value)


@pytest.mark.heavy  # ~6 s: three runs
def test_a_run_still_running_is_not_resumed_and_a_dead_one_is(store, client, tmp_path):
    import gradexp

    first = run(store, "trainer.epochs=4", "trainer.checkpoint_every=2", tmp_path=tmp_path)
    here, alive = socket.gethostname(), os.getppid()  # a live process on this host
    as_if_running(client, first.run_id, here, alive, minutes_ago=0)
    before = client.get_run(first.run_id)
    losses = points(client, first.run_id)
    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp_run(store, f"trainer.resume={first.run_id}", "trainer.epochs=8",
                    tmp_path=tmp_path)
    assert refused.value.exit_code == 2
    line = refused.value.line
    prefix = (f"trainer.resume={first.run_id}: the run is still RUNNING in process {alive} on "
              f"{here} (its heartbeat is ")
    assert line.startswith(prefix) and line.endswith(" s old); wait for it, or stop it first")
    assert "\n" not in line
    after = client.get_run(first.run_id)  # untouched: still its process's
    assert after.info.status == "RUNNING" and after.data.tags == before.data.tags
    assert points(client, first.run_id) == losses

    # elsewhere, with a fresh heartbeat: alive too, and the line says when it counts as dead
    as_if_running(client, first.run_id, "node-18", 4242, minutes_ago=1)
    with pytest.raises(ConfigError, match=r"still RUNNING in process 4242 on node-18 \(its "
                       r"heartbeat is \d+ s old\); wait for it, or stop it first \(from another "
                       r"host it counts as dead once its heartbeat is tracking.stale_after=10 "
                       r"minutes old\)$"):
        run(store, f"trainer.resume={first.run_id}", "trainer.epochs=8", tmp_path=tmp_path)
    assert client.get_run(first.run_id).info.status == "RUNNING"

    # a stale heartbeat elsewhere is a dead run: it resumes, as before
    as_if_running(client, first.run_id, "node-18", 4242, minutes_ago=25)
    resumed = run(store, f"trainer.resume={first.run_id}", "trainer.epochs=8", tmp_path=tmp_path)
    assert resumed.run_id == first.run_id and resumed.epochs == 8
    assert client.get_run(first.run_id).info.status == "FINISHED"
    steps = [step for step, _ in points(client, first.run_id)]
    assert steps == list(range(1, 9))  # each epoch once


HOLD = '''
import os, time
from pathlib import Path


class Hold:
    """At the first stretch end past epoch 2 (its checkpoint saved), says so in holding.txt and
    waits for go.txt (at most 600 s): the run stays alive, RUNNING, meanwhile."""

    def __init__(self):
        self.held = False

    def stops(self, epochs):
        return set(range(1, epochs))

    def on_stretch_end(self, run, stretch, logs):
        if self.held or run.epoch < 3:
            return
        self.held = True
        Path("holding.txt").write_text(str(os.getpid()))
        deadline = time.monotonic() + 600
        while not Path("go.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
'''


@pytest.mark.slow
def test_a_second_process_cannot_resume_a_run_that_trains(tmp_path):
    # QA: `trainer.resume=ID` of a run alive in another process was taken; both processes
    # wrote the run (steps 3-10 twice) and both saved checkpoints.
    from mlflow import MlflowClient

    (tmp_path / "hold.py").write_text(HOLD)
    store = conftest.empty_store(tmp_path)
    training = spawn_cli("trainer.epochs=6", "trainer.checkpoint_every=2", "gradcheck=off",
                         "tracking.log_model=false", "+callbacks.hold._target_=hold.Hold",
                         cwd=tmp_path)
    deadline = time.monotonic() + 300
    while not (tmp_path / "holding.txt").exists():
        assert training.poll() is None, finish(training, 10).stderr[-3000:]
        assert time.monotonic() < deadline, "the run never reached epoch 3"
        time.sleep(0.05)
    (folder,) = tmp_path.glob("checkpoints/*")
    run_id = folder.name
    try:
        second = run_cli(f"trainer.resume={run_id}", cwd=tmp_path, timeout=300)
    finally:
        (tmp_path / "go.txt").write_text("")
    first = finish(training, 300)
    assert second.returncode == 2, second.stderr[-3000:]
    errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert errors == [line for line in second.stderr.splitlines() if line.strip()][-1:]
    assert errors[0].startswith(f"error: trainer.resume={run_id}: the run is still RUNNING in "
                                f"process {training.pid} on {socket.gethostname()} (")
    assert "resuming" not in second.stdout
    assert first.returncode == 0, first.stderr[-3000:]
    client = MlflowClient(store)
    assert client.get_run(run_id).info.status == "FINISHED"
    steps = [step for step, _ in points(client, run_id)]
    assert steps == list(range(1, 7))  # one writer: each epoch once
    assert len(client.search_runs([client.get_run(run_id).info.experiment_id])) == 1


# ---------------------------------------------------------------- killed before a checkpoint
@pytest.mark.heavy  # ~8 s: four runs
def test_a_run_killed_before_its_first_checkpoint_is_restarted_once(store, client, tmp_path):
    killed = run(store, "trainer.epochs=3", "trainer.checkpoint_every=0", tmp_path=tmp_path)
    client.set_terminated(killed.run_id, "KILLED")  # as kill -9, found dead, leaves it
    restart = run(store, f"trainer.resume={killed.run_id}", tmp_path=tmp_path)
    assert restart.run_id != killed.run_id

    def restarts(run_id: str) -> list[str]:
        return [r.info.run_id for r in client.search_runs(
            [client.get_run(run_id).info.experiment_id],
            f"tags.`{RESTART_OF_TAG}` = '{run_id}'")]

    runs = len(client.search_runs([client.get_run(killed.run_id).info.experiment_id]))
    # QA: each `trainer.resume=ID` made another restart, same name, same restart_of tag
    with pytest.raises(ConfigError) as refused:
        run(store, f"trainer.resume={killed.run_id}", tmp_path=tmp_path)
    assert str(refused.value) == (
        f"trainer.resume={killed.run_id}: run {killed.run_id} was already restarted as "
        f"{restart.run_id}; resume that: trainer.resume={restart.run_id}")
    assert restarts(killed.run_id) == [restart.run_id]
    assert len(client.search_runs([client.get_run(killed.run_id).info.experiment_id])) == runs
    assert client.get_run(killed.run_id).info.status == "KILLED"

    # its restart killed before a checkpoint too, and restarted: the newest is named
    client.set_terminated(restart.run_id, "KILLED")
    newest = run(store, f"trainer.resume={restart.run_id}", tmp_path=tmp_path)
    with pytest.raises(ConfigError, match=f"already restarted as {newest.run_id}; resume that: "
                                          f"trainer.resume={newest.run_id}$"):
        run(store, f"trainer.resume={killed.run_id}", tmp_path=tmp_path)


# ---------------------------------------------------------------- the builder changed
BUILDER = '''
import keras


def build(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    h = keras.layers.Dense(WIDTH, activation="tanh", name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(n_outputs, name="out")(h))
'''

INTERRUPT_AT = '''
class InterruptAt:
    """Ctrl-C at the stretch end of epoch 4 (a resume, which starts there, is not cut again)."""

    def stops(self, epochs):
        return {4}

    def on_stretch_end(self, run, stretch, logs):
        if run.trainer.epoch == 4:
            raise KeyboardInterrupt
'''

CUSTOM = ("data=sine", "model=custom", "model._target_=qa_builder.build")


def custom_modules(tmp_path: Path, monkeypatch):
    """The launch folder with qa_builder.py (Dense(16)) and qa_cut.py, forgotten afterwards."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # the builder is edited in place
    return user_modules(tmp_path, monkeypatch, qa_cut=INTERRUPT_AT,
                        qa_builder=BUILDER.replace("WIDTH", "16"))


def killed_custom_run(store: str, tmp_path: Path) -> str:
    """A run of qa_builder.build KILLED by Ctrl-C at epoch 4 of 8, checkpointed."""
    with pytest.raises(KeyboardInterrupt) as interrupted:
        run(store, *CUSTOM, "trainer.epochs=8", "trainer.checkpoint_every=2",
            "+callbacks.cut._target_=qa_cut.InterruptAt", tmp_path=tmp_path)
    return interrupted.value.run_id


@pytest.mark.heavy  # ~5 s: two runs
def test_a_resume_of_a_model_whose_builder_changed_is_one_line(store, client, tmp_path,
                                                                 monkeypatch):
    import gradexp

    with custom_modules(tmp_path, monkeypatch):
        run_id = killed_custom_run(store, tmp_path)
        (tmp_path / "qa_builder.py").write_text(BUILDER.replace("WIDTH", "32"))
        sys.modules.pop("qa_builder", None)  # as a new process: the file as it is now
        losses = points(client, run_id)
        with pytest.raises(gradexp.GradexpError) as refused:  # was ValueError's traceback
            gradexp_run(store, f"trainer.resume={run_id}", tmp_path=tmp_path)
    assert refused.value.exit_code == 2
    assert refused.value.line == (
        f"trainer.resume={run_id}: the checkpoint's variables do not fit the model "
        "model._target_ builds now (hidden/kernel: (1, 16) saved, (1, 32) built; 2 more); put "
        "the model back as the run had it, or start a new run")
    assert points(client, run_id) == losses
    assert client.get_run(run_id).info.status == "KILLED"  # refused before it reopened


@pytest.mark.heavy  # ~4 s: a run
def test_a_changed_builder_is_refused_before_the_run_reopens(store, client, tmp_path,
                                                              monkeypatch):
    # What the run loop calls before the recorder reopens the run (Resume.check_builder): the
    # refused run stays as it was, KILLED with its tags (docs: "as it was, KILLED or FINISHED").
    # A layer added shifts the later ones, as TensorFlow's restore matches them.
    from gradexp.resume import prepare_resume

    with custom_modules(tmp_path, monkeypatch):
        run_id = killed_custom_run(store, tmp_path)
        before = client.get_run(run_id)
        (tmp_path / "qa_builder.py").write_text(BUILDER.replace("WIDTH", "16").replace(
            "    return", "    h = keras.layers.Dense(16, name='extra')(h)\n    return"))
        cfg = conftest.compose_config(f"tracking.uri={store}", f"trainer.resume={run_id}",
                                      "trainer.epochs=8")
        resume = prepare_resume(cfg, tmp_path)
        sys.modules.pop("qa_builder", None)
        with pytest.raises(ConfigError) as refused:
            resume.check_builder(n_features=1, n_outputs=1)
    assert str(refused.value).startswith(
        f"trainer.resume={run_id}: the checkpoint's variables do not fit the model "
        "model._target_ builds now (extra/kernel: (16, 1) saved as out/kernel, (16, 16) built")
    after = client.get_run(run_id)
    assert after.info.status == "KILLED" and after.data.tags == before.data.tags


# ---------------------------------------------------------------- raising the epochs
@pytest.mark.heavy  # ~6 s: three runs
def test_raising_the_epochs_under_a_schedule_of_the_run_length_is_refused(store, client,
                                                                          tmp_path):
    import yaml

    cosine = run(store, "optimizer.schedule.name=cosine", "trainer.epochs=4",
                 "trainer.checkpoint_every=2", tmp_path=tmp_path)
    rates = points(client, cosine.run_id, "lr")
    # QA: stretched over the new total, the rate jumped back up 20x after the old end
    with pytest.raises(ConfigError) as refused:
        run(store, f"trainer.resume={cosine.run_id}", "trainer.epochs=8", tmp_path=tmp_path)
    assert str(refused.value) == (
        f"trainer.resume={cosine.run_id}: cannot raise trainer.epochs to 8 (recorded: 4) with "
        "optimizer.schedule.name=cosine, which decays over the run's trainer.epochs: "
        "stretched, its learning rate would jump back up after epoch 4; for a longer schedule "
        "start a new run with trainer.epochs=8 (a constant rate, exponential or piecewise can "
        "train on)")
    after = client.get_run(cosine.run_id)
    assert after.info.status == "FINISHED" and points(client, cosine.run_id, "lr") == rates
    config = yaml.safe_load(Path(client.download_artifacts(cosine.run_id, "config.yaml",
                                                           str(tmp_path))).read_text())
    assert config["trainer"]["epochs"] == 4
    with pytest.raises(ConfigError, match="optimizer.schedule.name=warmup_cosine, which decays"):
        warm = run(store, "optimizer.schedule.name=warmup_cosine",
                   "optimizer.schedule.warmup_epochs=1", "trainer.epochs=4",
                   "trainer.checkpoint_every=2", tmp_path=tmp_path)
        run(store, f"trainer.resume={warm.run_id}", "trainer.epochs=8", tmp_path=tmp_path)

    # a schedule that counts epochs from the start, whatever the total, trains on
    decay = run(store, "optimizer.schedule.name=exponential", "trainer.epochs=4",
                "trainer.checkpoint_every=2", tmp_path=tmp_path)
    resumed = run(store, f"trainer.resume={decay.run_id}", "trainer.epochs=8",
                  tmp_path=tmp_path)
    assert resumed.epochs == 8 and client.get_run(decay.run_id).info.status == "FINISHED"


# ---------------------------------------------------------------- the messages
def test_a_refused_resume_says_null_for_a_recorded_none():
    from gradexp.resume import check_overrides

    with pytest.raises(ConfigError) as refused:
        check_overrides("trainer.resume=ID", conftest.compose_config("trainer.resume=ID", "seed=3"),
                        conftest.compose_config(), ["trainer.resume=ID", "seed=3"])
    assert "cannot change seed=3 (recorded: null);" in str(refused.value)  # was None


NOOP = '''
class Noop:
    pass
'''


@pytest.mark.heavy  # ~3 s: a run
def test_overrides_hydra_cannot_compose_are_judged_against_the_recorded_config(
        store, client, tmp_path, monkeypatch):
    # QA, for an mlp run: `model.dropout=0.2` said "model=linear has no key dropout" and
    # `~callbacks.noop` Hydra's "Could not delete ... does not exist": the default config's
    # words. The command line's composition errors take this line (gradexp.app.launch_failure).
    from gradexp.resume import refusal_of_overrides

    with user_modules(tmp_path, monkeypatch, qa_noop=NOOP):
        recorded = run(store, "data=sine", "model=mlp", "model.hidden=[8]", "trainer.epochs=2",
                       "+callbacks.noop._target_=qa_noop.Noop", tmp_path=tmp_path)
    resume = [f"tracking.uri={store}", f"trainer.resume={recorded.run_id}"]
    line = refusal_of_overrides([*resume, "model.dropout=0.2", "model.hidden=[16,16]",
                                 "~callbacks.noop", "seed=3"], tmp_path)
    assert line == (
        f"trainer.resume={recorded.run_id}: a resume continues the run as it was recorded, so "
        "it cannot change model.dropout=0.2 (recorded: 0.0), model.hidden=[16, 16] (recorded: "
        "[8]), ~callbacks.noop (recorded: {_target_: qa_noop.Noop}), seed=3 (recorded: null); "
        "beside trainer.resume it takes only a larger trainer.epochs (to train on) and "
        "tracking.uri; for other values start a new run")
    # restating a recorded value is no change: the line says to leave it out
    assert refusal_of_overrides([*resume, "model.hidden=[8]", "trainer.epochs=5"], tmp_path) == (
        f"trainer.resume={recorded.run_id}: model.hidden=[8] restates what the run recorded; "
        "leave it out (a resume runs the recorded config, but the command line is first "
        "composed on the default one)")
    # a key the run does not have either, no resume, a sweep: Hydra's own line stands
    assert refusal_of_overrides([*resume, "model.hiden=[8]"], tmp_path) is None
    assert refusal_of_overrides([f"tracking.uri={store}", "model.dropout=0.2"], tmp_path) is None
    assert refusal_of_overrides([*resume, "model.dropout=0.1,0.2"], tmp_path) is None
