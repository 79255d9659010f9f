"""The probe method: randomized directional checks vᵀJu, and how likely they miss an error.

Per input and probe: a random cotangent v and a Gaussian direction u (weighted down per element
where the gradient is large, _direction_weights; miss_probability then holds for the weighted
error w∘e); the analytical vᵀJu (from
the shared backward passes) against central differences at steps h and 2h, whose gap measures the
finite-difference error that widens the tolerance. A probe that fails at step h is measured again
at one smaller step first (_retry_failing: what settles a relu kink), and only if that does not
settle it are all probes measured at 2h and the non-smooth ones repeated with smaller steps; a
failing input is handed to bisection.py. ``miss_probability`` is the chance that
every probe misses a wrong gradient.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradexp.gradcheck.bisection import _narrow
from gradexp.gradcheck.checked_function import _Target
from gradexp.gradcheck.entries import (
    _along_notes,
    _along_the_step,
    _linearity,
    _new_entry,
    _noisy,
    _repeat_gap,
    _shape_error,
    _wrong_at_the_point,
)
from gradexp.gradcheck.options import _EPS, _cotangent, _direction_bits, _Options, _rounding
from gradexp.gradcheck.report import GradCheckEntry

# How often a probe that stepped over a kink is repeated with a smaller step.
_KINK_RETRIES = 3

# A direction's elements are scaled down where the analytical gradient exceeds this many times
# its median magnitude (_direction_weights), but never below this share of its largest one.
_WEIGHT_LIMIT = 4.0
_WEIGHT_FLOOR = 1e-3
# False inside plain_directions().
_WEIGHTED: contextvars.ContextVar[bool] = contextvars.ContextVar("weighted", default=True)


@contextlib.contextmanager
def plain_directions() -> Iterator[None]:
    """Probes in here use unweighted Gaussian directions (no _direction_weights): joint.py's
    check gives each variable its share of the direction by its own scaling, which per-element
    weights would undo (a small bias with large gradients would be scaled back down)."""
    token = _WEIGHTED.set(False)
    try:
        yield
    finally:
        _WEIGHTED.reset(token)


def miss_probability(error_std_to_tolerance: float, probes: int) -> float:
    """Chance that ``probes`` independent probes all miss a wrong gradient.

    ``error_std_to_tolerance`` is t = σ / tol, where σ is the standard deviation of one probe's
    directional error: with u ~ N(0, I) and a gradient error e, e·u is N(0, ‖e‖²) (the checker
    divides by ‖u‖·‖v‖, so σ ≈ ‖e‖ / (√n ‖v‖)). One probe misses when that Gaussian lands in
    [-tol, tol], with probability erf(1 / (t √2)); every probe has to miss. For small 1/t this
    is about (0.8 / t) ** probes.
    """
    if error_std_to_tolerance <= 0:
        return 1.0
    return math.erf(1.0 / (error_std_to_tolerance * math.sqrt(2.0))) ** probes


@dataclass
class _Probe:
    """One directional check of one input (values normalised by ‖u‖·‖v‖)."""

    analytical: float
    numerical: float
    fd_error: float  # |difference between the step-h and step-2h estimates|
    rounding: float  # a-priori rounding error of the outputs
    step: float


def scalar_cotangents(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any
                      ) -> list[np.ndarray]:
    """A scalar output's cotangents: v (every probe's, from rng) and -v/2 (the linearity check).

    check_jointly asks for their VJPs first, with np.random.default_rng(seed): its shares are
    then the probes' own backward passes (the VJP function keeps that call)."""
    v = _cotangent(rng, shape, dtype)
    return [v, -0.5 * v]


