"""Which of the other variables of a failing joint check are wrong, at a bounded cost.

check_jointly names the variable of the element bisection found with the full diagnosis
(kinks, the judgment along the step, bisection to one element). It used to find the others by
checking the rest jointly again, and again without each variable it named: one failing check's
diagnosis (~200 evaluations and ~130 backward passes, plus a trace of the rest) per wrong
variable. A wrong input gradient deep in a residual network flows into every variable before
it, so a 6-block, ~100k-parameter residual MLP spent 15 such checks (2,754 evaluations, 1,794
backward passes, 42 s) where a passing check costs 14 evaluations.

Here every other variable is judged once, on its own part of the joint check's probes: the
probe directions u_p restricted to the variable's elements (weighted as a probe of that variable
alone weights them, probe._direction_weights), its directional derivatives against central
differences on the joint function already traced (2 evaluations a probe, in a few compiled
calls, nothing traced again), with the relative tolerance of one variable alone (the joint
check's with a share of 1). A variable whose probes pass at step h judged with rounding alone
passes, as it would in the probe method (its full tolerance only widens). The failing probes
are measured again at one smaller step (probe._retry_failing: a kink within the step settles
there); a variable still failing is reported wrong, its worst element located by bisection of
its worst probe within its own elements (O(log n) evaluations), without the judgment along the
step. The residual MLP: 798 evaluations, 126 backward passes (the first variable's diagnosis),
about 4 s.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradexp.gradcheck.bisection import _narrow
from gradexp.gradcheck.checked_function import _FunctionTarget
from gradexp.gradcheck.directions import _direction
from gradexp.gradcheck.options import _TOLERANCES
from gradexp.gradcheck.probe import _direction_weights, _draw, _judge, _retry_failing, _step_h
from gradexp.gradcheck.report import GradCheckEntry

# The probe directions restricted to the variables are stacked for the compiled calls at most
# this many float64 elements at a time (16 MB): the calls keep their last few stacks, and a
# million-parameter model's 50 variables x 4 probes would otherwise stack 1.6 GB.
_STACK_ELEMENTS = 1 << 21

CUT_SHORT = ("the per-variable breakdown of this failing check was shortened to bound its cost: "
             "{named} was diagnosed in full (kinks, the judgment along the step, bisection); "
             "each other variable was judged once on its own part of the joint probes (at step "
             "h and at a smaller one) and, where it failed, located to an element by "
             "bisection, without the judgment along the step. {count} failed there: {failed}. "
             "A variable fails here when its gradient is wrong, or wrong only through a wrong "
             "layer after it (the wrong-layer search names that layer).")


@dataclass
class Layout:
    """Where each variable sits in the joint vector θ' = concat(x_k / c_k)."""

    names: Sequence[str]
    shapes: Sequence[tuple[int, ...]]
    dtypes: Sequence[str]
    scales: Sequence[float]
    sizes: Sequence[int]

    def bounds(self, k: int) -> tuple[int, int]:
        start = int(sum(self.sizes[:k]))
        return start, start + int(self.sizes[k])


@dataclass
class Screened:
    """The screen's entries (in the order of ``rest``) and what it cost."""

    entries: list[GradCheckEntry]
    function_evaluations: int
    seconds: float


def screen_variables(function: Any, flat: Any, cotangent: np.ndarray, grad: np.ndarray,
                     layout: Layout, rest: Sequence[int], *, probes: int, seed: int, h: float,
                     precision: str) -> Screened:
    """Judge each variable in ``rest`` on its own part of the joint probes (module doc).

    ``function`` is what the joint check checked (the compiled joint function, or the
    JointFunction itself when it runs eagerly), at ``flat``; ``grad`` its VJP there (flat,
    float64) for ``cotangent`` (output-shaped); ``h`` the joint check's step in θ'.
    """
    start = time.perf_counter()
    target = _FunctionTarget(function, [flat], ["joint"])
    target.start(values=False)  # the output's shape (bisection names an output element)
    try:
        entries = _screen(target, flat, cotangent, grad, layout, rest, probes, seed, h,
                          precision)
    finally:
        target.close()
    return Screened(entries, target.evaluations, time.perf_counter() - start)


