"""The jacobian method: the full numerical Jacobian of each input against the analytical one.

Every (output, input) element is compared, then the VJP with a random cotangent c against
cᵀ·J_numerical, which catches a backward that mishandles its upstream gradient. Exact, and it
names the wrong element, but it costs 2·n function evaluations for an input of n elements.
Each element has its own step; a column that disagrees is measured again at smaller steps
(a kink or strong curvature inside the step, e.g. relu at 0, is not a wrong gradient), and one
that still disagrees is judged by the analytical column along its step (_at_kinks).
"""

from __future__ import annotations

import numpy as np

from gradexp.gradcheck.checked_function import _Target
from gradexp.gradcheck.entries import (
    _along_notes,
    _along_the_step,
    _errors,
    _index,
    _linearity,
    _new_entry,
    _off_where_continuous,
    _repeat_gap,
    _shape_error,
    _wrong_at_the_point,
)
from gradexp.gradcheck.options import _EPS, _cotangent, _element_steps, _Options, _rounding
from gradexp.gradcheck.report import GradCheckEntry

# A disagreeing column is measured again at up to this many smaller steps (as probe.py's kinks).
_RETRIES = 3
# More disagreeing columns than this: a wrong backward, not kinks (and not worth 6 evaluations
# a column).
_MAX_RETRIED_COLUMNS = 256
# A column still failing is judged by its analytical column along the step (_at_kinks): a
# scalar output's at entries._ALONG_THE_STEP points (a VJP each), others' at the step's two
# ends (a VJP per output each), so only for outputs up to this size.
_KINK_OUTPUTS = 64


def _jacobian_entries(target: _Target, opts: _Options, rng: np.random.Generator,
                      only: list[int] | None = None) -> list[GradCheckEntry]:
    """An entry per input (per input of `only`, if given), judged column by column."""
    c = _cotangent(rng, target.out0.shape, target.out_numpy_dtype)
    g, g_half = target.vjps([c, -0.5 * c])
    entries = []
    for i in range(len(target.values)) if only is None else only:
        entry = _new_entry(target, i, opts)
        entries.append(entry)
        if not entry.checked or target.out0.size == 0 or _shape_error(target, i, entry):
            continue
        _linearity(entry, g[i], g_half[i])
        steps = _element_steps(target.values[i], entry.precision, opts)
        entry.delta = float(np.max(steps, initial=0.0))
        analytical, numerical = target.jacobians(i, steps)
        _retry_smaller(entry, target, i, analytical, numerical, steps)
        entry.analytical, entry.numerical = analytical, numerical
        judged, judged_g, spread = _at_kinks(entry, target, i, analytical, numerical, steps,
                                             c.reshape(-1), g[i])
        _compare_jacobian(entry, target, i, judged, numerical, steps, c.reshape(-1), judged_g,
                          spread)
    return entries


def _judge_columns(entry: GradCheckEntry, target: _Target, analytical: np.ndarray,
                   numerical: np.ndarray, steps: np.ndarray, spread: np.ndarray | float = 0.0
                   ) -> tuple:
    """(abs, rel, ratio) of every Jacobian element: the tolerance of _errors with the rounding
    noise of each output turned into a derivative error by each column's step, and (float64)
    an absolute term: rtol x the RMS of the element's output row, so an element where the
    Jacobian is ~0 next to O(1) ones (or where the second derivative jumps, x = 0) is not
    judged on a relative error of a tiny number. ``spread``: per column, the error bound of a
    column judged along its step (_at_kinks), added to the tolerance."""
    rounding = _rounding(target.out0.reshape(-1), _EPS[entry.precision])
    noise = rounding[:, None] / steps[None, :] + np.asarray(spread) / 2
    scale = 0.0
    if entry.precision == "float64" and numerical.size:
        scale = np.sqrt(np.mean(numerical**2, axis=1, keepdims=True))
    return _errors(analytical, numerical, noise, entry, scale)


