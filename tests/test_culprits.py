"""Name the layer: a failed check names the layer whose own backward is wrong (each layer checked
alone at the inputs it saw), lists the variables it only affects, and states one error (relative
error, tolerance, their ratio) the same way in the console, the summary, the json and MLflow."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import compose_config
from gradexp.experiment import run_experiment

# The user's module: a softplus block whose tf.custom_gradient backward is 5% too large for
# negative inputs (bug=0: its correct twin), in a functional, a nested, a subclassed and a
# shared-layer model, a subclassed model with the bug in its own call, and a loss with it.
MODELS = '''"""Models with a softplus block whose backward is `bug` off for negative inputs."""
import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="culprit_models")
class SoftplusBlock(keras.layers.Layer):
    """Dense then softplus; its backward is (1 + bug) times too large where the
    pre-activation is negative (the forward pass is right)."""

    def __init__(self, units, bug=0.05, **kwargs):
        super().__init__(**kwargs)
        self.units, self.bug = units, bug

    def build(self, shape):
        self.kernel = self.add_weight(shape=(shape[-1], self.units), name="kernel")
        self.bias = self.add_weight(shape=(self.units,), name="bias", initializer="zeros")

    def call(self, x):
        bug = self.bug

        @tf.custom_gradient
        def softplus(z):
            def backward(upstream):
                factor = tf.where(z < 0, tf.cast(1 + bug, z.dtype), tf.cast(1, z.dtype))
                return upstream * tf.sigmoid(z) * factor
            return tf.nn.softplus(z), backward

        return softplus(tf.matmul(x, self.kernel) + self.bias)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "bug": self.bug}


def functional(n_features, n_outputs, bug=0.05):
    x = keras.Input((n_features,))
    h = keras.layers.Dense(6, activation="tanh", name="encoder")(x)
    h = SoftplusBlock(5, bug=bug, name="softplus_block")(h)
    return keras.Model(x, keras.layers.Dense(n_outputs, name="head")(h), name="net")


def nested(n_features, n_outputs, bug=0.05):
    inner_x = keras.Input((n_features,))
    h = keras.layers.Dense(6, activation="tanh", name="encoder")(inner_x)
    block = keras.Model(inner_x, SoftplusBlock(5, bug=bug, name="softplus_block")(h),
                        name="block")
    x = keras.Input((n_features,))
    return keras.Model(x, keras.layers.Dense(n_outputs, name="head")(block(x)), name="net")


@keras.saving.register_keras_serializable(package="culprit_models")
class Subclassed(keras.Model):
    def __init__(self, n_outputs=1, bug=0.05, **kwargs):
        super().__init__(**kwargs)
        self.n_outputs, self.bug = n_outputs, bug
        dtype = self.dtype_policy  # the float64 twin of the check computes in float64 throughout
        self.encoder = keras.layers.Dense(6, activation="tanh", name="encoder", dtype=dtype)
        self.block = SoftplusBlock(5, bug=bug, name="softplus_block", dtype=dtype)
        self.head = keras.layers.Dense(n_outputs, name="head", dtype=dtype)

    def call(self, x, training=None):
        return self.head(self.block(self.encoder(x)))

    def get_config(self):
        return {**super().get_config(), "n_outputs": self.n_outputs, "bug": self.bug}


def subclassed(n_features, n_outputs, bug=0.05):
    network = Subclassed(n_outputs, bug, name="net")
    network(tf.zeros((1, n_features)))  # a subclassed model builds its layers when called
    return network


def shared(n_features, n_outputs, bug=0.05):
    """The block called twice (same weights): a layer used more than once."""
    x = keras.Input((n_features,))
    block = SoftplusBlock(n_features, bug=bug, name="softplus_block")
    h = block(keras.layers.Dense(n_features, activation="tanh", name="encoder")(x))
    return keras.Model(x, keras.layers.Dense(n_outputs, name="head")(block(h)), name="net")


def noisy(n_features, n_outputs, bug=0.0):
    """Dropout and batch norm, which behave differently in training mode."""
    x = keras.Input((n_features,))
    h = keras.layers.Dense(8, activation="tanh", name="encoder")(x)
    h = keras.layers.BatchNormalization(name="norm")(h)
    h = keras.layers.Dropout(0.3, seed=1, name="dropout")(h)
    h = SoftplusBlock(5, bug=bug, name="softplus_block")(h)
    return keras.Model(x, keras.layers.Dense(n_outputs, name="head")(h), name="net")


class Inline(keras.Model):
    """A subclassed model whose own call (not a layer) has the wrong backward."""

    def __init__(self, n_outputs=1, bug=0.05, **kwargs):
        super().__init__(**kwargs)
        self.bug = bug
        self.encoder = keras.layers.Dense(6, name="encoder")
        self.head = keras.layers.Dense(n_outputs, name="head")

    def call(self, x, training=None):
        bug = self.bug

        @tf.custom_gradient
        def softplus(z):
            def backward(upstream):
                factor = tf.where(z < 0, tf.cast(1 + bug, z.dtype), tf.cast(1, z.dtype))
                return upstream * tf.sigmoid(z) * factor
            return tf.nn.softplus(z), backward

        return self.head(softplus(self.encoder(x)))


def wrong_mse(y_true, y_pred):
    """Squared error whose backward is 5% too large where the residual is negative."""
    @tf.custom_gradient
    def square(r):
        def backward(upstream):
            return upstream * 2 * r * tf.where(r < 0, tf.cast(1.05, r.dtype), tf.cast(1, r.dtype))
        return r * r, backward

    return tf.reduce_mean(square(y_pred - y_true), axis=-1)
'''

FAST = ("data.n_features=3", "data.n_samples=48", "data.n_val=16", "trainer.epochs=2",
        "gradcheck.at_end=false", "gradcheck.plots=false", "tracking.log_model=false")


@pytest.fixture
def launch(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "launch"
    folder.mkdir()
    (folder / "culprit_models.py").write_text(MODELS)
    monkeypatch.setattr(sys, "path", [str(folder), *sys.path])
    sys.modules.pop("culprit_models", None)
    yield folder
    sys.modules.pop("culprit_models", None)


def run(store, launch, *overrides, quiet=True):
    cfg = compose_config(f"tracking.uri={store}", *FAST, *overrides)
    return run_experiment(cfg, quiet=quiet, launch_dir=launch)


def model(builder: str, bug: float | None = None) -> tuple[str, ...]:
    overrides = ("model=custom", f"model._target_=culprit_models.{builder}")
    return overrides + ((f"+model.kwargs.bug={bug}",) if bug is not None else ())


def first_report(client, run_id: str) -> dict:
    with open(client.download_artifacts(run_id, "gradcheck/report_epoch_00000.json")) as f:
        return json.load(f)


# ---------------------------------------------------------------- runs
@pytest.mark.parametrize(("builder", "culprit"), [
    ("functional", "softplus_block"),
    ("nested", "block/softplus_block"),
    ("subclassed", "softplus_block"),
])
def test_the_wrong_layer_is_named_and_the_variables_it_flows_into_are_affected(
        store, client, launch, builder, culprit):
    result = run(store, launch, *model(builder))
    assert result.gradcheck_passed is False
    stored = client.get_run(result.run_id)
    assert stored.data.tags["gradexp.gradcheck.culprits"] == culprit
    report = first_report(client, result.run_id)
    assert report["culprits"] == [culprit]
    # The encoder before the block fails the model's check only through the block's backward.
    assert {"encoder/kernel", "encoder/bias"} <= set(report["affected"])
    assert not any(name.startswith(("softplus_block/", "head/")) for name in report["affected"])
    (verdict,) = report["culprit_checks"]
    assert verdict["passed"] is False and verdict["dtype"] == "float64"
    assert verdict["variables"] == ["softplus_block/kernel", "softplus_block/bias"]
    # Its worst element is 5% off, which the layer's own check measures as such.
    worst = max((e for e in verdict["report"]["entries"] if not e["passed"]),
                key=lambda e: e["error_to_tolerance"])
    assert worst["reported_error"]["rel_error"] == pytest.approx(0.05, rel=0.02)
    assert stored.data.metrics["gradcheck/error_to_tolerance"] > 1


def test_the_correct_twin_passes_with_no_culprits(store, client, launch):
    result = run(store, launch, *model("functional", bug=0.0))
    assert result.gradcheck_passed is True
    stored = client.get_run(result.run_id)
    assert "gradexp.gradcheck.culprits" not in stored.data.tags  # set only when a check fails
    assert 0 < stored.data.metrics["gradcheck/error_to_tolerance"] < 1
    report = first_report(client, result.run_id)
    assert report["culprits"] is None and report["culprit_checks"] == []


def test_an_error_in_the_loss_names_no_layer(store, client, launch):
    result = run(store, launch, *model("functional", bug=0.0),
                 "loss._target_=culprit_models.wrong_mse")
    assert result.gradcheck_passed is False
    stored = client.get_run(result.run_id)
    assert stored.data.tags["gradexp.gradcheck.culprits"] == ""  # every layer passes alone
    report = first_report(client, result.run_id)
    assert report["culprits"] == [] and "head/kernel" in report["affected"]


def test_the_warning_is_a_few_lines_naming_the_layer_its_element_and_the_affected(
        store, launch, capsys):
    run(store, launch, *model("functional"), quiet=False)
    out = capsys.readouterr().out
    start = out.index("warning: gradient check failed at epoch 0")
    lines = out[start:].splitlines()[:4]
    assert lines[1].startswith("  wrong layer: softplus_block, checked alone in float64")
    assert lines[2].startswith("    worst element: d out[") and "rel diff 5.00e-02" in lines[2]
    assert lines[3].startswith("  affected (wrong only through it): encoder/kernel")
    assert all(len(line) < 200 for line in lines)
    epoch_line = out[start:].splitlines()[4]
    assert not epoch_line.startswith(" ")  # the warning ended after four lines


def test_one_reported_error_in_the_console_the_summary_the_json_and_mlflow(
        store, client, launch, capsys):
    result = run(store, launch, *model("functional"), quiet=False)
    out = capsys.readouterr().out
    metrics = client.get_run(result.run_id).data.metrics
    error = first_report(client, result.run_id)["error"]
    ratio, rel, tolerance = (error["error_to_tolerance"], error["rel_error"],
                             error["tolerance"])
    assert ratio > 1 and rel == pytest.approx(ratio * tolerance)
    assert metrics["gradcheck/error_to_tolerance"] == pytest.approx(ratio)
    assert metrics["gradcheck/tolerance"] == pytest.approx(tolerance)
    assert metrics["gradcheck/max_rel_error"] >= rel
    # The element named in the report is the one whose relative error is reported.
    entry = [e for e in first_report(client, result.run_id)["reports"][error["report"]]["entries"]
             if e["name"] == error["name"]][0]
    a, n = entry["worst_analytical"], entry["worst_numerical"]
    assert rel == pytest.approx(abs(a - n) / abs(n), rel=1e-6)
    assert f"relative error {rel:.2e}" in out  # the console
    summary = " ".join(out[out.index("gradient check  "):].replace("│", " ").split())
    assert f"epoch 0: relative error {rel:.2e} = " in summary
    assert "wrong layer: softplus_block" in summary


# ---------------------------------------------------------------- direct calls
@pytest.fixture
def culprit_models(launch):
    import importlib

    return importlib.import_module("culprit_models")


def x_rows(n_features: int = 3, rows: int = 32) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((rows, n_features)).astype("float32")


def test_a_layer_called_twice_is_named_once(culprit_models):
    from gradexp.gradcheck.culprits import find_culprits

    (verdict,) = find_culprits(culprit_models.shared(3, 1), x_rows())
    assert verdict.name == "softplus_block" and verdict.call == 0


def test_a_bug_in_a_models_own_call_names_the_model(culprit_models):
    import tensorflow as tf

    from gradexp.gradcheck.culprits import check_layers

    network = culprit_models.Inline(name="net")
    network(tf.zeros((1, 3)))
    verdicts = check_layers(network, x_rows())
    assert [(v.name, v.passed) for v in verdicts] == [("encoder", True), ("head", True),
                                                      ("net", False)]


def test_dropout_and_batch_norm_in_training_mode_pass_and_keep_their_state(culprit_models):
    from gradexp.gradcheck.culprits import check_layers

    network = culprit_models.noisy(3, 1)
    before = [v.numpy().copy() for v in network.variables]
    verdicts = check_layers(network, x_rows(), training=True)
    assert all(v.passed and v.report is not None for v in verdicts)
    assert {v.name for v in verdicts} >= {"norm", "dropout", "net"}
    assert all(np.array_equal(b, v.numpy()) for b, v in zip(before, network.variables))


def test_a_layer_drawing_raw_random_numbers_is_not_blamed():
    import keras
    import tensorflow as tf

    from gradexp.gradcheck.culprits import check_layers

    class Noise(keras.layers.Layer):
        def call(self, x):
            return x + tf.random.normal(tf.shape(x), dtype=x.dtype)

    x = keras.Input((3,))
    network = keras.Model(x, keras.layers.Dense(1, name="head")(Noise(name="noise")(x)))
    verdicts = {v.name: v for v in check_layers(network, x_rows())}
    assert verdicts["noise"].passed and verdicts["noise"].report is None
    assert "random numbers" in verdicts["noise"].note
