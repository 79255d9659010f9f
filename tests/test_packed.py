"""hydra/launcher=packed: jobs of one shape trained in one program, each recorded as the
sequential launcher records it (gradexp.packed, src/hydra_plugins/gradexp_packed)."""

from __future__ import annotations

import math
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

import gradexp
from conftest import artifact_paths, empty_store, finish, spawn_cli

# `-n 2 --dist loadgroup` (the fast tier on both cores): this module's tests on one xdist worker,
# so its module-scoped pair of sweeps is made once, not once a worker.
pytestmark = pytest.mark.xdist_group("packed")

# Four optimizers of one shape (seed 004's line), checks on as by default; no LoggedModel (slow
# to write, and the same code path either way).
FOUR = ("optimizer=sgd,momentum,adagrad,adam", "optimizer.learning_rate=0.05",
        "trainer.epochs=40", "tracking.log_model=false")
DRIFT = "gradexp.packed_drift"
# What differs between any two runs whatever launched them
PER_RUN_TAGS = {"mlflow.runName", "mlflow.source.name", "mlflow.source.type", "mlflow.user",
                "gradexp.host", "gradexp.pid", "gradexp.heartbeat", "mlflow.parentRunId",
                "gradexp.checkpoints"}  # a folder named by the run's id


def children(store: str) -> dict[str, object]:
    """The sweep's child runs by optimizer name."""
    runs = MlflowClient(store).search_runs(["1"])
    return {run.data.params["optimizer.name"]: run for run in runs
            if "mlflow.parentRunId" in run.data.tags}


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The same 4-job sweep, packed and sequential, each into its own store; and how many times
    each traced the sequential trainer's training call and compiled check functions."""
    import os

    from gradexp import run_checks, shared_programs, trainer

    os.environ.pop("MLFLOW_TRACKING_URI", None)
    stores = {}
    for launcher in ("packed", "basic"):
        folder = tmp_path_factory.mktemp(launcher)
        stores[launcher] = empty_store(folder)  # a copy of an empty one: no migrations
        shared_programs.clear()  # no traces left by earlier tests
        before, compiled = trainer.TRACES, run_checks.COMPILED
        # the default store (mlflow.db in the launch folder): the same tracking.uri param
        gradexp.sweep(f"hydra/launcher={launcher}", *FOUR, launch_dir=folder)
        stores[f"{launcher} traces"] = trainer.TRACES - before
        stores[f"{launcher} compiled"] = run_checks.COMPILED - compiled
    return stores


@pytest.mark.heavy  # ~15 s
def test_each_packed_job_records_what_its_sequential_run_records(both):
    packed, sequential = children(both["packed"]), children(both["basic"])
    assert sorted(packed) == sorted(sequential) == ["adagrad", "adam", "momentum", "sgd"]
    for name, run in packed.items():
        alone = sequential[name]
        assert run.info.status == alone.info.status == "FINISHED"
        assert run.data.params == alone.data.params
        assert set(run.data.metrics) == set(alone.data.metrics)
        for key, value in alone.data.metrics.items():
            assert math.isclose(run.data.metrics[key], value, rel_tol=1e-5, abs_tol=1e-7), \
                (name, key, run.data.metrics[key], value)
        # the one tag a packed job may add: its mark, when its loss oscillated or diverged
        assert set(run.data.tags) - {DRIFT} == set(alone.data.tags)
        tags = {k: v for k, v in run.data.tags.items() if k not in PER_RUN_TAGS | {DRIFT}}
        assert tags == {k: v for k, v in alone.data.tags.items() if k not in PER_RUN_TAGS}
        assert artifact_paths(MlflowClient(both["packed"]), run.info.run_id) == \
            artifact_paths(MlflowClient(both["basic"]), alone.info.run_id)


