"""One entry per checked input, and the judgements both methods share.

``_new_entry`` picks an entry's step and tolerances from its dtype and scale; ``_shape_error``
and ``_linearity`` fail it for a mis-shaped gradient or a backward pass that is not linear in its
upstream gradient; ``_errors`` turns analytical and numerical values into absolute error,
relative error and error/tolerance; ``_noisy`` says when finite-difference noise limits a verdict.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradexp.gradcheck.checked_function import _Target
from gradexp.gradcheck.options import _EPS, _coarsest, _defaults, _Options
from gradexp.gradcheck.report import GradCheckEntry


def _noisy(entry: GradCheckEntry) -> bool:
    """Is the measured finite-difference error what limits this entry's verdict?"""
    return entry.noise > max(10 * entry.rtol, 0.01)


def _new_entry(target: _Target, i: int, opts: _Options) -> GradCheckEntry:
    x = target.values[i]
    entry = GradCheckEntry(name=target.names[i], shape=tuple(int(d) for d in x.shape),
                           dtype=target.dtypes[i], passed=True)
    if target.skip[i] is not None:
        entry.checked = False
        entry.notes.append(target.skip[i])
        return entry
    entry.precision = _coarsest([target.dtypes[i], target.out_dtype])
    x = x.reshape(-1)
    scale = float(np.sqrt(np.einsum("i,i->", x, x, dtype=np.float64) / max(x.size, 1)))
    entry.delta, entry.atol, entry.rtol = _defaults(entry.precision, opts, scale)
    return entry


def _linearity(entry: GradCheckEntry, g: np.ndarray, g_half: np.ndarray) -> None:
    """VJP(-v/2) must be -VJP(v)/2; a backward that ignores or rectifies its upstream fails."""
    gap = g * 0.5  # one scratch array: inputs can have a million elements
    gap += g_half
    np.abs(gap, out=gap)
    gap = float(np.max(gap, initial=0.0))
    ref = max(0.5 * _max_abs(g), _max_abs(g_half))
    entry.linearity_error = gap / ref if ref > 0 else 0.0
    if not entry.linearity_error <= _linearity_limit(entry):
        entry.passed = False
        entry.notes.append(
            f"the backward pass is not linear in its upstream gradient: VJP(-v/2) differs from "
            f"-VJP(v)/2 by {entry.linearity_error:.2e} (relative); it ignores, rectifies or "
            "mis-scales the incoming gradient."
        )


def _max_abs(values: np.ndarray) -> float:
    """max |values| without an |values| array (NaN if any is NaN, 0 if empty)."""
    if values.size == 0:
        return 0.0
    return max(float(np.max(values)), -float(np.min(values)))


def _linearity_limit(entry: GradCheckEntry) -> float:
    # Scaling the cotangent by -1/2 is exact in floating point, so a linear backward matches to
    # rounding; the failures this is for are O(1).
    return max(1e3 * _EPS[entry.precision], 1e-2 * entry.rtol)


def _shape_error(target: _Target, i: int, entry: GradCheckEntry) -> bool:
    if i not in target.grad_shape_errors:
        return False
    entry.passed = False
    entry.max_abs_error = entry.max_rel_error = entry.error_to_tolerance = float("inf")
    entry.notes.append(target.grad_shape_errors[i])
    return True


def _errors(analytical: Any, numerical: Any, noise: Any, entry: GradCheckEntry,
            scale: Any = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Absolute error, relative error and error/tolerance ratio, elementwise.

    Tolerance: atol + rtol·max(|numerical|, scale) + 2·noise (noise = estimated
    finite-difference error; scale = a magnitude below which an element is judged absolutely).
    A NaN anywhere gives ratio inf, i.e. a failure.
    """
    a, n = np.asarray(analytical, np.float64), np.asarray(numerical, np.float64)
    diff = np.abs(a - n)
    floor = entry.atol / entry.rtol if entry.rtol > 0 else 0.0
    rel = diff / np.maximum(np.maximum(np.abs(n), floor), np.finfo(np.float64).tiny)
    tol = entry.atol + entry.rtol * np.maximum(np.abs(n), scale) + 2.0 * noise
    ratio = np.where(np.isnan(diff), np.inf, diff / np.maximum(tol, np.finfo(np.float64).tiny))
    diff = np.where(np.isnan(diff), np.inf, diff)
    rel = np.where(np.isnan(rel), np.inf, rel)
    return np.atleast_1d(diff), np.atleast_1d(rel), np.atleast_1d(ratio)


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(k) for k in np.unravel_index(int(flat), shape)) if shape else ()
