"""Max pools, relu, abs, maximum and minimum at exact ties of zeros (relu outputs), probe method.

A tie is a kink whatever the probe's direction: the central difference gives the mean of the
two sides (0.5 for a max of two equal values) and the backward picks one. The probe judges
such a step along the step (gradcheck/entries.py, `_along_the_step`), unless the gradient is
"wrong at the point itself" (`_wrong_at_the_point`): its two sides agree and the gradient at x
is off them. With many ties in one probe, the sides' g·step could all but cancel (one window's
jump up, another's down with the cotangent's signs), so a correct MaxPooling1D was judged wrong
at the point (QA, 2026-12-05: 595x its tolerance, "d out[9, 3, 3] / d x0[9, 7, 3]: analytical
0, numerical 0.5") and the culprit search named the pool for an error in the loss. The sides
must now agree element by element. A wrong pool backward still fails.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from op_bugs import factor_where, planted, shift

from gradexp.gradcheck import check_gradients

SEEDS = range(10)


def relu_output(shape: tuple[int, ...], seed: int = 0) -> tf.Tensor:
    """A relu's output with ~60% exact zeros: most pooling windows and pairs tie at 0."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    x[rng.random(shape) < 0.6] = 0.0
    return tf.constant(np.maximum(x, 0.0))


POOL1 = keras.layers.MaxPooling1D(2, dtype="float64")
POOL2 = keras.layers.MaxPooling2D(2, dtype="float64")
CASES = {
    "max_pooling1d": (lambda x: POOL1(x), [relu_output((8, 10, 4))]),
    "max_pooling2d": (lambda x: POOL2(x), [relu_output((8, 10, 2, 4))]),
    "relu": (lambda a, b: tf.nn.relu(a - b), [relu_output((8, 10, 4)), relu_output((8, 10, 4), 1)]),
    "abs": (lambda a, b: tf.abs(a - b) + a, [relu_output((8, 10, 4)), relu_output((8, 10, 4), 1)]),
    "maximum": (tf.maximum, [relu_output((8, 10, 4)), relu_output((8, 10, 4), 1)]),
    "minimum": (tf.minimum, [relu_output((8, 10, 4)), relu_output((8, 10, 4), 1)]),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(CASES))
def test_a_correct_op_at_ties_of_zeros_passes_the_probe(name, seed):
    # Before: max_pooling1d failed at seeds 2 and 5, max_pooling2d at 0, relu, maximum and
    # minimum at 2, 8 and 9, each "wrong at the point itself" (abs'(0) = 0 is the mean of its
    # sides: never).
    f, xs = CASES[name]
    report = check_gradients(f, xs, method="probe", seed=seed)
    assert report.passed, str(report)
    assert not any("wrong at the point itself" in note
                   for entry in report.entries for note in entry.notes)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("corrupt", "kind"), [
    (shift(0, axis=1), "gradient routed to the neighbour in the window's row"),
    (factor_where(lambda x: x >= 0), "1.05 x the gradient everywhere it flows")],
    ids=["shifted", "scaled"])
def test_a_wrong_max_pool_backward_at_ties_of_zeros_still_fails(corrupt, kind, seed):
    # As the op suite plants them (tests/op_bugs.py): wrong all along the step, not only at the
    # ties, so the mean along the step is wrong too.
    def pool(x):
        return tf.nn.max_pool1d(x, 2, 2, "VALID")

    report = check_gradients(planted(pool, corrupt), [relu_output((8, 10, 4))], method="probe",
                             seed=seed)
    assert not report.passed, kind


@pytest.mark.parametrize("seed", SEEDS)
def test_the_culprit_search_blames_no_correct_max_pool_after_a_relu_conv(seed):
    # The QA's model, cut down: Conv1D(relu) -> MaxPooling1D, whose windows tie at the relu's
    # zeros. Before, seed 5 named the pool (checked alone on the 128 rows it saw).
    from gradexp.gradcheck.culprits import find_culprits

    keras.utils.set_random_seed(0)
    x = keras.Input((10,))
    h = keras.layers.Reshape((10, 1))(x)
    h = keras.layers.Conv1D(4, 3, padding="same", activation="relu", name="conv")(h)
    h = keras.layers.MaxPooling1D(2, name="pool")(h)
    model = keras.Model(x, keras.layers.Dense(1, name="head")(keras.layers.Flatten()(h)))
    rows = np.random.default_rng(0).normal(size=(128, 10)).astype("float32")
    assert [verdict.name for verdict in find_culprits(model, rows, seed=seed)] == []


@tf.custom_gradient
def masked_at_zero(x, w):
    """x·w, its backward to w set to 0 wherever w is exactly 0: wrong at w = 0 only, where the
    function is smooth (tests/test_kinks_at_the_point.py's, on many weights)."""
    def backward(up):
        dw = up * x
        return up * w, tf.where(tf.equal(w, 0.0), tf.zeros_like(dw), dw)
    return x * w, backward


@pytest.mark.parametrize("seed", range(4))
def test_a_backward_wrong_at_many_exact_zeros_of_a_smooth_function_still_fails(seed):
    # Many exact zeros in one probe, as many ties were above, but no kink: the gradient's two
    # sides agree element by element, and at the zeros it is off them.
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=320) + 0.5)
    w = relu_output((320,))
    report = check_gradients(lambda a, b: tf.reduce_sum(tf.tanh(masked_at_zero(a, b) + 0.3)),
                             [x, w], method="probe", seed=seed)
    assert not report.passed
    assert any("wrong at the point itself" in note for note in report.entries[1].notes)
