"""gradexp.run / gradexp.sweep (gradexp/api.py): the command line's run and sweep in-process.

What a notebook user sees: a RunResult back, the run recorded in the launch folder's store as the
command line records it (one slow test compares the two on real runs), the command line's one
line as a GradexpError, and nothing of Hydra's global state left behind for the next call.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import pytest
import yaml
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from mlflow import MlflowClient

import gradexp
from conftest import CONF, FIXED_LINE, run_cli, shadowed_line, user_modules
from gradexp import shared_programs, trainer

QUICK = ("trainer.epochs=3", "gradcheck=off", "tracking.log_model=false")


def artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    """Every artifact file of a run, by its path."""
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


@pytest.mark.heavy  # ~3 s
def test_run_returns_its_result_and_records_it_in_the_launch_folders_store(tmp_path):
    result = gradexp.run("optimizer=adam", "loss=mae", *QUICK, launch_dir=tmp_path)

    # The default store, sqlite:///mlflow.db, and Hydra's outputs/ are in the launch folder.
    assert (tmp_path / "mlflow.db").is_file() and (tmp_path / "outputs").is_dir()
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["optimizer.name"] == "adam" and run.data.params["loss.name"] == "mae"
    assert run.data.params["trainer.epochs"] == "3"
    assert result.objective == "val/mse"
    assert result.objective_value == pytest.approx(run.data.metrics["val/mse"])
    assert result.final_loss == pytest.approx(run.data.metrics["final_loss"])
    assert run.info.run_name == "gradcheck=off,loss=mae,optimizer=adam,tracking.log_model=false,"\
        "trainer.epochs=3"  # as the command line names it: Hydra's override_dirname
    # The resolved config and Hydra's three files, as the command line records them.
    logged = artifacts(client, result.run_id)
    assert {"config.yaml", ".hydra/config.yaml", ".hydra/hydra.yaml",
            ".hydra/overrides.yaml"} <= logged
    overrides = yaml.safe_load(open(client.download_artifacts(result.run_id,
                                                               ".hydra/overrides.yaml")))
    assert overrides == ["optimizer=adam", "loss=mae", *QUICK]
    hydra_yaml = yaml.safe_load(open(client.download_artifacts(result.run_id,
                                                                ".hydra/hydra.yaml")))
    assert hydra_yaml["hydra"]["job"]["name"] == "app"  # the command line's job name
    assert hydra_yaml["hydra"]["mode"] == "RUN"
    assert hydra_yaml["hydra"]["runtime"]["cwd"] == str(tmp_path)


@pytest.mark.heavy  # ~2.1 s
def test_two_runs_in_one_process_leave_hydra_and_logging_as_they_found_them(tmp_path, store):
    from hydra import compose, initialize_config_dir

    # From a clean start: a test before it on this worker may have left Hydra's job config set
    # (seen under -n 2 --dist loadgroup); what is checked is that gradexp.run sets none.
    HydraConfig.instance().cfg = None
    handlers, cwd = logging.root.handlers[:], os.getcwd()
    first = gradexp.run(f"tracking.uri={store}", *QUICK, launch_dir=tmp_path)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):  # a caller's own
        second = gradexp.run(f"tracking.uri={store}", *QUICK, "optimizer=adam",
                             launch_dir=tmp_path)
        assert compose(config_name="config", overrides=["loss=mae"]).loss.name == "mae"

    assert first.run_id != second.run_id
    client = MlflowClient(store)
    assert client.get_run(second.run_id).data.params["optimizer.name"] == "adam"
    assert not GlobalHydra.instance().is_initialized()
    assert not HydraConfig.initialized()
    assert logging.root.handlers == handlers and os.getcwd() == cwd


def test_a_mistake_is_a_gradexp_error_with_the_command_lines_one_line(tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # not the `store` fixture's: none made yet
    with pytest.raises(gradexp.GradexpError) as unknown:
        gradexp.run(f"tracking.uri={store}", "optimizer=adamm", launch_dir=tmp_path)
    assert str(unknown.value) == ("optimizer=adamm: no such option; available: adagrad, adam, "
                                  "adamw, momentum, nadam, rmsprop, sgd")
    assert unknown.value.exit_code == 2
    with pytest.raises(gradexp.GradexpError,
                       match=r"^trainer\.epochs=0: must be an integer >= 1 and <= 2147483647$"):
        gradexp.run(f"tracking.uri={store}", "trainer.epochs=0", launch_dir=tmp_path)
    assert not (tmp_path / "mlflow.db").exists()  # refused before any run opened
    assert not GlobalHydra.instance().is_initialized()


def test_a_run_that_fails_raises_its_line_and_is_recorded_failed(tmp_path, store):
    with pytest.raises(gradexp.GradexpError) as failed:
        gradexp.run(f"tracking.uri={store}", "optimizer.learning_rate=50", "trainer.epochs=10",
                    "gradcheck=off", "tracking.log_model=false", launch_dir=tmp_path)
    assert failed.value.exit_code == 1 and "\n" not in str(failed.value)
    assert re.search(r"diverged|NaN|infinite", str(failed.value))
    (run,) = MlflowClient(store).search_runs(["1"])
    assert run.info.status == "FAILED"
    assert run.data.tags["gradexp.status_reason"] == str(failed.value)


def test_run_says_to_sweep_with_gradexp_sweep(tmp_path, store):
    with pytest.raises(gradexp.GradexpError, match=r"Ambiguous value[^-]*gradexp\.sweep\("):
        gradexp.run(f"tracking.uri={store}", "optimizer=sgd,adam", launch_dir=tmp_path)


def test_sweep_runs_hydras_multirun_with_a_parent_run_and_returns_the_children(tmp_path, store):
    results = gradexp.sweep(f"tracking.uri={store}", "optimizer=sgd,adam", *QUICK,
                            launch_dir=tmp_path)

    assert len(results) == 2
    client = MlflowClient(store)
    children = [client.get_run(result.run_id) for result in results]
    assert [child.data.params["optimizer.name"] for child in children] == ["sgd", "adam"]
    # Named by what the sweep varies only, not by the overrides every job shares (QUICK).
    assert [child.info.run_name for child in children] == ["optimizer=sgd", "optimizer=adam"]
    (parent_id,) = {child.data.tags["mlflow.parentRunId"] for child in children}
    parent = client.get_run(parent_id)  # opened and closed by the sweep callback, as with -m
    assert parent.info.status == "FINISHED" and parent.data.tags["gradexp.sweep"] == "true"
    best = min(results, key=lambda result: result.objective_value)
    assert parent.data.tags["gradexp.best_run_id"] == best.run_id
    assert "sweep_summary.json" in artifacts(client, parent_id)
    # Hydra's multirun folder: the sweep's multirun.yaml, a .hydra/ per job, recorded per child.
    (sweep_dir,) = (tmp_path / "multirun").glob("*/*")
    assert (sweep_dir / "multirun.yaml").is_file()
    assert {p.parent.parent.name for p in sweep_dir.glob("*/.hydra/overrides.yaml")} == {"0", "1"}
    for result in results:
        hydra_yaml = yaml.safe_load(open(client.download_artifacts(result.run_id,
                                                                    ".hydra/hydra.yaml")))
        assert hydra_yaml["hydra"]["mode"] == "MULTIRUN"
    assert not GlobalHydra.instance().is_initialized()


def test_a_sweep_with_a_failed_job_raises_after_every_job_ran(tmp_path, store):
    with pytest.raises(gradexp.GradexpError, match=r"^1 of 2 jobs failed") as failed:
        gradexp.sweep(f"tracking.uri={store}", "optimizer.learning_rate=0.1,50",
                      "trainer.epochs=10", "gradcheck=off", "tracking.log_model=false",
                      launch_dir=tmp_path)
    assert failed.value.exit_code == 1
    runs = MlflowClient(store).search_runs(["1"])
    statuses = sorted((run.data.params.get("optimizer.learning_rate"), run.info.status)
                      for run in runs if "mlflow.parentRunId" in run.data.tags)
    assert statuses == [("0.1", "FINISHED"), ("50.0", "FAILED")]


def test_a_sweep_told_not_to_go_on_raises_the_first_failure_at_once(tmp_path, store):
    with pytest.raises(gradexp.GradexpError) as failed:
        gradexp.sweep(f"tracking.uri={store}", "optimizer.learning_rate=50,0.1",
                      "sweep.continue_on_failure=false", "trainer.epochs=10", "gradcheck=off",
                      "tracking.log_model=false", launch_dir=tmp_path)
    assert failed.value.exit_code == 1 and re.search(r"diverged|NaN|infinite", str(failed.value))
    children = [run for run in MlflowClient(store).search_runs(["1"])
                if "mlflow.parentRunId" in run.data.tags]
    assert [run.info.status for run in children] == ["FAILED"]  # the second job never ran


# ---------------------------------------------------------------- against the command line
# What differs between any two runs, or between two processes: ids, times, the process.
PER_RUN_TAGS = {"mlflow.runName", "mlflow.source.name", "mlflow.source.type", "mlflow.user",
                "gradexp.host", "gradexp.pid", "gradexp.heartbeat", "mlflow.log-model.history"}


def _tags(run, launch: Path) -> dict[str, str]:
    """A run's tags with its launch folder and its id written as placeholders."""
    return {key: value.replace(str(launch), "LAUNCH").replace(run.info.run_id, "RUN")
            for key, value in run.data.tags.items() if key not in PER_RUN_TAGS}


