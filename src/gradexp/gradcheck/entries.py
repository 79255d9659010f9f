"""One entry per checked input, and the judgements both methods share.

``_new_entry`` picks an entry's step and tolerances from its dtype and scale; ``_shape_error``
and ``_linearity`` fail it for a mis-shaped gradient or a backward pass that is not linear in its
upstream gradient; ``_errors`` turns analytical and numerical values into absolute error,
relative error and error/tolerance; ``_noisy`` says when finite-difference noise limits a verdict;
``_along_the_step``, ``_wrong_at_the_point`` and ``_repeat_gap`` judge a step across kinks (both
methods, see there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradexp.gradcheck.checked_function import _Target
from gradexp.gradcheck.options import _EPS, _coarsest, _defaults, _Options
from gradexp.gradcheck.report import GradCheckEntry

_ALONG_THE_STEP = 24  # midpoints of a failing step where the analytical gradient is averaged
# How far either side of x, as a fraction of its step, its one-sided gradients are read
# (_wrong_at_the_point): near enough that kinks near x but not at it are rarely between.
_BESIDE_THE_POINT = 1e-3


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
    entry.precision = _coarsest([target.dtypes[i], target.out_precision or target.out_dtype])
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


def _along_the_step(target: _Target, i: int, low: np.ndarray, step: np.ndarray,
                    cotangent: np.ndarray) -> tuple[float, float] | None:
    """What a central difference measures exactly, kinks or not, from the analytical side.

    For f continuous and differentiable but at finitely many points of the segment from
    ``low`` to ``low + step`` (flat float64 arrays, the ends as realised in input i's dtype),
    f(low + step) - f(low) is the integral of g·step along it (the fundamental theorem of
    calculus), g the VJP of input i with ``cotangent``: the mean of g·step over
    _ALONG_THE_STEP midpoints of the segment, and the gap to the midpoint rule of a third as
    many panels (every third point from the second), which bounds the rule's own error (O(h²)
    where smooth, the jumps' share at kinks). A split into two interleaved halves would not do:
    their gap is first order in h even where f is smooth, and hid a 3e-5 error in a joint
    check. None if a value is not finite. Costs _ALONG_THE_STEP backward passes (in calls of
    two: one call each for a light-traced compiled f).

    A wrong backward is wrong along the step too, so the mean is as wrong as the gradient at x;
    only the value a backward picks *at* a kink goes unjudged, which no finite difference can
    judge. It needs a backward that gives one gradient a point (_repeat_gap)."""
    x = target.values[i]
    fractions = (np.arange(_ALONG_THE_STEP) + 0.5) / _ALONG_THE_STEP
    points = [(low + f * step).astype(x.dtype).reshape(x.shape) for f in fractions]
    along = np.array([float(g @ step) for pair in range(0, len(points), 2)
                      for g in target.vjps_at(i, points[pair:pair + 2], cotangent)])
    if not np.all(np.isfinite(along)):
        return None
    mean = float(np.mean(along))
    return mean, abs(mean - float(np.mean(along[1::3])))


def _wrong_at_the_point(target: _Target, i: int, step: np.ndarray, cotangent: np.ndarray,
                        along: float) -> bool:
    """Is the backward wrong at the point itself, where _along_the_step cannot see it?

    The mean along the step may judge a step whose gradient jumps at x (a kink at the point:
    relu of an exact 0, a max over ties), since no finite difference can judge the value a
    backward picks there. Where the gradient does not jump, its values just either side of x
    (x ± step·_BESIDE_THE_POINT) agree, and the gradient at x must be theirs: one off their
    mean by more than half of what the mean along the step must explain (`along`, against the
    gradient at x, both ·step), while the two sides differ by under a tenth of that, is wrong
    at the point itself. A backward that masks a weight's gradient to 0 where the weight is
    exactly 0 (a zero-initialised bias) does that, and so does TensorFlow's xlogy at x = 0,
    on functions smooth there. Such a column or probe is left as it failed. Three backward
    passes; False when x ± that offset rounds to x.

    The sides must agree as gradients, element by element (the sum of |difference|·|step|
    over the input's elements), not only in g·step: a probe across many ties (a max pool over
    relu zeros) jumps at thousands of elements, one window's jump up, another's down with
    the cotangent's signs, and their sum along the step can all but cancel (QA, 2026-12-05:
    a correct MaxPooling1D, the sides' g·step 1.35e-10 apart, the gradient at x 1.48e-9 off
    their mean, the elements' jumps 1.1e-7 in all: called wrong at the point). Nor element by
    element alone: three tied values or more have elements that are neither side's maximum,
    0 on both sides and not at x (reduce_max shares a tie's gradient). (The sides' range
    would not do either: a step crossing several kinks at x has a gradient at x outside it.)
    So a probe whose step also crosses a kink at x is not judged at the point."""
    x = target.values[i]
    flat = x.astype(np.float64, copy=False).reshape(-1)
    sides = [(flat + sign * _BESIDE_THE_POINT * step).astype(x.dtype).reshape(x.shape)
             for sign in (1, -1)]
    if any(np.array_equal(side, x) for side in sides):
        return False
    at_x = float(target.vjp_at(i, x, cotangent) @ step)
    g_plus, g_minus = target.vjps_at(i, sides, cotangent)
    plus, minus = float(g_plus @ step), float(g_minus @ step)
    jump = float(np.abs(g_plus - g_minus) @ np.abs(step))
    off = abs(at_x - (plus + minus) / 2)
    return bool(off > 0.5 * abs(at_x - along) and jump < 0.1 * off)


def _off_where_continuous(at_x: Any, plus: Any, minus: Any, slack: Any) -> bool:
    """A gradient at x off the mean of its two sides by more than `slack` where the sides agree
    (differ by under a tenth of that): no kink, a gradient wrong at the point (elementwise for
    arrays: any element)."""
    off = np.abs(np.asarray(at_x) - (np.asarray(plus) + np.asarray(minus)) / 2)
    return bool(np.any((off > slack) & (np.abs(np.asarray(plus) - np.asarray(minus)) < 0.1 * off)))


def _repeat_gap(target: _Target, i: int, cotangent: np.ndarray) -> np.ndarray:
    """The difference of two VJPs of input i at its own value (two backward passes).

    A random backward (noise or a mask drawn again in it) is no gradient of f, yet averages to
    about the right one along a step: where two calls at x differ by a tenth of the
    disagreement to be explained, _along_the_step must not judge it."""
    x = target.values[i]
    first, second = target.vjps_at(i, [x, x], cotangent)
    # The same NaN or inf twice is no randomness (NaN - NaN and inf - inf are NaN): a gradient
    # that is not finite was called a random backward.
    same = (first == second) | (np.isnan(first) & np.isnan(second))
    return np.where(same, 0.0, first - second)


def _along_notes(entry: GradCheckEntry, what: str, judged: int, unrepeatable: int,
                 agree: bool, at_the_point: int = 0) -> None:
    """The notes of a judgment along the step: ``judged`` probes or columns (``what``) judged
    so, ``unrepeatable`` left failing for a backward that gave two gradients at one point,
    ``at_the_point`` for one wrong at the point itself (_wrong_at_the_point)."""
    if at_the_point:
        entry.notes.append(
            f"{at_the_point} {what}: the analytical gradient does not jump at the point (its "
            f"values just either side, x ± {_BESIDE_THE_POINT:g} of the step, agree), yet at the "
            "point it is off them: no kink, the backward is wrong at the point itself (e.g. a "
            "gradient set to 0 where a weight is exactly 0), so it is not judged along the step")
    if unrepeatable:
        entry.notes.append(
            f"{unrepeatable} {what}: the backward pass gave two different gradients at the "
            "same point, so the gradient is not judged along the step (a random backward, "
            "e.g. a mask drawn again in it, is no gradient of f)")
    if judged:
        entry.notes.append(
            f"{judged} {what} still disagreed at their smallest step: judged against the mean "
            f"of the analytical gradient along the step ({_ALONG_THE_STEP} points), which the "
            "central difference measures exactly, kinks or not (relu at 0, a max over ties: "
            "there the gradient at the point is not the slope across the step)"
            + (": they agree." if agree else ": they still disagree."))
