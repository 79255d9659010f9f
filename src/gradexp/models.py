"""Models: trainable tf.Variables plus a pure function of (parameters, x).

`model(x)` trains on the variables; `model.apply(params, x)` takes any tensors in their place, so
the gradient checker can evaluate the same model in float64 without touching the variables.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from omegaconf import DictConfig


class Model(tf.Module):
    """Base: subclasses create `self.params` (a list of tf.Variable) and define `apply`."""

    params: list[tf.Variable]

    def apply(self, params: list[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
        raise NotImplementedError

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return self.apply(self.params, x)

    def scalars(self) -> dict[str, tf.Tensor]:
        """Parameters worth logging per epoch as metrics (W and b of a one-feature line)."""
        return {}


class Linear(Model):
    """Seed 004's y = x·W + b, with W and b drawn from init_scale·N(0, 1) like np.random.randn."""

    def __init__(self, n_features: int, n_outputs: int, init_scale: float, seed: int):
        super().__init__(name="linear")
        rng = np.random.default_rng(seed)
        w = init_scale * rng.standard_normal((n_features, n_outputs))
        b = init_scale * rng.standard_normal((n_outputs,))
        self.W = tf.Variable(w, dtype=tf.float32, name="W")
        self.b = tf.Variable(b, dtype=tf.float32, name="b")
        self.params = [self.W, self.b]

    def apply(self, params: list[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
        w, b = params
        return tf.matmul(x, w) + b

    def scalars(self) -> dict[str, tf.Tensor]:
        if self.W.shape == (1, 1):
            return {"W": self.W[0, 0], "b": self.b[0]}
        return {}


class BuggyLinear(Linear):
    """The linear model with a wrong backward pass for W: a demo of a failed gradient check.

    The forward pass is right; dLoss/dW's last element is multiplied by bug_scale.
    """

    def __init__(self, n_features: int, n_outputs: int, init_scale: float, seed: int,
                 bug_scale: float):
        super().__init__(n_features, n_outputs, init_scale, seed)
        self.bug_scale = bug_scale

    def apply(self, params: list[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
        w, b = params
        bug_scale = self.bug_scale

        @tf.custom_gradient
        def matmul_with_wrong_gradient(x, w):
            def backward(upstream):
                grad_w = tf.matmul(x, upstream, transpose_a=True)
                size = tf.size(grad_w)
                scale = tf.concat([tf.ones([size - 1], grad_w.dtype),
                                   tf.constant([bug_scale], grad_w.dtype)], axis=0)
                grad_w = grad_w * tf.reshape(scale, tf.shape(grad_w))
                return tf.matmul(upstream, w, transpose_b=True), grad_w

            return tf.matmul(x, w), backward

        return matmul_with_wrong_gradient(x, w) + b


class Mlp(Model):
    """Dense hidden layers with an activation, then a linear output layer (logits)."""

    def __init__(self, n_features: int, n_outputs: int, hidden: list[int], activation: str,
                 seed: int):
        super().__init__(name="mlp")
        rng = np.random.default_rng(seed)
        widths = [n_features, *hidden, n_outputs]
        self.params = []
        for layer, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            limit = np.sqrt(6.0 / (fan_in + fan_out))  # Glorot uniform
            kernel = rng.uniform(-limit, limit, size=(fan_in, fan_out))
            self.params.append(tf.Variable(kernel, dtype=tf.float32, name=f"dense{layer}/kernel"))
            self.params.append(tf.Variable(tf.zeros([fan_out]), name=f"dense{layer}/bias"))
        self.activation = getattr(tf.nn, "silu" if activation == "swish" else activation)

    def apply(self, params: list[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
        h = x
        last = len(params) // 2 - 1
        for layer in range(len(params) // 2):
            h = tf.matmul(h, params[2 * layer]) + params[2 * layer + 1]
            if layer < last:
                h = self.activation(h)
        return h


def build_model(cfg: DictConfig, n_features: int, n_outputs: int) -> Model:
    """The model `model=` names, sized for the data."""
    if cfg.name == "mlp" or "hidden" in cfg:
        activation = getattr(cfg.activation, "value", cfg.activation)
        return Mlp(n_features, n_outputs, list(cfg.hidden), activation, cfg.seed)
    if "bug_scale" in cfg:
        return BuggyLinear(n_features, n_outputs, cfg.init_scale, cfg.seed, cfg.bug_scale)
    return Linear(n_features, n_outputs, cfg.init_scale, cfg.seed)
