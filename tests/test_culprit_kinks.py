"""A correct relu layer whose pre-activations are exactly 0 (zero inputs, zero bias) is not
named by the culprit search (QA: a Keras Conv2D(relu) on digits named a 'wrong layer')."""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from gradexp.gradcheck.culprits import find_culprits  # noqa: E402


class _Scale(keras.layers.Layer):
    """y = x * w, its dw scaled by `factor` (1.0: right)."""

    def __init__(self, factor: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.factor = factor

    def build(self, shape) -> None:
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones", name="w")

    def call(self, x):
        factor = self.factor

        @tf.custom_gradient
        def scale(x, w):
            def grad(up):
                return up * w, tf.reduce_sum(up * x, axis=0) * factor
            return x * w, grad

        return scale(x, tf.convert_to_tensor(self.w))


def _model_and_data(factor: float):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,), dtype="float64")
    hidden = keras.layers.Dense(16, activation="relu", dtype="float64", name="relu")(inputs)
    hidden = _Scale(factor, dtype="float64", name="scale")(hidden)
    model = keras.Model(inputs, keras.layers.Dense(1, dtype="float64", name="out")(hidden))
    x = np.random.default_rng(0).uniform(0, 1000, (32, 8))
    x[::2] = 0.0  # zero rows and a zero bias: half the pre-activations exactly 0, relu's kink
    return model, x


@pytest.mark.heavy  # ~10 s
def test_a_correct_relu_at_exact_zeros_is_no_culprit():
    model, x = _model_and_data(1.0)
    assert [v.name for v in find_culprits(model, x)] == []


@pytest.mark.heavy  # ~10 s
def test_a_wrong_layer_beside_it_is_named_alone():
    model, x = _model_and_data(1.1)
    assert [v.name for v in find_culprits(model, x)] == ["scale"]
