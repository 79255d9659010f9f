"""More op-suite cases: op families tests/op_cases.py does not have (benchmarks/bench_op_suite.py
--more). Written by a QA pass after TensorFlow's own tests, to find where the checker is less
exact than `tf.test.compute_gradient`; the `edge/` family holds inputs TensorFlow's tests avoid
(an element at a kink, norms near 0), where compute_gradient itself fails correct ops.

Same OpCase structure as tests/op_cases.py; bugs planted with the helpers of tests/op_bugs.py.
Steps and tolerances follow TensorFlow's own gradient tests (named per family in ``source``):

- segment_reduction_ops_test: unsorted/sorted segment sums, delta = 1 (linear ops), atol = rtol
  = 1e-3 (float64); the non-linear reductions (prod/max/min/mean) at the suite's _ERR.
- cumulative_logsumexp_test: x = arange(10)/10 - 0.5, compute_gradient's default step 1/1024.
- topk_op_test: [[2, -1, 1000, 3, 4], [1, 5, 2, 4, 3]], k = 3.
- qr_op_test / eig_op_test: step 0.1 eps^(1/3), atol = rtol = 3e-2 (QR) / 1e-2 (eig) in float32,
  1e-6 / 1e-7 in float64; linalg_grad_test (svd values, sqrtm, lstsq, pinv, logdet): eps^(1/3),
  0.05 / 1e-6.
- fft_ops_test: loss = sum |z|^2, delta = 1e-2, atol = rtol = 1e-2 (float32); float64 at 1e-8
  (the loss is quadratic: central differences are exact up to rounding).
- lrn_op_test: compute_gradient_error (step 1e-3) < 1e-4, float32 only (no float64 kernel).
- fractional_max/avg_pool_op_test, ctc_loss_op_test, crop_and_resize, extract_patches, betainc,
  igamma, special functions, losses: compute_gradient_error < 1e-3 (float32) / 1e-6 (float64)
  at 1/1024, as the suite's _ERR (CTC: float32 only, its dense path does not run in float64).
"""

from __future__ import annotations

import numpy as np
from op_bugs import drop, factor_where, flip, misroute, shift, true_vjp, with_backward
from op_cases import _CWISE, _ERR, _IMAGE, _LINALG, OpCase, _above, _Builder, _neg, _pos

_SEG_LINEAR = {"float32": (1.0, 1e-3, 1e-3), "float64": (1.0, 1e-3, 1e-3)}
_QR = {"float32": (0.1 * (2.0**-23) ** (1 / 3), 3e-2, 3e-2),
       "float64": (0.1 * (2.0**-52) ** (1 / 3), 1e-6, 1e-6)}
_EIG = {"float32": (0.1 * (2.0**-23) ** (1 / 3), 1e-2, 1e-2),
        "float64": (0.1 * (2.0**-52) ** (1 / 3), 1e-7, 1e-7)}
_FFT = {"float32": (1e-2, 1e-2, 1e-2), "float64": (1e-2, 1e-8, 1e-8)}
_LRN = {"float32": (1e-3, 1e-4, 0.0)}


