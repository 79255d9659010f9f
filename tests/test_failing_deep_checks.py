"""A failing check of a deep residual network costs a bounded number of evaluations.

A layer whose tf.custom_gradient scales its input's gradient (1.1x, 0.9x) near the output of a
residual MLP makes every variable before it wrong. The joint probe check named one wrong
variable, then checked the rest jointly again without it, once per wrong variable, each round a
failing check's whole diagnosis: a 6-block, ~100k-parameter model took 15 rounds (2,754
evaluations, 1,794 backward passes, 42-245 s) where a passing check takes 14 evaluations. What
a person sees is still the same: the check fails, the wrong layer is named, the variables
before it are listed as affected and the head after it is not. The cost is counted, not timed.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import conftest

# The user's module: a residual MLP (stem, blocks of Dense + tanh added to their input, head)
# whose last block's tanh is a custom layer with a backward `bug` times the right one.
DEEP_MODELS = '''
import keras
import tensorflow as tf


class ScaledTanh(keras.layers.Layer):
    def __init__(self, bug=1.1, **kwargs):
        super().__init__(**kwargs)
        self.bug = bug

    def call(self, x):
        bug = self.bug

        @tf.custom_gradient
        def scaled_tanh(z):
            def backward(upstream):
                return upstream * (1 - tf.tanh(z) ** 2) * tf.cast(bug, z.dtype)
            return tf.tanh(z), backward

        return scaled_tanh(x)

    def get_config(self):
        return {**super().get_config(), "bug": self.bug}


def residual(n_features, n_outputs, blocks=3, width=16, bug=1.1, dtype=None):
    x = keras.Input((n_features,), dtype=dtype)
    h = keras.layers.Dense(width, activation="tanh", name="stem", dtype=dtype)(x)
    for b in range(blocks):
        z = keras.layers.Dense(width, name=f"dense_{b}", dtype=dtype)(h)
        last = b == blocks - 1
        z = (ScaledTanh(bug=bug, name="wrong", dtype=dtype) if last
             else keras.layers.Activation("tanh", name=f"act_{b}", dtype=dtype))(z)
        h = keras.layers.Add(name=f"add_{b}", dtype=dtype)([h, z])
    head = keras.layers.Dense(n_outputs, name="head", dtype=dtype)
    return keras.Model(x, head(h), name="net")
'''
BLOCKS = 3
BEFORE = ["stem/kernel", "stem/bias"] + [f"dense_{b}/{w}" for b in range(BLOCKS)
                                          for w in ("kernel", "bias")]
AFTER = ["head/kernel", "head/bias"]
PROBES = 4
# One variable's full diagnosis (kink retries, bisection: ~180 evaluations here; the judgment
# along the step: 29 backward passes a failing probe, plus 2 a probe for the kink test),
# whatever the model's depth; then 2 evaluations a probe of each other variable, 2 more for each
# one failing and its bisection (2 a halving of its 256 elements or fewer, 18 for the last 4):
# 442 evaluations and 126 backward passes. Naming every wrong variable by checking the rest
# jointly again without it cost ~180 evaluations and ~130 backward passes a variable: 1,442
# and 1,026 for these 8.
MAX_EVALUATIONS = 250 + (2 * PROBES + 2) * (len(BEFORE) + len(AFTER)) + (2 * 8 + 18) * len(BEFORE)
MAX_BACKWARD_PASSES = PROBES * (29 + 2) + 2 + 20


def _loss_and_weights(bug: float):
    """The model's float64 MSE on 64 rows of a sine, as a compiled function of its weights
    (what a run's check differentiates), its weights and their names."""
    import keras

    namespace: dict = {}
    exec(compile(DEEP_MODELS, "deep_models", "exec"), namespace)
    keras.utils.set_random_seed(0)
    net = namespace["residual"](1, 1, blocks=BLOCKS, bug=bug, dtype="float64")
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(-1, 1, (64, 1)))
    y = tf.sin(2 * np.pi * x)

    @tf.function(autograph=False)
    def loss(*weights):
        prediction, _ = net.stateless_call(list(weights), [], x, training=True)
        return tf.reduce_mean((prediction - y) ** 2)

    weights = [tf.constant(v.numpy()) for v in net.trainable_variables]
    return loss, weights, [v.path.removeprefix("net/") for v in net.trainable_variables]


def _joint_check(bug: float):
    from gradexp.gradcheck.joint import JointFunction, check_jointly, direction_scales

    loss, weights, names = _loss_and_weights(bug)
    shapes = [tuple(w.shape) for w in weights]
    joint = JointFunction(loss, shapes, direction_scales([int(np.prod(s)) for s in shapes]))
    return check_jointly(loss, weights, names=names, probes=PROBES, dtype="float64",
                         joint=joint)


@pytest.mark.parametrize("bug", [1.1, 0.9])
def test_a_wrong_input_gradient_deep_in_a_residual_net_fails_at_a_bounded_cost(bug):
    report = _joint_check(bug)
    assert not report.passed
    # Every variable before the wrong layer is wrong through it; the head after it is right.
    assert [e.name for e in report.failed_entries] == BEFORE, str(report)
    assert all(e.passed for e in report.entries if e.name in AFTER), str(report)
    assert report.function_evaluations <= MAX_EVALUATIONS, report.function_evaluations
    assert report.backward_passes <= MAX_BACKWARD_PASSES, report.backward_passes
    # The worst one is located to an element; the report says how far the others were taken.
    assert any(e.worst_input_index is not None for e in report.failed_entries)
    assert any("breakdown of this failing check was shortened" in n for n in report.notes)


def test_the_correct_twin_passes_at_a_passing_checks_cost():
    report = _joint_check(1.0)
    assert report.passed, str(report)
    assert report.function_evaluations <= 2 * PROBES + 8
    assert report.backward_passes <= 2


@pytest.mark.heavy  # ~5 s (11 s at a load of 4)
def test_a_run_names_the_wrong_layer_and_spends_a_bounded_check(tmp_path, monkeypatch):
    """What a person running it sees: the check fails, `wrong` is named, the variables before
    it are affected, the head is not, and the check's report counts a bounded cost."""
    from mlflow import MlflowClient

    store = conftest.empty_store(tmp_path)
    with conftest.user_modules(tmp_path, monkeypatch, deep_models=DEEP_MODELS) as launch:
        result = conftest.run(
            store, "seed=0", "model=custom", "model._target_=deep_models.residual", "data=sine",
            "data.n_samples=64", "data.n_val=16", "trainer.epochs=1", "gradcheck.at_end=false",
            "gradcheck.plots=false", "tracking.log_model=false", launch_dir=launch)
    assert result.gradcheck_passed is False
    report = conftest.read_report(MlflowClient(store), result.run_id, 0)
    assert report["culprits"] == ["wrong"]
    assert set(report["affected"]) == set(BEFORE)
    probe = report["reports"]["variables/probe"]
    assert probe["function_evaluations"] <= MAX_EVALUATIONS, probe["function_evaluations"]
    assert probe["backward_passes"] <= MAX_BACKWARD_PASSES, probe["backward_passes"]
