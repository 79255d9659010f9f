"""Example models for naming the wrong layer (docs/gradcheck.md, "Which layer is wrong").

A softplus block whose hand-written backward (tf.custom_gradient) is `bug` (5%) too large for
negative inputs, the forward pass right; bug=0 is its correct twin. The same block in a
functional, a nested (a keras.Model used as a layer), a subclassed and a shared-layer model; a
subclassed model with the same bug in its own call; a model with dropout and batch norm; a
layer wrong in training mode only; a backward right in value whose own derivative is wrong
(order 2); and a loss with the bug. From this folder:

    python -m gradexp model=custom model._target_=culprit_models.functional data.n_features=3
"""
import keras
import tensorflow as tf


def wrong_softplus(z, bug):
    """softplus(z), its backward (1 + bug) times too large where z < 0."""
    @tf.custom_gradient
    def softplus(z):
        def backward(upstream):
            factor = tf.where(z < 0, tf.cast(1 + bug, z.dtype), tf.cast(1, z.dtype))
            return upstream * tf.sigmoid(z) * factor
        return tf.nn.softplus(z), backward

    return softplus(z)


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
        return wrong_softplus(tf.matmul(x, self.kernel) + self.bias, self.bug)

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
        return self.head(wrong_softplus(self.encoder(x), self.bug))


@keras.saving.register_keras_serializable(package="culprit_models")
class TrainingOnlyBug(keras.layers.Layer):
    """tanh whose backward is (1 + bug) times too large for negative inputs in training mode
    only: what a check in inference mode cannot see."""

    def __init__(self, bug=0.05, **kwargs):
        super().__init__(**kwargs)
        self.bug = bug

    def call(self, x, training=None):
        bug = self.bug if training else 0.0

        @tf.custom_gradient
        def tanh(z):
            def backward(upstream):
                factor = tf.where(z < 0, tf.cast(1 + bug, z.dtype), tf.cast(1, z.dtype))
                return upstream * (1 - tf.tanh(z) ** 2) * factor
            return tf.tanh(z), backward

        return tanh(x)

    def get_config(self):
        return {**super().get_config(), "bug": self.bug}


def training_only(n_features, n_outputs, bug=0.05):
    x = keras.Input((n_features,))
    h = TrainingOnlyBug(bug=bug, name="tanh")(keras.layers.Dense(6, name="encoder")(x))
    return keras.Model(x, keras.layers.Dense(n_outputs, name="head")(h), name="net")


@keras.saving.register_keras_serializable(package="culprit_models")
class FrozenBackward(keras.layers.Layer):
    """softplus whose backward is right in value but built with tf.stop_gradient, so its own
    derivative (the second derivative) is wrong: what only an order-2 check sees."""

    def call(self, x):
        @tf.custom_gradient
        def softplus(z):
            def backward(upstream):
                return upstream * tf.stop_gradient(tf.sigmoid(z))
            return tf.nn.softplus(z), backward

        return softplus(x)


def second_order(n_features, n_outputs, bug=0.0):
    x = keras.Input((n_features,))
    h = FrozenBackward(name="frozen")(keras.layers.Dense(6, name="encoder")(x))
    return keras.Model(x, keras.layers.Dense(n_outputs, name="head")(h), name="net")


def wrong_mse(y_true, y_pred):
    """Squared error whose backward is 5% too large where the residual is negative."""
    @tf.custom_gradient
    def square(r):
        def backward(upstream):
            return upstream * 2 * r * tf.where(r < 0, tf.cast(1.05, r.dtype), tf.cast(1, r.dtype))
        return r * r, backward

    return tf.reduce_mean(square(y_pred - y_true), axis=-1)