@pytest.mark.heavy  # reads `both`: two 4-job sweeps, ~15 s
def test_an_oscillating_packed_job_is_marked_though_it_matched_here(both):
    # momentum at 0.05 swings around the minimum (its loss rises in 17 of 39 epochs): marked as
    # one that may drift, though this one matches its sequential run (the test above)
    marks = {name: run.data.tags.get(DRIFT) for name, run in children(both["packed"]).items()}
    assert marks["momentum"].startswith("oscillated (loss rose in ")
    assert marks["sgd"] is marks["adam"] is marks["adagrad"] is None


@pytest.mark.heavy  # reads `both`: two 4-job sweeps, ~15 s
def test_each_packed_job_logs_the_same_loss_curve(both):
    packed, sequential = children(both["packed"]), children(both["basic"])
    for name in packed:
        curves = [[(m.step, m.value) for m in MlflowClient(store).get_metric_history(
            runs[name].info.run_id, "loss")]
            for store, runs in ((both["packed"], packed), (both["basic"], sequential))]
        assert [step for step, _ in curves[0]] == [step for step, _ in curves[1]]
        for (_, mine), (_, theirs) in zip(*curves):
            assert math.isclose(mine, theirs, rel_tol=1e-5, abs_tol=1e-7), name


@pytest.mark.heavy  # reads `both`: two 4-job sweeps, ~15 s
def test_packed_jobs_are_replayed_not_trained_again(both):
    # a packed job's epochs come from its group's program; the sequential trainer never trains
    # (an earlier job's shared trainer, gradexp.shared_programs, must not take over either)
    assert both["packed traces"] == 0
    assert both["basic traces"] > 0


@pytest.mark.heavy  # reads `both`: two 4-job sweeps, ~15 s
def test_packed_jobs_share_their_check_functions_as_sequential_jobs_do(both):
    # the four jobs (one model and data, four optimizers) replay through the same traced
    # checks: the packed sweep compiles no more of them than the sequential one (4x before)
    assert 0 < both["packed compiled"] == both["basic compiled"]


@pytest.mark.heavy  # reads `both`: two 4-job sweeps, ~15 s
def test_the_parent_names_the_packed_launcher(both):
    runs = MlflowClient(both["packed"]).search_runs(["1"])
    (parent,) = [run for run in runs if run.data.tags.get("gradexp.sweep") == "true"]
    assert parent.data.tags["gradexp.launcher"] == "PackedLauncher"


@pytest.mark.heavy  # ~7 s
def test_a_mixed_sweep_packs_its_groups_and_says_which_jobs_ran_alone(tmp_path, store, capsys):
    results = gradexp.sweep(f"tracking.uri={store}", "hydra/launcher=packed",
                            "optimizer=sgd,adam,rmsprop", "trainer.batch_size=null,25",
                            "trainer.epochs=5", "gradcheck=off", "tracking.log_model=false",
                            launch_dir=tmp_path)
    lines = [line for line in capsys.readouterr().err.splitlines() if "packed " in line]
    assert len(lines) == 1
    assert lines[0].endswith("packed 4 of 6 jobs in 2 programs; sequential: #4, #5: optimizer "
                             "RMSprop has no stateless update here")
    assert len(results) == 6
    runs = [run for run in MlflowClient(store).search_runs(["1"])
            if "mlflow.parentRunId" in run.data.tags]
    assert sorted(run.info.status for run in runs) == ["FINISHED"] * 6
    from hydra.core.hydra_config import HydraConfig

    assert not HydraConfig.initialized()  # the launcher leaves no job's Hydra config behind