def _probe_entries(target: _Target, opts: _Options, rng: np.random.Generator
                   ) -> list[GradCheckEntry]:
    if target.out0.size == 1:
        # A scalar output: VJP(c·v) = c·VJP(v) for any backward that passes the linearity check
        # below, so one cotangent serves every probe (normalised by |v|, a probe does not
        # depend on it) and K - 1 backward passes are saved. A backward that is not linear in
        # its upstream gradient fails that check whatever the other probes say.
        vs = scalar_cotangents(rng, target.out0.shape, target.out_numpy_dtype)
        grads = target.vjps(vs)
        vs = vs[:1] * opts.probes
        grads = grads[:1] * opts.probes + grads[-1:]
    else:
        vs = [_cotangent(rng, target.out0.shape, target.out_numpy_dtype)
              for _ in range(opts.probes)]
        grads = target.vjps(vs + [-0.5 * vs[0]])
    entries = []
    for i in range(len(target.values)):
        entry = _new_entry(target, i, opts)
        entries.append(entry)
        if not entry.checked or target.out0.size == 0 or _shape_error(target, i, entry):
            continue
        _linearity(entry, grads[0][i], grads[-1][i])
        _probe_one(entry, target, i, vs, [g[i] for g in grads[:-1]], opts.seed)
    return entries


def _probe_one(entry: GradCheckEntry, target: _Target, i: int, vs: list[np.ndarray],
               gs: list[np.ndarray], seed: int) -> None:
    x = target.values[i]
    x64 = x.astype(np.float64, copy=False).reshape(-1)
    vs = [v.reshape(-1) for v in vs]
    # Step h first, judged with the rounding error alone: if every probe passes that tighter
    # tolerance it passes the full one too (the measured finite-difference error only widens
    # it), so the step-2h evaluations are spent only on inputs that fail at first sight.
    directions, pairs, results = [], [], []
    tensors: dict[int, Any] = {}  # converted once (probes may share g; steps reuse it)
    g_ts = [tensors.setdefault(id(g), target.as_tensor(g)) for g in gs]
    # Each direction has its own stream, (seed, input, probe), so it can be drawn once.
    keys = [(seed, i, k, x64.size) for k in range(len(vs))]
    draws = [functools.partial(_draw, [seed % 2**64, i, k], x64.size) for k in range(len(vs))]
    weights: dict[int, Any] = {}  # per distinct g (a scalar output's probes share one)
    for g in gs:
        if id(g) not in weights:
            weights[id(g)] = _direction_weights(g) if _WEIGHTED.get() else None
    ws = [weights[id(g)] for g in gs]
    firsts = target.first_directionals(i, keys, draws, entry.delta, g_ts, ws)
    for v, g_t, (u, u_norm, step_dot, fp, fm) in zip(vs, g_ts, firsts):
        directions.append(u)
        pairs.append((target.as_tensor(u), g_t, u_norm))
        results.append(_step_h(entry, v, u_norm, entry.delta, step_dot, fp, fm))
    ratio, noise = _judge(results, entry)
    retried = None if np.all(ratio <= 1) else _retry_failing(target, i, directions, pairs, vs,
                                                             results, ratio, entry)
    if retried is not None:  # every probe agrees: at step h, or the failing ones at a smaller
        results = retried
        ratio, noise = _judge(results, entry)
    elif not np.all(ratio <= 1):
        ratio, noise = _judge(results, entry)  # the first sight's fields, as before the retry
        # The step-2h evaluations of every probe at once, as the step-h ones (one compiled
        # call for a tf.function; probe by probe otherwise, as _measure would).
        seconds = target.first_directionals(i, keys, draws, 2 * entry.delta, g_ts, ws)
        results = [_measure(target, i, u, pair, entry.delta, v, entry, first=p,
                            second=second[2:])
                   for u, pair, v, p, second in zip(directions, pairs, vs, results, seconds)]
        ratio, noise = _judge(results, entry)
        _steadier(target, i, directions, pairs, vs, results, entry)
        ratio, noise = _judge(results, entry)
    # A probe that fails because it stepped over a kink is repeated with smaller steps (fewer
    # kinks inside; more rounding noise, which the tolerance then accounts for).
    shrink = 1 / 64 if _EPS[entry.precision] < 1e-10 else 1 / 8
    kinks: list[int] = []
    # Each probe as measured before the kink retries: judged along the step there too when
    # that is tighter (_judge_along_the_step; QA: a relu at exact-0 pre-activations).
    measured = list(results)
    retries = [0] * len(results)
    rms = _rms(results)
    while True:  # re-judged after each round
        todo = [k for k in np.flatnonzero(~(ratio <= 1)) if retries[k] < _KINK_RETRIES]
        for k in todo:
            retries[k] = _KINK_RETRIES
        crossing = [k for k in todo
                    if _crosses_kink(target, i, x, x64, directions[k], vs[k], gs[k], results[k])]
        # The round's smaller steps in one compiled call: each probe's retry depends on its
        # own results only (rms is the loop's), so batching them changes no value.
        smallers = _measure_many(target, i, [(directions[k], pairs[k], results[k].step * shrink,
                                              vs[k]) for k in crossing], entry)
        for k, smaller in zip(crossing, smallers):
            # Worth taking only while its noise stays below half the disagreement it is
            # to explain (or within its nominal tolerance): past that, a wrong gradient
            # hides in the rounding of a tiny float32 step.
            nominal = entry.atol + entry.rtol * max(abs(smaller.numerical), rms)
            gap = abs(results[k].analytical - results[k].numerical)
            if _noise(smaller) <= max(nominal, _noise(results[k]), 0.5 * gap):
                retries[k] = kinks.count(k) + 1
                kinks.append(k)
                results[k] = smaller
        if not todo:
            break
        ratio, noise = _judge(results, entry)
    steps = ", ".join(f"{results[k].step:.1e}" for k in sorted(set(kinks)))
    along, unrepeatable, at_the_point = _judge_along_the_step(target, i, x, x64, directions,
                                                              vs, results, ratio, entry,
                                                              measured)
    if along:
        ratio, noise = _judge(results, entry)
    _along_notes(entry, "probe(s)", len(along), unrepeatable, bool(np.all(ratio[along] <= 1)),
                 at_the_point)
    if kinks:
        entry.notes.append(
            f"{len(set(kinks))} probe(s) crossed a kink (the analytical gradient jumps within the "
            "step, e.g. relu at 0), where finite differences are wrong; repeated with smaller "
            f"steps (down to {steps})"
            + (": they agree." if np.all(ratio <= 1) else ": they still disagree.")
        )
    if not np.isfinite(entry.noise):  # "noisy ... inf%; dtype='float64' helps", in float64
        entry.notes.append(
            "some probes have no numerical derivative: f is not finite at x ± step along them, "
            "at every step tried (outside its domain? e.g. x**y of a negative x and a "
            "fractional y), so the gradient along them cannot be checked.")
    elif _noisy(entry):
        entry.notes.append(
            f"finite differences are noisy here: their estimated error is {entry.noise:.1%} of "
            f"the directional derivative, so gradient errors below about {2 * entry.noise:.0%} "
            "cannot be seen (kinks or float32 rounding"
            + ("; dtype='float64' helps)." if entry.dtype != "float64" else ").")
        )
    if entry.probes_failed:
        entry.passed = False
    if not entry.passed:
        k = int(np.argmax(ratio))
        noise_abs = noise * pairs[k][2] * float(np.linalg.norm(vs[k]))
        _narrow(entry, target, i, directions[k], vs[k], gs[k], results[k].step, noise_abs)


