"""A kink the point itself sits on (relu of an exact 0, tied values under a max): no finite step
settles it, so the checker judges it by the analytical gradients either side
(gradcheck/probe.py and jacobian.py, `_judge_at_kinks` / `_at_kinks`). A correct model there
passes, a wrong backward there still fails, and the culprit search blames no correct layer."""

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