@pytest.mark.slow
def test_an_interrupted_packed_sweep_leaves_no_child_running(tmp_path):
    # made before the sweep starts: this test's client polling a store the sweep is still
    # creating would migrate the new file beside it, and one of the two would fail
    store = empty_store(tmp_path)
    process = spawn_cli("-m", "hydra/launcher=packed", f"tracking.uri={store}",
                        "optimizer=sgd,adam", "trainer.seed=range(0,8)", "trainer.epochs=100",
                        cwd=tmp_path)
    client = MlflowClient(store)
    deadline = time.monotonic() + 240
    started = []
    while not started and process.poll() is None and time.monotonic() < deadline:
        try:  # the store exists once the parent run opened
            started = [r for r in client.search_runs(["1"]) if "mlflow.parentRunId" in r.data.tags
                       and r.info.status == "RUNNING"]  # a job replaying now
        except Exception:  # noqa: BLE001 - not created yet
            started = []
        time.sleep(0.05)  # polling, not waiting for a fixed time
    if not started:
        code = process.poll()  # None: still running at the deadline
        process.kill()
        raise AssertionError(f"no child run began (exit {code}); its stderr:\n"
                             f"{process.communicate()[1][-3000:]}")
    process.send_signal(signal.SIGTERM)
    finish(process, timeout=120)
    runs = client.search_runs(["1"])
    statuses = [run.info.status for run in runs if "mlflow.parentRunId" in run.data.tags]
    # The job seen replaying ends KILLED, unless its replay (a fraction of a second) ended
    # before the signal landed, as it may on a loaded machine: then it is FINISHED. Either
    # way none is left RUNNING, and the sweep stopped.
    assert set(statuses) <= {"KILLED", "FINISHED"}
    assert len(statuses) < 16  # it stopped the sweep


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGINT, 130, "interrupted (Ctrl-C)"), (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_a_signal_while_the_groups_train_ends_the_sweep_as_a_sequential_one(tmp_path, sig,
                                                                             code, said):
    # The groups train before any job runs, outside every job's handling of Ctrl-C and SIGTERM:
    # SIGTERM used to end the process on the spot, the parent left RUNNING; Ctrl-C printed a
    # traceback. The child starts with default signals (conftest.spawn_cli), so Ctrl-C reaches
    # it even when this suite runs with SIGINT ignored (nohup ... &).
    store = empty_store(tmp_path)
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr:
        # eval.every=1000: stretches of 1000 epochs, so the signal lands within one (~0.1 s),
        # far before the million epochs end
        process = spawn_cli("-m", "hydra/launcher=packed", f"tracking.uri={store}",
                            "optimizer=sgd,adam", "trainer.epochs=1000000", "eval.every=1000",
                            "gradcheck=off", cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=stderr)
        try:
            deadline = time.monotonic() + 240  # TensorFlow's import alone, under load
            while "packed 2 of 2 jobs in 1 program" not in err.read_text():  # now it trains
                assert process.poll() is None, err.read_text()[-3000:]
                assert time.monotonic() < deadline, "the packed training never began"
                time.sleep(0.1)  # polling for the line, not waiting for a fixed time
            process.send_signal(sig)
            done = finish(process, timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    said_lines = err.read_text().splitlines()
    assert done.returncode == code, said_lines[-40:]
    assert "Traceback" not in err.read_text()
    assert said_lines[-1] == (f"error: {said} during the packed training: the sweep's parent "
                              "run is recorded as KILLED; no job had opened its run yet, so "
                              "none is recorded")
    runs = MlflowClient(store).search_runs(["1"])
    assert [(run.data.tags.get("gradexp.sweep"), run.info.status) for run in runs] == \
        [("true", "KILLED")]  # the parent, ended now; no child run was opened


@pytest.mark.heavy  # ~4 s
def test_gradexp_sweep_says_a_ctrl_c_during_the_packed_training_and_stays_an_interrupt(
        tmp_path, store, capsys, monkeypatch):
    # in a notebook, as a sequential sweep's Ctrl-C: the one line, then the KeyboardInterrupt
    from gradexp.packed import plan

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # as Python's SIGINT handler raises it, while the groups train

    monkeypatch.setattr(plan, "train_groups", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gradexp.sweep(f"tracking.uri={store}", "hydra/launcher=packed", "optimizer=sgd,adam",
                      "trainer.epochs=5", "gradcheck=off", launch_dir=tmp_path)
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: interrupted (Ctrl-C) during the packed training: the sweep's parent run is "
        "recorded as KILLED; no job had opened its run yet, so none is recorded")
    assert children(store) == {}


@pytest.mark.heavy  # ~3 s
def test_a_diverging_packed_job_is_marked_and_named(tmp_path, store, capsys):
    # lr=3 makes SGD on the line diverge: its packed records may drift from a sequential run's
    gradexp.sweep(f"tracking.uri={store}", "hydra/launcher=packed", "optimizer=sgd",
                  "optimizer.learning_rate=0.05,3.0", "trainer.epochs=8", "gradcheck=off",
                  "tracking.log_model=false", launch_dir=tmp_path)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if "diverged or" in line]
    assert len(lines) == 1 and "packed jobs #1 diverged or oscillated" in lines[0]
    runs = {run.data.params["optimizer.learning_rate"]: run
            for run in MlflowClient(store).search_runs(["1"])
            if "mlflow.parentRunId" in run.data.tags}
    assert "gradexp.packed_drift" not in runs["0.05"].data.tags
    assert runs["3.0"].data.tags["gradexp.packed_drift"].startswith("diverged")
    marked = [line for line in out.splitlines() if "FINISHED drift" in line]  # the sweep table
    assert len(marked) == 1 and f"{runs['3.0'].data.metrics['val/mse']:.6g}" in marked[0], out


@pytest.mark.parametrize(("loss", "reason"), [
    ([1.0, 0.5, 0.3, 0.25, 0.24, 0.24], None),
    ([1.0, 0.5, float("nan"), float("nan")], "diverged (loss not finite from epoch 3)"),
    ([1.0, 2.0, 4.0], "diverged (loss 1 at epoch 1, 4 at the end)"),
    ([0.5351, 0.5350, 0.5352], None),  # a plateau (QA: read "diverged")
    ([1.0, 0.5, 0.9, 0.4, 0.8, 0.3, 0.7, 0.2], "oscillated (loss rose in 3 of 7 epochs)"),
])
def test_the_drift_reason_reads_the_loss_curve(loss, reason):
    from gradexp.packed.program import drift_reason

    assert drift_reason(loss) == reason


@pytest.mark.heavy  # ~4 s
def test_a_packed_job_takes_the_seeds_its_master_seed_derives(tmp_path):
    # seed=N derives model.seed and trainer.seed (gradexp.seeds): a packed job's first weights
    # and batches must come from those, as its sequential run's do
    common = ("trainer.epochs=5", "trainer.batch_size=25", "gradcheck=off",
              "tracking.log_model=false")
    empty_store(tmp_path / "packed")  # each launch folder's default store, without migrations
    empty_store(tmp_path / "alone")
    packed = gradexp.sweep("hydra/launcher=packed", "seed=1,2", *common,
                           launch_dir=tmp_path / "packed")
    alone = gradexp.run("seed=2", *common, launch_dir=tmp_path / "alone")
    assert packed[0].metrics["val/mse"] != packed[1].metrics["val/mse"]
    for key, value in alone.metrics.items():
        assert math.isclose(packed[1].metrics[key], value, rel_tol=1e-5, abs_tol=1e-7), key


@pytest.mark.parametrize("stopped", [{0: 4}, {0: 4, 2: 8}])
def test_a_stopped_job_keeps_its_weights_while_the_others_train_as_they_would(tmp_path,
                                                                               stopped):
    # sweep.pruner in a group (gradexp.packed.plan.GroupJudge): one job of five stopped is
    # masked (its weights held), two are dropped from a narrower program. Either way each
    # job's weights are those of the group trained unjudged, up to where it stopped.
    import numpy as np

    from conftest import compose_config
    from gradexp.packed.plan import plan_sweep

    rates = [0.01, 0.03, 0.1, 0.2, 0.3]
    plan = plan_sweep({n: compose_config("trainer.epochs=12", "trainer.batch_size=25",
                                         f"optimizer.learning_rate={rate}", "optimizer=adam")
                       for n, rate in enumerate(rates)}, tmp_path)
    (members,) = plan.groups
    from gradexp.packed.program import PackedProgram

    def program():
        first = plan.prepared[members[0]]
        return PackedProgram(first.model, first.loss,
                             [plan.prepared[n].setup for n in members], first.batch_size)

    keep = {4, 8, 12}
    alone = program().train(12, keep)
    judged = program().train(12, keep, lambda epoch, trained: {
        j for j, at in stopped.items() if at == epoch})
    for j, job in enumerate(judged):
        assert job.pruned_at == stopped.get(j)
        last = stopped.get(j, 12)
        assert sorted(job.weights) == [e for e in (0, 4, 8, 12) if e <= last]
        assert len(job.values["loss"]) == last
        np.testing.assert_allclose(job.values["loss"], alone[j].values["loss"][:last],
                                   rtol=1e-6)
        for epoch, weights in job.weights.items():
            for mine, theirs in zip(weights, alone[j].weights[epoch]):
                np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-7)