def _hydra_yaml(client, run_id: str) -> dict:
    """.hydra/hydra.yaml without what names the time or the folder of one particular launch."""
    hydra = yaml.safe_load(open(client.download_artifacts(run_id, ".hydra/hydra.yaml")))["hydra"]
    for key in ("output_dir", "cwd", "config_sources"):
        hydra["runtime"].pop(key)
    hydra["run"].pop("dir")
    return hydra


# A notebook's module: one layer, correct, with a planted 1.5x dW, or with W cut from the loss;
# a model whose call reads a weight with .numpy() (it trains only eagerly).
NOTEBOOK_MODELS = """
import keras
import tensorflow as tf


class Lin(keras.layers.Layer):
    def __init__(self, mode="ok", **kwargs):
        super().__init__(**kwargs)
        self.mode = mode

    def build(self, shape):
        self.W = self.add_weight(name="W", shape=(shape[-1], 1), initializer="ones")
        self.b = self.add_weight(name="b", shape=(1,), initializer="zeros")

    def call(self, x):
        if self.mode == "dead":
            return 3.0 * x[:, :1] + self.b
        if self.mode == "bug":
            @tf.custom_gradient
            def times(x, w):
                def grad(upstream):
                    return (tf.matmul(upstream, w, transpose_b=True),
                            1.5 * tf.matmul(x, upstream, transpose_a=True))
                return tf.matmul(x, w), grad
            return times(x, tf.convert_to_tensor(self.W)) + self.b
        return tf.matmul(x, self.W) + self.b


def build_with(mode):
    def build(n_features, n_outputs):
        rows = keras.Input((n_features,))
        return keras.Model(rows, Lin(mode, name="lin")(rows))
    return build


class EagerOnly(keras.Model):  # Lin's weights, but a call that runs only eagerly
    def __init__(self, n_features):
        super().__init__()
        self.W = self.add_weight(name="W", shape=(n_features, 1), initializer="ones")
        self.b = self.add_weight(name="b", shape=(1,), initializer="zeros")

    def call(self, x):
        return tf.matmul(x, self.W) * float(self.W.numpy().sum()) + self.b


def build_eager(n_features, n_outputs):
    return EagerOnly(n_features)


build = build_with("ok")
"""
NOTEBOOK = ("model=custom", "model._target_=notebook_models.build", "data.n_features=1",
            "trainer.epochs=3", "tracking.log_model=false", "gradcheck.plots=false")


