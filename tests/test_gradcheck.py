"""Tests for gradexp.gradcheck: right gradients pass, planted wrong ones are caught and located.

Wrong gradients are planted with tf.custom_gradient, so the forward function is right and only
the backward is wrong, which is exactly what a gradient checker must see. Inputs are drawn away
from kinks (|x| at 0, Huber at delta) so finite differences are valid there.
"""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from op_bugs import one_element_off

from gradexp.gradcheck import (
    GradCheckEntry,
    GradCheckReport,
    check_gradients,
    check_variables,
    miss_probability,
)

METHODS = ["jacobian", "probe"]


def away_from_zero(rng: np.random.Generator, shape, low: float = 0.3, high: float = 1.5):
    """Random values with |x| in [low, high]: no sampling into kinks at 0."""
    return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(low, high, size=shape)


# ---------------------------------------------------------------------------------------------
# Correct gradients pass


def _mlp(x, w1, b1, w2):
    return tf.nn.softplus(tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2))


@tf.custom_gradient
def _good_softplus(x):
    def grad(up):
        return up * tf.sigmoid(x)

    return tf.nn.softplus(x), grad


def _correct_cases(rng: np.random.Generator, dtype: str = "float64") -> dict:
    """name -> (f, xs). Keras losses compute in their own dtype, so they get the test's."""
    losses = keras.losses
    labels = np.eye(4)[rng.integers(0, 4, size=5)]
    target = rng.standard_normal((6, 3))
    residual = away_from_zero(rng, (6, 3), 0.2, 0.8)  # Huber/MAE kinks at |r| = 1 and 0
    a = 3.0 * np.eye(4) + 0.3 * rng.standard_normal((4, 4))  # well conditioned
    return {
        "matmul": (tf.matmul, [rng.standard_normal((4, 3)), rng.standard_normal((3, 5))]),
        "mlp tanh/softplus": (_mlp, [rng.standard_normal((5, 3)), rng.standard_normal((3, 6)),
                                     rng.standard_normal(6), rng.standard_normal((6, 2))]),
        "keras mse": (losses.MeanSquaredError(dtype=dtype), [target, rng.standard_normal((6, 3))]),
        "keras huber": (lambda p: losses.Huber(delta=1.0, dtype=dtype)(target, p),
                        [target + residual]),
        "keras huber (linear part)": (lambda p: losses.Huber(delta=0.1, dtype=dtype)(target, p),
                                      [target + residual]),
        "keras mae away from kinks": (
            lambda p: losses.MeanAbsoluteError(dtype=dtype)(target, p), [target + residual]),
        "keras log_cosh": (losses.LogCosh(dtype=dtype), [target, rng.standard_normal((6, 3))]),
        "keras cce from logits": (
            lambda z: losses.CategoricalCrossentropy(from_logits=True, dtype=dtype)(labels, z),
            [2.0 * rng.standard_normal((5, 4))],
        ),
        "softmax ce per example": (
            lambda z: tf.nn.softmax_cross_entropy_with_logits(labels, z),
            [2.0 * rng.standard_normal((5, 4))],
        ),
        "right custom gradient": (lambda x: _good_softplus(x) * 2.0, [rng.standard_normal(7)]),
        "linalg inv": (tf.linalg.inv, [a]),
        "linalg solve": (tf.linalg.solve, [a, rng.standard_normal((4, 2))]),
    }


CORRECT = list(_correct_cases(np.random.default_rng(0)))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", CORRECT)
def test_correct_gradients_pass(case, method, dtype):
    f, xs = _correct_cases(np.random.default_rng(0), dtype)[case]
    report = check_gradients(f, [np.asarray(x, dtype) for x in xs], method=method)
    assert report.passed, str(report)
    assert report.dtype_used == dtype
    assert all(e.checked and e.passed for e in report.entries)
    # No accidental pass by huge tolerances: the errors seen are far below a real bug's.
    assert report.max_rel_error < (1e-6 if dtype == "float64" else 1e-2)


# ---------------------------------------------------------------------------------------------
# Wrong gradients are caught, by both methods, on the right input


def _planted(forward, backward):
    """forward(x) with a hand-written backward(x, upstream): the way real bugs get in."""

    @tf.custom_gradient
    def op(x):
        return forward(x), lambda up: backward(x, up)

    return op


