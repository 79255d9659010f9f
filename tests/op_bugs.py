"""Planting bugs in an op's backward, for the op suite (tests/op_cases.py).

Each helper gives a ``tf.custom_gradient`` with the op's own forward and a realistic wrong
backward: the true VJP corrupted (``planted`` with factor_where, misroute, shift, flip, drop) or
a hand-written one (``with_backward``). TensorFlow is imported when they are called.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def true_vjp(fn: Callable[..., Any], xs: list[Any], up: Any) -> list[Any]:
    """fn's true VJP at xs (a tape inside the backward: works eagerly and in tf.function)."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(xs)
        y = fn(*xs)
    grads = tape.gradient(y, xs, output_gradients=up)
    return [tf.zeros_like(x) if g is None else tf.convert_to_tensor(g) for x, g in zip(xs, grads)]


def planted(fn: Callable[..., Any], corrupt: Callable[[list, list, Any], list]) -> Callable:
    """fn's forward, with a backward that corrupts the true one: corrupt(xs, grads, up)."""
    import tensorflow as tf

    @tf.custom_gradient
    def wrong(*xs):
        y = fn(*xs)

        def grad(up):
            return corrupt(list(xs), true_vjp(fn, list(xs), up), up)

        return y, grad

    return wrong


def with_backward(fn: Callable[..., Any], backward: Callable[[list, Any, Any], list]) -> Callable:
    """fn's forward with a hand-written (wrong) backward(xs, y, up) -> grads."""
    import tensorflow as tf

    @tf.custom_gradient
    def wrong(*xs):
        y = fn(*xs)

        def grad(up):
            return backward(list(xs), y, up)

        return y, grad

    return wrong


def factor_where(cond: Callable[[Any], Any], which: int = 0, k: float = 1.05) -> Callable:
    """The gradient of input ``which`` off by ``k`` where cond(x) holds (part of the domain)."""
    import tensorflow as tf

    def corrupt(xs, grads, up):
        g = grads[which]
        grads[which] = tf.where(cond(xs[which]), k * g, g)
        return grads

    return corrupt


def misroute(which: int = 0, a: int = 0, b: int = -1) -> Callable:
    """Input ``which``'s gradient elements a and b swapped (an index bug)."""
    import tensorflow as tf

    def corrupt(xs, grads, up):
        g = tf.reshape(grads[which], [-1])
        n = int(g.shape[0])
        ia, ib = a % n, b % n
        perm = list(range(n))
        perm[ia], perm[ib] = ib, ia
        grads[which] = tf.reshape(tf.gather(g, perm), tf.shape(xs[which]))
        return grads

    return corrupt


def shift(which: int = 0, axis: int = -1) -> Callable:
    """Input ``which``'s gradient moved one place along ``axis`` (routed to a neighbour)."""
    import tensorflow as tf

    def corrupt(xs, grads, up):
        grads[which] = tf.roll(grads[which], 1, axis)
        return grads

    return corrupt


def flip(which: int = 0) -> Callable:
    """Input ``which``'s gradient with the wrong sign."""
    def corrupt(xs, grads, up):
        grads[which] = -grads[which]
        return grads

    return corrupt


def drop(which: int) -> Callable:
    """Input ``which``'s gradient term dropped (a zero)."""
    import tensorflow as tf

    def corrupt(xs, grads, up):
        grads[which] = tf.zeros_like(grads[which])
        return grads

    return corrupt




def one_element_off(k: int, error: float, scalar: bool = True) -> Callable:
    """A smooth float32 function of a vector, sin(x)·x + 0.3x³, whose backward is `error`
    (relative) off in element k only, so no step excuses it; `scalar`: as a loss, its sum
    weighted 1 to 2 (~40 on 32 normal inputs). tests/test_gradcheck.py and
    benchmarks/bench_jacobian_one_element.py."""
    import tensorflow as tf

    @tf.custom_gradient
    def curve(x):
        def backward(upstream):
            exact = upstream * (tf.cos(x) * x + tf.sin(x) + 0.9 * x**2)
            return exact * (1 + error * tf.one_hot(k, tf.size(x), dtype=x.dtype))

        return tf.sin(x) * x + 0.3 * x**3, backward

    if scalar:
        return lambda x: tf.reduce_sum(curve(x) * tf.linspace(1.0, 2.0, tf.size(x)))
    return curve