@pytest.mark.heavy  # ~8 s
def test_a_builder_redefined_between_two_runs_is_trained_and_checked_as_redefined(
        tmp_path, store, monkeypatch):
    """Jobs of one shape share their traced model and checks (gradexp.shared_programs), but a
    person's code can change between two calls in one session with nothing in the config to
    tell: the second run trained and checked the first one's model, and a planted wrong
    gradient passed."""
    client = MlflowClient(store)
    import importlib

    with user_modules(tmp_path, monkeypatch, notebook_models=NOTEBOOK_MODELS):
        sys.path.insert(0, str(tmp_path))  # the notebook's folder, where it imports its module
        module = importlib.import_module("notebook_models")
        ok = gradexp.run(f"tracking.uri={store}", *NOTEBOOK, launch_dir=tmp_path)
        module.build = module.build_with("bug")  # redefined, as in a notebook cell
        bug = gradexp.run(f"tracking.uri={store}", *NOTEBOOK, launch_dir=tmp_path)
        module.build = module.build_with("dead")
        dead = gradexp.run(f"tracking.uri={store}", *NOTEBOOK, launch_dir=tmp_path)
        module.build = module.build_with("ok")
        traces = trainer.TRACES
        rates = gradexp.sweep(f"tracking.uri={store}", *NOTEBOOK,
                              "optimizer.learning_rate=0.01,0.02", launch_dir=tmp_path)

    assert ok.gradcheck_passed and not bug.gradcheck_passed
    assert client.get_run(bug.run_id).data.tags["gradexp.gradcheck.culprits"] == "lin"
    assert bug.final_loss != ok.final_loss  # trained with its own gradient
    assert client.get_run(dead.run_id).data.tags["gradexp.gradcheck.disconnected"] == "lin/W"
    # Within one launch the code is one: the sweep's second job reuses the first one's trace.
    assert [result.gradcheck_passed for result in rates] == [True, True]
    assert trainer.TRACES - traces == 1
    # The next call lets the notebook's models go: never reused, each held its programs.
    gradexp.run(f"tracking.uri={store}", *QUICK, launch_dir=tmp_path)
    assert all(key[-1] is None for key in shared_programs._SHARED)