scaled_1pct = _planted(tf.square, lambda x, up: up * 2.0 * x * 1.01)
tanh_3pct = _planted(tf.tanh, lambda x, up: up * (1.0 - tf.tanh(x) ** 2) * 1.03)
sign_flipped = _planted(tf.sin, lambda x, up: -up * tf.cos(x))
missing_term = _planted(lambda x: x * tf.sin(x), lambda x, up: up * x * tf.cos(x))
ignores_upstream = _planted(tf.square, lambda x, up: 2.0 * x)
ignores_upstream_loss = _planted(tf.reduce_sum, lambda x, up: tf.ones_like(x))
misrouted_upstream = _planted(tf.square, lambda x, up: tf.reverse(up, [0]) * 2.0 * x)
negative_branch = _planted(
    lambda x: tf.where(x > 0, x, 0.1 * x),
    lambda x, up: up * tf.where(x > 0, tf.ones_like(x), 0.2 * tf.ones_like(x)),
)


def _one_wrong_element(n: int, index: int):
    mask = np.zeros(n)
    mask[index] = 1.0
    return _planted(tf.square, lambda x, up: up * 2.0 * x * (1.0 + mask.reshape(x.shape)))


def _matmul_bad_grad(wrong):
    """a @ b whose gradient for a is wrong(correct gradient); b's gradient is right."""

    @tf.custom_gradient
    def mm(a, b):
        def grad(up):
            return (wrong(tf.matmul(up, b, transpose_b=True)),
                    tf.matmul(a, up, transpose_a=True))

        return tf.matmul(a, b), grad

    return mm


_transposed = _matmul_bad_grad(tf.transpose)
_layout = _matmul_bad_grad(lambda g: tf.reshape(tf.transpose(g), tf.shape(g)))


def _bug_cases(rng: np.random.Generator) -> dict:
    """name -> (f, xs, name of the wrong input, flat index of a wrong element or None)."""
    x = away_from_zero(rng, 12)
    w = rng.standard_normal((5, 3))
    x32 = rng.standard_normal((4, 5)).astype(np.float32)
    a = rng.standard_normal((4, 4))
    c = rng.standard_normal((4, 3))
    return {
        "1% scale error (float64)": (lambda x, w: tf.reduce_sum(scaled_1pct(x) * w[0, 0]),
                                     [x, w], "x0", None),
        "3% error (float32)": (lambda x, w: tf.reduce_mean(tanh_3pct(tf.matmul(x, w))),
                               [x32, w.astype(np.float32)], None, None),
        "sign flip": (lambda x: sign_flipped(x) * 3.0, [x], "x0", None),
        "missing term": (lambda x: tf.reduce_sum(missing_term(x)), [x], "x0", None),
        "ignores upstream, vector output": (ignores_upstream, [x], "x0", None),
        "ignores upstream, scalar output": (ignores_upstream_loss, [x], "x0", None),
        "upstream of the wrong element": (misrouted_upstream, [x], "x0", None),
        "negative branch only": (lambda x: tf.reduce_sum(negative_branch(x) ** 2), [x], "x0",
                                 None),
        "one wrong element of 300": (lambda x: tf.reduce_sum(_one_wrong_element(300, 123)(x)),
                                     [away_from_zero(rng, 300)], "x0", 123),
        "transposed gradient, square": (lambda a, c: tf.reduce_sum(_transposed(a, c) ** 2),
                                        [a, c], "x0", None),
        "mis-laid-out gradient, non-square": (
            lambda a, c: tf.reduce_sum(_layout(a, c) * np.arange(6.0).reshape(2, 3)),
            [rng.standard_normal((2, 4)), c], "x0", None,
        ),
        "wrong-shaped gradient": (lambda a: tf.reduce_sum(_transposed(a, c[:3, :2]) ** 2),
                                  [rng.standard_normal((4, 3))], "x0", None),
    }


BUGS = list(_bug_cases(np.random.default_rng(1)))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", BUGS)
def test_wrong_gradients_are_caught(case, method):
    f, xs, wrong_input, wrong_index = _bug_cases(np.random.default_rng(1))[case]
    report = check_gradients(f, xs, method=method)
    assert not report.passed, str(report)
    failed = [e.name for e in report.failed_entries]
    if wrong_input is not None:
        assert failed == [wrong_input], str(report)
    if wrong_index is not None:
        entry = report.failed_entries[0]
        assert entry.worst_input_index == (wrong_index,), str(report)
        assert entry.worst_output_index == ()
    assert f"FAIL  {failed[0]}" in str(report)


