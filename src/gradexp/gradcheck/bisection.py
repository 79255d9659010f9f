"""Localisation for the probe method: which element of a failing input is wrong.

Bisection on the failing probe down to a few elements (O(log n) evaluations), central
differences on each of those, and the exact Jacobian column of the worst one, so the report
names the (output, input) element as the jacobian method would.
"""

from __future__ import annotations

import math

import numpy as np

from gradexp.gradcheck.checked_function import _Target
from gradexp.gradcheck.entries import _errors, _index, _linearity_limit
from gradexp.gradcheck.options import _EPS, _rounding
from gradexp.gradcheck.report import GradCheckEntry

# Bisection stops at this many elements; they are then checked one by one (4 evaluations each).
_NARROW_BLOCK = 4


def _narrow(entry: GradCheckEntry, target: _Target, i: int, u: np.ndarray, v: np.ndarray,
            g: np.ndarray, h: float, noise_abs: float,
            span: tuple[int, int] | None = None) -> None:
    """Point at the wrong element of a failing input, at a cost of O(log n) evaluations.

    Bisection on the failing probe (direction u, cotangent v, analytical VJP g, step h) down to
    _NARROW_BLOCK elements; those are checked one by one with central differences of vᵀf, and
    for the worst one the exact Jacobian column (numerical: the two evaluations just made;
    analytical: derivative of the VJP in v) names the output element too. ``span`` (start,
    end): bisect only those flat elements of the input (u is zero elsewhere), as
    breakdown.py does for one variable's part of a joint vector.
    """
    x = target.values[i]
    lo, hi = _bisect(entry, target, i, u, v, g, h, noise_abs, span)
    r, j, num, col, col_noise = _worst_in_block(entry, target, i, v, g, h, lo, hi)
    analytical_col = None
    if entry.linearity_error <= _linearity_limit(entry) and v.size == 1 and v.flat[0] != 0:
        # A scalar output's column is one number, g[j] / v for a backward linear in v (just
        # checked): the same value as differentiating the VJP in v, without tracing a compiled
        # f's backward again for second order (~0.7 s of a failing check of a 100k-parameter
        # residual MLP, a third of its diagnosis).
        analytical_col = np.array([float(g[j]) / float(v.flat[0])])
    elif entry.linearity_error <= _linearity_limit(entry):
        analytical_col = target.column(i, j, v.reshape(target.out0.shape))
    if analytical_col is not None and analytical_col.size == col.size:
        _, _, col_ratio = _errors(analytical_col, col, col_noise, entry)
        o = int(np.argmax(col_ratio))
        entry.worst_output_index = _index(o, target.out0.shape)
        entry.worst_analytical = float(analytical_col[o])
        entry.worst_numerical = float(col[o])
        entry.worst_kind = "jacobian element (located by bisection)"
    else:
        entry.worst_analytical = float(g[j])
        entry.worst_numerical = num
        entry.worst_kind = "cotangent-weighted gradient (v^T J) with random v (bisection)"
    entry.worst_input_index = _index(j, x.shape)
    if not r > 1:
        entry.notes.append("bisection did not isolate one clearly wrong element: the error may be "
                           "spread thinly over many elements; the element shown is the largest "
                           "found.")


def _bisect(entry: GradCheckEntry, target: _Target, i: int, u: np.ndarray, v: np.ndarray,
            g: np.ndarray, h: float, noise_abs: float,
            span: tuple[int, int] | None = None) -> tuple[int, int]:
    """Keep the half of [lo, hi) whose directional error is larger relative to its tolerance.

    Only the left half is evaluated (2 evaluations a level): central differences are additive
    over disjoint parts of the direction up to O(h³), so the right half is parent - left.
    """
    x = target.values[i]
    x64 = x.astype(np.float64).reshape(-1)
    work = x.reshape(-1).copy()
    v_norm = float(np.linalg.norm(v)) or 1.0

    def measure(a: int, b: int) -> tuple[float, float, float]:
        """(analytical, numerical, ‖u[a:b]‖²) of vᵀJ·(realised step on [a, b))."""
        seg = u[a:b]
        plus = (x64[a:b] + h * seg).astype(x.dtype)
        minus = (x64[a:b] - h * seg).astype(x.dtype)
        work[a:b] = plus
        fp = target.evaluate(i, work.reshape(x.shape))
        work[a:b] = minus
        fm = target.evaluate(i, work.reshape(x.shape))
        work[a:b] = x.reshape(-1)[a:b]
        an = float(g[a:b] @ (plus.astype(np.float64) - minus.astype(np.float64)))
        return an, float(v @ (fp - fm)), float(seg @ seg)

    def ratio(an: float, nu: float, norm2: float) -> float:
        tol = (entry.atol * 2 * h * math.sqrt(max(norm2, 0.0)) * v_norm
               + entry.rtol * max(abs(an), abs(nu)) + 2 * noise_abs)
        return abs(an - nu) / tol if tol > 0 else float("inf")

    lo, hi = span or (0, x64.size)
    parent = measure(lo, hi) if hi - lo > _NARROW_BLOCK else (0.0, 0.0, 0.0)
    while hi - lo > _NARROW_BLOCK:
        mid = (lo + hi) // 2
        left = measure(lo, mid)
        right = (parent[0] - left[0], parent[1] - left[1], parent[2] - left[2])
        if ratio(*left) >= ratio(*right):
            hi, parent = mid, left
        else:
            lo, parent = mid, right
    return lo, hi


def _worst_in_block(entry: GradCheckEntry, target: _Target, i: int, v: np.ndarray,
                    g: np.ndarray, h: float, lo: int, hi: int
                    ) -> tuple[float, int, float, np.ndarray, float]:
    """Central differences (steps h and 2h) of each element in [lo, hi); the worst one.

    Returns (error/tolerance, flat index, numerical (vᵀJ)[j], numerical column J[:, j], its
    estimated finite-difference error).
    """
    x = target.values[i]
    work = x.reshape(-1).copy()
    eps = _EPS[entry.precision]
    v_norm = float(np.linalg.norm(v)) or 1.0
    best: tuple[float, int, float, np.ndarray, float] | None = None
    for j in range(lo, hi):
        cols = []
        for step in (h, 2 * h):
            fp, fm, realised = target.central_pair(i, j, step, work)
            rounding = (_rounding(fp, eps) + _rounding(fm, eps)) / realised
            cols.append(((fp - fm) / realised, rounding))
        (col, rounding), (col2, _) = cols
        num = float(v @ col)
        noise = max(abs(num - float(v @ col2)), float(np.abs(v) @ rounding))
        tol = entry.atol * v_norm + entry.rtol * abs(num) + 2 * noise
        r = abs(float(g[j]) - num) / tol if tol > 0 else float("inf")
        r = float("inf") if math.isnan(r) else r
        if best is None or r > best[0]:
            col_noise = np.maximum(np.abs(col - col2), rounding)
            best = (r, j, num, col, col_noise)
    assert best is not None  # the block is never empty
    return best
