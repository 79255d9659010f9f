"""Example models for the second-order check (docs/gradcheck.md, "Second order"): a softplus
block whose hand-written backward is right in value, but with kind="stop_gradient" cannot be
differentiated again (its own derivative is 0). From this folder:

    python -m gradexp model=custom model._target_=order2_models.build \
        +model.kwargs.kind=stop_gradient gradcheck.order=2 trainer.epochs=3 data.n_samples=32
"""
import keras
import tensorflow as tf


def softplus_with(kind):
    @tf.custom_gradient
    def softplus(x):
        def backward(upstream):
            slope = tf.sigmoid(x)
            return upstream * (tf.stop_gradient(slope) if kind == "stop_gradient" else slope)
        return tf.nn.softplus(x), backward
    return softplus


@keras.saving.register_keras_serializable(package="order2_models")
class Softplus(keras.layers.Layer):
    def __init__(self, kind="right", **kwargs):
        super().__init__(**kwargs)
        self.kind = kind

    def call(self, x):
        return softplus_with(self.kind)(x)

    def get_config(self):
        return {**super().get_config(), "kind": self.kind}


@keras.saving.register_keras_serializable(package="order2_models")
class WithIdleWeight(keras.layers.Dense):
    """A Dense layer with one more weight that nothing reads."""

    def build(self, shape):
        super().build(shape)
        self.idle = self.add_weight(shape=(2,), initializer="ones", name="idle")


def build(n_features, n_outputs, kind="right"):
    inputs = keras.Input((n_features,))
    h = keras.layers.Dense(4, name="encoder")(inputs)
    h = Softplus(kind, name="softplus_block")(h)
    return keras.Model(inputs, keras.layers.Dense(n_outputs, name="head")(h))


def build_idle(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, WithIdleWeight(n_outputs, name="head")(inputs))