def test_ignored_upstream_at_a_scalar_loss_is_named():
    """One-hot cotangents (what tf.test.compute_gradient uses) cannot see this bug."""
    x = away_from_zero(np.random.default_rng(2), 5)
    (theoretical,), (numerical,) = tf.test.compute_gradient(ignores_upstream_loss, [x])
    np.testing.assert_allclose(theoretical, numerical, rtol=1e-6)  # TF alone: looks right
    for method in METHODS:
        report = check_gradients(ignores_upstream_loss, [x], method=method)
        assert not report.passed
        assert report.entries[0].linearity_error > 1
        assert "not linear in its upstream gradient" in str(report)


def test_probe_finds_one_wrong_element_among_20000():
    n, bad = 20_000, 13_579
    x = away_from_zero(np.random.default_rng(3), n)
    wrong = _one_wrong_element(n, bad)
    report = check_gradients(lambda x: tf.reduce_sum(wrong(x)), [x], method="probe")
    entry = report.entries[0]
    assert not report.passed
    assert entry.worst_input_index == (bad,)
    assert entry.worst_numerical == pytest.approx(2 * x[bad], rel=1e-6)
    assert entry.worst_analytical == pytest.approx(4 * x[bad], rel=1e-6)
    assert report.function_evaluations < 200  # bisection, not 2 x 20,000 evaluations
    assert f"x0[{bad}]" in str(report)
    # The same function with the right gradient passes.
    assert check_gradients(lambda x: tf.reduce_sum(x * x), [x]).passed


def _tanh_backward_times(factor: float):
    """tanh, its backward `factor` times the right one (1.0: right)."""
    @tf.custom_gradient
    def tanh(z):
        def backward(upstream):
            return upstream * (1 - tf.tanh(z) ** 2) * factor
        return tf.tanh(z), backward

    return tanh


