"""An op suite for the gradient checker, after TensorFlow's own gradient tests.

Each case is an op as TensorFlow's gradient tests check it (math_grad_test, nn_grad_test and the
cwise, reduction, matmul, softmax, conv, pooling, pad, gather, image-resize and linalg gradient
tests under tensorflow/python/kernel_tests): the kind of inputs those tests use (shapes, value
ranges, float32 and float64), the step and tolerance they give ``tf.test.compute_gradient``, a
correct function ``f(*xs)`` and the same op with one realistic planted bug in its backward (a
``tf.custom_gradient``): a dropped term, a missing transpose, a flipped sign, a factor of 1.05 on
part of the domain, a misrouted element. Written for gradexp (not copied from TensorFlow).

Imported by tests/test_op_suite.py (a fast subset) and benchmarks/bench_op_suite.py (all of it).
``cases()`` builds every case; TensorFlow is imported when it is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from op_bugs import drop, factor_where, flip, misroute, planted, shift, true_vjp, with_backward

# Re-exported for the suite's users (tests/test_op_suite.py).
__all__ = ["OpCase", "cases", "drop", "factor_where", "flip", "misroute", "planted",
           "reference", "shift", "with_backward"]


@dataclass(frozen=True)
class OpCase:
    """One op at one dtype: inputs, the correct function, its planted bug, TF's tolerances."""

    name: str  # "family/op/dtype"
    source: str  # the TensorFlow test it follows
    dtype: str  # "float32" | "float64"
    inputs: tuple[np.ndarray, ...]
    f: Callable[..., Any]
    bug: Callable[..., Any]
    bug_kind: str  # what the planted backward gets wrong
    delta: float  # the step TF's test gives compute_gradient
    atol: float  # TF's test passes when |J_t - J_n| <= atol + rtol |J_n| everywhere
    rtol: float


# -- the cases -----------------------------------------------------------------------------

# TensorFlow's gradient tests: (delta, atol, rtol) per dtype for compute_gradient.
_CWISE = {"float32": (1e-3, 1e-3, 1e-3), "float64": (1e-5, 1e-5, 1e-5)}
_ERR = {"float32": (1 / 1024, 1e-3, 0.0), "float64": (1 / 1024, 1e-6, 0.0)}  # max_error < tol
_IMAGE = {"float32": (1 / 1024, 1e-3, 0.0), "float64": (1 / 1024, 1e-3, 0.0)}
# linalg_grad_test: step eps^(1/3), atol = rtol = 0.05 in float32 and 1e-6 in float64; its
# planted bugs are large enough (factor 1.5) for float32's 5% to see them.
_LINALG = {"float32": ((2.0**-23) ** (1 / 3), 5e-2, 5e-2),
           "float64": ((2.0**-52) ** (1 / 3), 1e-6, 1e-6)}


_FLOAT32_ONLY = {"max_pool3d", "resize_lanczos3"}


def _neg(x):
    return x < 0


def _pos(x):
    return x > 0


def _above(t: float) -> Callable:
    return lambda x: x > t


class _Builder:
    def __init__(self, first_seed: int = 0, tolerances: dict = _CWISE) -> None:
        self.cases: list[OpCase] = []
        self.first_seed = first_seed  # inputs drawn from first_seed + the case's number
        self.tolerances = tolerances  # a family's default (delta, atol, rtol) per dtype

    def add(self, family: str, op: str, source: str, inputs: Callable[[Any], list[np.ndarray]],
            f: Callable[..., Any], bug: Callable[..., Any], bug_kind: str,
            tolerances: dict | None = None, dtypes: tuple[str, ...] | None = None) -> None:
        tolerances = tolerances or self.tolerances
        if getattr(bug, "__name__", "") == "corrupt":  # a corruption of the true backward
            bug = planted(f, bug)
        # TensorFlow has these kernels (or their gradients) in float32 only.
        dtypes = dtypes or (("float32",) if op in _FLOAT32_ONLY else tuple(tolerances))
        seed = self.first_seed + len(self.cases)  # the same inputs in each dtype
        for dtype in dtypes:
            delta, atol, rtol = tolerances[dtype]
            xs = tuple(np.asarray(x, dtype) for x in inputs(np.random.default_rng(seed)))
            self.cases.append(OpCase(f"{family}/{op}/{dtype}", source, dtype, xs, f, bug, bug_kind,
                                     delta, atol, rtol))


