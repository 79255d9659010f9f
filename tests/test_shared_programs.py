"""Jobs of one shape in one process share their traced programs (gradexp.shared_programs): the
second job traces neither the training call nor the checks' float64 functions, and records what
it records when run alone. Real TensorFlow, Keras and a sqlite MLflow store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from conftest import empty_store, run
from gradexp import run_checks, shared_programs, trainer

sys.path.insert(0, str(Path(__file__).resolve().parent / "baselines"))
import record_baseline  # noqa: E402
from test_records_unchanged import differences  # noqa: E402

# Mini-batches, so the seed orders them; a check at epochs 10 and 20 (the float64 functions);
# Adam, whose step count and moments must start over.
SHAPE = ("trainer.epochs=20", "trainer.batch_size=16", "gradcheck.every_n_epochs=10",
         "optimizer=adam")
FIRST = (*SHAPE, "trainer.seed=0")
SECOND = (*SHAPE, "trainer.seed=1", "optimizer.learning_rate=0.05")


def store_in(folder: Path) -> str:
    folder.mkdir()
    return empty_store(folder)


def record(folder: Path, result) -> dict:
    """The run as plain data, its store's folder written <TMP>."""
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    return record_baseline.run_record(client, client.get_run(result.run_id), str(folder))


@pytest.mark.heavy  # ~4 s
def test_two_jobs_of_one_shape_trace_once_and_record_what_they_record_alone(tmp_path):
    shared_programs.clear()
    together = store_in(tmp_path / "together")
    traces, compiled = trainer.TRACES, run_checks.COMPILED
    run(together, *FIRST)
    first_traces, first_compiled = trainer.TRACES - traces, run_checks.COMPILED - compiled
    second = run(together, *SECOND)
    assert first_traces == 1 and first_compiled >= 1
    assert trainer.TRACES - traces == first_traces  # the second job traced nothing new
    assert run_checks.COMPILED - compiled == first_compiled

    shared_programs.clear()  # the second job alone: its own parts, traced anew
    alone = run(store_in(tmp_path / "alone"), *SECOND)
    assert trainer.TRACES - traces == 2 * first_traces
    found, expected = record(tmp_path / "together", second), record(tmp_path / "alone", alone)
    assert expected["metrics"]["val/mse"] and expected["params"]["trainer.seed"] == "1"
    assert differences(expected, found) == []
    assert found["metrics"] == expected["metrics"]  # bit for bit, not only within 1e-6


@pytest.mark.heavy  # ~4 s
def test_a_job_of_another_optimizer_reuses_the_checks_functions_and_records_what_it_does_alone(
        tmp_path):
    """The checks' float64 functions depend on the model, loss and data, not the optimizer:
    a job of another optimizer traces its training call but not its checks, and its gradcheck
    metrics are those of the job run alone (default checks: at the start and the end)."""
    shared_programs.clear()
    together = store_in(tmp_path / "together")
    run(together, "optimizer=sgd")
    compiled, traces = run_checks.COMPILED, trainer.TRACES
    second = run(together, "optimizer=adam", "optimizer.learning_rate=0.05")
    assert trainer.TRACES - traces == 1  # its own training call (another optimizer)
    assert run_checks.COMPILED == compiled  # the checks: the first job's

    shared_programs.clear()
    alone = run(store_in(tmp_path / "alone"), "optimizer=adam", "optimizer.learning_rate=0.05")
    found, expected = record(tmp_path / "together", second), record(tmp_path / "alone", alone)
    assert expected["metrics"]["gradcheck/max_rel_error"]
    assert differences(expected, found) == []
    assert found["metrics"] == expected["metrics"]  # bit for bit


@pytest.mark.heavy  # ~5 s
def test_jobs_of_other_shapes_trace_apart_and_the_kept_shapes_are_bounded(tmp_path, monkeypatch):
    shared_programs.clear()
    monkeypatch.setattr(shared_programs, "MAX_SHARED", 2)
    store = empty_store(tmp_path)
    traces = trainer.TRACES
    for optimizer in ("sgd", "adam", "rmsprop"):  # three shapes: three traces, two kept
        run(store, "trainer.epochs=5", "gradcheck=off", f"optimizer={optimizer}")
    assert trainer.TRACES - traces == 3
    assert len(shared_programs._SHARED) == 2
    run(store, "trainer.epochs=5", "gradcheck=off", "optimizer=sgd")  # dropped: traced again
    run(store, "trainer.epochs=5", "gradcheck=off", "optimizer=rmsprop")  # kept: shared
    assert trainer.TRACES - traces == 4


@pytest.mark.heavy  # ~6 s
def test_a_shape_let_go_takes_its_checks_functions_with_it(tmp_path, monkeypatch):
    """A sweep over many shapes holds at most MAX_SHARED of them (item 7), checks on: the
    checks' compiled float64 functions close over their model, and a global table of them kept
    every model of every shape alive (it did until the model held its own)."""
    import gc
    import weakref

    from gradexp import models

    shared_programs.clear()
    monkeypatch.setattr(shared_programs, "MAX_SHARED", 1)
    built = []
    build_model = models.build_model

    def building(*args, **kwargs):
        model = build_model(*args, **kwargs)
        built.append(weakref.ref(model))
        return model

    monkeypatch.setattr(models, "build_model", building)
    store = empty_store(tmp_path)
    for rows in (20, 21, 22, 23):  # four shapes (the data's contents are part of it)
        run(store, "trainer.epochs=3", f"data.n_samples={rows}")
    gc.collect()
    assert len(built) == 4
    # The second shape, let go when the third was kept. (Not the first: the first store opened
    # in a process freezes what exists then for the cycle collector, tensorflow_import.py.)
    assert built[1]() is None and built[2]() is None
    shared_programs.clear()


