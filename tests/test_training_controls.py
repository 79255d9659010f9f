"""Training controls (issue 10): learning-rate schedules, early stopping, determinism, XLA,
checkpoints and resume after a crash. Real TensorFlow, a real sqlite MLflow store; processes only
where the crash is the point."""

from __future__ import annotations

import math
import queue
import re
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import conftest
from conftest import finish, run_cli, spawn_cli
from gradexp.schema import ConfigError


def run(store: str, *overrides: str, tmp_path=None):
    return conftest.run(store, "gradcheck=off", *overrides, launch_dir=tmp_path)


def series(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


# ---------------------------------------------------------------- schedules
@pytest.mark.parametrize(("schedule", "expected"), [
    (("optimizer.schedule.name=cosine",),
     lambda e: 0.1 * 0.5 * (1 + math.cos(math.pi * e / 40))),
    (("optimizer.schedule.name=exponential", "optimizer.schedule.decay_epochs=10",
      "optimizer.schedule.decay_rate=0.5"), lambda e: 0.1 * 0.5 ** (e / 10)),
    (("optimizer.schedule.name=piecewise", "optimizer.schedule.boundaries=[10,30]",
      "optimizer.schedule.factors=[1,0.1,0.01]"),
     lambda e: 0.1 * (1 if e < 10 else 0.1 if e < 30 else 0.01)),  # after 10 and 30 epochs
    (("optimizer.schedule.name=warmup_cosine", "optimizer.schedule.warmup_epochs=10"),
     lambda e: 0.1 * e / 10 if e <= 10 else 0.1 * 0.5 * (1 + math.cos(math.pi * (e - 10) / 30))),
])
def test_each_schedule_draws_its_learning_rate_curve_in_epochs(store, client, tmp_path,
                                                               schedule, expected):
    # 100 rows in batches of 25: 4 steps an epoch, so epochs and steps differ.
    result = run(store, "trainer.epochs=40", "trainer.batch_size=25", *schedule,
                 tmp_path=tmp_path)
    logged = series(client, result.run_id, "lr")
    assert [step for step, _ in logged] == list(range(1, 41))
    # epoch k's rate is that of its first update, after k - 1 epochs of 4 steps
    np.testing.assert_allclose([value for _, value in logged],
                               [expected(k - 1) for k in range(1, 41)], rtol=1e-4, atol=1e-7)


PIECEWISE = ("optimizer.schedule.name=piecewise", "optimizer.schedule.boundaries=[5,8]",
             "optimizer.schedule.factors=[1,0.1,0.01]")


def test_a_piecewise_boundary_of_b_epochs_changes_the_rate_from_epoch_b_plus_1(store, client,
                                                                             tmp_path):
    # Full batch, one step an epoch: boundaries [5, 8] train epochs 1-5 at 0.1, 6-8 at 0.01
    # and 9-12 at 0.001 (each change used to land one epoch late).
    result = run(store, "trainer.epochs=12", "trainer.log_every=1", *PIECEWISE,
                 tmp_path=tmp_path)
    np.testing.assert_allclose([value for _, value in series(client, result.run_id, "lr")],
                               [0.1] * 5 + [0.01] * 3 + [0.001] * 4, rtol=1e-6)


@pytest.mark.parametrize(("schedule", "first_new_step"), [
    (PIECEWISE, (20, 32)),
    ((*PIECEWISE, "optimizer.schedule.boundaries=[2.5]", "optimizer.schedule.factors=[1,0.1]"),
     (10,))])
def test_every_step_of_the_epoch_after_a_boundary_uses_the_new_rate(schedule, first_new_step):
    # 4 steps an epoch (optimizer.iterations = the updates made so far): every step of epochs
    # 6 and 9 at the new rate, not only those after their first; a fractional boundary at the
    # nearest step (2.5 epochs: after 10 steps).
    from gradexp.schedules import build_optimizer

    cfg = conftest.compose_config(*schedule)
    optimizer = build_optimizer(cfg.optimizer, 4, 12)
    rates = []
    for step in range(48):
        optimizer.iterations.assign(step)
        rates.append(float(optimizer.learning_rate))
    stretch = [sum(step >= first for first in first_new_step) for step in range(48)]
    np.testing.assert_allclose(rates, [0.1 * 0.1 ** k for k in stretch], rtol=1e-6)


def test_no_schedule_logs_no_lr(store, client, tmp_path):
    result = run(store, "trainer.epochs=5", tmp_path=tmp_path)
    assert series(client, result.run_id, "lr") == []


# ---------------------------------------------------------------- early stopping
@pytest.mark.heavy  # ~2.0 s
def test_early_stopping_stops_after_patience_and_restores_the_best_weights(store, client,
                                                                           tmp_path):
    # Adam at a large rate on seed 004's line: val/mse bottoms out, then bounces around.
    overrides = ("optimizer=adam", "optimizer.learning_rate=0.5", "eval.every=5",
                 "trainer.log_every=5", "trainer.epochs=400")
    full = run(store, *overrides, tmp_path=tmp_path)
    curve = series(client, full.run_id, "val/mse")  # (step = epoch, value) every 5 epochs
    stopped = run(store, *overrides, "trainer.early_stopping.enabled=true",
                  "trainer.early_stopping.patience=20", tmp_path=tmp_path)
    # Where it should stop: the first evaluation 20 epochs after the best so far.
    best_value, best_epoch, expected_stop = math.inf, None, None
    for epoch, value in curve:
        if value < best_value:
            best_value, best_epoch = value, epoch
        elif epoch - best_epoch >= 20:
            expected_stop = epoch
            break
    assert expected_stop is not None and expected_stop < 400
    metrics = client.get_run(stopped.run_id).data.metrics
    assert metrics["stopped_epoch"] == expected_stop and stopped.epochs == expected_stop
    assert metrics["best_epoch"] == best_epoch
    assert client.get_run(stopped.run_id).info.status == "FINISHED"
    # restore_best: the run ends on the best epoch's weights, so its final val/mse is the best
    assert stopped.metrics["val/mse"] == pytest.approx(best_value, rel=1e-5)


@pytest.mark.heavy  # ~14 s
def test_an_early_stop_far_before_trainer_epochs_keeps_its_curve_and_final_weights_in_mlflow(
        store, client, tmp_path):
    # QA: the 320 points a series were spread over trainer.epochs=100000, so a run stopped at
    # epoch ~100 had 2 points in MLflow (the best epoch in none), and after the restore its
    # latest W and b (the runs table's columns) were the stopped epoch's, not the model's
    stopped = run(store, "optimizer=momentum", "optimizer.learning_rate=0.5", "eval.every=1",
                  "trainer.epochs=100000", "trainer.early_stopping.enabled=true",
                  "trainer.early_stopping.patience=40", tmp_path=tmp_path)
    metrics = client.get_run(stopped.run_id).data.metrics
    epochs = int(metrics["stopped_epoch"])
    assert epochs < 1000
    logged = dict(series(client, stopped.run_id, "loss"))
    assert set(logged) >= set(range(1, epochs + 1))
    # each at its own epoch (review: the fill-in once took each epoch's value from the one before)
    assert [logged[epoch] for epoch in range(1, epochs + 1)] == pytest.approx(
        stopped.history["loss"][:epochs].tolist(), rel=1e-6)
    assert int(metrics["best_epoch"]) in {step for step, _ in series(client, stopped.run_id,
                                                                     "val/mse")}
    assert (metrics["W"], metrics["b"]) == (metrics["final_W"], metrics["final_b"])
    assert metrics["W"] == pytest.approx(stopped.scalars["W"])


# ---------------------------------------------------------------- determinism and XLA
def test_deterministic_runs_with_mini_batches_are_identical_bit_for_bit(store, tmp_path):
    overrides = ("trainer.deterministic=true", "trainer.batch_size=16", "trainer.epochs=30",
                 "model=mlp", "model.hidden=[8]", "model.dropout=0.2", "data=sine")
    first = run(store, *overrides, tmp_path=tmp_path)
    second = run(store, *overrides, tmp_path=tmp_path)
    for key in ("loss", "grad_norm"):
        assert np.array_equal(first.history[key], second.history[key]), key
    assert first.metrics == second.metrics


@pytest.mark.heavy  # the heaviest in-process tests (~100 s, ~50 s): not in -m "not slow"
def test_xla_refuses_a_short_last_batch_and_agrees_on_a_full_batch(store, tmp_path):
    # XLA padded the short last batch with other rows (QA: 8 extra rows an epoch on iris)
    with pytest.raises(ConfigError, match=re.escape(
            "trainer.jit_compile=true: the 100 training rows leave a last mini-batch of 10 rows "
            "at trainer.batch_size=30, and XLA pads a short batch with other rows: use a batch "
            "size that divides 100 (e.g. 10, 20, 25, 50), or trainer.jit_compile=false")):
        run(store, "trainer.jit_compile=true", "trainer.batch_size=30", tmp_path=tmp_path)
    xla = run(store, "trainer.jit_compile=true", "trainer.batch_size=25", tmp_path=tmp_path)
    assert xla.final_loss < 0.02  # 100 rows in batches of 25: it learned
    full_xla = run(store, "trainer.jit_compile=true", tmp_path=tmp_path)
    full = run(store, tmp_path=tmp_path)
    assert full_xla.scalars["W"] == pytest.approx(full.scalars["W"], rel=1e-5)
    assert full_xla.scalars["b"] == pytest.approx(full.scalars["b"], rel=1e-5)


# ---------------------------------------------------------------- checkpoints and resume
LONG = ("trainer.epochs=100000", "trainer.checkpoint_every=5000", "trainer.deterministic=true",
        "gradcheck=off", "tracking.log_model=false")


def wait_for_checkpoint(folder: Path, process, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # The manager's state file is written last, once a checkpoint is whole.
        found = sorted(folder.glob("checkpoints/*/checkpoint"))
        if found:
            return found[0].parent
        assert process.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")


@pytest.mark.slow
def test_kill_9_then_resume_reaches_the_uninterrupted_result(tmp_path):
    import pyarrow.parquet as pq
    from mlflow import MlflowClient

    from gradexp.callbacks.epoch_history import kept_epochs

    crashed = spawn_cli(*LONG, cwd=tmp_path)
    folder = wait_for_checkpoint(tmp_path, crashed)
    crashed.send_signal(signal.SIGKILL)
    finish(crashed, 30)
    run_id = folder.name
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert client.get_run(run_id).info.status == "RUNNING"  # kill -9: nothing could end it

    resumed = run_cli(f"trainer.resume={run_id}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:] + resumed.stdout[-3000:]
    # TensorFlow's start-up chatter (absl's and oneDNN's lines) stays off a resume too; the
    # note that the killed run was marked KILLED is gradexp's
    assert "InitializeLog" not in resumed.stderr and "oneDNN" not in resumed.stderr
    after = client.get_run(run_id)
    assert after.info.status == "FINISHED"
    assert int(after.data.tags["gradexp.resumed_from_epoch"]) >= 5000
    steps = [m.step for m in client.get_metric_history(run_id, "loss")]
    assert len(steps) == len(set(steps))  # no epoch written twice
    # the uninterrupted run's kept epochs: 320 (tracking.max_points), evenly spaced, no gap
    assert sorted(steps) == list(kept_epochs(0, 100_000, 320))
    (tmp_path / "resumed").mkdir()
    history = pq.read_table(client.download_artifacts(run_id, "history.parquet",
                                                      str(tmp_path / "resumed")))
    assert history["step"].to_pylist() == list(range(1, 100_001))  # every epoch, both parts

    # the uninterrupted reference in-process: the kill and the resume are what need processes
    whole = run(f"sqlite:///{tmp_path / 'mlflow.db'}", *LONG,
                "tracking.experiment=uninterrupted", tmp_path=tmp_path)
    reference = client.get_run(whole.run_id)
    for key in ("final_W", "final_b"):
        assert after.data.metrics[key] == pytest.approx(reference.data.metrics[key], abs=1e-6)
    (tmp_path / "whole").mkdir()
    whole_history = pq.read_table(client.download_artifacts(reference.info.run_id,
                                                            "history.parquet",
                                                            str(tmp_path / "whole")))
    assert np.allclose(history["loss"].to_numpy(), whole_history["loss"].to_numpy(), rtol=1e-6)


def printed_epochs(process) -> queue.Queue:
    """The epochs of the child's progress lines ("epoch 40000/100000 ..."), as they come."""
    found: queue.Queue = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            match = re.match(r"epoch\s+(\d+)/", line)
            if match:
                found.put(int(match.group(1)))

    threading.Thread(target=read, daemon=True).start()
    return found


@pytest.mark.slow
def test_an_interrupt_writes_a_checkpoint_at_the_epoch_it_reached(tmp_path):
    import pyarrow.parquet as pq
    from mlflow import MlflowClient

    # Periodic saves far apart, so the interrupt's own save is told from them. The signal goes
    # only once the run has printed an epoch past its first save: evidence that it trained on,
    # however slowly a loaded machine runs it (a fixed sleep once raced the child there).
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = spawn_cli(*LONG, "trainer.checkpoint_every=30000", cwd=tmp_path, stderr=stderr)
        epochs = printed_epochs(process)
        seen = 0
        while seen <= 30000:
            try:
                seen = epochs.get(timeout=120)
            except queue.Empty:
                process.kill()
                raise AssertionError("no progress past epoch 30000 in 120 s") from None
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    # what the run said, with faulthandler's stacks if it crashed (once: -11, a segfault)
    assert code == 143, (tmp_path / "stderr.txt").read_text()[-3000:]
    folder = next(tmp_path.glob("checkpoints/*"))
    numbers = sorted(int(p.stem.split("-")[1]) for p in folder.glob("ckpt-*.index"))
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(folder.name)
    assert run.info.status == "KILLED"
    history = pq.read_table(client.download_artifacts(folder.name, "history.parquet", tmp_path))
    reached = int(history.column("step").to_numpy()[-1])  # the last epoch the run trained
    assert numbers[0] == 30000
    assert numbers[-1] == reached > seen  # the interrupt's own checkpoint, at its epoch


def test_resume_refuses_what_it_cannot_continue(store, tmp_path):
    with pytest.raises(ConfigError, match="trainer.resume=nope: no such run"):
        run(store, "trainer.resume=nope", tmp_path=tmp_path)
    short = run(store, "trainer.epochs=3", tmp_path=tmp_path)  # too short to have saved
    # the run's own setting named (QA: "trainer.checkpoint_every=0" for the default null)
    with pytest.raises(ConfigError, match=f"trainer.resume={short.run_id}: no checkpoint in "
                       r".* \(it ended before its first: trainer.checkpoint_every=null saves"):
        run(store, f"trainer.resume={short.run_id}", tmp_path=tmp_path)
    never = run(store, "trainer.epochs=3", "trainer.checkpoint_every=0", tmp_path=tmp_path)
    with pytest.raises(ConfigError, match=r"\(trainer.checkpoint_every=0: it saved none\)"):
        run(store, f"trainer.resume={never.run_id}", tmp_path=tmp_path)


@pytest.mark.slow
def test_a_sweep_job_that_was_killed_resumes_from_its_checkpoint(tmp_path):
    from mlflow import MlflowClient

    sweep = ("-m", "loss=mse,mae", *LONG)
    first = spawn_cli(*sweep, cwd=tmp_path)
    wait_for_checkpoint(tmp_path, first)
    first.send_signal(signal.SIGINT)  # Ctrl-C during the first job: it ends KILLED, checkpointed
    assert finish(first, 60).returncode == 130
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("gradexp").experiment_id
    (killed,) = [r for r in client.search_runs([experiment]) if r.info.status == "KILLED"
                 and "mlflow.parentRunId" in r.data.tags]

    again = run_cli(*sweep, "sweep.resume_killed=true", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[absl]" not in again.stdout  # no TensorFlow INFO lines around its checkpoints
    resumed = client.get_run(killed.info.run_id)
    assert resumed.info.status == "FINISHED"
    assert int(resumed.data.tags["gradexp.resumed_from_epoch"]) >= 5000
    children = [r for r in client.search_runs([experiment]) if "mlflow.parentRunId" in r.data.tags]
    # the killed job continued as its own run; only the job that never ran made a new one
    assert sorted(r.data.params["loss.name"] for r in children) == ["mae", "mse"]
    assert all(r.info.status == "FINISHED" for r in children)


def refusal(recorded: tuple[str, ...], overrides: tuple[str, ...]) -> str | None:
    """check_overrides' line for resuming a run recorded with `recorded` overrides by a job
    given `overrides` (as Hydra parsed them); None when it lets the resume go on."""
    from gradexp.resume import check_overrides

    try:
        check_overrides("trainer.resume=ID", conftest.compose_config(*overrides),
                        conftest.compose_config(*recorded), list(overrides))
    except ConfigError as refused:
        return str(refused)
    return None


def test_a_refused_resume_masks_secrets_as_the_params_do():
    """config.yaml keeps a loader's token unmasked; the refusal line shows it as params do."""
    loader = ("data=custom", "data._target_=my_data.load")
    line = refusal((*loader, "+data.kwargs.token=OLD", "+data.kwargs.url=http://u:pw@host/x"),
                   ("trainer.resume=ID", *loader, "+data.kwargs.token=NEW",
                    "+data.kwargs.url=http://u:pw2@host/x"))
    assert "OLD" not in line and "NEW" not in line and "pw" not in line
    assert "+data.kwargs.token=*** (recorded: ***)" in line
    assert "+data.kwargs.url=http://***@host/x (recorded: http://***@host/x)" in line


def test_a_sweep_that_resumes_a_killed_run_takes_its_raised_epochs():
    """A killed run resumed to 100 epochs records 100 in config.yaml (its param keeps 50); the
    sweep (trainer.epochs=50) rerun with sweep.resume_killed=true finds it by its params and
    resumes it to 100, as before. Asked on the command line, fewer epochs are still refused."""
    assert refusal(("trainer.epochs=100",),
                   ("trainer.epochs=50", "sweep.resume_killed=true")) is None
    assert "trainer.epochs=50 (recorded: 100)" in refusal(
        ("trainer.epochs=100",), ("trainer.resume=ID", "trainer.epochs=50"))


INTERRUPT_AT = '''
class InterruptAt:
    """Ctrl-C at the stretch end of `epoch` (a resume, which starts there, is not cut again)."""

    def __init__(self, epoch):
        self.epoch = epoch

    def stops(self, epochs):
        return {self.epoch}

    def on_stretch_end(self, run, stretch, logs):
        if run.trainer.epoch == self.epoch:
            raise KeyboardInterrupt
'''


def interrupted_run(store: str, tmp_path: Path, epochs: int) -> str:
    """A run of `epochs` KILLED by Ctrl-C at epoch 10, with its interrupt checkpoint there."""
    (tmp_path / "interrupt_at.py").write_text(INTERRUPT_AT)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        run(store, f"trainer.epochs={epochs}", "trainer.checkpoint_every=20",
            "tracking.log_model=false", "+callbacks.cut._target_=interrupt_at.InterruptAt",
            "+callbacks.cut.epoch=10", tmp_path=tmp_path)
    return interrupted.value.run_id


def test_a_resumed_run_that_finishes_drops_the_reason_it_was_killed(store, client, tmp_path):
    from gradexp.tag_keys import REASON_TAG

    run_id = interrupted_run(store, tmp_path, epochs=30)
    assert client.get_run(run_id).data.tags[REASON_TAG] == "interrupted (Ctrl-C or SIGTERM)"
    run(store, f"trainer.resume={run_id}", "trainer.epochs=30", tmp_path=tmp_path)
    resumed = client.get_run(run_id)
    assert resumed.info.status == "FINISHED"
    assert REASON_TAG not in resumed.data.tags


def checkpointed_state(folder: Path) -> dict[str, np.ndarray]:
    """Every value the latest checkpoint in `folder` holds (the weights, found through the
    optimizer's list of them, its state, the epoch, the generators) but the count of saves."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(folder))
    return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(str(folder))
            if not name.startswith(("save_counter/", "_CHECKPOINTABLE_OBJECT_GRAPH"))}


@pytest.mark.heavy  # ~5 s: three runs
def test_a_dropout_model_resumed_mid_run_ends_where_the_uninterrupted_run_ends(store, client,
                                                                               tmp_path):
    # Dropout's masks come from its Keras SeedGenerator, whose state was not in the checkpoint:
    # a resumed run drew the masks of its first epochs again (QA: 10 epochs, then resumed to 20,
    # final loss 0.413837 against 0.413159 uninterrupted), where without dropout it was
    # bit-identical. Here 4 epochs (saved at 2 and 4), resumed to 8.
    common = ("data=sine", "model=mlp", "model.hidden=[8]", "model.dropout=0.2",
              "trainer.deterministic=true", "trainer.checkpoint_every=2",
              "trainer.batch_size=64", "tracking.log_model=false")
    whole = run(store, *common, "trainer.epochs=8", tmp_path=tmp_path)
    cut = run(store, *common, "trainer.epochs=4", tmp_path=tmp_path)
    resumed = run(store, f"trainer.resume={cut.run_id}", "trainer.epochs=8", tmp_path=tmp_path)
    assert resumed.epochs == 8
    assert series(client, cut.run_id, "loss") == series(client, whole.run_id, "loss")
    assert resumed.final_loss == whole.final_loss
    # the weights, the optimizer's and the generators' states, the epoch at the end: the same
    mine = checkpointed_state(tmp_path / "checkpoints" / cut.run_id)
    theirs = checkpointed_state(tmp_path / "checkpoints" / whole.run_id)
    assert sorted(mine) == sorted(theirs)
    assert any(name.startswith("seeds/") for name in mine)  # dropout's generator is saved
    for name, value in theirs.items():
        assert np.array_equal(mine[name], value), name


def test_a_checkpoint_saved_without_the_seed_states_still_restores(tmp_path):
    # written before the seeds were saved: the model, optimizer, epoch and generator come back,
    # the dropout seeds stay as built
    import keras
    import tensorflow as tf

    from gradexp.data import load_data
    from gradexp.models import build_model
    from gradexp.resume import Resume
    from gradexp.trainer import Trainer, seed_states

    cfg = conftest.compose_config("data=sine", "model=mlp", "model.hidden=[4]",
                                  "model.dropout=0.2")
    data = load_data(cfg.data)

    def trainer():
        model = build_model(cfg.model, data.n_features, data.n_outputs)
        return Trainer(model, keras.losses.MeanSquaredError(), keras.optimizers.SGD(0.1), data,
                       batch_size=64, seed=0)

    before = trainer()
    for variable in before.model.params:
        variable.assign(variable + 1.0)
    before.epoch_variable.assign(7)
    (state,) = seed_states(before.model.network)
    state.assign(state + [0, 5])
    old = tf.train.Checkpoint(model=before.model.network, optimizer=before.optimizer,
                              epoch=before.epoch_variable, shuffle=before.shuffle)
    tf.train.CheckpointManager(old, str(tmp_path), 3).save()
    after = trainer()
    built = seed_states(after.model.network)[0].numpy()
    Resume("run", None, tmp_path).restore(after)
    assert after.epoch == 7
    for mine, theirs in zip(after.model.params, before.model.params):
        assert np.array_equal(mine.numpy(), theirs.numpy())
    assert np.array_equal(seed_states(after.model.network)[0].numpy(), built)


def resume_as_command_line(store: str, tmp_path: Path, run_id: str):
    """`python -m gradexp trainer.resume=RUN_ID` in this process: Hydra's config with the
    command line's overrides (what a resume reads them from), then the run."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from gradexp.loop import run_experiment

    with initialize_config_dir(config_dir=str(conftest.CONF), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=[f"tracking.uri={store}", f"trainer.resume={run_id}"])
    before = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(cfg)
    try:
        with open_dict(cfg):
            del cfg["hydra"]
        return run_experiment(cfg, quiet=True, launch_dir=tmp_path)
    finally:
        HydraConfig.instance().cfg = before


def test_a_plain_resume_trains_to_the_recorded_epochs(store, client, tmp_path):
    # `trainer.resume=ID` alone trained a 30-epoch run on to the default trainer.epochs, 100,
    # with the run's param still saying 30
    from gradexp.tag_keys import RESUMED_TO_EPOCH_TAG

    run_id = interrupted_run(store, tmp_path, epochs=30)
    result = resume_as_command_line(store, tmp_path, run_id)
    assert result.epochs == 30
    resumed = client.get_run(run_id)
    assert resumed.info.status == "FINISHED"
    assert resumed.data.tags[RESUMED_TO_EPOCH_TAG] == "30"
    assert max(m.step for m in client.get_metric_history(run_id, "loss")) == 30


def test_a_resume_that_raises_the_epochs_records_them_for_the_next_resume(store, client,
                                                                           tmp_path):
    import yaml

    from gradexp.tag_keys import RESUMED_TO_EPOCH_TAG

    run_id = interrupted_run(store, tmp_path, epochs=30)
    result = run(store, f"trainer.resume={run_id}", "trainer.epochs=45", tmp_path=tmp_path)
    assert result.epochs == 45
    resumed = client.get_run(run_id)
    assert resumed.data.params["trainer.epochs"] == "30"  # MLflow params cannot change
    assert resumed.data.tags[RESUMED_TO_EPOCH_TAG] == "45"
    config = yaml.safe_load(Path(client.download_artifacts(run_id, "config.yaml",
                                                           str(tmp_path))).read_text())
    assert config["trainer"]["epochs"] == 45 and config["trainer"]["resume"] is None
    # a later resume sees the 45 epochs it reached, not the 30 the run started with
    with pytest.raises(ConfigError, match="its checkpoint is at epoch 45 of 45; raise "
                                          "trainer.epochs above 45"):
        run(store, f"trainer.resume={run_id}", "trainer.epochs=30", tmp_path=tmp_path)


def test_a_resume_refuses_other_changes_and_leaves_the_run_as_it_was(store, client, tmp_path):
    """`trainer.resume=ID optimizer.learning_rate=0.5` trained on at the recorded rate and said
    nothing. A resume continues the recorded run: a change it cannot make is one line, exit 2,
    and the run stays KILLED with its records; restating a recorded value is no change."""
    import gradexp

    run_id = interrupted_run(store, tmp_path, epochs=30)
    before = client.get_run(run_id)
    losses = series(client, run_id, "loss")
    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp.run(f"tracking.uri={store}", f"trainer.resume={run_id}", "trainer.epochs=40",
                    "optimizer=adam", "optimizer.learning_rate=0.5", launch_dir=tmp_path)
    assert refused.value.exit_code == 2
    assert refused.value.line == (
        f"trainer.resume={run_id}: a resume continues the run as it was recorded, so it cannot "
        "change optimizer=adam (recorded: sgd), optimizer.learning_rate=0.5 (recorded: 0.1); "
        "beside trainer.resume it takes only a larger trainer.epochs (to train on) and "
        "tracking.uri; for other values start a new run")
    after = client.get_run(run_id)
    assert after.info.status == "KILLED" and after.data.tags == before.data.tags
    assert after.data.params == before.data.params and series(client, run_id, "loss") == losses
    gradexp.run(f"tracking.uri={store}", f"trainer.resume={run_id}", "gradcheck=off",
                "optimizer=sgd", "trainer.epochs=30", launch_dir=tmp_path)
    assert client.get_run(run_id).info.status == "FINISHED"


EARLY = ("trainer.epochs=200", "eval.every=1", "trainer.early_stopping.enabled=true",
         "trainer.early_stopping.patience=5", "trainer.early_stopping.min_delta=0.001",
         "optimizer.learning_rate=0.05", "trainer.checkpoint_every=10")


def test_a_resumed_run_keeps_early_stoppings_best_and_goes_on_from_its_last_epoch(
        store, client, tmp_path):
    """QA: early stopping's best epoch, value and weights were not in the checkpoint (a run
    resumed after Ctrl-C forgot them, stopped 200 epochs later and served worse weights), and a
    run's last checkpoint held the best epoch's weights restored at its end, labelled as its
    last epoch. Resumed at epoch 40 (its best was 37), the run ends as the one never stopped:
    stopped at 42, best 37, the same weights; an early-stopped run is not resumed."""
    whole = run(store, *EARLY, tmp_path=tmp_path)
    stopped = client.get_run(whole.run_id).data.metrics
    assert (stopped["stopped_epoch"], stopped["best_epoch"]) == (42, 37)  # Keras' fit agrees
    first = run(store, *EARLY[1:], "trainer.epochs=40", tmp_path=tmp_path)
    assert client.get_run(first.run_id).data.metrics["best_epoch"] == 37
    resumed = run(store, *EARLY, f"trainer.resume={first.run_id}", tmp_path=tmp_path)
    metrics = client.get_run(resumed.run_id).data.metrics
    assert (metrics["stopped_epoch"], metrics["best_epoch"]) == (42, 37)
    for key in ("final_W", "final_b", "val/mse"):
        assert metrics[key] == stopped[key], key
    with pytest.raises(ConfigError, match=rf"trainer.resume={whole.run_id}: the run stopped "
                       r"early \(val/mse did not improve by 0.001 in 5 epochs, "):
        run(store, *EARLY, "trainer.epochs=300", f"trainer.resume={whole.run_id}",
            tmp_path=tmp_path)


def test_the_end_check_runs_where_early_stopping_ends_training(store, client, tmp_path):
    # QA: gradcheck.at_end was scheduled at trainer.epochs, which an early stop never reaches
    stopped = run(store, *EARLY, "gradcheck=default", tmp_path=tmp_path)
    assert [m.step for m in client.get_metric_history(stopped.run_id, "gradcheck/passed")] \
        == [0, 42]