@pytest.mark.parametrize("factor", [1.0, 1.01, -1.0])
def test_probe_judges_the_elements_that_matter_where_most_are_saturated(factor):
    """99% of a tanh's inputs at |x| 10-30 (gradients 1e-9 and below), 1% where it is not: the
    probe's weighting by the median gradient weighed every element that matters down to 1e-9,
    under the absolute tolerance, and a backward of the wrong sign passed."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(2000)
    saturated = rng.random(2000) < 0.99
    x[saturated] = np.sign(x[saturated]) * rng.uniform(10, 30, saturated.sum())
    report = check_gradients(_tanh_backward_times(factor), [tf.constant(x)], method="probe")
    assert report.passed is (factor == 1.0)


def test_jacobian_in_float32_catches_one_element_ten_percent_off_at_every_seed():
    """A column that disagrees is measured again at smaller steps, where float32 rounding is
    large: a gradient 10% off in one element once agreed there by chance (1 seed in 10, 3% off
    2 in 10) and the check passed, calling the wrong column a kink."""
    for seed in range(10):
        rng = np.random.default_rng(seed)
        x, k = rng.normal(size=32).astype(np.float32), int(rng.integers(32))
        report = check_gradients(one_element_off(k, 0.1), [x], method="jacobian",
                                 dtype="float32", seed=seed, compile=False)
        assert not report.passed, f"seed {seed}: {report}"
        assert report.entries[0].worst_input_index == (k,)
        assert "agree at smaller steps" not in str(report)
    # The same loss with its right gradient passes.
    assert check_gradients(one_element_off(0, 0.0), [x], method="jacobian", dtype="float32",
                           compile=False).passed


def test_probe_names_the_output_element_of_a_vector_function():
    x = away_from_zero(np.random.default_rng(4), (3, 4))
    wrong = _one_wrong_element(12, 7)
    report = check_gradients(lambda x: wrong(x) * 2.0, [x], method="probe")
    entry = report.entries[0]
    assert entry.worst_input_index == (1, 3)
    assert entry.worst_output_index == (1, 3)
    assert entry.worst_numerical == pytest.approx(4 * x[1, 3], rel=1e-6)


# ---------------------------------------------------------------------------------------------
# Options, report, cost


def test_jacobian_refuses_large_inputs_and_suggests_probe():
    x = np.ones(20_001)
    with pytest.raises(ValueError, match='method="probe"') as info:
        check_gradients(tf.reduce_sum, [x], method="jacobian")
    assert "20,001" in str(info.value)
    small = check_gradients(tf.reduce_sum, [x[:50]], method="jacobian", max_jacobian_size=50)
    assert small.passed


def test_jacobian_entries_keep_both_jacobians_for_plots():
    x, w = np.random.default_rng(5).standard_normal((2, 3)), np.ones((3, 4))
    report = check_gradients(tf.matmul, [x, w], method="jacobian")
    entry = report.entries[1]
    assert entry.analytical.shape == entry.numerical.shape == (8, 12)
    np.testing.assert_allclose(entry.analytical, entry.numerical, atol=1e-8)
    assert "analytical" not in entry.to_dict()
    probe = check_gradients(tf.matmul, [x, w], method="probe")
    assert probe.entries[1].analytical is None


def test_report_is_json_ready_and_readable():
    f, xs, _, _ = _bug_cases(np.random.default_rng(1))["wrong-shaped gradient"]
    shape_bug = check_gradients(f, xs, method="probe")
    x = away_from_zero(np.random.default_rng(6), 4)
    report = check_gradients(lambda x, y: tf.reduce_sum(sign_flipped(x) * y), [x, x],
                             names=["weights", "bias"])
    for r in (report, shape_bug):
        assert isinstance(r, GradCheckReport)
        assert all(isinstance(e, GradCheckEntry) for e in r.entries)
        text = json.dumps(r.to_dict(), allow_nan=False)
        assert json.loads(text)["passed"] is False
    data = report.to_dict()
    assert [e["name"] for e in data["entries"]] == ["weights", "bias"]
    assert data["entries"][0]["passed"] is False and data["entries"][1]["passed"] is True
    assert isinstance(data["max_abs_error"], float) and isinstance(data["entries"][0]["shape"],
                                                                   list)
    text = str(report)
    assert "FAIL  weights" in text and "ok    bias" in text
    assert "float64" in text and "step" in text and "rtol" in text
    assert "worst element" in text and "weights[" in text
    assert "transposed or mis-shaped" in str(shape_bug)


def test_float64_evaluation_and_its_fallback():
    x = np.random.default_rng(7).standard_normal(6).astype(np.float32)
    ok = check_gradients(lambda x: tf.reduce_sum(tf.tanh(x)), [x], dtype="float64")
    assert ok.dtype_used == "float64" and ok.entries[0].dtype == "float64" and ok.passed
    casts = check_gradients(lambda x: tf.reduce_sum(tf.tanh(tf.cast(x, tf.float32))), [x],
                            dtype="float64")
    assert casts.dtype_used == "float32" and casts.passed
    assert "float64" in casts.notes[0] and "float32" in casts.notes[0]
    w32 = tf.constant(np.ones(6, np.float32))
    fails = check_gradients(lambda x: tf.reduce_sum(x * w32), [x], dtype="float64")
    assert fails.dtype_used == "float32" and "raised" in fails.notes[0]
    # What float64 buys: a 0.01% error is inside float32's tolerance (the probe's rtol 3e-4
    # there), outside float64's (1e-5).
    small = _planted(tf.tanh, lambda x, up: up * (1.0 - tf.tanh(x) ** 2) * 1.0001)

    def f(x):
        return tf.reduce_sum(small(x))

    assert check_gradients(f, [x]).passed
    assert not check_gradients(f, [x], dtype="float64").passed


def test_probe_cost_does_not_grow_with_size():
    def f(x):
        return tf.reduce_sum(tf.tanh(x) * x)

    rng = np.random.default_rng(8)
    eager = check_gradients(f, [rng.standard_normal(10)])  # f's first check runs eagerly
    small = check_gradients(f, [rng.standard_normal(10)])  # compiled from its second on
    large = check_gradients(f, [rng.standard_normal(200_000)])
    assert small.passed and large.passed
    # 2 evaluations a probe (the step-2h pair only where a probe fails at first sight), and
    # one recorded forward if f is evaluated eagerly (compiled, its trace gives the output's
    # shape); a scalar output shares its cotangent: VJP(v) and VJP(-v/2).
    assert small.function_evaluations == large.function_evaluations == 4 * 2
    assert eager.passed and eager.function_evaluations == 1 + 4 * 2
    assert small.backward_passes == large.backward_passes == eager.backward_passes == 2
    vector = check_gradients(lambda x: tf.tanh(x) * x, [rng.standard_normal(10)])
    assert vector.passed and vector.backward_passes == 4 + 1  # one cotangent per probe


def test_options_are_validated():
    with pytest.raises(ValueError, match="method"):
        check_gradients(tf.reduce_sum, [np.ones(3)], method="exact")
    with pytest.raises(ValueError, match="probes"):
        check_gradients(tf.reduce_sum, [np.ones(3)], probes=0)
    with pytest.raises(ValueError, match="dtype"):
        check_gradients(tf.reduce_sum, [np.ones(3)], dtype="float16")
    with pytest.raises(ValueError, match="names"):
        check_gradients(tf.reduce_sum, [np.ones(3)], names=["a", "b"])


def test_integer_inputs_are_listed_not_checked():
    x = away_from_zero(np.random.default_rng(12), 3)
    report = check_gradients(lambda x, k: tf.reduce_sum(sign_flipped(x) * tf.cast(k, x.dtype)),
                             [x, np.arange(1, 4)])
    assert [e.checked for e in report.entries] == [True, False]
    assert [e.name for e in report.failed_entries] == ["x0"]
    assert "skip  x1" in str(report) and "int64" in str(report)


def _planted_error(error: np.ndarray):
    """f(x) = sum(0·x) whose backward returns `error`: every probe's numerical derivative is
    exactly 0 (no noise, no relative tolerance), so a probe passes iff |e·u|/‖u‖ <= atol."""
    e = tf.constant(error)

    @tf.custom_gradient
    def f(x):
        return tf.reduce_sum(0.0 * x), lambda up: up * e

    return f


@pytest.mark.parametrize("t", [0.5, pytest.param(1.0, marks=pytest.mark.heavy),  # ~2, ~3.5 s
                               pytest.param(2.0, marks=pytest.mark.heavy)])
def test_miss_probability_matches_measured_miss_rates(t):
    """miss_probability(σ/tol, probes) against what the probe method really does: plant a
    gradient error whose per-probe standard deviation is t·atol and count the checks it passes.
    """
    n, atol, probes, trials = 400, 1e-6, 2, 150
    rng = np.random.default_rng(13)
    direction = rng.standard_normal(n)
    error = direction / np.linalg.norm(direction) * t * atol * np.sqrt(n)  # σ = ‖e‖/√n = t·atol
    f, x = _planted_error(error), np.zeros(n)
    reports = [check_gradients(f, [x], probes=probes, atol=atol, seed=seed)
               for seed in range(trials)]
    missed_checks = np.mean([r.passed for r in reports])
    missed_probes = 1 - np.mean([r.entries[0].probes_failed for r in reports]) / probes
    # 4 standard errors of a binomial rate: deterministic seeds, so this never flickers; it
    # fails only if the formula is off by more than sampling can explain.
    for measured, count, probes_all_missing in ((missed_probes, trials * probes, 1),
                                                (missed_checks, trials, probes)):
        expected = miss_probability(t, probes_all_missing)
        margin = 4 * np.sqrt(expected * (1 - expected) / count)
        assert abs(measured - expected) < margin, (t, probes_all_missing, measured, expected)


def test_miss_probability_limits():
    assert miss_probability(10.0, 1) == pytest.approx(0.0797, abs=1e-4)  # erf(0.1 / sqrt 2)
    assert miss_probability(0.0, 4) == 1.0  # no error: nothing to catch
    assert miss_probability(1.0, 4) > miss_probability(2.0, 4) > miss_probability(2.0, 8)


# ---------------------------------------------------------------------------------------------
# Variables


def _linear_model(bad_w: bool = False):
    rng = np.random.default_rng(9)
    w = tf.Variable(rng.standard_normal((3, 2)), name="w")
    b = tf.Variable(rng.standard_normal(2), name="b")
    x = tf.constant(rng.standard_normal((5, 3)))
    use_w = scaled_1pct if bad_w else tf.identity

    def loss():
        return tf.reduce_mean(tf.square(tf.matmul(x, use_w(w)) + b))

    return loss, [w, b]


@pytest.mark.parametrize("method", METHODS)
def test_variables_pass_and_are_restored(method):
    loss, variables = _linear_model()
    before = [v.numpy().copy() for v in variables]
    report = check_variables(loss, variables, method=method)
    assert report.passed, str(report)
    assert [e.name for e in report.entries] == ["w", "b"]
    for v, old in zip(variables, before):
        np.testing.assert_array_equal(v.numpy(), old)


@pytest.mark.parametrize("method", METHODS)
def test_wrong_gradient_is_reported_on_that_variable_only(method):
    loss, variables = _linear_model(bad_w=True)
    report = check_variables(loss, variables, method=method)
    assert [e.name for e in report.failed_entries] == ["w"], str(report)
    assert report.entries[1].passed


@pytest.mark.parametrize("method", METHODS)
def test_variables_are_restored_when_the_loss_raises(method):
    loss, variables = _linear_model()
    before = [v.numpy().copy() for v in variables]
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("data loader died")
        return loss()

    with pytest.raises(RuntimeError, match="data loader died"):
        check_variables(flaky, variables, method=method)
    for v, old in zip(variables, before):
        np.testing.assert_array_equal(v.numpy(), old)


@pytest.mark.parametrize("method", METHODS)
def test_keras_model_variables(method):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                              keras.layers.Dense(2)])
    x = np.random.default_rng(10).standard_normal((8, 3)).astype(np.float32)
    y = np.random.default_rng(11).standard_normal((8, 2)).astype(np.float32)
    before = [v.numpy().copy() for v in model.trainable_variables]
    report = check_variables(lambda: keras.losses.MeanSquaredError()(y, model(x)),
                             model.trainable_variables, method=method, dtype="float64")
    assert report.passed, str(report)
    assert report.dtype_used == "float32" and "float64" in report.notes[0]
    names = [e.name for e in report.entries]
    assert len(set(names)) == 4 and names[0].endswith("kernel")
    for v, old in zip(model.trainable_variables, before):
        np.testing.assert_array_equal(v.numpy(), old)


# ---------------------------------------------------------------------------------------------
# One probe set over all variables (check_jointly, as in-training checks use it)


def _bias_bug_mlp(relative_error: float):
    """A 64-64-10 softmax MLP's loss of (w1, b1, w2, b2) whose b2 gradient is off by a factor
    1 + relative_error; b2 has 10 of its 4,810 elements and a seventh of its gradient norm."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((200, 64)))
    y = tf.one_hot(rng.integers(0, 10, 200), 10, dtype=tf.float64)

    @tf.custom_gradient
    def wrong_bias(b):
        return tf.identity(b), lambda up: up * (1 + relative_error)

    @tf.function(autograph=False)
    def loss(w1, b1, w2, b2):
        logits = tf.tanh(x @ w1 + b1) @ w2 + wrong_bias(b2)
        return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y, logits))

    params = [tf.constant(rng.standard_normal((64, 64)) / 8),
              tf.constant(rng.standard_normal(64) / 10),
              tf.constant(rng.standard_normal((64, 10)) / 8),
              tf.constant(rng.standard_normal(10) / 10)]
    return loss, params