@pytest.mark.heavy  # ~3 s
def test_a_job_leaves_neither_its_own_model_nor_its_served_model_behind(tmp_path, monkeypatch):
    """Sharing must not grow memory (issue 20 item 7): a job of a kept shape builds a model only
    for its initial values and a served model only to log it; once a later job of that shape has
    begun, neither is alive (the shared network used to keep every job's served model)."""
    import gc
    import weakref

    from gradexp import export, models

    shared_programs.clear()
    built, served = [], []
    build_model, served_network = models.build_model, export.served_network

    def building(*args, **kwargs):
        model = build_model(*args, **kwargs)
        built.append(weakref.ref(model.network))
        return model

    def serving(network, *args, **kwargs):
        model = served_network(network, *args, **kwargs)  # its input layer: what Keras keeps
        served.append([weakref.ref(part) for part in [model, *model.layers] if part is not network])
        return model

    monkeypatch.setattr(models, "build_model", building)
    monkeypatch.setattr(export, "served_network", serving)
    store = empty_store(tmp_path)
    for seed in range(3):
        run(store, "trainer.epochs=5", "gradcheck=off", f"trainer.seed={seed}")
    gc.collect()
    assert len(built) == len(served) == 3
    assert built[0]() is not None  # the first job's model: the shape's shared one
    assert [ref() for ref in built[1:]] == [None, None]
    # The last job's served model goes when the next job of the shape begins.
    assert [[ref() for ref in parts] for parts in served[:2]] == [[None] * len(served[0])] * 2


# A builder that draws its initial weights from a stateful kernel (tf.random.normal keeps its
# stream in the kernel, which only tf.random.set_seed's cache clearing restarts).
STATEFUL_BUILDER = '''
import keras
import tensorflow as tf


def build(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    layer = keras.layers.Dense(n_outputs)
    model = keras.Model(inputs, layer(inputs))
    layer.kernel.assign(tf.random.normal((n_features, n_outputs)))
    return model
'''


def count_set_seed(monkeypatch) -> list[int]:
    import tensorflow as tf

    calls: list[int] = []
    original = tf.random.set_seed
    monkeypatch.setattr(tf.random, "set_seed", lambda seed: (calls.append(seed), original(seed)))
    return calls


@pytest.mark.heavy  # ~2.4 s
def test_a_later_job_of_built_in_parts_keeps_tensorflows_compiled_programs(tmp_path, monkeypatch):
    """tf.random.set_seed clears TensorFlow's caches, so each later job instantiated its shared
    programs again (~0.2 s of CPU a job); built-in parts draw no stateful kernel, so the seed is
    set without it, and the job still records what it records alone (tests above)."""
    shared_programs.clear()
    calls = count_set_seed(monkeypatch)
    run(store_in(tmp_path / "store"), *FIRST)  # a process's first seed: set_seed, caches empty
    calls.clear()
    run(store_in(tmp_path / "again"), *SECOND)
    assert calls == []
    from tensorflow.python.eager import context

    assert context.context()._seed == 1  # the second job's trainer.seed, set all the same


def test_a_job_of_your_own_code_restarts_stateful_kernels_as_a_job_alone_does(tmp_path,
                                                                                monkeypatch):
    """Your builder may draw from a stateful kernel: its job gets tf.random.set_seed, so the same
    job twice in one process starts from the same weights and records the same, as alone."""
    (tmp_path / "stateful_models.py").write_text(STATEFUL_BUILDER)
    shared_programs.clear()
    calls = count_set_seed(monkeypatch)
    store = store_in(tmp_path / "store")
    job = ("model=custom", "model._target_=stateful_models.build", "trainer.epochs=5",
           "gradcheck=off")
    first = run(store, *job, launch_dir=tmp_path)
    second = run(store, *job, launch_dir=tmp_path)
    assert calls == [0, 0]
    assert second.history["loss"][0] == first.history["loss"][0]  # the same initial weights
    assert second.metrics == first.metrics


RANDOM_FEATURES = '''
import keras
import tensorflow as tf


class RandomFeatures(keras.layers.Layer):
    def build(self, shape):
        self.projection = tf.random.normal((shape[-1], 16))  # a tensor drawn, not a weight

    def call(self, x):
        return tf.cos(tf.matmul(x, self.projection))


def rff(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(RandomFeatures()(inputs)))
'''


@pytest.mark.heavy  # ~15 s
@pytest.mark.parametrize("launcher", ["basic", "packed"])
def test_a_replicate_whose_model_keeps_state_outside_its_weights_is_its_own(tmp_path, launcher):
    # QA: jobs of one shape took the first job's model and set only its variables, so every
    # seed's replicate trained the first seed's random projection (val/mse 4.8 where alone 631)
    import gradexp

    store = empty_store(tmp_path)
    (tmp_path / "random_features.py").write_text(RANDOM_FEATURES)
    keys = (f"tracking.uri={store}", "data=sine", "data.resample=false", "model=custom",
            "model._target_=random_features.rff", "trainer.epochs=5", "gradcheck=off",
            "tracking.log_model=false")
    swept = gradexp.sweep(*keys, "seed=0,1", f"hydra/launcher={launcher}", launch_dir=tmp_path)
    alone = gradexp.run(*keys, "seed=1", launch_dir=tmp_path)
    assert swept[1].metrics["val/mse"] == alone.metrics["val/mse"]