def test_a_model_redefined_to_train_only_eagerly_is_refused_before_its_run(
        tmp_path, store, monkeypatch):
    """The compile check's verdict is kept for a shape (gradexp.setup_checks), not across calls
    whose code may differ: the second call opened a run that failed with a traceback."""
    import importlib

    with user_modules(tmp_path, monkeypatch, notebook_models=NOTEBOOK_MODELS):
        sys.path.insert(0, str(tmp_path))  # the notebook's folder, where it imports its module
        module = importlib.import_module("notebook_models")
        gradexp.run(f"tracking.uri={store}", *NOTEBOOK, "gradcheck=off", launch_dir=tmp_path)
        module.build = module.build_eager  # redefined in a cell
        with pytest.raises(gradexp.GradexpError,
                           match="cannot run in the compiled training step") as refused:
            gradexp.run(f"tracking.uri={store}", *NOTEBOOK, "gradcheck=off",
                        launch_dir=tmp_path)
    assert refused.value.exit_code == 2
    assert len(MlflowClient(store).search_runs(["1"])) == 1  # no run opened for it


# A notebook's layer, with fixed names (Keras' own count up per model), and a cell that
# redefines it with an __init__ argument its config leaves out: saved, it cannot load back.
SCALED = """
import keras


class Scale(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones")

    def call(self, x):
        return x * self.w

    def get_config(self):  # written out, as the cell's must be: Keras' own adds more keys
        return {"name": self.name, "trainable": self.trainable}


def build(n_features, n_outputs):
    inputs = keras.Input((n_features,), name="x")
    outputs = keras.layers.Dense(n_outputs, name="out")(Scale(name="scale")(inputs))
    return keras.Model(inputs, outputs, name="net")
"""
UNLOADABLE_CELL = """
class Scale(Scale):
    def __init__(self, *, check, **kwargs):
        super().__init__(**kwargs)


def build(n_features, n_outputs):
    inputs = keras.Input((n_features,), name="x")
    outputs = keras.layers.Dense(n_outputs, name="out")(Scale(check=1, name="scale")(inputs))
    return keras.Model(inputs, outputs, name="net")
"""