def test_joint_probes_pass_a_right_mlp_with_a_quarter_of_the_evaluations():
    from gradexp.gradcheck.joint import check_jointly

    loss, params = _bias_bug_mlp(0.0)
    names = ["w1", "b1", "w2", "b2"]
    joint = check_jointly(loss, params, names=names, probes=8)
    separate = check_gradients(loss, params, names=names, probes=8)
    assert joint.passed and separate.passed, str(joint)
    assert [e.name for e in joint.entries] == names
    assert joint.function_evaluations * 3 <= separate.function_evaluations


@pytest.mark.heavy  # ~2.1 s
def test_joint_probes_catch_and_name_a_small_error_in_a_small_bias(monkeypatch):
    """Dilution: the bias is 0.2% of the elements. Its 3e-5 relative error is caught by probing
    it alone (rtol 1e-5) and must be caught jointly too, the bias named."""
    from gradexp.gradcheck import joint as joint_module

    loss, params = _bias_bug_mlp(3e-5)
    names = ["w1", "b1", "w2", "b2"]
    assert [e.name for e in check_gradients(loss, params, names=names, probes=8)
            .failed_entries] == ["b2"]
    report = joint_module.check_jointly(loss, params, names=names, probes=8)
    assert [e.name for e in report.failed_entries] == ["b2"], str(report)
    (entry,) = report.failed_entries
    assert entry.worst_input_index is not None and entry.worst_input_index[0] < 10
    assert "b2[" in entry.describe_worst()

    # Without the per-variable scales and the tolerance shrunk by the bias's share, one plain
    # Gaussian direction over all 4,810 elements misses it: what the two are for.
    monkeypatch.setattr(joint_module, "direction_scales", lambda sizes: [1.0] * len(sizes))
    monkeypatch.setattr(joint_module, "_MAX_DILUTION", 1.0)
    assert joint_module.check_jointly(loss, params, names=names, probes=8).passed