def _retry_failing(target: _Target, i: int, directions: list[np.ndarray], pairs: list,
                   vs: list[np.ndarray], results: list[_Probe], ratio: np.ndarray,
                   entry: GradCheckEntry) -> list[_Probe] | None:
    """The probes that failed at first sight measured again at one smaller step (1/64 of h in
    float64, 1/8 in float32), at that step only, judged with its rounding error alone as the first
    sight is; the results with those in place if then every probe passes, else None (the full
    path follows, from the first sight's results: the verdict and values it gives are the
    ones it gave without this retry).

    Why: a probe that steps over a relu kink fails at step h, and the full path measured
    every probe at step 2h and then retried the non-smooth ones at steps h' and 2h' (the
    digits MLP's last check: 56 evaluations for the floor's 16). Two evaluations a failing
    probe decide the common case. Trust: a wrong gradient's error does not depend on the step,
    so it fails at h' as at h (then the full path runs); judging with the rounding error alone
    is tighter than the full path's tolerance (which adds half the h'-2h' gap), and the retry
    is taken only where that rounding error is at most half the nominal tolerance (atol + rtol
    x scale): a tiny float32 step, whose rounding would widen the tolerance enough to hide a
    wrong gradient, is left to the full path.
    """
    shrink = 1 / 64 if _EPS[entry.precision] < 1e-10 else 1 / 8
    failing = [int(k) for k in np.flatnonzero(~(ratio <= 1))]
    h = results[failing[0]].step * shrink  # every probe's first step is the entry's one
    steps = target.directional_steps_many(
        i, [(pairs[k][0], h, pairs[k][1]) for k in failing], twice=False)
    retried = list(results)
    for k, (at_h,) in zip(failing, steps):
        retried[k] = _step_h(entry, vs[k], pairs[k][2], h, *at_h)
    rms = _rms(retried)
    for k in failing:
        nominal = entry.atol + entry.rtol * max(abs(retried[k].numerical), rms)
        if not retried[k].rounding <= 0.5 * nominal:
            return None
    passed, _ = _judge(retried, entry)
    if not np.all(passed <= 1):
        return None
    entry.notes.append(
        f"{len(failing)} probe(s) disagreed at step {results[failing[0]].step:.1e} and agree "
        f"at step {h:.1e}, judged there with its rounding error alone: the function is not "
        "smooth within the larger step (e.g. relu at 0), where finite differences are wrong.")
    return retried


