"""A kink the point itself sits on (relu of an exact 0, tied values under a max), or the kinks
a float32 relu network puts within any usable step: no finite step settles them, so the checker
judges them by the mean of the analytical gradient along the step (the probe; the jacobian for
a scalar output) or either side (the jacobian for several outputs) (gradcheck/probe.py and
jacobian.py, `_judge_along_the_step` / `_at_kinks`). A correct model there passes, a wrong
backward there still fails, a random backward is not averaged into a pass, and the culprit
search blames no correct layer."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradexp.gradcheck import check_gradients

RNG = np.random.default_rng(0)
W = RNG.normal(size=(6, 3))


def with_zero_column() -> np.ndarray:
    x = RNG.normal(size=(8, 6))
    x[:, 2] = 0.0  # a constant column, standardized: exactly 0 under a relu
    return x


def relu_net(positive: float = 1.0, negative: float = 0.0):
    """relu, then a quadratic; its backward scaled on either side of 0 (1, 0: the right one)."""
    @tf.custom_gradient
    def relu(x):
        def backward(up):
            return up * (tf.cast(x > 0, x.dtype) * positive + tf.cast(x <= 0, x.dtype) * negative)
        return tf.nn.relu(x), backward

    return lambda x: tf.reduce_sum(tf.matmul(relu(x), W) ** 2 + tf.matmul(relu(x), W))


@pytest.mark.parametrize("method", ["probe", "jacobian"])
@pytest.mark.parametrize("x", [with_zero_column(), np.zeros((4, 6))], ids=["column", "all"])
def test_a_correct_relu_at_exact_zeros_passes_and_says_why(method, x):
    report = check_gradients(relu_net(), [tf.constant(x)], method=method)
    assert report.passed
    # A scalar output: the jacobian judges its columns along the step too.
    said = "mean of the analytical gradient along the step"
    assert any(said in note for note in report.entries[0].notes)


def test_several_outputs_at_exact_zeros_are_judged_at_the_ends_of_the_step():
    # The jacobian's columns of several outputs (a VJP per output a point) are judged by the
    # analytical columns at the two ends of the step.
    def per_row(x):
        return tf.reduce_sum(tf.nn.relu(x) @ W, axis=1)

    report = check_gradients(per_row, [tf.constant(with_zero_column())], method="jacobian")
    assert report.passed
    assert any("kink at the point itself" in note for note in report.entries[0].notes)


@pytest.mark.parametrize("method", ["probe", "jacobian"])
@pytest.mark.parametrize(("positive", "negative"), [(1.05, 0.0), (0.5, 0.0), (1.0, 0.1)])
@pytest.mark.parametrize("x", [with_zero_column(), np.zeros((4, 6))], ids=["column", "all"])
def test_a_wrong_backward_at_exact_zeros_still_fails(method, positive, negative, x):
    report = check_gradients(relu_net(positive, negative), [tf.constant(x)], method=method)
    assert not report.passed


@pytest.mark.parametrize("method", ["probe", "jacobian"])
def test_a_max_over_tied_values_passes(method):
    def pooled(x):
        return tf.reduce_sum(tf.nn.max_pool2d(tf.reshape(x, (1, 2, 2, 1)), 2, 2, "VALID") * 3.0)

    report = check_gradients(pooled, [tf.constant([[1.0, 1.0, -1.0, 0.5]])], method=method)
    assert report.passed


def test_the_culprit_search_blames_no_correct_max_pool_at_ties():
    import keras

    from gradexp.gradcheck.culprits import find_culprits

    x = keras.Input((4,))
    pooled = keras.layers.MaxPooling2D(2, name="pool")(keras.layers.Reshape((2, 2, 1))(x))
    model = keras.Model(x, keras.layers.Dense(1)(keras.layers.Flatten()(pooled)))
    rows = np.array([[0, 0, 0, 0], [1, 1, -1, 0.5], [0.3, 0.1, 0.2, 0.0]], "float32")
    assert find_culprits(model, rows) == []


X_ROWS = tf.constant([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]], tf.float64)


@tf.custom_gradient
def scaled_masked_at_zero(x, w):
    """x·w, its backward to w set to 0 wherever w is exactly 0 (a "safe" mask): wrong at w = 0
    only, where the function is smooth (QA: strict passed a layer whose zero-initialised weight
    then never trained)."""
    def backward(up):
        dw = tf.reduce_sum(up * x, axis=0)
        return up * w, tf.where(tf.equal(w, 0.0), tf.zeros_like(dw), dw)
    return x * w, backward


@pytest.mark.parametrize(("method", "seed"), [("jacobian", 0), *(("probe", s) for s in range(4))])
def test_a_backward_wrong_only_at_an_exact_zero_of_a_smooth_function_fails(method, seed):
    # Judged along the step it passed (the gradient is right everywhere but at w = 0): only a
    # gradient that jumps at the point may be judged so.
    def loss(x, w):
        return tf.reduce_sum(tf.tanh(scaled_masked_at_zero(x, w) + 0.3))

    report = check_gradients(loss, [X_ROWS, tf.zeros([3], tf.float64)], method=method, seed=seed)
    assert not report.passed
    assert report.entries[0].passed  # x's gradient is right
    assert any("wrong at the point itself" in note for note in report.entries[1].notes), \
        report.entries[1].notes


@pytest.mark.parametrize("method", ["probe", "jacobian"])
def test_tensorflows_xlogy_at_x_0_fails_as_compute_gradient_does(method):
    # x·log(y) has slope log(y) at x = 0; TensorFlow's gradient there is 0 (several outputs:
    # the jacobian judges by the columns either side of the point, which agree).
    y = tf.constant([0.5, 2.0, 3.0], tf.float64)
    report = check_gradients(lambda a: tf.math.xlogy(a, y),
                             [tf.constant([0.0, 0.5, 2.0], tf.float64)], method=method)
    assert not report.passed
    assert any("wrong at the point itself" in note for note in report.entries[0].notes)


def test_the_culprit_search_names_a_layer_wrong_only_at_its_zero_initialised_weight():
    import keras

    from gradexp.gradcheck.culprits import find_culprits

    class Gate(keras.layers.Layer):
        def build(self, shape):
            self.w = self.add_weight(shape=(shape[-1],), initializer="zeros", name="w")

        def call(self, x):
            return x + scaled_masked_at_zero(x, tf.cast(self.w, x.dtype))  # x·(1 + w)

    x = keras.Input((3,))
    model = keras.Model(x, keras.layers.Dense(1)(Gate(name="gate")(keras.layers.Dense(3)(x))))
    rows = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
    assert [verdict.name for verdict in find_culprits(model, rows)] == ["gate"]

RELU_FIRST = '''
import keras


def build(n_features, n_outputs):
    x = keras.Input((n_features,))
    return keras.Model(x, keras.layers.Dense(n_outputs)(keras.layers.ReLU(name="relu")(x)))
'''


@pytest.mark.heavy  # a digits run with the strict checks
def test_a_correct_relu_on_constant_columns_passes_the_strict_run(tmp_path, monkeypatch):
    # digits has columns that are 0 in every image: exactly 0 after standardization, so the
    # relu on the inputs sits on its kink. The strict check failed the run (exit 1, FAILED,
    # "wrong layer: relu").
    import sys

    import conftest

    (tmp_path / "kink_models.py").write_text(RELU_FIRST)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    sys.modules.pop("kink_models", None)
    result = conftest.run(conftest.empty_store(tmp_path), "data=sklearn", "data.name=digits",
                          "model=custom", "model._target_=kink_models.build",
                          "loss=categorical_crossentropy", "trainer.epochs=1", "gradcheck=strict",
                          "gradcheck.at_end=false", "tracking.log_model=false",
                          launch_dir=tmp_path)
    sys.modules.pop("kink_models", None)
    assert result.gradcheck_passed is True


def digits_relu_loss(relu_error: float = 0.0, classes: int = 10, rows: int = 512):
    """A Dense-relu-Dense network's cross-entropy on the first ``rows`` standardized digits of
    the ``classes`` first classes, in float32 (a model that cannot run in float64 is checked
    so), as a function of its four variables; the relu's backward off by a factor
    1 + relu_error."""
    from sklearn.datasets import load_digits

    x, labels = load_digits(return_X_y=True)
    keep = labels < classes
    x, labels = x[keep], labels[keep]
    spread = np.where(x.std(0) > 0, x.std(0), 1.0)
    x = tf.constant(((x - x.mean(0)) / spread)[:rows], tf.float32)
    y = tf.one_hot(labels[:rows], classes)

    @tf.custom_gradient
    def relu(z):
        return tf.nn.relu(z), lambda up: up * tf.cast(z > 0, z.dtype) * (1 + relu_error)

    def loss(k1, b1, k2, b2):
        logits = relu(x @ k1 + b1) @ k2 + b2
        return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y, logits))

    return loss


def glorot_weights(seed: int) -> list[tf.Tensor]:
    rng = np.random.default_rng(seed)
    return [tf.constant(value, tf.float32) for value in (
        rng.uniform(-1, 1, (64, 64)) * np.sqrt(6 / 128), np.zeros(64),
        rng.uniform(-1, 1, (64, 10)) * np.sqrt(6 / 74), np.zeros(10))]


@pytest.mark.heavy  # ~6 s
def test_a_correct_float32_relu_network_passes_and_a_2_percent_wrong_relu_fails():
    # In float32 no usable step avoids the kinks a relu network puts near every point: judged
    # by the gradient at x alone, a correct network failed 4 of 10 weight seeds (1.5-1.7x its
    # tolerance); judged by the mean of the gradient along the step, none. A relu backward 2%
    # off is wrong all along the step and still fails.
    from gradexp.gradcheck.joint import check_jointly

    names = ["k1", "b1", "k2", "b2"]
    for seed in range(4):
        report = check_jointly(digits_relu_loss(), glorot_weights(seed), names=names, probes=4)
        assert report.passed, (seed, str(report))
        wrong = check_jointly(digits_relu_loss(0.02), glorot_weights(seed), names=names,
                              probes=4)
        assert not wrong.passed, seed


@pytest.mark.parametrize("seed", range(3))
def test_a_random_backward_is_not_averaged_into_a_pass_along_the_step(seed):
    # A backward that draws noise anew at each call averages to about the right gradient along
    # a step: the judgment along the step must not take its mean for the gradient.
    rng = np.random.default_rng(seed)
    a = tf.constant(rng.normal(size=(200, 8)))

    @tf.custom_gradient
    def noisy_sin(z):
        def backward(up):
            return up * tf.cos(z) * (1 + 0.5 * tf.random.normal(tf.shape(z), dtype=z.dtype))
        return tf.sin(z), backward

    report = check_gradients(lambda x: tf.reduce_sum(noisy_sin(x @ a) ** 2),
                             [tf.constant(rng.normal(size=(64, 200)))], method="probe", seed=seed)
    (entry,) = report.entries
    assert entry.error_to_tolerance > 10, str(report)
    assert any("two different gradients at the same point" in note for note in entry.notes)


def test_a_gradient_that_is_not_finite_fails_without_being_called_random():
    # log(0) = -inf feeds a cumulative logsumexp: the gradient is NaN there, the same NaN at
    # every call, and NaN - NaN != 0 read as "the backward pass gave two different gradients".
    x = np.array([[0.0, 1.5, 0.7], [2.0, 0.3, 1.1]])
    report = check_gradients(lambda v: tf.math.cumulative_logsumexp(tf.math.log(v), axis=1),
                             [x], method="probe")
    assert not report.passed
    assert not any("two different gradients" in note for note in report.entries[0].notes)


def small_digits_relu_loss(relu_error: float = 0.0):
    """A network small enough for method=auto's exact Jacobian (with small_weights:
    Dense(8, relu)-Dense(3), 547 parameters) on the 256 first digits 0-2
    (benchmarks/bench_float32_relu_jacobian.py)."""
    return digits_relu_loss(relu_error, classes=3, rows=256)


def small_weights(seed: int) -> list[tf.Tensor]:
    rng = np.random.default_rng(seed)
    return [tf.constant(value, tf.float32) for value in (
        rng.uniform(-1, 1, (64, 8)) * np.sqrt(6 / 72), rng.normal(size=8) * 0.1,
        rng.uniform(-1, 1, (8, 3)) * np.sqrt(6 / 11), rng.normal(size=3) * 0.1)]


def check_small(loss, seed: int):
    return check_gradients(loss, small_weights(seed), method="jacobian", dtype="float32",
                           names=["k1", "b1", "k2", "b2"])


@pytest.mark.parametrize("seed", [1, 3, 4])
def test_a_correct_float32_relu_network_passes_the_jacobian(seed):
    # Judged by the two ends of the step, these seeds failed (5 of 10): in float32
    # no usable step avoids the kinks the relu puts within many columns' steps.
    report = check_small(small_digits_relu_loss(), seed)
    assert report.passed, str(report)


@pytest.mark.parametrize("seed", range(3))
def test_a_2_percent_wrong_relu_fails_the_jacobian_along_the_step(seed):
    # Wrong all along the step: the first column judged so still disagrees (k1's columns fail
    # too many to be judged: more than 256 disagreeing columns are a wrong backward).
    report = check_small(small_digits_relu_loss(0.02), seed)
    assert not report.passed
    (k1, b1, _, _) = report.entries
    assert not k1.passed and not b1.passed
    assert any("along the step" in note and "they still disagree" in note for note in b1.notes)


def test_a_random_backward_is_not_averaged_into_a_pass_by_the_jacobian():
    # A backward drawing noise at each call averages to about the right gradient along a step,
    # and the gap to the coarser rule widens the tolerance by about its noise: judged so, 7 of
    # 8 failing columns of a sin with 1e-5 noise passed. No column of it is judged so.
    rng = np.random.default_rng(0)
    a = tf.constant(rng.normal(size=(10, 8)))

    @tf.custom_gradient
    def noisy_sin(z):
        def backward(up):
            return up * tf.cos(z) * (1 + 1e-5 * tf.random.normal(tf.shape(z), dtype=z.dtype))
        return tf.sin(z), backward

    report = check_gradients(lambda x: tf.reduce_sum(noisy_sin(x @ a) ** 2),
                             [tf.constant(rng.normal(size=(4, 10)))], method="jacobian")
    (entry,) = report.entries
    assert not report.passed
    assert any("two different gradients at the same point" in note for note in entry.notes)
    assert not any("still disagreed at their smallest step" in note for note in entry.notes)