def test_joint_probes_name_a_wrong_kernel_and_pass_the_rest():
    from gradexp.gradcheck.joint import check_jointly

    def loss(w, b):
        @tf.custom_gradient
        def wrong(w):
            return tf.identity(w), lambda up: up * 1.1

        return tf.reduce_sum(tf.tanh(tf.constant(np.ones((3, 4))) @ wrong(w) + b) ** 2)

    rng = np.random.default_rng(1)
    report = check_jointly(loss, [tf.constant(away_from_zero(rng, (4, 5))),
                                  tf.constant(away_from_zero(rng, (5,)))],
                           names=["w", "b"])
    assert [e.name for e in report.failed_entries] == ["w"], str(report)
    assert report.entries[1].passed and len(report.entries[0].worst_input_index) == 2


def test_the_worst_element_of_two_zeros_reads_no_relative_difference():
    # A column judged at a kink reads analytical 0, numerical 0: its relative difference was
    # printed as inf beside a headline error of 0.
    from gradexp.gradcheck.report import GradCheckEntry

    entry = GradCheckEntry("w", (2,), "float64", True, worst_input_index=(1,),
                           worst_analytical=0.0, worst_numerical=0.0)
    assert entry.describe_worst().endswith("(abs diff 0.00e+00, rel diff 0.00e+00)")