def _retry_smaller(entry: GradCheckEntry, target: _Target, i: int, analytical: np.ndarray,
                   numerical: np.ndarray, steps: np.ndarray) -> None:
    """Measure each disagreeing column again at smaller steps; keep the one that agrees.

    A column is taken at a smaller step only if it agrees there (within that step's own,
    larger rounding tolerance) and its error shrank to at most half, by more than the rounding
    noise of both measurements could make it shrink (options._rounding, itself twice the
    rounding measured): the error of a wrong gradient does not depend on the step, that of a
    kink or curvature within it does, and a shrink within the rounding is no evidence. Without
    that guard a float32 loss of ~40, whose derivative at a step of 1e-5 carries a noise of
    ~0.1, passed with one element of its gradient 10% off at 1 seed in 10 (3% off: 2 in 10;
    benchmarks/bench_jacobian_one_element.py). The probe method guards its smaller steps
    alike (probe.py). Updates numerical and steps.
    """
    _, _, ratio = _judge_columns(entry, target, analytical, numerical, steps)
    failing = np.flatnonzero(np.any(~(ratio <= 1), axis=0))
    if failing.size == 0 or failing.size > _MAX_RETRIED_COLUMNS:
        return  # many columns off: a wrong backward, not kinks
    shrink = 1 / 64 if _EPS[entry.precision] < 1e-10 else 1 / 8
    rounding = float(np.max(_rounding(target.out0.reshape(-1), _EPS[entry.precision]),
                            initial=0.0))
    smooth = 0
    for j in failing:
        # A column that is not a number (a step out of the function's domain: log of x - h
        # < 0 for x within a step of 0) is measured again too, until a smaller step is inside.
        error = float(np.max(np.abs(analytical[:, j] - numerical[:, j])))
        error = error if np.isfinite(error) else np.inf
        step = float(steps[j])
        for _ in range(_RETRIES):
            step *= shrink
            # A shrink to half the error must exceed what the rounding of the two measurements
            # could move it by; smaller steps only add rounding, so none would tell.
            if not 0.5 * error > rounding / float(steps[j]) + rounding / step:
                break
            col = target.numerical_column(i, j, step)
            _, _, r = _judge_columns(entry, target, analytical[:, j:j + 1], col[:, None],
                                     np.array([step]))
            if np.all(r <= 1) and np.max(np.abs(analytical[:, j] - col)) <= 0.5 * error:
                numerical[:, j], steps[j] = col, step
                smooth += 1
                break
    if smooth:
        entry.notes.append(
            f"{smooth} of {failing.size} disagreeing Jacobian column(s) agree at smaller steps "
            f"(down to {float(np.min(steps)):.1e}): the function is not smooth within the step "
            "there (a kink, e.g. relu at 0, or strong curvature), which is not a wrong "
            "gradient.")