def test_a_mixed_float16_model_runs_alone_and_says_why(tmp_path):
    # Its optimizer is a LossScaleOptimizer, as Keras' fit gives it; the packed update has no
    # loss scaling, so the job would have trained otherwise than alone.
    from conftest import compose_config
    from gradexp.packed.plan import prepare

    (tmp_path / "half_models.py").write_text(
        "import keras\n\n"
        "def mixed(n_features, n_outputs):\n"
        "    keras.config.set_dtype_policy('mixed_float16')\n"
        "    try:\n"
        "        inputs = keras.Input((n_features,))\n"
        "        outputs = keras.layers.Dense(n_outputs, dtype='float32')(\n"
        "            keras.layers.Dense(4)(inputs))\n"
        "        return keras.Model(inputs, outputs)\n"
        "    finally:\n"
        "        keras.config.set_dtype_policy('float32')\n")
    cfg = compose_config("model=custom", "model._target_=half_models.mixed")
    prepared, reason = prepare(cfg, tmp_path)
    assert prepared is None
    assert reason == "a mixed_float16 model (its optimizer scales the loss, as Keras' fit)"


def test_a_short_last_batch_weighs_the_same_in_a_packed_jobs_loss(tmp_path, store):
    # 100 rows in batches of 32, 32, 32 and 4: each epoch's loss weights a batch's by its rows
    # (Keras' fit's mean, tests/test_what_trains.py), in the packed program as in the
    # sequential trainer; a plain mean of the four in one and not the other moved the records.
    import numpy as np

    import conftest
    from conftest import compose_config
    from gradexp.packed.plan import plan_sweep
    from gradexp.packed.program import PackedProgram

    common = ("trainer.epochs=4", "trainer.batch_size=32", "gradcheck=off",
              "tracking.log_model=false")
    rates = [0.05, 0.1]
    plan = plan_sweep({n: compose_config(*common, f"optimizer.learning_rate={rate}")
                       for n, rate in enumerate(rates)}, tmp_path)
    (members,) = plan.groups
    first = plan.prepared[members[0]]
    packed = PackedProgram(first.model, first.loss, [plan.prepared[n].setup for n in members],
                           first.batch_size).train(4, {4})
    alone = conftest.run(store, *common, "optimizer.learning_rate=0.05", launch_dir=tmp_path)
    np.testing.assert_allclose(packed[members.index(0)].values["loss"], alone.history["loss"],
                               rtol=1e-5)