def _segments(b, tf):
    src = "kernel_tests/math_ops/segment_reduction_ops_test.py, ops/math_grad_test.py"
    x62 = lambda r: [r.standard_normal((6, 2))]  # noqa: E731
    distinct = lambda r: [r.permutation(12).reshape(6, 2) / 4.0]  # noqa: E731
    prod_in = lambda r: [r.uniform(0.5, 1.5, (6, 2))]  # noqa: E731
    sorted_ids = tf.constant([0, 0, 1, 1, 1, 2])
    ids = tf.constant([0, 2, 0, 1, 2, 2])

    def seg_mean(x):
        return tf.math.segment_mean(x, sorted_ids)

    def seg_mean_wrong_count(xs, y, up):  # divides by 2 whatever the segment's size
        return [tf.gather(up, sorted_ids) / 2.0]

    def useg_sqrt_n(x):
        return tf.math.unsorted_segment_sqrt_n(x, ids, 3)

    def sqrt_n_by_n(xs, y, up):  # divides by N instead of sqrt(N)
        n = tf.math.unsorted_segment_sum(tf.ones_like(xs[0]), ids, 3)
        return [tf.gather(up / n, ids)]

    def useg_mean(x):
        return tf.math.unsorted_segment_mean(x, ids, 3)

    def useg_prod(x):
        return tf.math.unsorted_segment_prod(x, ids, 3)

    def useg_max(x):
        return tf.math.unsorted_segment_max(x, ids, 3)

    def seg_min(x):
        return tf.math.segment_min(x, sorted_ids)

    def seg_sum_sorted(x):
        return tf.math.segment_sum(x, sorted_ids)

    sp_idx = tf.constant([0, 2, 2, 3, 5])
    sp_seg = tf.constant([0, 0, 1, 1, 2])

    def sp_sum(x):
        return tf.sparse.segment_sum(x, sp_idx, sp_seg)

    def sp_sum_overwrite(xs, y, up):  # duplicate indices overwrite instead of adding
        g = tf.gather(up, sp_seg)
        return [tf.tensor_scatter_nd_update(tf.zeros_like(xs[0]), sp_idx[:, None], g)]

    def sp_mean(x):
        return tf.sparse.segment_mean(x, sp_idx, sp_seg)

    def sp_sqrt_n(x):
        return tf.sparse.segment_sqrt_n(x, sp_idx, sp_seg)

    ops = [
        ("segment_sum_sorted", seg_sum_sorted, x62, misroute(0, 0, 4), "rows 0 and 2 mixed up",
         _SEG_LINEAR),
        ("segment_mean", seg_mean, x62, with_backward(seg_mean, seg_mean_wrong_count),
         "divides by 2 instead of the segment's size", _ERR),
        ("unsorted_segment_mean", useg_mean, x62, factor_where(_pos), "1.05 x where x > 0", _ERR),
        ("unsorted_segment_sqrt_n", useg_sqrt_n, x62, with_backward(useg_sqrt_n, sqrt_n_by_n),
         "divides by N instead of sqrt(N)", _ERR),
        ("unsorted_segment_prod", useg_prod, prod_in, factor_where(_above(1.2)),
         "1.05 x where x > 1.2", _ERR),
        ("unsorted_segment_max", useg_max, distinct, shift(0, axis=0),
         "routed to the next row", _ERR),
        ("segment_min", seg_min, distinct, shift(0, axis=0),
         "routed to the next row", _ERR),
        ("sparse_segment_sum", sp_sum, x62, with_backward(sp_sum, sp_sum_overwrite),
         "duplicate indices overwrite instead of adding", _SEG_LINEAR),
        ("sparse_segment_mean", sp_mean, x62, factor_where(_neg), "1.05 x where x < 0", _ERR),
        ("sparse_segment_sqrt_n", sp_sqrt_n, x62, misroute(0, 4, 6), "rows 2 and 3 mixed up",
         _ERR),
    ]
    for name, fn, inputs, bug, kind, tol in ops:
        b.add("segment", name, src, inputs, fn, bug, kind, tolerances=tol)


