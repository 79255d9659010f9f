"""Second derivatives (``order=2``): the gradient as a function, checked to first order.

g(xs) = d(vᵀf)/dxs, computed with a GradientTape (v = 1 for a scalar f, else a fixed random
cotangent drawn from the seed), returns the gradients of every checked input, flattened and
concatenated (x0's elements first, then x1's...). Its Jacobian is the Hessian of vᵀf, cross
terms d g_j / d x_i included, and the analytical Jacobian the checker forms for g (VJPs of g,
recorded around g's own tape) is the backward pass of the user's backward pass. So
``check_gradients(f, xs, order=2)`` is the first-order check of g, by either method: a backward
whose value is right but whose own derivative is wrong (``tf.stop_gradient`` in it, numpy via
``tf.numpy_function``, a constant) gives Hessian-vector products that finite differences of g
contradict, although it passes at order 1. What gradient penalties, meta-learning and
Hessian-based methods differentiate is exactly that backward.

Cost (docs/gradcheck.md measures one): an evaluation of g is a forward and a backward pass of f,
a VJP of g a backward pass of that backward (~2-3 backward passes of f). probe: 2 evaluations of
g per probe and input (4 where a probe fails at first sight) and probes + 1 VJPs of g; jacobian:
2n evaluations of g for an input of n elements and m VJPs of g, m being g's size (all checked
inputs' elements together), per input.

A run (gradcheck.order=2) checks both orders: its first-order checks as before, then
second_order_reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

ORDERS = (1, 2)


def check_order(order: Any) -> int:
    if isinstance(order, bool) or order not in ORDERS:
        raise ValueError(f"order={order!r}: expected 1 (gradients) or 2 (second derivatives)")
    return int(order)


class Gradient:
    """g = d(vᵀf)/d(checked inputs), flat and concatenated, as a function of the same inputs.

    ``f`` takes the inputs (``variables=None``: check_gradients) or nothing and reads
    ``variables`` (check_variables). ``none`` collects the inputs whose gradient the tape gave as
    None (they do not reach f's output): their part of g is zeros, and the report names them.
    """

    def __init__(self, f: Callable[..., Any], checked: list[int], v: np.ndarray,
                 variables: list[Any] | None = None) -> None:
        self.f = f
        self.checked = checked
        self.v = v
        self.variables = variables
        self.none: set[int] = set()

    def __call__(self, *xs: Any) -> Any:
        import tensorflow as tf

        pool = xs if self.variables is None else self.variables
        sources = [pool[k] for k in self.checked]
        with tf.GradientTape() as tape:
            tape.watch(sources)
            y = tf.convert_to_tensor(self.f(*xs))
        grads = tape.gradient(y, sources, output_gradients=tf.constant(self.v, y.dtype))
        parts = []
        for k, source, grad in zip(self.checked, sources, grads):
            if grad is None:
                self.none.add(k)
                grad = tf.zeros(source.shape, y.dtype)
            grad = tf.convert_to_tensor(grad)  # IndexedSlices (gathers) -> dense
            parts.append(tf.reshape(tf.cast(grad, y.dtype), [-1]))
        return tf.concat(parts, 0) if parts else tf.zeros([0], y.dtype)


def gradient_of(f: Callable[..., Any], args: Sequence[Any], checked: list[int], seed: int,
                variables: list[Any] | None = None) -> Gradient:
    """The Gradient of ``f`` (one evaluation of f at ``args``, for its output's shape)."""
    import tensorflow as tf

    y = tf.convert_to_tensor(f(*args))
    if y.shape.num_elements() == 1:
        v = np.ones(y.shape.as_list())
    else:  # a fixed random cotangent, its own stream of the seed
        v = np.random.default_rng([seed, 2]).standard_normal(y.shape.as_list())
    return Gradient(f, checked, v, variables)


def describe(gradient: Gradient, names: Sequence[str], sizes: Sequence[int]) -> str:
    """The report's note: what an order-2 check compared, and g's layout."""
    layout = ", ".join(f"{names[k]} ({sizes[k]})" for k in gradient.checked)
    weight = "" if gradient.v.size == 1 else " with a fixed random cotangent v"
    return (f"order 2: checked the Jacobian of the gradient g = d(v^T f)/dx{weight} (its "
            f"elements: {layout}): Hessian-vector products from the backward pass's own "
            "backward against finite differences of g")


# Why an input's order-2 analytical Jacobian is all zeros when the tape gave it as None.
FLAT_NOTE = ("its gradient's own derivative is None (nothing in the backward pass depends on "
             "it: tf.stop_gradient, numpy or a constant in the backward, or f is linear in it), "
             "so it was taken as 0 and compared with finite differences of the gradient")


def second_order_reports(targets: Sequence[tuple[str, Callable[..., Any], list[Any], list[str]]],
                         method: str, probes: int, dtype: str, max_jacobian_size: int
                         ) -> dict[str, Any]:
    """A run's second-order checks (gradcheck.order=2), keyed "<target>/order2/<method>".

    ``targets`` are the run's (key, loss as a function of xs, xs, names). ``method="both"``
    adds the exact Jacobian of g only while all of g's elements fit max_jacobian_size: its
    analytical Jacobian costs one VJP of g per element of g, for each input.
    """
    from gradexp.gradcheck.checker import check_gradients  # api imports this module

    reports = {}
    for key, f, xs, names in targets:
        options = {"order": 2, "probes": probes, "dtype": dtype, "names": names,
                   "compile": False, "max_jacobian_size": max_jacobian_size}
        if method in ("auto", "probe", "both"):
            reports[f"{key}/order2/probe"] = check_gradients(f, xs, method="probe", **options)
        size = sum(int(np.prod(x.shape, dtype=np.int64)) for x in xs)
        if method == "jacobian" or (method == "both" and size <= max_jacobian_size):
            reports[f"{key}/order2/jacobian"] = check_gradients(f, xs, method="jacobian",
                                                                **options)
    return reports
