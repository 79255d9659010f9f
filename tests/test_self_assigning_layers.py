"""A layer that assigns its own trainable variable while it computes in training mode (Keras'
SpectralNormalization assigns its kernel W/sigma, then reads it back) is checked in inference
mode, the computation whose gradient a training step applies.

QA: a correct Dense -> SpectralNormalization(Dense) -> Dense model failed the default
training-mode check at 34,000-546,000x its tolerance, and the culprit search said "wrong model:
sn" (a Keras wrapper called a model). The check differentiated W/sigma(W, u) through
stateless_call, a gradient training never applies.
"""

import numpy as np
import pytest

import conftest

MODELS = '''
import keras
import tensorflow as tf

from gradexp.models import BuggyDense


@tf.custom_gradient
def tanh_wrong(x):
    def backward(upstream):  # 10% off everywhere
        return upstream * (1 - tf.tanh(x) ** 2) * tf.cast(1.1, x.dtype)
    return tf.tanh(x), backward


class WrongTanh(keras.layers.Layer):
    """tanh through a hand-written backward, 10% off"""
    def call(self, x):
        return tanh_wrong(x)


class RawNoise(keras.layers.Layer):
    """noise from raw tf.random in training mode (no Keras seed generator)"""
    def call(self, x, training=None):
        if training:
            return x + tf.random.normal(tf.shape(x), stddev=0.1, dtype=x.dtype)
        return x


class ScaledWrapper(keras.layers.Wrapper):
    """a wrapper layer whose own op (after its layer) has a wrong backward"""
    def call(self, x):
        return tanh_wrong(self.layer(x))


class OpsModel(keras.Model):
    """a subclassed model whose own op (after its layer) has a wrong backward"""
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(1, name="d", kernel_initializer=init(2))

    def call(self, x):
        return tanh_wrong(self.dense(x))


def init(seed):
    return keras.initializers.GlorotUniform(seed)


def sn_model(n_features, n_outputs, bug="none", noise=False):
    """Dense(tanh) -> SpectralNormalization(Dense) -> Dense; `bug` plants a wrong backward:
    "inside" the SN layer (a BuggyDense wrapped), or "after" it (WrongTanh)."""
    inputs = keras.Input((n_features,))
    h = keras.layers.Dense(8, activation="tanh", name="enc", kernel_initializer=init(1))(inputs)
    if noise:
        h = RawNoise(name="noise")(h)
    kind = BuggyDense if bug == "inside" else keras.layers.Dense
    inner = kind(8, name="inner", kernel_initializer=init(2),
                 **({"bug_scale": 1.5} if bug == "inside" else {}))
    h = keras.layers.SpectralNormalization(inner, name="sn")(h)
    if bug == "after":
        h = WrongTanh(name="wrong_tanh")(h)
    return keras.Model(inputs, keras.layers.Dense(n_outputs, name="head",
                                                  kernel_initializer=init(3))(h))


def wrapped_model(n_features, n_outputs):
    """a Keras Wrapper layer that is itself wrong (its inner Dense is right)"""
    inputs = keras.Input((n_features,))
    h = ScaledWrapper(keras.layers.Dense(4, name="inner", kernel_initializer=init(2)),
                      name="scaled")(inputs)
    return keras.Model(inputs, keras.layers.Dense(n_outputs, name="head",
                                                  kernel_initializer=init(3))(h))
'''

NOTE = ("layer sn assigns its own trainable variable sn/inner/kernel while it computes in "
        "training mode (as Keras' SpectralNormalization does)")


@pytest.fixture
def models(tmp_path, monkeypatch):
    import importlib

    with conftest.user_modules(tmp_path, monkeypatch, sn_models=MODELS):
        monkeypatch.syspath_prepend(str(tmp_path))
        yield importlib.import_module("sn_models")


def rows(n=32, features=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, features)).astype("float32"), \
        rng.normal(size=(n, 1)).astype("float32")


def check(model, **options):
    import keras

    from gradexp.gradcheck import check_model

    x, y = rows()
    return check_model(model, x, y, loss=keras.losses.MeanSquaredError(), mode="train",
                       **options)


@pytest.mark.heavy  # ~3 s
def test_a_correct_spectral_normalization_model_passes_with_a_note_naming_the_layer(models):
    model = models.sn_model(3, 1)
    before = [v.numpy().copy() for v in model.variables]
    report = check(model)
    assert report.passed, str(report)
    assert report.notes[0].startswith(NOTE), report.notes
    assert "checked with it in inference mode, every other layer in training mode" in \
        report.notes[0]
    # the check changed nothing: not the kernel SN assigns, nor its power-iteration vector
    for value, variable in zip(before, model.variables):
        np.testing.assert_array_equal(value, variable.numpy())


@pytest.mark.heavy  # ~8 s
@pytest.mark.parametrize(("bug", "culprits"), [("inside", ["sn/inner"]),
                                               ("after", ["wrong_tanh"])])
def test_a_wrong_layer_beside_spectral_normalization_still_fails_and_is_named(models, bug,
                                                                             culprits):
    report = check(models.sn_model(3, 1, bug=bug))
    assert not report.passed
    assert report.notes[0].startswith(NOTE), report.notes
    assert report.culprits == culprits  # the SN layer itself is not blamed


@pytest.mark.heavy  # ~8 s
def test_spectral_normalization_and_raw_noise_are_held_together_each_with_its_note(models):
    report = check(models.sn_model(3, 1, noise=True))
    assert report.passed, str(report)
    assert report.notes[0].startswith(NOTE)
    assert report.notes[1].startswith("layer noise draws random numbers"), report.notes
    wrong = check(models.sn_model(3, 1, bug="after", noise=True))
    assert not wrong.passed and wrong.culprits == ["wrong_tanh"]


LEAN = ("gradcheck.plots=false", "tracking.log_model=false", "data=sine", "data.n_samples=64",
        "trainer.epochs=2", "model=custom", "model._target_=sn_models.sn_model")


@pytest.mark.heavy  # ~8 s
def test_a_run_of_a_spectral_normalization_model_passes_and_its_report_says_what_was_held(
        models, store, client, tmp_path):
    result = conftest.run(store, *LEAN, launch_dir=tmp_path)
    assert result.gradcheck_passed is True
    for epoch in (0, 2):  # the start and end checks
        report = conftest.read_report(client, result.run_id, epoch)
        assert report["passed"] is True and report["mode"] == "train"
        assert report["notes"][0].startswith(NOTE), report["notes"]


@pytest.mark.heavy  # ~5 s
def test_a_wrong_wrapper_layer_is_called_a_layer_and_a_wrong_model_a_model(models):
    from gradexp.callbacks.checks import failure_lines
    from gradexp.check_result import CheckResult
    from gradexp.gradcheck.culprits import find_culprits

    x, _ = rows()
    verdicts = find_culprits(models.wrapped_model(3, 1), x)
    assert [v.name for v in verdicts] == ["scaled"]
    lines = failure_lines(CheckResult(0, culprits=verdicts, culprits_searched=True))
    assert lines[1].startswith("  wrong layer: scaled, checked alone in float64"), lines
    # a model whose own ops are wrong is a model
    ops_model = models.OpsModel(name="ops")
    ops_model(x)
    verdicts = find_culprits(ops_model, x)
    assert [(v.name, v.model) for v in verdicts] == [("ops", True)]
    lines = failure_lines(CheckResult(0, culprits=verdicts, culprits_searched=True))
    assert lines[1].startswith("  wrong model: ops, checked alone"), lines