@pytest.mark.heavy  # ~5 s
def test_a_layer_redefined_so_it_cannot_load_back_is_said_on_the_next_run(
        tmp_path, store, monkeypatch):
    """Whether a saved model loads back is remembered by its config, spec and modules
    (gradexp.model_files), within one launch: a class redefined in the same module object (a
    notebook cell, importlib.reload) left the key as it was, and the second run logged a model
    that mlflow.pyfunc.load_model cannot load (QA)."""
    import importlib

    client = MlflowClient(store)
    with user_modules(tmp_path, monkeypatch, scaled_models=SCALED):
        sys.path.insert(0, str(tmp_path))
        module = importlib.import_module("scaled_models")
        model = ("model=custom", "model._target_=scaled_models.build", "trainer.epochs=1",
                 "gradcheck=off")
        loads = gradexp.run(f"tracking.uri={store}", *model, launch_dir=tmp_path)
        exec(UNLOADABLE_CELL, module.__dict__)  # noqa: S102 - a notebook cell, run
        fails = gradexp.run(f"tracking.uri={store}", *model, launch_dir=tmp_path)
    assert "gradexp.model_logged" not in client.get_run(loads.run_id).data.tags
    assert client.get_run(fails.run_id).data.tags["gradexp.model_logged"] == "false"

def _draws() -> tuple[float, ...]:
    """The next number of each global random stream a caller's seed sets
    (keras.utils.set_random_seed): Python's, numpy's, TensorFlow's unseeded ops', Keras'."""
    import random

    import keras
    import numpy as np
    import tensorflow as tf

    return (random.random(), float(np.random.random()), float(tf.random.uniform(())),
            float(keras.random.uniform(())))


def _seeded(seed: int) -> None:
    """A caller's seed, its global SeedGenerator already drawn from (so it is an object a run
    could advance), as a notebook's cells would leave it."""
    import keras

    keras.utils.set_random_seed(seed)
    keras.random.uniform(())


@pytest.mark.heavy  # ~6 s
def test_a_run_or_sweep_leaves_the_callers_random_state_as_it_found_it(tmp_path, store):
    """A run seeds Python's, numpy's, Keras' and TensorFlow's global state for itself (trainer.
    seed, trainer.deterministic); the caller's own seed went on from the run's: after
    keras.utils.set_random_seed(1) or (2), tf.random.uniform(()) gave the same number."""
    from tensorflow.python.framework import config

    determinism = config.is_op_determinism_enabled()
    _seeded(7)
    expected = _draws()

    _seeded(7)
    gradexp.run("tracking=none", "trainer.deterministic=true", "trainer.seed=3", *QUICK,
                launch_dir=tmp_path)
    assert _draws() == expected
    _seeded(7)  # a run that fails, after it seeded everything
    with pytest.raises(gradexp.GradexpError):
        gradexp.run("tracking=none", "trainer.deterministic=true", "optimizer.learning_rate=50",
                    "trainer.epochs=10", "gradcheck=off", launch_dir=tmp_path)
    assert _draws() == expected
    _seeded(7)  # a sweep, recorded in MLflow, the callback's parent run around its jobs
    gradexp.sweep(f"tracking.uri={store}", "optimizer=sgd,adam", *QUICK, launch_dir=tmp_path)
    assert _draws() == expected
    assert config.is_op_determinism_enabled() == determinism

    # No seed and no op determinism before: a deterministic run leaves neither, or the
    # caller's next unseeded op would raise "Random ops require a seed to be set".
    import tensorflow as tf

    config.disable_op_determinism()
    tf.random.set_seed(None)
    gradexp.run("tracking=none", "trainer.deterministic=true", *QUICK, launch_dir=tmp_path)
    assert not config.is_op_determinism_enabled()
    from tensorflow.python.eager import context

    assert context.global_seed() is None
    tf.random.uniform(())
    if determinism:
        config.enable_op_determinism()