def _scaled_backward(f, factor):
    @tf.custom_gradient
    def scaled(z):
        def backward(upstream):
            with tf.GradientTape() as tape:
                tape.watch(z)
                y = f(z)
            return tape.gradient(y, z, upstream) * factor
        return f(z), backward
    return scaled


@pytest.mark.parametrize(("f", "x", "seeds"), [
    (tf.sqrt, [[2e-2, 5e-2, 0.1], [0.5, 1.0, 3.0]], [7, 18, 29]),
    (tf.math.log, [[2e-2, 5e-2, 0.1], [0.5, 1.0, 3.0]], [7, 29]),
    (tf.math.acosh, [[1.02, 1.05, 1.1], [1.5, 2.0, 4.0]], [1, 6, 16]),
], ids=["sqrt", "log", "acosh"])
def test_a_float32_probe_stepping_out_of_the_domain_steps_again_rather_than_fails(f, x, seeds):
    # QA: a probe step took 0.02 below 0 under sqrt (NaN): every probe's tolerance became NaN,
    # and a correct op failed ("max rel error nan") at these seeds of 32; 1.1x off still fails
    x = np.array(x, np.float32)
    for seed in seeds:
        assert check_gradients(f, [x], method="probe", seed=seed).passed, seed
        assert not check_gradients(_scaled_backward(f, 1.1), [x], method="probe",
                                   seed=seed).passed, seed


@pytest.mark.parametrize(("f", "x"), [
    (tf.math.log, [3e-3, 0.5, 1.2]),
    (tf.math.atanh, [0.998, 0.2]),
    (tf.math.log1p, [-0.997, 1.0]),
], ids=["log", "atanh", "log1p"])
def test_a_float32_jacobian_column_stepping_out_of_the_domain_steps_again(f, x):
    # QA (2026-12-05): the float32 step (cbrt(eps) ~ 5e-3) took x = 0.003 below 0 under a
    # loss of log: a NaN column was never measured again, and a correct op failed ("numerical
    # nan", and a note blaming a random backward); compute_gradient passes it; 1.05x off fails
    x = np.array(x, np.float32)
    report = check_gradients(lambda z: tf.reduce_sum(f(z)), [x], method="jacobian")
    assert report.passed, str(report)
    assert "random backward" not in str(report)
    wrong = _scaled_backward(f, 1.05)
    assert not check_gradients(lambda z: tf.reduce_sum(wrong(z)), [x], method="jacobian").passed


@pytest.mark.parametrize("method", ["jacobian", "probe"])
def test_a_float64_function_computing_in_float32_inside_is_judged_as_float32(method):
    # QA: rgb_to_grayscale on float64 (float32 inside) failed both methods, the probe at up to
    # 549,000x naming an element, where compute_gradient passed: float64's step of 6e-6 took
    # a difference of float32 roundings; 1.05x off still fails
    x = np.random.default_rng(0).uniform(0, 1, (2, 2, 3))

    def through(z):
        return tf.cast(tf.cast(z, tf.float32) * 1.5, tf.float64)

    for f in (tf.image.rgb_to_grayscale, through):
        report = check_gradients(f, [x], method=method)
        assert report.passed, str(report)
        assert "its values are float32 numbers" in str(report)
        assert not check_gradients(_scaled_backward(f, 1.05), [x], method=method).passed
    plain = check_gradients(lambda z: z * 1.5, [x], method=method)  # float64 all through
    assert plain.passed and "float32 numbers" not in str(plain)