def _direction_weights(g: np.ndarray) -> Any:
    """Per-element weights of a probe direction (a float64 tensor), or None for none.

    A probe's vᵀJu = g·u sums every element's g_j·u_j: elements with a large gradient dominate
    it, its tolerance (rtol x it) and its finite-difference noise, so an error on elements with
    small gradients, however large relative to them, hides (rsqrt on 0.1 next to 5: a 5% error
    for x > 2.5 is 0.04% of the whole). Where |g_j| exceeds _WEIGHT_LIMIT times the median |g|
    (of the nonzero elements), u_j is scaled down to bring g_j·u_j to that limit: every element
    then weighs about as much, as in an element-wise comparison. Steps only shrink, so no
    finite difference gets worse; u stays a random direction, so vᵀJu is still a valid check
    of every element (a wrong large g_j still shows, as a relative error of that limit).

    The limit is at least _WEIGHT_FLOOR times the largest |g|: where most elements have almost
    no gradient (a saturated tanh: 1e-9 beside 0.02-1), the median's limit weighed every
    element that matters down to 1e-9, the whole probe sank under the absolute tolerance, and a
    gradient of the wrong sign passed.
    """
    import tensorflow as tf

    a = np.abs(g)
    sample = a[:: max(1, a.size // 65536)]  # the median of a sample: a million costs ~15 ms
    sample = sample[sample > 0]
    if sample.size == 0:
        return None
    largest = float(np.max(a))
    limit = max(_WEIGHT_LIMIT * float(np.median(sample)), _WEIGHT_FLOOR * largest)
    if not largest > limit:  # also None for a NaN gradient: failed as it is
        return None
    a = tf.constant(a, tf.float64)
    return tf.minimum(tf.constant(1.0, tf.float64), limit / tf.maximum(a, limit))


def _measure(target: _Target, i: int, u: np.ndarray, pair: tuple[Any, Any, float], h: float,
             v: np.ndarray, entry: GradCheckEntry, twice: bool = True,
             first: _Probe | None = None, second: tuple | None = None) -> _Probe:
    """One probe: directional derivatives at steps h and 2h, normalised by ‖u‖·‖v‖.

    ``pair`` is (u, g) as the target's tensors (target.as_tensor), g the analytical VJP, and
    ‖u‖.
    ``twice=False`` measures step h only (fd_error 0: not measured); ``first`` is that
    measurement, to which only the step-2h evaluations are added; ``second`` those, if
    already evaluated (target.directional's values at step 2h).
    """
    norm = float(pair[2] * np.linalg.norm(v)) or 1.0
    if first is None and twice and second is None:  # both steps at once (one compiled call)
        at_h, second = target.directional_steps(i, pair[0], h, pair[1])
        first = _step_h(entry, v, pair[2], h, *at_h)
    if first is None:
        step_dot, fp, fm = target.directional(i, pair[0], h, pair[1])
        first = _step_h(entry, v, pair[2], h, step_dot, fp, fm)
    if not twice:
        return first
    step_dot, fp, fm = second or target.directional(i, pair[0], 2 * h, pair[1])
    a2, n2 = step_dot / (4 * h), float(v @ (fp - fm)) / (4 * h)
    # A gradient error is the same at both steps; the finite-difference error is not.
    fd_error = abs((first.analytical - first.numerical) - (a2 - n2) / norm)
    return _Probe(first.analytical, first.numerical, fd_error, first.rounding, h)


def _rms(results: list[_Probe]) -> float:
    """The root mean square of the probes' numerical derivatives that are numbers: one that
    left the function's domain (NaN) made every probe's tolerance NaN, and every probe fail."""
    numerical = np.array([p.numerical for p in results])
    finite = numerical[np.isfinite(numerical)]
    return float(np.sqrt(np.mean(finite**2))) if finite.size else 0.0


def _noise(p: _Probe) -> float:
    """A probe's estimated finite-difference error: its rounding error, or half the gap
    between its step-h and step-2h estimates. The truncation error of step h is a third of
    that gap where the function is smooth (~c·h² at h, ~4c·h² at 2h) and all of it where its
    second derivative jumps (~c·h at h, 2c·h at 2h; softsign or elu at 0): with the factor 2
    of the tolerance, half the gap covers both. Infinite where the measurement is not a
    number: a step that left the function's domain (sqrt of 0.02 - 0.03), so that a smaller
    step replaces it (QA: a correct float32 sqrt failed at 3 seeds of 32, "max rel error nan")."""
    noise = max(p.fd_error / 2, p.rounding)
    return noise if np.isfinite(noise) and np.isfinite(p.numerical) else np.inf


def _judge(results: list[_Probe], entry: GradCheckEntry) -> tuple[np.ndarray, float]:
    """Error/tolerance ratio per probe (> 1 fails); fills the entry's error fields.

    Tolerance: atol + rtol·scale + 2·noise, where scale is the probe's numerical directional
    derivative (at least their rms, so a probe that happens to be ~0 is not judged relatively)
    and noise the probe's own estimated finite-difference error (_noise). Each probe has its
    own: the largest over the probes, as before, let one noisy probe widen every probe's
    tolerance, and a 5% error on part of a float32 input hid under 1-3% of another's noise.
    """
    numerical = np.array([p.numerical for p in results])
    analytical = np.array([p.analytical for p in results])
    noises = np.array([_noise(p) for p in results])
    noise = float(np.max(noises))
    rms = _rms(results)
    scale = np.maximum(np.abs(numerical), rms)
    diff = np.abs(analytical - numerical)
    tol = entry.atol + entry.rtol * scale + 2.0 * noises
    # a measurement that is not a number (its noise infinite: _noise) fails until replaced
    ratio = np.where(np.isnan(diff) | ~np.isfinite(noises), np.inf,
                     diff / np.maximum(tol, np.finfo(float).tiny))
    floor = entry.atol / entry.rtol if entry.rtol > 0 else np.finfo(float).tiny
    entry.error_to_tolerance = float(np.max(ratio))
    entry.probes = len(results)
    entry.probes_failed = int(np.sum(~(ratio <= 1)))
    entry.max_abs_error = float(np.max(np.where(np.isnan(diff), np.inf, diff)))
    entry.max_rel_error = float(np.max(diff / np.maximum(scale, floor)))
    entry.noise = noise / max(rms, floor)
    return ratio, noise


def _steadier(target: _Target, i: int, directions: list[np.ndarray], pairs: list, vs: list,
              results: list[_Probe], entry: GradCheckEntry) -> None:
    """Probes whose step-h and step-2h estimates disagree by more than their nominal
    tolerance: measured again at smaller steps, keeping the measurement with the smallest
    estimated error (in place, in ``results``). Called only for an input that failed at first
    sight (step h, judged with rounding alone), so a passing check costs nothing more.

    Such a gap means the function is not smooth within 2h (a max-pool window whose maximum
    changes, a relu crossing): counted as noise, it widened the tolerance to ~58% and hid wrong
    gradients. A smaller step usually steps over no kink; where rounding makes the gap (float32),
    smaller steps are worse and the first measurement is kept.
    """
    shrink = 1 / 64 if _EPS[entry.precision] < 1e-10 else 1 / 8
    rms = _rms(results)
    active: dict[int, list] = {}  # probe -> [its best measurement, its step, its nominal tol]
    for k in range(len(results)):
        best = results[k]
        # (a NaN measurement, stepped out of the domain, is retried: its noise is infinite)
        nominal = entry.atol + entry.rtol * max(np.nan_to_num(abs(best.numerical)), rms)
        if _noise(best) > max(nominal, np.nan_to_num(best.rounding)):  # else smooth: its gap
            active[k] = [best, best.step, nominal]  # does not limit it
    # Round by round, every probe still retried measured in one call (_measure_many); each
    # probe's sequence of steps and its choice are its own, as when retried one by one.
    for _ in range(_KINK_RETRIES):
        if not active:
            break
        for state in active.values():
            state[1] *= shrink
        ks = list(active)
        probes = _measure_many(target, i, [(directions[k], pairs[k], active[k][1], vs[k])
                                           for k in ks], entry)
        for k, probe in zip(ks, probes):
            if _noise(probe) < _noise(active[k][0]):
                active[k][0] = probe
            if _noise(probe) <= max(active[k][2], probe.rounding):
                results[k] = active.pop(k)[0]
    for k, state in active.items():
        results[k] = state[0]


def _measure_many(target: _Target, i: int, items: list[tuple[np.ndarray, tuple, float,
                                                              np.ndarray]],
                  entry: GradCheckEntry) -> list[_Probe]:
    """_measure (steps h and 2h) of each (u, pair, h, v) in ``items``: for a compiled target
    every evaluation in one call (target.directional_steps_many)."""
    if not items:
        return []
    steps = target.directional_steps_many(i, [(pair[0], h, pair[1]) for _, pair, h, _ in items])
    return [_measure(target, i, u, pair, h, v, entry,
                     first=_step_h(entry, v, pair[2], h, *at_h), second=at_2h)
            for (u, pair, h, v), (at_h, at_2h) in zip(items, steps)]


def _crosses_kink(target: _Target, i: int, x: np.ndarray, x64: np.ndarray, u: np.ndarray,
                  v: np.ndarray, g: np.ndarray, probe: _Probe) -> bool:
    """Does the analytical gradient jump between x - hu and x + hu (two extra VJPs)?

    For a smooth function the second difference of the directional derivative,
    (g(x+hu) + g(x-hu) - 2 g(x))·u, is O(h²); a kink crossed inside the step makes it as large as
    the jump, and a crossed kink can spoil the finite difference by up to half the jump. A wrong
    but smooth gradient leaves it ~0, so real errors are not excused by this test.
    """
    h = probe.step
    plus = (x64 + h * u).astype(x.dtype).reshape(x.shape)
    minus = (x64 - h * u).astype(x.dtype).reshape(x.shape)
    vv = v.reshape(target.out0.shape)
    g_plus, g_minus = target.vjps_at(i, [plus, minus], vv)
    curve = float((g_plus + g_minus - 2 * g) @ u)
    norm = float(np.linalg.norm(u) * np.linalg.norm(v)) or 1.0
    return abs(curve) / norm >= 0.5 * abs(probe.analytical - probe.numerical)


def _judge_along_the_step(target: _Target, i: int, x: np.ndarray, x64: np.ndarray,
                          directions: list[np.ndarray], vs: list[np.ndarray],
                          results: list[_Probe], ratio: np.ndarray, entry: GradCheckEntry,
                          measured: list[_Probe]) -> tuple[list[int], int, int]:
    """The probes still failing at their smallest step, judged against the mean of the
    analytical directional derivative over the step, which the central difference measures
    exactly, kinks or not (entries._along_the_step); the gap to the coarser rule goes into the
    probe's noise.

    What it settles: a kink at the point itself (an input exactly 0 under a relu, tied values
    under a max: no step is small enough, and the mean is that of the two sides), and kinks no
    usable step avoids, which a relu network in float32 puts near every point (a correct float32
    relu MLP on digits failed 5 of 10 seeds at 1.3-18x its tolerance). A probe whose backward
    gives two gradients at x that differ by a tenth of its disagreement is left as it failed
    (entries._repeat_gap), and so is one whose gradient at x is off its values just either side
    (entries._wrong_at_the_point: wrong at the point itself, no kink). Costs
    entries._ALONG_THE_STEP + 5 backward passes a probe that would otherwise fail. Updates
    ``results`` in place; returns the probes it judged so, and how many it left for an
    unrepeatable backward and for one wrong at the point.

    A kink at the point fails at every step, so the kink retries shrink its step to where the
    outputs' rounding is a large share of it (QA: a correct Conv2D(relu) on digits, its zero
    patches and zero bias exact 0s, judged at 3.6e-13 with 17% noise; the check then fell back
    to its exact Jacobian, which cannot settle a kink in 51,200 outputs, and named the layer).
    Where its noise so exceeds the probe's nominal tolerance, the probe is judged along its
    step as measured before those retries (``measured``) too, and the tighter judgement kept:
    either is exact for its own central difference."""
    judged, unrepeatable, at_the_point = [], 0, 0
    rms = _rms(results)
    for k in np.flatnonzero(~(ratio <= 1)):
        probe, u, v = results[k], directions[k], vs[k]
        cotangent = v.reshape(target.out0.shape)
        norm = float(np.linalg.norm(u) * np.linalg.norm(v)) or 1.0
        if not np.isfinite(probe.analytical - probe.numerical):
            continue  # a value that is not finite: nothing along the step can judge it
        if not abs(float(_repeat_gap(target, i, cotangent) @ u)) / norm \
                <= 0.1 * abs(probe.analytical - probe.numerical):
            unrepeatable += 1
            continue
        along = _along(target, i, x, x64, u, cotangent, norm, probe)
        if along == "wrong":
            at_the_point += 1
            continue
        if along is None:
            continue
        earlier = measured[k]
        if (earlier.step != probe.step and np.isfinite(earlier.numerical)
                and _noise(along) > entry.atol + entry.rtol * max(abs(along.numerical), rms)):
            wider = _along(target, i, x, x64, u, cotangent, norm, earlier)
            if isinstance(wider, _Probe) and _noise(wider) < _noise(along):
                along = wider
        results[k] = along
        judged.append(int(k))
    return judged, unrepeatable, at_the_point


def _along(target: _Target, i: int, x: np.ndarray, x64: np.ndarray, u: np.ndarray,
           cotangent: np.ndarray, norm: float, probe: _Probe) -> _Probe | str | None:
    """`probe` judged against the mean of the analytical gradient along its step; "wrong"
    when the backward is wrong at the point itself, None when a value there is not finite."""
    h = probe.step
    # The step as realised in the input's dtype, as _step_h's analytical uses it.
    low = (x64 - h * u).astype(x.dtype).reshape(-1).astype(np.float64)
    step = (x64 + h * u).astype(x.dtype).reshape(-1).astype(np.float64) - low
    along = _along_the_step(target, i, low, step, cotangent)
    if along is None:
        return None
    if _wrong_at_the_point(target, i, step, cotangent, along[0]):
        return "wrong"
    scale = 2 * h * norm
    return _Probe(along[0] / scale, probe.numerical, max(probe.fd_error, along[1] / scale),
                  probe.rounding, h)


def _draw(stream: list[int], size: int) -> np.ndarray:
    return _direction_bits(np.random.default_rng(stream), size)


def _step_h(entry: GradCheckEntry, v: np.ndarray, u_norm: float, h: float, step_dot: float,
            fp: np.ndarray, fm: np.ndarray) -> _Probe:
    """A probe at step h from target.directional's values (fd_error not measured: 0).

    Analytical and numerical both use the perturbation actually realised in the input's dtype
    (step_dot = g·(x⁺ - x⁻)), so rounding the perturbed input (large in float32) does not
    count as a gradient error.
    """
    norm = float(u_norm * np.linalg.norm(v)) or 1.0
    eps = _EPS[entry.precision]
    analytical = step_dot / (2 * h)
    numerical = float(v @ (fp - fm)) / (2 * h)
    rounding = float(np.abs(v) @ (_rounding(fp, eps) + _rounding(fm, eps))) / (2 * h)
    return _Probe(analytical / norm, numerical / norm, 0.0, rounding / norm, h)