NOT_VECTORIZED = '''
import keras
import tensorflow as tf


class RawNoise(keras.layers.Layer):
    def call(self, x, training=None):
        return x + tf.random.normal(tf.shape(x), stddev=0.3) if training else x


def noisy(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(RawNoise()(inputs)))


class Unused(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones")
        self.spare = self.add_weight(shape=(1,), initializer="ones")  # reaches no loss

    def call(self, x):
        return x * self.w


def unused(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(Unused()(inputs)))


def frozen(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    hidden = keras.layers.Dense(4, trainable=False, name="frozen")(inputs)
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(hidden))
'''


@pytest.mark.parametrize(("overrides", "reason"), [
    (("model=buggy_linear",), "a gradient of its own (a tf.custom_gradient) that vectorized "
                              "training does not reproduce"),
    (("loss._target_=robust_losses.pseudo_huber_wrong_branch",), "a gradient of its own"),
    (("model=custom", "model._target_=not_vectorized.noisy"), "a loss that is not the same "
                                                              "twice (a layer drawing raw "
                                                              "tf.random)"),
    (("loss._target_=robust_losses.pseudo_huber",), None),  # its own backward, right: packed
    (("model=custom", "model._target_=not_vectorized.unused"), None),  # (review: a TypeError)
    # QA: told as "dropout seeds, batch-norm statistics", which it has neither of
    (("model=custom", "model._target_=not_vectorized.frozen"), "a model with state per job "
     "(non-trainable variables: frozen/kernel, frozen/bias)"),
    (("model=linear",), None)])