def _at_kinks(entry: GradCheckEntry, target: _Target, i: int, analytical: np.ndarray,
              numerical: np.ndarray, steps: np.ndarray, c: np.ndarray, g: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The analytical Jacobian (and VJP) to judge by, and each column's error bound (for
    _judge_columns' ``spread``): as computed (bound 0), except in the columns still failing
    after _retry_smaller. There kinks within the step make the gradient at x not the slope
    across it: the kinks a relu network in float32 puts near every point (no usable step avoids
    them), or one at the point itself (an input exactly 0 under a relu, tied values under a
    max), where no step helps. A scalar output's such column (a loss: a point costs one VJP)
    is judged by _along_the_steps, exact for a central difference, kinks or not; outputs up to
    _KINK_OUTPUTS (a point costs a VJP per output) by _at_the_ends, exact for a kink at the
    point only. The report keeps the analytical values as computed."""
    spread = np.zeros(steps.size)
    _, _, ratio = _judge_columns(entry, target, analytical, numerical, steps)
    failing = np.flatnonzero(np.any(~(ratio <= 1), axis=0))
    if (failing.size == 0 or failing.size > _MAX_RETRIED_COLUMNS
            or target.out0.size > _KINK_OUTPUTS):
        return analytical, g, spread
    worst = np.max(np.where(np.isnan(ratio), np.inf, ratio)[:, failing], axis=0)
    failing = failing[np.argsort(-worst, kind="stable")]  # the worst first
    if target.out0.size == 1:
        return _along_the_steps(entry, target, i, analytical, numerical, steps, failing, c, g)
    return (*_at_the_ends(entry, target, i, analytical, numerical, steps, failing, c, g),
            spread)


def _along_the_steps(entry: GradCheckEntry, target: _Target, i: int, analytical: np.ndarray,
                     numerical: np.ndarray, steps: np.ndarray, failing: np.ndarray,
                     c: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A scalar output's failing columns, each judged against the mean of its analytical
    derivative over entries._ALONG_THE_STEP midpoints of its step (entries._along_the_step:
    what the central difference measures exactly, kinks or not), the gap to the coarser rule
    its error bound; the numerical column measured again at the step as realised in the
    input's dtype, which the midpoints span. A wrong backward is wrong along the step too and
    still fails. None is judged so where the backward gives a failing column two values at x
    that differ by a tenth of its disagreement (entries._repeat_gap): such a backward is
    random, its mean along a step about the right gradient, and the gap to the coarser rule
    widens the tolerance by about its noise. Costs two VJPs an input, and _ALONG_THE_STEP VJPs
    and two evaluations a column that would otherwise fail; the first column (the worst first)
    that still disagrees settles the verdict, and the rest are left as measured (a relu
    backward 1% off in a digits MLP failed 150 columns: 17 s a check, 3 s so)."""
    x = target.values[i]
    flat = x.astype(np.float64, copy=False).reshape(-1)
    one = np.ones(target.out0.shape, target.out_numpy_dtype)
    judged, judged_g, spread = analytical.copy(), g.copy(), np.zeros(steps.size)
    gaps = np.abs(analytical[0, failing] - numerical[0, failing])
    gaps = np.where(np.isnan(gaps), np.inf, gaps)  # no number to explain: no evidence of noise
    unrepeatable = int(np.sum(~(np.abs(_repeat_gap(target, i, one)[failing]) <= 0.1 * gaps)))
    if unrepeatable:  # a random backward: no column of it is judged along the step
        failing = failing[:0]
    along, agree, at_the_point = [], True, 0
    for j in failing:
        fp, fm, realised = target.central_pair(i, j, float(steps[j]))
        if not realised:
            continue
        column = (fp - fm) / realised
        low = flat.copy()
        low[j] = float(x.dtype.type(flat[j] - float(steps[j])))  # as central_pair's
        step = np.zeros(flat.size)
        step[j] = realised
        mean = _along_the_step(target, i, low, step, one)
        if mean is None:
            continue
        if _wrong_at_the_point(target, i, step, one, mean[0]):
            at_the_point += 1
            agree = False
            break  # a wrong gradient: the other columns cannot change the verdict
        judged[0, j], spread[j] = mean[0] / realised, mean[1] / realised
        judged_g[j] = float(c @ judged[:, j])
        numerical[:, j] = column
        along.append(int(j))
        agree = bool(_judge_columns(entry, target, judged, numerical, steps, spread)[2][0, j] <= 1)
        if not agree:
            break  # a wrong gradient: the other columns cannot change the verdict
    _along_notes(entry, "Jacobian column(s)", len(along), unrepeatable, agree, at_the_point)
    return judged, judged_g, spread


def _at_the_ends(entry: GradCheckEntry, target: _Target, i: int, analytical: np.ndarray,
                 numerical: np.ndarray, steps: np.ndarray, failing: np.ndarray, c: np.ndarray,
                 g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Several outputs' failing columns whose element sits on a kink at the point itself: the
    gradient is not defined there and the central difference measures the mean of the
    one-sided derivatives, so the column is judged against the mean of the analytical columns
    at x ± step (points where the function is differentiable), one VJP per output each; a
    column whose analytical column does not jump across the step is left as it failed (a
    wrong gradient, not a kink). Several kinks within the step are not settled so."""
    x = target.values[i]
    flat = x.astype(np.float64, copy=False).reshape(-1)
    one_hots = np.eye(target.out0.size, dtype=target.out_numpy_dtype)
    judged, judged_g, at_point, wrong_at_the_point = analytical.copy(), g.copy(), 0, 0
    # A one-sided derivative's truncation error is O(step), not O(step²): judged at a smaller
    # step (_retry_smaller's second), where the numerical column is measured again.
    shrink = (1 / 64 if _EPS[entry.precision] < 1e-10 else 1 / 8) ** 2
    for j in failing:
        step = float(steps[j]) * shrink
        fp, fm, realised = target.central_pair(i, j, step)
        if not realised:
            continue
        column = (fp - fm) / realised
        work = x.copy().reshape(-1)
        plus, minus = x.dtype.type(flat[j] + step), x.dtype.type(flat[j] - step)
        work[j] = plus
        above = work.reshape(x.shape).copy()
        work[j] = minus
        below = work.reshape(x.shape).copy()
        sides = [target.vjps_at(i, [above, below], e.reshape(target.out0.shape))
                 for e in one_hots]
        col_plus = np.array([up[j] for up, _ in sides])
        col_minus = np.array([down[j] for _, down in sides])
        jump = np.abs(col_plus + col_minus - 2 * analytical[:, j])
        slack = 0.5 * np.abs(analytical[:, j] - column) + _EPS[entry.precision]
        if not np.all(jump >= slack - 2 * _EPS[entry.precision]):
            continue  # smooth across the step: a wrong gradient, not a kink
        if _off_where_continuous(analytical[:, j], col_plus, col_minus, slack):
            wrong_at_the_point += 1  # no jump across the point: no kink (entries)
            continue
        up, down = float(plus) - flat[j], flat[j] - float(minus)
        judged[:, j] = (col_plus * up + col_minus * down) / (up + down)
        judged_g[j] = float(c @ judged[:, j])
        numerical[:, j], steps[j] = column, step  # the measurement it is judged by
        at_point += 1
    if at_point:
        entry.notes.append(
            f"{at_point} Jacobian column(s) sit on a kink at the point itself (the gradient is "
            "not defined there: relu of an exact 0, a max over tied values), so no step "
            "settles them; judged instead against the mean of the analytical columns just "
            "either side of it, which the central difference measures.")
    if wrong_at_the_point:
        entry.notes.append(
            f"{wrong_at_the_point} Jacobian column(s) do not jump at the point (the analytical "
            "columns just either side of it agree), yet at the point they are off them: no "
            "kink, the backward is wrong at the point itself (e.g. a gradient set to 0 where an "
            "input is exactly 0), so they are left as measured.")
    return judged, judged_g


def _compare_jacobian(entry: GradCheckEntry, target: _Target, i: int, analytical: np.ndarray,
                      numerical: np.ndarray, steps: np.ndarray, c: np.ndarray, g: np.ndarray,
                      spread: np.ndarray) -> None:
    """Every Jacobian element, then the VJP with the random cotangent c against cᵀ·J_numerical.

    The second comparison is what catches a backward that mishandles its upstream gradient:
    the Jacobian rows are built with one-hot cotangents, which such a backward can get right.
    ``spread``: per column, the error bound of a column judged along its step (_at_kinks).
    """
    eps = _EPS[entry.precision]
    j_abs, j_rel, j_ratio = _judge_columns(entry, target, analytical, numerical, steps, spread)
    # The outputs' rounding noise, weighted by c, turned into a derivative error by each step.
    rounding = _rounding(target.out0.reshape(-1), eps)
    c_norm = float(np.linalg.norm(c)) or 1.0
    row_n = c @ numerical
    r_scale = 0.0  # float64: the same absolute term as the elements' (_judge_columns)
    if entry.precision == "float64" and row_n.size:
        r_scale = float(np.sqrt(np.mean((row_n / c_norm) ** 2)))
    r_abs, r_rel, r_ratio = _errors(g / c_norm, row_n / c_norm,
                                    float(np.linalg.norm(c * rounding)) / c_norm / steps
                                    + spread / 2, entry, r_scale)
    # A ratio that is not a number fails: it was never > 1, and the report named an element
    # that agreed, blaming the backward's use of its upstream gradient (QA: pow of x < 0)
    j_ratio, r_ratio = (np.where(np.isnan(ratio), np.inf, ratio) for ratio in (j_ratio, r_ratio))
    outside = int(np.sum(~np.isfinite(numerical).all(axis=0)))
    if outside:
        entry.notes.append(
            f"{outside} Jacobian column(s) have no numerical derivative: f is not finite at "
            "x ± step there, at any step tried (outside its domain? e.g. x**y of a negative x "
            "and a fractional y), so the gradient there cannot be checked")
    entry.error_to_tolerance = max(float(np.max(j_ratio)), float(np.max(r_ratio)))
    entry.max_abs_error = max(float(np.max(j_abs)), float(np.max(r_abs)))
    entry.max_rel_error = max(float(np.max(j_rel)), float(np.max(r_rel)))
    if not (np.all(j_ratio <= 1) and np.all(r_ratio <= 1)):
        entry.passed = False
    out_shape, in_shape = target.out0.shape, target.values[i].shape
    if np.max(j_ratio) > 1 or np.max(r_ratio) <= 1:
        o, j = np.unravel_index(int(np.argmax(j_ratio)), j_ratio.shape)
        entry.worst_output_index = _index(o, out_shape)
        entry.worst_input_index = _index(j, in_shape)
        entry.worst_analytical = float(analytical[o, j])
        entry.worst_numerical = float(numerical[o, j])
        entry.worst_kind = "jacobian element"
    else:
        j = int(np.argmax(r_ratio))
        entry.worst_input_index = _index(j, in_shape)
        entry.worst_analytical = float(g[j])
        entry.worst_numerical = float(row_n[j])
        entry.worst_kind = "cotangent-weighted gradient (v^T J) with random v"
        entry.notes.append("the Jacobian built from one-hot cotangents matches, but the VJP "
                           "with a random cotangent does not: check how the backward uses its "
                           "upstream gradient.")