@pytest.mark.slow
def test_gradexp_run_records_what_the_command_line_records(tmp_path):
    overrides = ("optimizer=adam", "loss=mae", "trainer.epochs=4", "gradcheck.every_n_epochs=2")
    by_cli, by_api = tmp_path / "cli", tmp_path / "api"
    by_cli.mkdir(), by_api.mkdir()
    done = run_cli(*overrides, cwd=by_cli)
    assert done.returncode == 0, done.stderr[-3000:]
    result = gradexp.run(*overrides, launch_dir=by_api)

    cli_client = MlflowClient(f"sqlite:///{by_cli / 'mlflow.db'}")
    api_client = MlflowClient(f"sqlite:///{by_api / 'mlflow.db'}")
    (cli_run,) = cli_client.search_runs(["1"])
    api_run = api_client.get_run(result.run_id)
    assert api_run.info.run_name == cli_run.info.run_name
    assert api_run.data.params == cli_run.data.params
    assert _tags(api_run, by_api) == _tags(cli_run, by_cli)
    assert api_run.data.metrics.keys() == cli_run.data.metrics.keys()
    for name, value in cli_run.data.metrics.items():  # the same seeds: the same numbers
        assert api_run.data.metrics[name] == pytest.approx(value, rel=1e-6), name
    assert artifacts(api_client, api_run.info.run_id) == artifacts(cli_client, cli_run.info.run_id)
    for path in ("config.yaml", ".hydra/config.yaml", ".hydra/overrides.yaml"):
        assert (Path(api_client.download_artifacts(api_run.info.run_id, path)).read_text()
                == Path(cli_client.download_artifacts(cli_run.info.run_id, path)).read_text())
    assert _hydra_yaml(api_client, api_run.info.run_id) == \
        _hydra_yaml(cli_client, cli_run.info.run_id)


@pytest.mark.slow
def test_import_gradexp_loads_neither_hydra_nor_tensorflow(tmp_path):
    import subprocess

    from conftest import cli_env

    def loaded(code: str) -> str:
        shown = "print(sorted(m for m in ('tensorflow', 'hydra', 'mlflow') if m in sys.modules))"
        done = subprocess.run([sys.executable, "-c", f"import sys, gradexp; {code}; {shown}"],
                              cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert loaded("pass") == "[]"
    assert loaded("gradexp.run, gradexp.sweep") == "['hydra']"  # TensorFlow loads in the job


@pytest.mark.slow
def test_the_first_use_of_gradexp_run_leaves_pythons_random_stream_alone(tmp_path):
    """gradexp.run's first use loads gradexp.api, and with it rich, whose import draws from
    Python's random (rich.style's ids): after random.seed(5), the caller's next number was
    0.2554, not 0.6229 (seen as "MLflow advances random", on a session's first run)."""
    import subprocess

    from conftest import cli_env

    code = ("import random, gradexp; random.seed(5); gradexp.run; a = random.random(); "
            "random.seed(5); print(a == random.random())")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


@pytest.mark.heavy  # ~4 s
def test_a_store_deleted_between_two_runs_is_made_anew(tmp_path):
    """A notebook starting afresh deletes mlflow.db between two calls: MLflow's cached store
    and engine for its URI kept the deleted file, every write "attempt to write a readonly
    database"; a new process makes the store anew, and so does the next call."""
    gradexp.run(*QUICK, launch_dir=tmp_path)
    (tmp_path / "mlflow.db").unlink()
    result = gradexp.run(*QUICK, launch_dir=tmp_path)

    (run,) = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs(["1"])
    assert run.info.run_id == result.run_id and run.info.status == "FINISHED"


def test_a_caller_seeded_as_the_run_was_draws_as_if_no_run_had_come_between():
    # Both at seed 0 (the default trainer.seed): the run's tf.random.set_seed(0) and its draws
    # advanced the stateful random kernels cached for seed 0, and the caller's next draw went on
    # from where the run stopped.
    import tensorflow as tf

    from gradexp.seeds import restore_session_random_state, session_random_state

    def draws(count: int) -> list[float]:
        return [float(tf.random.normal(())) for _ in range(count)]

    tf.random.set_seed(0)
    expected = draws(1) + draws(2)
    tf.random.set_seed(0)
    got = draws(1)
    saved = session_random_state()
    tf.random.set_seed(0)  # the run's own seeding, and its draws
    draws(3)
    restore_session_random_state(saved)
    assert got + draws(2) == expected


def test_a_call_from_another_folder_runs_that_folders_module_of_the_same_name(tmp_path):
    # The second call ran the first folder's fixed_line.py, cached in sys.modules, and the
    # first folder stayed on sys.path: a person's two projects in one notebook mixed up.
    finals = {}
    for name, (w, b) in {"zero": (0.0, 0.0), "true": (3.0, 4.0)}.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "fixed_line.py").write_text(FIXED_LINE.format(w=w, b=b))
        result = gradexp.run("model=custom", "model._target_=fixed_line.build",
                             "gradcheck=off", "trainer.epochs=1", "tracking.log_model=false",
                             "optimizer.learning_rate=1e-9", launch_dir=folder)
        finals[name] = result.final_loss
        assert "fixed_line" not in sys.modules
        assert not any(str(tmp_path) in entry for entry in sys.path)
    assert finals["zero"] > 20 and finals["true"] < 0.05, finals