def test_a_job_the_vectorized_program_would_train_otherwise_runs_alone(tmp_path, overrides,
                                                                         reason):
    # QA: a tf.custom_gradient's backward did not survive tf.vectorized_map (a planted bug
    # trained as the correct model, in a layer or a loss), and raw tf.random drew other numbers
    import shutil

    from conftest import compose_config
    from gradexp.packed.plan import prepare

    shutil.copy(Path(__file__).parents[1] / "examples" / "robust_losses.py", tmp_path)
    (tmp_path / "not_vectorized.py").write_text(NOT_VECTORIZED)
    prepared, why = prepare(compose_config(*overrides, "trainer.epochs=5"), tmp_path)
    assert (prepared is None) == (reason is not None)
    assert why is None if reason is None else why.startswith(reason), why


@pytest.mark.heavy  # ~10 s
def test_a_planted_wrong_gradient_trains_in_a_packed_sweep_as_alone(tmp_path, store):
    keys = ("model=buggy_linear", "trainer.epochs=20", "gradcheck=off",
            "tracking.log_model=false")
    swept = gradexp.sweep(f"tracking.uri={store}", "hydra/launcher=packed",
                          "optimizer.learning_rate=0.05,0.1", *keys, launch_dir=tmp_path)
    alone = gradexp.run(f"tracking.uri={store}", "optimizer.learning_rate=0.1", *keys,
                        launch_dir=tmp_path)
    assert swept[1].metrics["val/mse"] == alone.metrics["val/mse"]  # 0.0098697, not 0.0139915


@pytest.mark.heavy  # ~8 s
def test_jobs_skip_finished_reuses_are_not_trained_nor_called_packed(tmp_path, store, capsys):
    # A rerun of a packed sweep with one job more: the two FINISHED jobs are reused, so only the
    # new one is left, which has no other job of its shape (it trained and was labelled
    # "(packed)" with the reused ones before)
    common = ("hydra/launcher=packed", "trainer.epochs=5", "gradcheck=off",
              "tracking.log_model=false", "sweep.skip_finished=true")
    gradexp.sweep(f"tracking.uri={store}", "optimizer.learning_rate=0.05,0.1", *common,
                  launch_dir=tmp_path)
    capsys.readouterr()
    gradexp.sweep(f"tracking.uri={store}", "optimizer.learning_rate=0.05,0.1,0.2", *common,
                  launch_dir=tmp_path)
    out, err = capsys.readouterr()
    assert ("packed 0 of 3 jobs in 0 programs; sequential: #0, #1: FINISHED before, reused "
            "(sweep.skip_finished); #2: no other job of its shape") in err
    assert "(packed)" not in out + err and "packed jobs in" not in out + err
    assert out.count("skipped optimizer.learning_rate=") == 2