def _cumulative(b, tf):
    src = "kernel_tests/math_ops/cumulative_logsumexp_test.py, scan_ops_test.py"
    grid = lambda r: [np.reshape(np.arange(10) / 10.0 - 0.5, (2, 5))]  # noqa: E731
    small = lambda r: [r.uniform(-1.0, 1.0, (2, 3, 4))]  # noqa: E731
    prod_in = lambda r: [r.uniform(0.5, 1.5, (3, 4))]  # noqa: E731

    def cs_ex_rev(x):
        return tf.cumsum(x, axis=1, exclusive=True, reverse=True)

    def cs_ex_rev_wrong(xs, y, up):  # the backward forgets `exclusive`
        return [tf.cumsum(up, axis=1)]

    def clse(x):
        return tf.math.cumulative_logsumexp(x, axis=1)

    def clse_rev_ex(x):  # exp() as TF's test: the exclusive end is log(0) = -inf
        return tf.exp(tf.math.cumulative_logsumexp(x, axis=1, reverse=True, exclusive=True))

    def cp_rev(x):
        return tf.math.cumprod(x, axis=1, reverse=True)

    def cp_ex(x):
        return tf.math.cumprod(x, axis=0, exclusive=True)

    ops = [
        ("cumsum_exclusive_reverse", cs_ex_rev, small,
         with_backward(cs_ex_rev, cs_ex_rev_wrong), "exclusive dropped in the backward"),
        ("cumulative_logsumexp", clse, grid, factor_where(_pos), "1.05 x where x > 0"),
        ("cumulative_logsumexp_rev_excl", clse_rev_ex, grid, misroute(0, 1, 2),
         "elements 1 and 2 swapped"),
        ("cumprod_reverse", cp_rev, prod_in, shift(0, axis=1), "routed to the next column"),
        ("cumprod_exclusive", cp_ex, prod_in, factor_where(_above(1.2)),
         "1.05 x where x > 1.2"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("cumulative", name, src, inputs, fn, bug, kind)


def _selection(b, tf):
    src = "kernel_tests/math_ops/topk_op_test.py, sort_ops_test.py, nth_element_op_test.py"
    topk_in = lambda r: [np.array([[2.0, -1, 1000, 3, 4], [1, 5, 2, 4, 3]])]  # noqa: E731
    distinct = lambda r: [r.permutation(20).reshape(4, 5) / 5.0]  # noqa: E731

    def top3(x):
        return tf.math.top_k(x, 3).values

    def sort_desc(x):
        return tf.sort(x, axis=1, direction="DESCENDING")

    def nth(x):
        return tf.nn.experimental.nth_element(x, 2) if hasattr(tf.nn, "experimental") and \
            hasattr(tf.nn.experimental, "nth_element") else tf.math.top_k(x, 3).values[:, 2]

    ops = [
        ("top_k", top3, topk_in, misroute(0, 3, 4), "gradient to the 4th instead of the 5th"),
        ("sort_descending", sort_desc, distinct, misroute(0, 0, 1), "elements 0 and 1 swapped"),
        ("kth_largest", nth, distinct, shift(0, axis=1), "routed to the next column"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("selection", name, src, inputs, fn, bug, kind)


def _scatter(b, tf):
    src = ("kernel_tests/array_ops/scatter_nd_ops_test.py, gather_op_test.py, "
           "ops/array_grad_test.py, image_ops_test (extract_patches)")
    idx = tf.constant([[1], [3], [1]])

    def scatter_nd(u):
        return tf.scatter_nd(idx, u, [4, 2])

    def ts_update(t, u):
        return tf.tensor_scatter_nd_update(t, [[0], [2]], u)

    def ts_update_leak(xs, y, up):  # the overwritten rows still pass gradient to the tensor
        return [up, tf.gather(up, [0, 2])]

    def ts_add(t, u):
        return tf.tensor_scatter_nd_add(t, [[0], [2], [0]], u)

    def gather_bd(x):
        return tf.gather(x, [[2, 0], [1, 1], [0, 3]], batch_dims=1)

    def gather_nd_bd(x):
        return tf.gather_nd(x, [[[1], [0]], [[2], [2]]], batch_dims=1)

    def patches(x):
        return tf.image.extract_patches(x, [1, 2, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], "VALID")

    def bcast(x):
        return tf.broadcast_to(x, [2, 3, 4])

    def bcast_wrong(xs, y, up):  # reduced over the wrong axis
        return [tf.reduce_sum(up[0], axis=1)[:, None]]

    def band(x):
        return tf.linalg.band_part(x, 1, 0)

    def band_wrong(xs, y, up):  # band (0, 1): upper instead of lower
        return [tf.linalg.band_part(up, 0, 1)]

    def roll(x):
        return tf.roll(x, 2, axis=1)

    def roll_wrong(xs, y, up):  # rolled the same way again instead of back
        return [tf.roll(up, 2, axis=1)]

    def s2d(x):
        return tf.nn.space_to_depth(x, 2)

    ops = [
        ("scatter_nd_duplicates", scatter_nd, lambda r: [r.standard_normal((3, 2))],
         shift(0, axis=0), "routed to the next update"),
        ("tensor_scatter_update", ts_update,
         lambda r: [r.standard_normal((4, 3)), r.standard_normal((2, 3))],
         with_backward(ts_update, ts_update_leak), "overwritten rows leak into d/dtensor"),
        ("tensor_scatter_add", ts_add,
         lambda r: [r.standard_normal((4, 3)), r.standard_normal((3, 3))], drop(1),
         "d/dupdates dropped"),
        ("gather_batch_dims", gather_bd, lambda r: [r.standard_normal((3, 4))],
         misroute(0, 0, 2), "elements 0 and 2 swapped"),
        ("gather_nd_batch_dims", gather_nd_bd, lambda r: [r.standard_normal((2, 3, 2))],
         shift(0, axis=1), "routed to the next row"),
        ("extract_patches", patches, lambda r: [r.uniform(0, 1, (1, 4, 4, 2))],
         factor_where(_above(0.5)), "1.05 x where x > 0.5"),
        ("broadcast_to", bcast, lambda r: [r.standard_normal((3, 1))],
         with_backward(bcast, bcast_wrong), "summed over the first broadcast copy only"),
        ("matrix_band_part", band, lambda r: [r.standard_normal((4, 4))],
         with_backward(band, band_wrong), "upper band instead of lower"),
        ("roll", roll, lambda r: [r.standard_normal((3, 5))], with_backward(roll, roll_wrong),
         "rolled forward again instead of back"),
        ("space_to_depth", s2d, lambda r: [r.standard_normal((1, 4, 4, 1))],
         misroute(0, 1, 4), "elements 1 and 4 swapped"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("scatter", name, src, inputs, fn, bug, kind)


def _linalg(b, tf):
    src = ("kernel_tests/linalg/qr_op_test.py, eig_op_test.py, self_adjoint_eig_op_test.py, "
           "svd_op_test.py, linalg_grad_test.py")

    def unif(shape):
        return lambda r: [r.uniform(-1.0, 1.0, shape)]

    def qr_r(a):
        return tf.linalg.qr(a)[1]

    def qr_q(a):
        return tf.linalg.qr(a)[0]

    def sym(a):
        return 0.5 * (a + tf.linalg.matrix_transpose(a))

    def eigvals(a):
        return tf.linalg.eigvalsh(sym(a))

    def eigvecs_sq(a):  # squared: the eigenvectors' sign ambiguity removed
        return tf.square(tf.linalg.eigh(sym(a))[1])

    def svals(a):
        return tf.linalg.svd(a, compute_uv=False)

    def svals_reversed(xs, y, up):  # upstream paired with the wrong singular vectors
        _, u, v = tf.linalg.svd(xs[0], full_matrices=False)
        return [tf.matmul(u * tf.reverse(up, [-1])[None, :], v, transpose_b=True)]

    def sqrtm(a):  # squared first so the square root exists (as TF's test)
        return tf.linalg.sqrtm(tf.matmul(a, a))

    def logdet(a):
        return tf.linalg.logdet(tf.matmul(a, a, transpose_b=True) + tf.eye(3, dtype=a.dtype))

    def lstsq(a, rhs):
        return tf.linalg.lstsq(a, rhs, fast=True)

    def pinv(a):
        return tf.linalg.pinv(a)

    def well_rect(r):
        a = r.uniform(-1, 1, (4, 3))
        a[:3] += 1.5 * np.eye(3)
        return a

    def spectral_norm(a):
        return tf.norm(a, ord=2, axis=[-2, -1])

    ops = [
        ("qr_r", qr_r, unif((4, 3)), factor_where(_neg, k=1.5), "1.5 x where A < 0", _QR),
        ("qr_q", qr_q, unif((3, 3)), misroute(0, 1, 3), "elements (0,1) and (1,0) swapped", _QR),
        ("eigvalsh", eigvals, unif((4, 4)), factor_where(_pos, k=1.5), "1.5 x where A > 0",
         _EIG),
        ("eigh_vectors_sq", eigvecs_sq, unif((3, 3)), misroute(0, 0, 4),
         "elements (0,0) and (1,1) swapped", _EIG),
        ("svd_values", svals, unif((3, 4)), with_backward(svals, svals_reversed),
         "upstream paired with the wrong singular vectors", _LINALG),
        ("sqrtm", sqrtm, unif((3, 3)), factor_where(_neg, k=1.5), "1.5 x where A < 0",
         _LINALG),
        ("logdet_gram", logdet, unif((3, 3)), flip(), "sign flipped", _LINALG),
        ("lstsq", lstsq, lambda r: [well_rect(r), r.standard_normal((4, 2))], drop(0),
         "d/dA dropped", _LINALG),
        ("pinv", pinv, lambda r: [well_rect(r)], misroute(0, 0, 1), "elements 0 and 1 swapped",
         _LINALG),
        ("spectral_norm", spectral_norm, lambda r: [well_rect(r)], factor_where(_pos, k=1.5),
         "1.5 x where A > 0", _LINALG),
    ]
    for name, fn, inputs, bug, kind, tol in ops:
        b.add("linalg2", name, src, inputs, fn, bug, kind, tolerances=tol)


def _spectral(b, tf):
    src = "kernel_tests/signal/fft_ops_test.py (_check_grad_real/_check_grad_complex)"

    def sq_loss(z):
        return tf.reduce_sum(tf.math.real(z * tf.math.conj(z)))

    def rfft(x):
        return sq_loss(tf.signal.rfft(x))

    def rfft2d(x):
        return sq_loss(tf.signal.rfft2d(x))

    def fft(re, im):
        return sq_loss(tf.signal.fft(tf.complex(re, im)))

    def irfft(re, im):
        return sq_loss(tf.signal.irfft(tf.complex(re, im)))

    def rfft_linear(x):  # a linear real wrapping: every output element has its own gradient
        z = tf.signal.rfft(x)
        return tf.concat([tf.math.real(z), tf.math.imag(z)], axis=-1)

    ops = [
        ("rfft", rfft, lambda r: [r.uniform(-1, 1, (2, 8))], misroute(0, 0, 1),
         "elements 0 and 1 swapped"),
        ("rfft2d", rfft2d, lambda r: [r.uniform(-1, 1, (4, 6))], factor_where(_pos, k=1.05),
         "1.05 x where x > 0"),
        ("fft_complex", fft, lambda r: [r.uniform(-1, 1, (2, 5)), r.uniform(-1, 1, (2, 5))],
         flip(1), "sign of d/d imag"),
        ("irfft", irfft, lambda r: [r.uniform(-1, 1, (2, 5)), r.uniform(-1, 1, (2, 5))],
         drop(1), "d/d imag dropped"),
        ("rfft_real_imag", rfft_linear, lambda r: [r.uniform(-1, 1, (2, 8))],
         shift(0, axis=1), "routed to the next sample"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("spectral", name, src, inputs, fn, bug, kind, tolerances=_FFT)


def _nn(b, tf):
    src = ("kernel_tests/nn_ops/lrn_op_test.py, fractional_max/avg_pool_op_test.py, "
           "ctc_loss_op_test.py, conv_ops_3d_test.py, atrous_conv2d_test.py, "
           "image_ops_test (crop_and_resize)")

    def distinct(shape):
        def make(r):
            total = int(np.prod(shape))
            return [r.permutation(np.arange(1, total + 1)).reshape(shape) / total]
        return make

    def lrn(x):
        return tf.nn.local_response_normalization(x, depth_radius=2, bias=1.3, alpha=0.6,
                                                  beta=0.7)

    def fmp(x):
        return tf.nn.fractional_max_pool(x, [1.0, 1.5, 1.5, 1.0], pseudo_random=True,
                                         overlapping=False, seed=7)[0]

    def fap(x):
        return tf.nn.fractional_avg_pool(x, [1.0, 1.5, 1.5, 1.0], pseudo_random=True,
                                         overlapping=True, seed=7)[0]

    def ctc(logits):
        return tf.nn.ctc_loss(tf.constant([[1, 2, 2], [3, 1, 0]]), logits,
                              tf.constant([3, 2]), tf.constant([6, 5]),
                              logits_time_major=True, blank_index=0)

    def crop(img):
        return tf.image.crop_and_resize(img, [[0.1, 0.15, 0.8, 0.9], [0.3, 0.05, 0.95, 0.7]],
                                        [0, 0], [3, 3])

    def atrous(x, w):
        return tf.nn.conv2d(x, w, 1, "SAME", dilations=2)

    def conv3d(x, w):
        return tf.nn.conv3d(x, w, [1, 1, 1, 1, 1], "SAME")

    def sep(x, dw, pw):
        return tf.nn.separable_conv2d(x, dw, pw, [1, 1, 1, 1], "SAME")

    def avg3d(x):
        return tf.nn.avg_pool3d(x, 2, 1, "VALID")

    def fused_bn(x, scale, offset):
        return tf.compat.v1.nn.fused_batch_norm(x, scale, offset, epsilon=1e-3,
                                                is_training=True)[0]

    ops = [
        ("lrn", lrn, lambda r: [r.uniform(0, 1, (1, 2, 2, 5))], factor_where(_above(0.5)),
         "1.05 x where x > 0.5", _LRN),
        ("fractional_max_pool", fmp, distinct((1, 6, 6, 1)), shift(0, axis=2),
         "routed to the next column", {"float32": _ERR["float32"], "float64": _ERR["float64"]}),
        ("fractional_avg_pool", fap, distinct((1, 6, 6, 1)), factor_where(_above(0.5)),
         "1.05 x where x > 0.5", _ERR),
        ("ctc_loss", ctc, lambda r: [r.standard_normal((6, 2, 4))], factor_where(_neg),
         "1.05 x where logits < 0", {"float32": _ERR["float32"]}),
        ("crop_and_resize", crop, lambda r: [r.uniform(0, 1, (1, 5, 5, 1))],
         misroute(0, 6, 7), "elements 6 and 7 swapped", _IMAGE),
        ("atrous_conv2d", atrous,
         lambda r: [r.uniform(-1, 1, (1, 5, 5, 2)), r.uniform(-1, 1, (2, 2, 2, 2))],
         misroute(1, 0, 3), "d/dw elements 0 and 3 swapped", {"float32": _ERR["float32"]}),
        ("conv3d", conv3d,
         lambda r: [r.uniform(-1, 1, (1, 3, 3, 3, 2)), r.uniform(-1, 1, (2, 2, 2, 2, 2))],
         factor_where(_neg, which=1), "1.05 x d/dw where w < 0", _ERR),
        ("separable_conv2d", sep,
         lambda r: [r.uniform(-1, 1, (1, 4, 4, 2)), r.uniform(-1, 1, (2, 2, 2, 2)),
                    r.uniform(-1, 1, (1, 1, 4, 3))],
         flip(2), "sign of d/d pointwise filter", _ERR),
        ("avg_pool3d", avg3d, distinct((1, 3, 3, 3, 1)), misroute(0, 0, 13),
         "elements 0 and 13 swapped", {"float32": _ERR["float32"]}),
        ("fused_batch_norm", fused_bn,
         lambda r: [r.standard_normal((2, 2, 2, 3)), r.uniform(0.5, 1.5, 3),
                    r.standard_normal(3)],
         factor_where(_pos, which=0), "1.05 x d/dx where x > 0", {"float32": _ERR["float32"]}),
    ]
    for name, fn, inputs, bug, kind, tol in ops:
        b.add("nn2", name, src, inputs, fn, bug, kind, tolerances=tol)


def _special(b, tf):
    src = ("kernel_tests/nn_ops/betainc_op_test.py, math_ops/cwise_ops_unary_test.py "
           "(igamma, digamma, erfinv, bessel), ops/math_grad_test.py, keras losses")

    def betainc_x(x):
        return tf.math.betainc(tf.constant([[0.5, 2.0, 3.0]] * 2, x.dtype),
                               tf.constant([[1.5, 0.8, 2.5]] * 2, x.dtype), x)

    def igamma(a, x):
        return tf.math.igamma(a, x)

    def huber(pred):
        y = tf.constant([[0.0, 1.0, -1.0, 2.0], [0.5, -0.5, 3.0, -2.0]], pred.dtype)
        err = pred - y
        quad = tf.minimum(tf.abs(err), 1.0)
        return 0.5 * quad ** 2 + (tf.abs(err) - quad)

    def log_cosh(pred):
        return tf.math.log(tf.cosh(pred - 0.3))

    def polyval(c0, c1, c2, x):
        return tf.math.polyval([c0, c1, c2], x)

    def variance(x):
        return tf.math.reduce_variance(x, axis=1)

    def std(x):
        return tf.math.reduce_std(x, axis=0)

    def gelu(x):
        return tf.nn.gelu(x, approximate=False)

    def clip_norm(x):
        return tf.clip_by_norm(x, 1.0, axes=[1])

    ops = [
        ("betainc_x", betainc_x, lambda r: [r.uniform(0.1, 0.9, (2, 3))],
         factor_where(_above(0.5)), "1.05 x where x > 0.5"),
        ("igamma", igamma, lambda r: [r.uniform(0.5, 3.0, (2, 3)), r.uniform(0.5, 3.0, (2, 3))],
         factor_where(_above(1.5), which=0), "1.05 x d/da where a > 1.5"),
        ("digamma", tf.math.digamma, lambda r: [np.array([[0.3, 0.8, 1.5], [2.5, 4.0, 6.0]])],
         factor_where(_above(2.0)), "1.05 x where x > 2"),
        ("erfinv", tf.math.erfinv, lambda r: [np.arange(-0.8, 0.81, 0.2).reshape(3, 3)],
         factor_where(_neg), "1.05 x where x < 0"),
        ("bessel_i1e", tf.math.bessel_i1e, lambda r: [np.arange(-3, 3).reshape(2, 3) + 0.5],
         misroute(0, 0, 5), "elements 0 and 5 swapped"),
        ("huber", huber, lambda r: [np.array([[0.3, 2.5, -0.6, 0.2], [1.9, -1.2, 2.6, -2.4]])],
         factor_where(_above(2.0)), "1.05 x where pred > 2 (linear part)"),
        ("log_cosh", log_cosh, lambda r: [r.uniform(-3, 3, (3, 4))], factor_where(_neg),
         "1.05 x where x < 0"),
        ("polyval", polyval,
         lambda r: [r.standard_normal(3), r.standard_normal(3), r.standard_normal(3),
                    r.uniform(-2, 2, 3)],
         with_backward(polyval, lambda xs, y, up: true_vjp(polyval, xs, up)[:3] + [
             up * (2 * xs[0] * xs[3])]), "d/dx misses the c1 term"),
        ("reduce_variance", variance, lambda r: [r.standard_normal((3, 5))],
         with_backward(variance, lambda xs, y, up: [
             2 * up[:, None] * (xs[0] - tf.reduce_mean(xs[0], 1, keepdims=True)) / 4.0]),
         "divides by n - 1 (ddof 1 backward)"),
        ("reduce_std", std, lambda r: [r.standard_normal((4, 3))], misroute(0, 0, 3),
         "elements (0,0) and (1,0) swapped"),
        ("gelu", gelu, lambda r: [np.arange(-3, 3).reshape(2, 3) + 0.5], factor_where(_neg),
         "1.05 x where x < 0"),
        ("clip_by_norm", clip_norm, lambda r: [np.array([[0.3, -0.2, 0.4], [1.5, 2.0, -1.0]])],
         with_backward(clip_norm, lambda xs, y, up: [up / tf.maximum(
             tf.norm(xs[0], axis=1, keepdims=True), 1.0)]),
         "scale's own gradient dropped (treated as constant)"),
    ]
    cwise = {"betainc_x", "igamma", "digamma", "erfinv", "bessel_i1e"}
    for name, fn, inputs, bug, kind in ops:
        b.add("special", name, src, inputs, fn, bug, kind,
              tolerances=_CWISE if name in cwise else _ERR)


def _losses(b, tf):
    src = "kernel_tests/nn_ops/xent_op_test.py, ops/nn_grad_test.py, einsum_op_test.py"

    def sparse_xent_3d(x):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.constant([[3, 0], [1, 2]]), x)

    def sparse_xent_saturated(x):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(tf.constant([0, 2]), x)

    def keras_sparse(x):
        return tf.keras.losses.sparse_categorical_crossentropy(
            tf.constant([1, 3]), x, from_logits=True)

    def ein_inner(a, c):
        return tf.einsum("ij,ij->", a, c)

    def ein_diag(a):
        return tf.einsum("ii->i", a)

    def ein_outer_batch(a, c):
        return tf.einsum("bij,bkj->bik", a, c)

    def ein_diag_wrong(xs, y, up):  # spreads up over the rows instead of the diagonal
        return [tf.tile(up[:, None], [1, 3])]

    ops = [
        ("sparse_xent_3d", sparse_xent_3d, lambda r: [r.standard_normal((2, 2, 4))],
         misroute(0, 0, 4), "routed to the other batch row"),
        ("sparse_xent_saturated", sparse_xent_saturated,
         lambda r: [np.array([[12.0, 0.5, -3.0, 1.0], [-4.0, 2.0, 10.0, 0.0]])],
         factor_where(_above(5.0)), "1.05 x where logit > 5"),
        ("keras_sparse_cce", keras_sparse, lambda r: [r.standard_normal((2, 4))],
         shift(0, axis=1), "routed to the next class"),
        ("einsum_inner", ein_inner, lambda r: [r.standard_normal((3, 4)),
                                               r.standard_normal((3, 4))],
         misroute(1, 0, 11), "d/dc elements 0 and 11 swapped"),
        ("einsum_diag", ein_diag, lambda r: [r.standard_normal((3, 3))],
         with_backward(ein_diag, ein_diag_wrong), "spread over rows, not the diagonal"),
        ("einsum_bij_bkj", ein_outer_batch,
         lambda r: [r.standard_normal((2, 2, 3)), r.standard_normal((2, 4, 3))],
         factor_where(_neg, which=0), "1.05 x d/da where a < 0"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("loss", name, src, inputs, fn, bug, kind)


def _edges(b, tf):
    """Points TensorFlow's tests keep away from: norms near zero, xlogy near x = 0."""
    src = "ops/math_grad_test.py, linalg_ops_test (norm), cwise_ops_binary_test (xlogy)"

    def norm_small(x):
        return tf.norm(x, axis=1)

    def l1(x):
        return tf.norm(x, ord=1, axis=1)

    def linf(x):
        return tf.norm(x, ord=np.inf, axis=1)

    def l2n_small(x):
        return tf.math.l2_normalize(x, axis=1)

    def xlogy_x(x):
        return tf.math.xlogy(x, tf.constant([[2.0, 3.0, 0.5]], x.dtype))

    ops = [
        ("norm_near_zero", norm_small,
         lambda r: [np.array([[3e-3, -4e-3, 1e-3], [0.5, -0.2, 0.1]])], factor_where(_neg),
         "1.05 x where x < 0"),
        ("norm_l1", l1, lambda r: [np.array([[0.3, -1.2, 2.0], [1.5, -0.4, 0.9]])],
         factor_where(_neg), "1.05 x where x < 0"),
        ("norm_inf", linf, lambda r: [np.array([[0.3, -1.2, 2.0], [1.5, -0.4, 0.9]])],
         misroute(0, 2, 3), "elements 2 and 3 swapped"),
        ("l2_normalize_small", l2n_small,
         lambda r: [np.array([[2e-3, -1e-3, 3e-3], [0.5, -0.2, 0.1]])], misroute(0, 0, 1),
         "elements 0 and 1 swapped"),
        ("abs_with_zero", tf.abs, lambda r: [np.array([[0.0, 1.5, -0.7], [2.2, -1.3, 0.4]])],
         factor_where(_above(1.0)), "1.05 x where x > 1 (one element at the kink x = 0)"),
        ("relu_with_zero", tf.nn.relu, lambda r: [np.array([[0.0, 1.5, -0.7], [2.2, -1.3, 0.4]])],
         factor_where(_above(1.0)), "1.05 x where x > 1 (one element at the kink x = 0)"),
        # xlogy at x = 0 is no correct op: its gradient there is TensorFlow's 0, while
        # x·log(y) is smooth with slope log(y) (test_kinks_at_the_point.py fails it).
        ("xlogy_near_x0", xlogy_x, lambda r: [np.array([[1e-3, 1.5, 0.7]])],
         factor_where(_above(1.0)), "1.05 x where x > 1"),
    ]
    for name, fn, inputs, bug, kind in ops:
        b.add("edge", name, src, inputs, fn, bug, kind)


def cases() -> list[OpCase]:
    import tensorflow as tf

    b = _Builder(first_seed=1000, tolerances=_ERR)
    for family in (_segments, _cumulative, _selection, _scatter, _linalg, _spectral, _nn,
                   _special, _losses, _edges):
        family(b, tf)
    return b.cases
