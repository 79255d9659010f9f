"""A robust loss with a hand-written gradient, right and subtly wrong: gradexp's worked example.

Pseudo-Huber, L(r) = δ²·(sqrt(1 + (r/δ)²) − 1) with r = y_pred − y_true: like r²/2 for small
residuals, like δ·|r| for large ones (outliers pull less), and smooth everywhere. Its derivative
is r / sqrt(1 + (r/δ)²). The backward below computes it in two branches, as hand-written
gradients often are: directly for |r| ≤ δ, and as δ·sign(r) / sqrt(1 + (δ/r)²) for |r| > δ (the
same value; it never squares a huge residual). The "WrongBranch" versions get that second
branch 10% too large: right for every residual inside δ, wrong only for the outliers.

Two forms, as a new user would write them:

- `PseudoHuber`, a Keras loss class written for float32: its constants are `tf.constant(...)`
  (float32), so it cannot run in float64 (TensorFlow refuses to multiply a float64 tensor by a
  float32 constant). gradexp's gradient check then runs in float32 and says so.
- `pseudo_huber`, a plain function (y_true, y_pred): its constants follow y_pred's dtype, so
  the check runs in float64.

    cd examples
    python -m gradexp loss._target_=robust_losses.PseudoHuber data.outliers=0.1
    python -m gradexp loss._target_=robust_losses.PseudoHuberWrongBranch data.outliers=0.1
    python -m gradexp loss._target_=robust_losses.pseudo_huber_wrong_branch data.outliers=0.1
"""

from __future__ import annotations

import keras
import tensorflow as tf

WRONG = 1.1  # how far off the wrong branch is: 10%


# ---------------------------------------------------------------- a Keras loss class, float32
class PseudoHuber(keras.losses.Loss):
    """Pseudo-Huber loss with a hand-written backward, written for float32 as most code is."""

    outer_scale = 1.0  # the large-residual branch of the backward is multiplied by this

    def __init__(self, delta: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.delta = delta

    def call(self, y_true, y_pred):
        delta = tf.constant(self.delta)  # float32, like tf.constant(0.5) in most user code
        outer_scale = tf.constant(self.outer_scale)

        @tf.custom_gradient
        def pseudo_huber(r):
            scaled = r / delta
            loss = delta * delta * (tf.sqrt(1.0 + scaled * scaled) - 1.0)

            def backward(upstream):
                inner = r / tf.sqrt(1.0 + scaled * scaled)
                safe = tf.where(tf.abs(r) > delta, r, delta)  # no 1/0 in the unused branch
                ratio = delta / safe
                outer = delta * tf.sign(r) / tf.sqrt(1.0 + ratio * ratio) * outer_scale
                return upstream * tf.where(tf.abs(r) <= delta, inner, outer)

            return loss, backward

        return pseudo_huber(y_pred - y_true)


class PseudoHuberWrongBranch(PseudoHuber):
    """The same, with the large-residual branch of the backward 10% too large."""

    outer_scale = WRONG


# ---------------------------------------------------------------- a plain function, any dtype
def _pseudo_huber(y_true, y_pred, delta: float, outer_scale: float):
    y_pred = tf.convert_to_tensor(y_pred)
    y_true = tf.cast(y_true, y_pred.dtype)
    delta = tf.constant(delta, y_pred.dtype)  # constants follow the data's dtype
    outer_scale = tf.constant(outer_scale, y_pred.dtype)

    @tf.custom_gradient
    def pseudo_huber(r):
        scaled = r / delta
        loss = delta * delta * (tf.sqrt(1 + scaled * scaled) - 1)

        def backward(upstream):
            inner = r / tf.sqrt(1 + scaled * scaled)
            safe = tf.where(tf.abs(r) > delta, r, delta)
            ratio = delta / safe
            outer = delta * tf.sign(r) / tf.sqrt(1 + ratio * ratio) * outer_scale
            return upstream * tf.where(tf.abs(r) <= delta, inner, outer)

        return loss, backward

    return tf.reduce_mean(pseudo_huber(y_pred - y_true))


def pseudo_huber(y_true, y_pred, delta: float = 1.0):
    """Pseudo-Huber loss (mean over the batch) with a hand-written backward."""
    return _pseudo_huber(y_true, y_pred, delta, 1.0)


def pseudo_huber_wrong_branch(y_true, y_pred, delta: float = 1.0):
    """The same, with the large-residual branch of the backward 10% too large."""
    return _pseudo_huber(y_true, y_pred, delta, WRONG)