def test_a_dtype_policy_changed_between_calls_is_the_one_trained(tmp_path, store):
    # The second call reused the first one's traced float32 model under mixed_float16 (its
    # variables are float32 either way): a silently wrong result (QA)
    import keras

    mlp = (f"tracking.uri={store}", "model=mlp", "data=sine", "model.hidden=[8]",
           "model.dropout=0.2", "trainer.epochs=3", "data.n_samples=64", "data.n_val=16",
           "trainer.batch_size=16", "gradcheck=off", "tracking.log_model=false")
    try:
        plain = gradexp.run(*mlp, launch_dir=tmp_path).final_loss
        keras.mixed_precision.set_global_policy("mixed_float16")
        mixed = gradexp.run(*mlp, launch_dir=tmp_path).final_loss
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert gradexp.run(*mlp, launch_dir=tmp_path).final_loss == plain
    assert mixed != plain and abs(mixed - plain) < 0.05 * plain


def test_keras_floatx_float64_trains_in_mini_batches(tmp_path, store):
    # The epoch's float32 totals took float64 losses: a TypeError from the trainer (QA; the
    # same with floatx float64 in ~/.keras/keras.json on the command line)
    import keras

    keras.config.set_floatx("float64")
    try:
        result = gradexp.run(f"tracking.uri={store}", "model=mlp", "data=sine",
                             "model.hidden=[8]", "data.n_samples=64", "trainer.batch_size=16",
                             *QUICK, launch_dir=tmp_path)
    finally:
        keras.config.set_floatx("float32")
    assert 0 < result.final_loss < 1


def test_a_module_the_session_imported_from_elsewhere_is_not_run_for_the_launch_folders(
        tmp_path, store, monkeypatch):
    # The notebook imported its folder's fixed_line; a call launched from another folder with
    # a fixed_line.py of its own ran the notebook's, silently (QA)
    import importlib

    notebook, project = tmp_path / "notebook", tmp_path / "project"
    for folder, (w, b) in ((notebook, (0.0, 0.0)), (project, (3.0, 4.0))):
        folder.mkdir()
        (folder / "fixed_line.py").write_text(FIXED_LINE.format(w=w, b=b))
    monkeypatch.setattr(sys, "path", [str(notebook), *sys.path])
    monkeypatch.delitem(sys.modules, "fixed_line", raising=False)
    importlib.import_module("fixed_line")
    try:
        with pytest.raises(gradexp.GradexpError) as refused:
            gradexp.run(f"tracking.uri={store}", "model=custom", "model._target_=fixed_line.build",
                        *QUICK, launch_dir=project)
    finally:
        sys.modules.pop("fixed_line", None)
    assert refused.value.line == shadowed_line("fixed_line", notebook)
    assert refused.value.exit_code == 2


def test_a_launch_dir_that_does_not_exist_is_one_line(tmp_path, store):
    with pytest.raises(gradexp.GradexpError) as refused:  # a FileNotFoundError traceback (QA)
        gradexp.run(f"tracking.uri={store}", *QUICK, launch_dir=tmp_path / "nowhere")
    assert refused.value.line == f"launch_dir={tmp_path / 'nowhere'}: no such folder"
    assert refused.value.exit_code == 2