@pytest.mark.parametrize("method", ["jacobian", "probe"])
@pytest.mark.parametrize("factor", [1.0, 1.05, 1.01])
def test_a_float32_part_summed_into_a_float64_function_is_judged_as_float32(method, factor):
    # QA: a model whose add_loss penalty is cast to float32 (as mixed-precision code writes it,
    # so that fit can sum model.losses) failed the run's float64 check at 4,842x, blamed on the
    # loss: its values are float64 sums, not float32 numbers, so only how its errors shrink at
    # float32's steps tells rounding from a wrong gradient. 1.05x and 1% off still fail
    # (float32's tolerances see 1%); a float64 function 1% off fails in float64 as before.
    x = np.random.default_rng(1).uniform(-1, 1, 12)

    def penalty32(z):
        return tf.cast(tf.cast(0.1 * tf.reduce_sum(tf.sin(z) ** 2), tf.float32), tf.float64)

    def f(z):
        return tf.reduce_sum(tf.tanh(z) * z) + penalty32(z)

    report = check_gradients(_scaled_backward(f, factor), [x], method=method)
    assert report.passed == (factor == 1.0), str(report)
    if factor == 1.0:
        assert "casts float64 values to lower precision inside" in str(report)
        assert report.dtype_used == "float32"
    plain = check_gradients(_scaled_backward(lambda z: tf.reduce_sum(tf.tanh(z) * z), factor),
                            [x], method=method)
    assert plain.passed == (factor == 1.0) and "lower precision" not in str(plain)


@pytest.mark.parametrize("method", ["jacobian", "probe"])
def test_a_cast_that_only_guards_or_decides_leaves_the_float64_verdict(method):
    # review: any float64->float32 Cast in f's graph made a 0.2% wrong backward pass at
    # float32's tolerances, though the cast fed only an assert or a condition
    x = np.random.default_rng(1).uniform(-1, 1, 12)

    def guarded(z):
        tf.debugging.assert_all_finite(tf.cast(z, tf.float32), "finite")
        return tf.reduce_sum(tf.tanh(z) * z)

    def decided(z):
        small = tf.cast(tf.reduce_max(tf.cast(z, tf.float32)) < 10.0, tf.float64)
        return tf.reduce_sum(tf.tanh(z) * z) * small

    for f in (guarded, decided):
        report = check_gradients(_scaled_backward(f, 1.002), [x], method=method)
        assert not report.passed and report.dtype_used == "float64", str(report)


def test_a_function_not_finite_around_the_point_says_so_rather_than_blame_the_backward():
    # QA: pow of x < 0 by a fractional y is NaN at every step: the jacobian named an element
    # that agreed and blamed "how the backward uses its upstream gradient"; the probe said
    # "noisy ... inf%; dtype='float64' helps", in float64
    x = np.array([-2.0, -1.5, -0.5, 0.5, 1.5])
    y = np.array([2.0, 3.0, 2.0, 1.5, 0.5])
    jacobian = check_gradients(tf.pow, [x, y], method="jacobian")
    assert not jacobian.passed
    by_y = jacobian.entries[1]
    assert np.isnan(by_y.worst_numerical)
    assert any(note.startswith("3 Jacobian column(s) have no numerical derivative")
               for note in by_y.notes), by_y.notes
    assert not any("upstream gradient" in note for note in by_y.notes)
    probe = check_gradients(tf.pow, [x, y], method="probe")
    assert not probe.passed and "dtype='float64' helps" not in str(probe)
    assert "no numerical derivative" in str(probe)


def test_a_probe_whose_noise_is_not_a_number_fails_until_measured_again():
    # review: infinite noise (a step-2h evaluation out of the domain) made an infinite
    # tolerance, and a probe 2x off passed
    from gradexp.gradcheck.probe import _judge, _Probe

    entry = GradCheckEntry("x", (3,), "float32", passed=True, atol=1e-5, rtol=1e-3)
    ok = _Probe(1.0, 1.0, 0.0, 1e-7, 1e-3)
    ratio, _ = _judge([ok, _Probe(2.0, 1.0, float("nan"), 1e-7, 1e-3)], entry)
    assert ratio[0] <= 1 and ratio[1] == np.inf