def _screen(target: _FunctionTarget, flat: Any, cotangent: np.ndarray, grad: np.ndarray,
            layout: Layout, rest: Sequence[int], probes: int, seed: int, h: float,
            precision: str) -> list[GradCheckEntry]:
    import tensorflow as tf

    n = int(flat.shape[0])
    v = np.asarray(cotangent, np.float64).reshape(-1)
    g_t = tf.constant(np.asarray(grad, np.float64))
    # The joint check's own directions (kept by directions.py under the same keys): the
    # screen's probes are the pieces of the probes that failed.
    drawn = [_direction((seed, 0, p, n), functools.partial(_draw, [seed % 2**64, 0, p], n), h)[0]
             for p in range(probes)]
    atol0, rtol0 = _TOLERANCES[precision]
    entries, parts = [], []
    for k in rest:
        a, b = layout.bounds(k)
        # Judged in θ', where this variable's directional derivatives are c_k times its own:
        # the absolute tolerance scales with them (reported in its own units below).
        entry = GradCheckEntry(name=layout.names[k], shape=layout.shapes[k],
                               dtype=layout.dtypes[k], passed=True, precision=precision,
                               delta=h, atol=atol0 * layout.scales[k], rtol=rtol0)
        weights = _direction_weights(grad[a:b])
        parts.append((a, b, [u[a:b] if weights is None else u[a:b] * weights for u in drawn]))
        entries.append(entry)

    # Each variable's probes are padded to the whole parameter vector only when measured or
    # judged: kept for every variable at once, a failing check of a 3.3M-parameter model's 102
    # variables held 400 such vectors, ~10 GB (QA).
    def padded(j: int, p: int) -> Any:
        a, b, mine = parts[j]
        return tf.pad(mine[p], [[a, n - b]])

    items = [(j, p) for j in range(len(parts)) for p in range(probes)]
    chunk = max(1, _STACK_ELEMENTS // max(n, 1))
    measured = [step for first in range(0, len(items), chunk)
                for (step,) in target.directional_steps_many(
                    0, [(padded(j, p), h, g_t) for j, p in items[first:first + chunk]],
                    twice=False)]
    for j, entry in enumerate(entries):
        mine = [(padded(j, p), g_t, float(tf.norm(part))) for p, part in enumerate(parts[j][2])]
        results = [_step_h(entry, v, u_norm, h, *measured[j * probes + p])
                   for p, (_, _, u_norm) in enumerate(mine)]
        ratio, noise = _judge(results, entry)
        if not np.all(ratio <= 1):
            retried = _retry(target, mine, v, results, ratio, entry)
            if retried is not None:
                ratio, noise = _judge(retried, entry)
        entry.passed = bool(np.all(ratio <= 1))
        if not entry.passed:
            _locate(entry, target, mine, v, grad, h, ratio, noise, layout, rest[j])
        _in_own_units(entry, layout.scales[rest[j]], probes)
    return entries


def _retry(target: _FunctionTarget, mine: list[tuple[Any, Any, float]], v: np.ndarray,
           results: list, ratio: np.ndarray, entry: GradCheckEntry) -> list | None:
    """probe._retry_failing of the failing probes, the worst one alone first: a wrong
    variable's worst probe fails at the smaller step too, and then so would the whole retry
    (it settles only if every failing probe agrees there), for 2 evaluations instead of 2 a
    failing probe. Only a worst probe that settles has the others retried with it."""
    directions, vs = [u for u, _, _ in mine], [v] * len(mine)
    worst = int(np.argmax(np.where(np.isnan(ratio), np.inf, ratio)))
    alone = np.where(np.arange(len(ratio)) == worst, ratio, 0.0)
    scratch = dataclasses.replace(entry, notes=[])  # its note is the full retry's to make
    if (alone != ratio).any() and _retry_failing(target, 0, directions, mine, vs, results,
                                                 alone, scratch) is None:
        return None
    return _retry_failing(target, 0, directions, mine, vs, results, ratio, entry)


def _locate(entry: GradCheckEntry, target: _FunctionTarget, mine: list[tuple[Any, Any, float]],
            v: np.ndarray, grad: np.ndarray, h: float, ratio: np.ndarray, noise: float,
            layout: Layout, k: int) -> None:
    """The failing variable's worst element, by bisection of its worst probe within its own
    elements (bisection._narrow: ~2 log2(n_k) + 16 evaluations, no backward pass for a scalar
    loss): the element every failing variable of the report is named with, as before."""
    a, b = layout.bounds(k)
    worst = int(np.argmax(np.where(np.isnan(ratio), np.inf, ratio)))
    u, _, u_norm = mine[worst]
    noise_abs = noise * u_norm * float(np.linalg.norm(v))
    _narrow(entry, target, 0, np.asarray(u), v, grad, h, noise_abs, span=(a, b))
    if entry.worst_input_index is not None:  # an index into θ': this variable's own
        entry.worst_input_index = tuple(
            int(i) for i in np.unravel_index(entry.worst_input_index[0] - a, layout.shapes[k]))
    scale = layout.scales[k]  # dθ'/dθ = 1/c_k: its values back in this variable's units
    if entry.worst_analytical is not None:
        entry.worst_analytical /= scale
    if entry.worst_numerical is not None:
        entry.worst_numerical /= scale


def _in_own_units(entry: GradCheckEntry, scale: float, probes: int) -> None:
    """θ' = x / c: the step and absolute numbers back in the variable's own units."""
    entry.delta *= scale
    entry.atol /= scale
    entry.max_abs_error /= scale
    entry.notes.insert(0, (
        f"judged on its own part of the joint probes ({probes} probe(s): their directions "
        f"restricted to its elements, scaled by {scale:.3g}), with the relative tolerance of "
        "one variable alone, after another variable was found wrong"
        + ("" if entry.passed else ": it disagrees at step h and at a smaller step, so its "
           "gradient is wrong (or wrong only through a wrong layer after it); its worst "
           "element located by bisection of its worst probe, not judged along the step (kinks "
           "crossed by every step), to bound a failing check's cost")))