def _cwise_unary(b: _Builder, tf: Any) -> None:
    src = "kernel_tests/math_ops/cwise_ops_unary_test.py"
    # The unary tests' inputs: arange(-3, 3) style grids, shifted positive for log/sqrt, and
    # a grid inside (-1, 1) for the inverse trig functions; a few ops on 0.1 next to 5.
    grid = lambda r: [np.arange(-3, 3).reshape(1, 3, 2) + 0.5]  # noqa: E731
    pos = lambda r: [np.arange(-3, 3).reshape(1, 3, 2) - (-3) + 1.02]  # noqa: E731
    mixed = lambda r: [np.array([[0.1, 0.5, 2.0], [3.0, 4.5, 5.0]])]  # noqa: E731
    unit = lambda r: [np.arange(-0.90, 0.90, 0.25).reshape(2, 4)]  # noqa: E731
    zero = lambda r: [np.arange(-3, 3).reshape(2, 3) * 1.0]  # noqa: E731 - includes x = 0
    ops = [
        ("tanh", tf.tanh, grid, factor_where(_neg), "1.05 x the gradient for x < 0"),
        ("sigmoid", tf.sigmoid, grid, factor_where(_pos), "1.05 x the gradient for x > 0"),
        ("exp", tf.exp, grid, misroute(), "first and last elements swapped"),
        ("expm1", tf.math.expm1, grid, factor_where(_neg), "1.05 x the gradient for x < 0"),
        ("log", tf.math.log, pos, factor_where(_above(4.0)), "1.05 x the gradient for x > 4"),
        ("log_mixed", tf.math.log, mixed, factor_where(_above(4.0)),
         "1.05 x the gradient for x > 4"),
        ("log1p", tf.math.log1p, pos, misroute(0, 0, 1), "elements 0 and 1 swapped"),
        ("sqrt", tf.sqrt, pos, factor_where(_above(3.0)), "1.05 x the gradient for x > 3"),
        ("rsqrt", tf.math.rsqrt, mixed, factor_where(_above(2.5)),
         "1.05 x the gradient for x > 2.5"),
        ("reciprocal", tf.math.reciprocal, mixed, flip(), "sign flipped"),
        ("square", tf.square, grid, with_backward(tf.square, lambda xs, y, up: [up * xs[0]]),
         "2x dropped: up * x"),
        ("sin", tf.sin, grid, factor_where(_neg), "1.05 x the gradient for x < 0"),
        ("cos", tf.cos, grid, with_backward(tf.cos, lambda xs, y, up: [up * tf.sin(xs[0])]),
         "sign: +sin"),
        ("asin", tf.asin, unit, factor_where(_pos), "1.05 x the gradient for x > 0"),
        ("acos", tf.acos, unit, misroute(), "first and last elements swapped"),
        ("atan", tf.atan, grid, factor_where(_neg), "1.05 x the gradient for x < 0"),
        ("sinh", tf.sinh, grid, factor_where(_pos), "1.05 x the gradient for x > 0"),
        ("asinh", tf.asinh, grid, factor_where(_neg), "1.05 x the gradient for x < 0"),
        ("atanh", tf.atanh, unit, factor_where(_neg), "1.05 x the gradient for x < 0"),
        ("erf", tf.math.erf, grid, factor_where(_pos), "1.05 x the gradient for x > 0"),
        ("lgamma", tf.math.lgamma, mixed, misroute(0, 1, 4), "elements 1 and 4 swapped"),
        ("softplus", tf.nn.softplus, grid, factor_where(_neg), "1.05 x the gradient for x < 0"),
        ("softsign", tf.nn.softsign, zero, factor_where(_neg), "1.05 x the gradient for x < 0"),
        ("abs", tf.abs, grid, with_backward(tf.abs, lambda xs, y, up: [up]), "sign(x) dropped"),
        ("elu", tf.nn.elu, zero, factor_where(_neg), "1.05 x the gradient for x < 0"),
        ("selu", tf.nn.selu, grid, factor_where(_pos), "1.05 x the gradient for x > 0"),
        ("relu", tf.nn.relu, lambda r: [np.array([[-0.9, -0.7, -0.5, -0.3, -0.1],
                                                  [0.1, 0.3, 0.5, 0.7, 0.9]])],
         with_backward(tf.nn.relu,
                       lambda xs, y, up: [up * tf.cast(xs[0] > -0.2, xs[0].dtype)]),
         "passes the gradient for x > -0.2 (threshold off)"),
        ("relu6", tf.nn.relu6, lambda r: [np.array([[-3.5, -1.5, 2, 4], [4.5, 7.5, 8.5, 11]])],
         misroute(0, 2, 4), "elements 2 and 4 swapped"),
        ("leaky_relu", lambda x: tf.nn.leaky_relu(x, 0.2), lambda r: [np.array(
            [[-0.9, -0.7, -0.5, -0.3, -0.1], [0.1, 0.3, 0.5, 0.7, 0.9]])],
         factor_where(_neg, k=1.25),
         "slope 0.25 instead of 0.2 for x < 0"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("cwise", name, src, inputs, fn, bug, kind)


def _cwise_binary(b: _Builder, tf: Any) -> None:
    src = "kernel_tests/math_ops/cwise_ops_binary_test.py"
    pair = lambda r: [np.linspace(-5, 5, 6).reshape(1, 3, 2),  # noqa: E731
                      np.linspace(20, -20, 6).reshape(1, 3, 2)]
    bcast = lambda r: [r.standard_normal((2, 3, 2)), r.standard_normal((3, 1))]  # noqa: E731
    positive = lambda r: [r.uniform(0.5, 3.0, (2, 3)), r.uniform(0.5, 2.0, (2, 3))]  # noqa: E731
    apart = lambda r: [np.array([[0.3, -1.2, 2.0], [1.5, -0.4, 0.9]]),  # noqa: E731
                       np.array([[-0.5, 0.8, 1.1], [0.2, 1.3, -1.9]])]
    ops = [
        ("add_broadcast", tf.add, bcast,
         with_backward(tf.add, lambda xs, y, up: [up, tf.zeros_like(xs[1]) + tf.reduce_sum(
             up, axis=[0, 2])[:, None] / 2]), "broadcast gradient halved"),
        ("sub", tf.subtract, pair, flip(1), "sign of the second input's gradient"),
        ("mul", tf.multiply, bcast, drop(1), "the second input's term dropped"),
        ("div", tf.divide, positive,
         with_backward(tf.divide, lambda xs, y, up: [up / xs[1], up * xs[0] / xs[1] ** 2]),
         "sign: +x/y^2"),
        ("pow", tf.pow, positive, factor_where(_above(1.5), which=1),
         "1.05 x d/dy where y > 1.5"),
        ("maximum", tf.maximum, apart, misroute(1, 1, 0), "second input's elements swapped"),
        ("minimum", tf.minimum, apart, factor_where(_neg, which=0),
         "1.05 x d/dx where x < 0"),
        ("squared_difference", tf.math.squared_difference,
         lambda r: [r.standard_normal((1, 2, 3, 2)), r.standard_normal((3, 2))],
         with_backward(tf.math.squared_difference, lambda xs, y, up: [
             2 * up * (xs[0] - xs[1]), -tf.reduce_sum(2 * up * (xs[0] - xs[1]), axis=[0])[0]]),
         "broadcast gradient reduced over one axis too few"),
        ("atan2", tf.atan2, apart, flip(0), "sign of d/dy"),
        ("xlogy", tf.math.xlogy, positive, factor_where(_above(1.0), which=1),
         "1.05 x d/dy where y > 1"),
        ("xdivy", tf.math.xdivy, positive, misroute(0, 0, 3), "elements 0 and 3 swapped"),
        ("div_no_nan", tf.math.divide_no_nan, positive, drop(1), "d/dy dropped"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("cwise", name, src, inputs, fn, bug, kind)


def _reductions(b: _Builder, tf: Any) -> None:
    src = "kernel_tests/math_ops/reduction_ops_test.py"
    grid = lambda r: [np.arange(1.0, 49.0).reshape(2, 3, 4, 2) / 10]  # noqa: E731
    small = lambda r: [r.uniform(-1.0, 1.0, (2, 3, 4))]  # noqa: E731
    prod_in = lambda r: [r.uniform(0.5, 1.5, (3, 4))]  # noqa: E731
    distinct = lambda r: [r.permutation(24).reshape(2, 3, 4) / 4.0]  # noqa: E731
    ops = [
        ("reduce_sum", lambda x: tf.reduce_sum(x, axis=[1, 2]), grid,
         misroute(0, 0, 1), "elements 0 and 1 swapped"),
        ("reduce_mean", lambda x: tf.reduce_mean(x, axis=1), small,
         with_backward(lambda x: tf.reduce_mean(x, axis=1),
                       lambda xs, y, up: [tf.repeat(up[:, None, :], 3, axis=1) / 4.0]),
         "divides by the wrong axis' size"),
        ("reduce_prod", lambda x: tf.reduce_prod(x, axis=1), prod_in,
         factor_where(_above(1.2)), "1.05 x the gradient where x > 1.2"),
        ("reduce_max", lambda x: tf.reduce_max(x, axis=2), distinct,
         misroute(0, 0, 3), "gradient routed to the wrong element"),
        ("reduce_min", lambda x: tf.reduce_min(x, axis=[0, 2]), distinct,
         misroute(0, 0, 23), "gradient routed to the wrong element"),
        ("reduce_logsumexp", lambda x: tf.reduce_logsumexp(x, axis=-1), small,
         factor_where(_neg), "1.05 x the gradient for x < 0"),
        ("reduce_euclidean_norm", lambda x: tf.math.reduce_euclidean_norm(x, axis=1), small,
         factor_where(_pos), "1.05 x the gradient for x > 0"),
        ("cumsum", lambda x: tf.cumsum(x, axis=1), small,
         with_backward(lambda x: tf.cumsum(x, axis=1),
                       lambda xs, y, up: [tf.cumsum(up, axis=1)]),
         "forward cumsum in the backward (reverse=True missing)"),
        ("cumprod", lambda x: tf.math.cumprod(x, axis=1), prod_in,
         factor_where(_above(1.2)), "1.05 x the gradient where x > 1.2"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("reduction", name, src, inputs, fn, bug, kind, tolerances=_ERR)


def _matmul(b: _Builder, tf: Any) -> None:
    src = "kernel_tests/math_ops/matmul_op_test.py, batch_matmul_op_test.py"
    sq = lambda r: [r.standard_normal((3, 3)), r.standard_normal((3, 3))]  # noqa: E731

    def mm_no_transpose(xs, y, up):  # d/da = up b (b^T forgotten), d/db right
        return [tf.matmul(up, xs[1]), tf.matmul(xs[0], up, transpose_a=True)]

    ops = [
        ("matmul", tf.matmul, sq, with_backward(tf.matmul, mm_no_transpose),
         "missing transpose in d/da"),
        ("matmul_rect", tf.matmul,
         lambda r: [r.standard_normal((2, 4)), r.standard_normal((4, 3))],
         planted(tf.matmul, factor_where(_neg, which=1)), "1.05 x d/db where b < 0"),
        ("matmul_transpose_a", lambda a, c: tf.matmul(a, c, transpose_a=True), sq,
         planted(lambda a, c: tf.matmul(a, c, transpose_a=True), misroute(0, 1, 3)),
         "d/da elements (0,1) and (1,0) swapped"),
        ("batch_matmul", tf.matmul,
         lambda r: [r.standard_normal((2, 2, 3)), r.standard_normal((2, 3, 2))],
         planted(tf.matmul, misroute(1, 0, 6)), "d/db routed to the other batch"),
        ("einsum_bij_bjk", lambda a, c: tf.einsum("bij,bjk->bik", a, c),
         lambda r: [r.standard_normal((2, 2, 3)), r.standard_normal((2, 3, 2))],
         planted(lambda a, c: tf.einsum("bij,bjk->bik", a, c), flip(1)), "sign of d/db"),
        ("tensordot", lambda a, c: tf.tensordot(a, c, axes=1),
         lambda r: [r.standard_normal((3, 4)), r.standard_normal((4, 2))],
         planted(lambda a, c: tf.tensordot(a, c, axes=1), factor_where(_pos, which=0)),
         "1.05 x d/da where a > 0"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("matmul", name, src, inputs, fn, bug, kind, tolerances=_ERR)


def _softmax(b: _Builder, tf: Any) -> None:
    src = "kernel_tests/nn_ops/softmax_op_test.py, xent_op_test.py, nn_grad_test.py"
    logits = lambda r: [np.array([[-2.0, -1, 1, 3], [5, 7, 8, 9]]) / 3]  # noqa: E731

    def softmax_drop(xs, y, up):  # y (up - sum(up y)) with the sum term dropped
        return [y * up]

    def log_softmax_drop(xs, y, up):
        return [up]

    labels = np.array([[0.0, 0.5, 0.5, 0.0], [0.1, 0.2, 0.3, 0.4]])

    def xent(x):
        return tf.nn.softmax_cross_entropy_with_logits(tf.constant(labels, x.dtype), x)

    def sparse(x):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(tf.constant([3, 0]), x)

    def sigmoid_xent(x):
        return tf.nn.sigmoid_cross_entropy_with_logits(tf.constant(labels, x.dtype), x)

    ops = [
        ("softmax", tf.nn.softmax, logits, with_backward(tf.nn.softmax, softmax_drop),
         "the -sum(up * y) term dropped"),
        ("log_softmax", tf.nn.log_softmax, logits,
         with_backward(tf.nn.log_softmax, log_softmax_drop), "the softmax term dropped"),
        ("softmax_axis0", lambda x: tf.nn.softmax(x, axis=0), logits,
         planted(lambda x: tf.nn.softmax(x, axis=0), factor_where(_above(1.0))),
         "1.05 x the gradient where x > 1"),
        ("softmax_cross_entropy", xent, logits, planted(xent, misroute(0, 1, 2)),
         "elements 1 and 2 swapped"),
        ("sparse_softmax_cross_entropy", sparse, logits,
         planted(sparse, factor_where(_neg)), "1.05 x the gradient for x < 0"),
        ("sigmoid_cross_entropy", sigmoid_xent, logits,
         planted(sigmoid_xent, factor_where(_pos)), "1.05 x the gradient for x > 0"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("softmax", name, src, inputs, fn, bug, kind, tolerances=_ERR)


def _conv(b: _Builder, tf: Any) -> None:
    src = "kernel_tests/nn_ops/conv_ops_test.py, depthwise_conv_op_test.py, nn_grad_test.py"
    img = lambda r: [r.uniform(-1, 1, (1, 4, 4, 3)), r.uniform(-1, 1, (2, 2, 3, 2))]  # noqa: E731

    def conv(x, w):
        return tf.nn.conv2d(x, w, 1, "SAME")

    def conv_valid_s2(x, w):
        return tf.nn.conv2d(x, w, 2, "VALID")

    def depthwise(x, w):
        return tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME")

    def conv1d(x, w):
        return tf.nn.conv1d(x, w, 1, "SAME")

    def conv_t(x, w):
        return tf.nn.conv2d_transpose(x, w, [1, 6, 6, 2], 2, "SAME")

    def conv_flipped_filter(xs, y, up):  # d/dx with the filter not flipped (correlation twice)
        x, w = xs
        dx = tf.nn.conv2d(up, tf.transpose(w, [0, 1, 3, 2]), 1, "SAME")
        dw = true_vjp(conv, xs, up)[1]
        return [dx, dw]

    ops = [
        ("conv2d_input", conv, img, with_backward(conv, conv_flipped_filter),
         "d/dx correlates with the unflipped filter"),
        ("conv2d_filter", conv, img, planted(conv, factor_where(_neg, which=1)),
         "1.05 x d/dw where w < 0"),
        ("conv2d_valid_stride2", conv_valid_s2,
         lambda r: [r.uniform(-1, 1, (1, 5, 5, 2)), r.uniform(-1, 1, (3, 3, 2, 2))],
         planted(conv_valid_s2, misroute(0, 0, 1)), "d/dx elements 0 and 1 swapped"),
        ("depthwise_conv2d", depthwise, img, planted(depthwise, factor_where(_pos, which=0)),
         "1.05 x d/dx where x > 0"),
        ("conv1d", conv1d,
         lambda r: [r.uniform(-1, 1, (2, 6, 2)), r.uniform(-1, 1, (3, 2, 3))],
         planted(conv1d, misroute(1, 0, 2)), "d/dw elements 0 and 2 swapped"),
        ("conv2d_transpose", conv_t,
         lambda r: [r.uniform(-1, 1, (1, 3, 3, 3)), r.uniform(-1, 1, (2, 2, 2, 3))],
         planted(conv_t, flip(1)), "sign of d/dw"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("conv", name, src, inputs, fn, bug, kind, tolerances=_ERR)


def _pooling(b: _Builder, tf: Any) -> None:
    src = "kernel_tests/nn_ops/pooling_ops_test.py, pooling_ops_3d_test.py"

    def distinct(shape):  # TF's pooling tests: distinct values 1/total apart, shuffled
        def make(r):
            total = int(np.prod(shape))
            return [r.permutation(np.arange(1, total + 1)).reshape(shape) / total]

        return make

    def max2(x):
        return tf.nn.max_pool2d(x, 2, 2, "VALID")

    def max3s1(x):
        return tf.nn.max_pool2d(x, 3, 1, "SAME")

    def avg2(x):
        return tf.nn.avg_pool2d(x, 2, 2, "VALID")

    def avg3s1(x):
        return tf.nn.avg_pool2d(x, 3, 1, "SAME")

    def max3d(x):
        return tf.nn.max_pool3d(x, 2, 2, "VALID")

    def avg_all_ones(xs, y, up):  # spreads up without dividing by the window size
        return [tf.repeat(tf.repeat(up, 2, axis=1), 2, axis=2)]

    ops = [
        ("max_pool_2x2", max2, distinct((1, 4, 4, 2)), planted(max2, shift(0, axis=2)),
         "gradient routed to the neighbour in the next column"),
        ("max_pool_3x3_same", max3s1, distinct((1, 5, 5, 1)),
         planted(max3s1, factor_where(_above(0.5))), "1.05 x the gradient where x > 0.5"),
        ("avg_pool_2x2", avg2, distinct((1, 4, 4, 2)), with_backward(avg2, avg_all_ones),
         "not divided by the window size"),
        ("avg_pool_3x3_same", avg3s1, distinct((1, 5, 5, 1)),
         planted(avg3s1, misroute(0, 0, 6)), "elements 0 and 6 swapped"),
        ("max_pool3d", max3d, distinct((1, 4, 4, 4, 1)), planted(max3d, factor_where(_pos)),
         "1.05 x the gradient everywhere it flows"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("pooling", name, src, inputs, fn, bug, kind, tolerances=_ERR)


def _arrays(b: _Builder, tf: Any) -> None:
    src = ("kernel_tests/array_ops/pad_op_test.py, gather_op_test.py, gather_nd_op_test.py, "
           "array_ops_test.py, segment_reduction_ops_test.py")
    x23 = lambda r: [r.standard_normal((2, 3))]  # noqa: E731
    x45 = lambda r: [r.standard_normal((4, 5))]  # noqa: E731
    idx = tf.constant([3, 0, 2, 0])

    def pad_c(x):
        return tf.pad(x, [[1, 0], [2, 1]])

    def pad_r(x):
        return tf.pad(x, [[1, 1], [2, 2]], mode="REFLECT")

    def pad_s(x):
        return tf.pad(x, [[1, 1], [2, 2]], mode="SYMMETRIC")

    def gather(x):
        return tf.gather(x, idx)

    def gather_axis1(x):
        return tf.gather(x, [4, 1, 1], axis=1)

    def gather_nd(x):
        return tf.gather_nd(x, [[0, 1], [2, 3], [0, 1]])

    def segment_sum(x):
        return tf.math.unsorted_segment_sum(x, tf.constant([0, 2, 0, 1]), 3)

    def segment_max(x):
        return tf.math.segment_max(x, tf.constant([0, 0, 1, 1]))

    def gather_no_dup(xs, y, up):  # scatter that overwrites duplicate indices instead of adding
        g = tf.tensor_scatter_nd_update(tf.zeros_like(xs[0]), idx[:, None], up)
        return [g]

    ops = [
        ("pad_constant", pad_c, x23, planted(pad_c, misroute(0, 0, 1)), "elements 0, 1 swapped"),
        ("pad_reflect", pad_r, x23,
         with_backward(pad_r, lambda xs, y, up: [up[1:3, 2:5]]), "reflected parts dropped"),
        ("pad_symmetric", pad_s, x23, planted(pad_s, factor_where(_neg)),
         "1.05 x the gradient for x < 0"),
        ("gather", gather, x45, with_backward(gather, gather_no_dup),
         "duplicate indices overwrite instead of adding"),
        ("gather_axis1", gather_axis1, x45, planted(gather_axis1, misroute(0, 1, 4)),
         "routed to the wrong column"),
        ("gather_nd", gather_nd, x45, planted(gather_nd, shift(0, axis=1)),
         "routed to the next column"),
        ("transpose", lambda x: tf.transpose(x, [1, 0]), x45,
         with_backward(lambda x: tf.transpose(x, [1, 0]),
                       lambda xs, y, up: [tf.reshape(up, [4, 5])]),
         "reshape instead of transpose in the backward"),
        ("tile", lambda x: tf.tile(x, [2, 1]), x23,
         with_backward(lambda x: tf.tile(x, [2, 1]), lambda xs, y, up: [up[:2]]),
         "only the first tile's gradient"),
        ("strided_slice", lambda x: x[1:, ::2], x45,
         planted(lambda x: x[1:, ::2], misroute(0, 5, 7)), "elements 5 and 7 swapped"),
        ("reverse", lambda x: tf.reverse(x, [1]), x45,
         with_backward(lambda x: tf.reverse(x, [1]), lambda xs, y, up: [up]),
         "not reversed in the backward"),
        ("concat", lambda x, z: tf.concat([x, z], axis=1),
         lambda r: [r.standard_normal((2, 3)), r.standard_normal((2, 2))],
         planted(lambda x, z: tf.concat([x, z], axis=1), factor_where(_neg, which=1)),
         "1.05 x d/dz where z < 0"),
        ("unsorted_segment_sum", segment_sum, x45, planted(segment_sum, misroute(0, 0, 5)),
         "rows 0 and 1 mixed up"),
        ("segment_max", segment_max, lambda r: [r.permutation(20).reshape(4, 5) / 5.0],
         planted(segment_max, misroute(0, 0, 5)), "routed to the other row of the segment"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("array", name, src, inputs, fn, bug, kind, tolerances=_ERR)


def _image(b: _Builder, tf: Any) -> None:
    src = "kernel_tests/image_ops/image_grad_test.py (resize_bilinear/nearest/bicubic)"
    img = lambda r: [r.uniform(0, 1, (1, 3, 4, 1))]  # noqa: E731

    def bilinear(x):
        return tf.image.resize(x, [6, 8], "bilinear")

    def bilinear_down(x):
        return tf.image.resize(x, [2, 3], "bilinear")

    def nearest(x):
        return tf.image.resize(x, [6, 8], "nearest")

    def bicubic(x):
        return tf.image.resize(x, [6, 8], "bicubic")

    def lanczos(x):
        return tf.image.resize(x, [5, 7], "lanczos3")

    ops = [
        ("resize_bilinear_up", bilinear, img, planted(bilinear, factor_where(_above(0.5))),
         "1.05 x the gradient where x > 0.5"),
        ("resize_bilinear_down", bilinear_down, img, planted(bilinear_down, misroute(0, 0, 1)),
         "elements 0 and 1 swapped"),
        ("resize_nearest", nearest, img, planted(nearest, misroute(0, 1, 2)),
         "elements 1 and 2 swapped"),
        ("resize_bicubic", bicubic, img, planted(bicubic, factor_where(_above(0.5))),
         "1.05 x the gradient where x > 0.5"),
        ("resize_lanczos3", lanczos, img, planted(lanczos, factor_where(_above(0.5))),
         "1.05 x the gradient where x > 0.5"),
    ]
    for name, fn, inputs, bug, kind in ops:
        # The resize kernels compute in float32 whatever the input dtype: float32 tolerances.
        b.add("image", name, src, inputs, fn, bug, kind, tolerances=_IMAGE)


def _linalg(b: _Builder, tf: Any) -> None:
    src = "kernel_tests/linalg/linalg_grad_test.py, matrix_inverse/solve/cholesky tests"

    def well(r):  # well-conditioned and clearly not symmetric (a transpose bug must show)
        a = r.uniform(-1, 1, (3, 3))
        a[0, 1] += 1.5
        return a + 2 * np.eye(3)

    def spd(r):
        a = r.uniform(-1, 1, (3, 3))
        return a @ a.T + 3 * np.eye(3)

    def cholesky(x):  # symmetrised as TF's test does (the gradient of the lower triangle)
        return tf.linalg.cholesky(0.5 * (x + tf.linalg.matrix_transpose(x)))

    def solve(a, rhs):
        return tf.linalg.solve(a, rhs)

    def tri_solve(a, rhs):
        return tf.linalg.triangular_solve(tf.linalg.band_part(a, -1, 0), rhs, lower=True)

    def inv_missing_transpose(xs, y, up):  # -y^T up y^T with the transposes dropped
        return [-tf.matmul(tf.matmul(y, up), y)]

    def det_no_transpose(xs, y, up):  # d det/dA = det A^-T; the transpose forgotten
        return [up * y * tf.linalg.inv(xs[0])]

    ops = [
        ("matrix_inverse", tf.linalg.inv, lambda r: [well(r)],
         with_backward(tf.linalg.inv, inv_missing_transpose), "transposes dropped"),
        ("matrix_determinant", tf.linalg.det, lambda r: [well(r)],
         with_backward(tf.linalg.det, det_no_transpose), "missing transpose"),
        ("log_abs_determinant", lambda x: tf.linalg.slogdet(x)[1], lambda r: [well(r)],
         planted(lambda x: tf.linalg.slogdet(x)[1], misroute(0, 1, 3)),
         "elements (0,1) and (1,0) swapped"),
        ("cholesky", cholesky, lambda r: [spd(r)], planted(cholesky, factor_where(_neg, k=1.5)),
         "1.5 x the gradient where A < 0"),
        ("matrix_solve", solve, lambda r: [well(r), r.standard_normal((3, 2))],
         planted(solve, flip(1)), "sign of d/d rhs"),
        ("triangular_solve", tri_solve, lambda r: [well(r), r.standard_normal((3, 2))],
         planted(tri_solve, flip(0)), "sign of d/dA"),
        ("trace_matmul", lambda a: tf.linalg.trace(tf.matmul(a, a)), lambda r: [well(r)],
         with_backward(lambda a: tf.linalg.trace(tf.matmul(a, a)),
                       lambda xs, y, up: [2 * up * xs[0]]), "missing transpose: 2A"),
        ("matrix_exponential", tf.linalg.expm, lambda r: [r.uniform(-0.5, 0.5, (3, 3))],
         planted(tf.linalg.expm, factor_where(_pos, k=1.5)), "1.5 x the gradient where A > 0"),
        ("norm_fro", lambda a: tf.norm(a), lambda r: [well(r)],
         planted(lambda a: tf.norm(a), misroute(0, 1, 3)), "elements (0,1) and (1,0) swapped"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("linalg", name, src, inputs, fn, bug, kind, tolerances=_LINALG)


def _nn(b: _Builder, tf: Any) -> None:
    src = "ops/nn_grad_test.py, kernel_tests/nn_ops/*_test.py (l2loss, bias_add, batchnorm)"
    x = lambda r: [r.standard_normal((3, 4))]  # noqa: E731
    swish_in = lambda r: [np.array([[-2.0, -1, 1, 3]]), np.array(0.25)]  # noqa: E731

    def swish(f, beta):
        return f * tf.sigmoid(beta * f)

    def bias_add(v, bias):
        return tf.nn.bias_add(v, bias)

    def batch_norm(v, scale, offset):
        mean, var = tf.nn.moments(v, axes=[0])
        return tf.nn.batch_normalization(v, mean, var, offset, scale, 1e-3)

    def l2n(v):
        return tf.math.l2_normalize(v, axis=1)

    def l2n_dropped(xs, y, up):  # (up - y sum(up y)) / norm with the projection dropped
        norm = tf.norm(xs[0], axis=1, keepdims=True)
        return [up / norm]

    ops = [
        ("l2_loss", tf.nn.l2_loss, x, with_backward(tf.nn.l2_loss, lambda xs, y, up: [
            2 * up * xs[0]]), "twice the gradient (forgot the 1/2)"),
        ("l2_normalize", l2n, x, with_backward(l2n, l2n_dropped), "projection term dropped"),
        ("bias_add", bias_add, lambda r: [r.standard_normal((3, 4)), r.standard_normal(4)],
         planted(bias_add, misroute(1, 0, 1)), "bias gradient elements 0 and 1 swapped"),
        ("swish", swish, swish_in, planted(swish, factor_where(_neg, which=0)),
         "1.05 x d/df for f < 0"),
        ("batch_normalization", batch_norm,
         lambda r: [r.standard_normal((5, 3)), r.uniform(0.5, 1.5, 3), r.standard_normal(3)],
         planted(batch_norm, factor_where(_pos, which=0)), "1.05 x d/dx where x > 0"),
        ("log_sigmoid", tf.math.log_sigmoid, x, planted(tf.math.log_sigmoid, factor_where(_pos)),
         "1.05 x the gradient for x > 0"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("nn", name, src, inputs, fn, bug, kind, tolerances=_ERR)


def cases() -> list[OpCase]:
    """Every case of the suite, in a fixed order (inputs drawn from fixed seeds)."""
    import tensorflow as tf

    b = _Builder()
    for family in (_cwise_unary, _cwise_binary, _reductions, _matmul, _softmax, _conv,
                   _pooling, _arrays, _image, _linalg, _nn):
        family(b, tf)
    return b.cases


def reference(case: OpCase, bug: bool) -> bool:
    """Does tf.test.compute_gradient at the case's step and tolerance pass (True) or fail?"""
    import tensorflow as tf

    fn = case.bug if bug else case.f
    xs = [tf.constant(x) for x in case.inputs]
    theoretical, numerical = tf.test.compute_gradient(fn, xs, delta=case.delta)
    for t, n in zip(theoretical, numerical):
        t, n = np.asarray(t, np.float64), np.asarray(n, np.float64)
        if not np.all(np.abs(t - n) <= case.atol + case.rtol * np.abs(n)):
            return False
    return True
