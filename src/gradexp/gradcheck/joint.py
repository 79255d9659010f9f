"""One probe set over several inputs at once (check_jointly), for checks repeated in training.

A directional derivative of f along a direction over all inputs concatenated is the sum over
the inputs, so one probe set checks every input: K probes cost 2K evaluations, not 2K per input.
A wrong gradient anywhere makes that sum disagree with the central differences; bisection over
the concatenated vector (bisection.py, unchanged) then points at one element, hence one input. That
input is reported wrong with that element; each other input is then judged once on its own part
of the same probes (breakdown.py), which bounds a failing check's cost: checking the rest jointly
again without each wrong input cost a failing check's whole diagnosis per wrong input (15 of them
for a 6-block residual MLP whose wrong layer sits near its output: 2,754 evaluations, 42 s).

Dilution, and what keeps a wrong bias visible among large kernels:

* the direction gives every input the same share of its length: input k's elements are N(0, 1)
  scaled by c_k = sqrt(n / (m n_k)) (n elements over m inputs), so a 10-element bias is not a
  rounding error next to a 4,096-element kernel. The check runs on θ' = concat(x_k / c_k), a
  reparametrisation whose exact gradient is c_k g_k: plain Gaussian directions over θ' are the
  scaled directions over x.
* the relative tolerance shrinks by the smallest share of the directional derivative
  s_k = c_k ‖g_k‖ / sqrt(Σ c_j² ‖g_j‖²) (from one backward pass): an input whose relative error
  is r moves the sum by about r·s_k of its size, so rtol·s_k keeps r > rtol visible, as when the
  input was probed alone. It never goes below 1% of rtol (nor 10 eps^(2/3), what central
  differences resolve); the measured finite-difference error still widens it (probe.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gradexp.gradcheck.breakdown import CUT_SHORT, Layout, screen_variables
from gradexp.gradcheck.checker import check_gradients
from gradexp.gradcheck.compiled import compiled_vjp
from gradexp.gradcheck.options import _EPS, _TOLERANCES, _coarsest
from gradexp.gradcheck.probe import plain_directions, scalar_cotangents
from gradexp.gradcheck.report import GradCheckEntry, GradCheckReport

# The relative tolerance is divided by at most this (a variable with no gradient at all, e.g. a
# dead layer, would otherwise ask finite differences for more than they can resolve).
_MAX_DILUTION = 100.0


@dataclasses.dataclass
class JointFunction:
    """f(*xs) as a function of one flat vector θ' = concat(x_k / c_k); compiled if f is.

    Built once per run (gradexp.run_checks keeps it): the shapes and scales depend only on the
    variables' sizes, and tracing again at every check would cost more than the check.
    """

    f: Callable[..., Any]
    shapes: list[tuple[int, ...]]
    scales: list[float]
    function: Callable[[Any], Any] | None = None
    compile: bool = True  # False: eager (a run's first checks: cheaper than a trace)
    # The compiled function's output as traced (symbolic: its shape and dtype), if it is one
    # float tensor of known shape: what the shares' cotangent needs, without calling it.
    traced: Any = None

    def __call__(self, flat: Any) -> Any:
        if self.function is None:
            self.function = self._build(flat)
        return self.function(flat)

    def output(self, flat: Any) -> Any:
        """f at ``flat``, or for a compiled f its traced (symbolic) output: a later check of a
        run needs only its shape and dtype, and a call cost ~0.7 ms of a ~15 ms check."""
        if self.function is None:
            self.function = self._build(flat)
        return self.function(flat) if self.traced is None else self.traced

    def _build(self, flat: Any) -> Callable[[Any], Any]:
        """joint compiled (no autograph: ~1.5 s for a Keras model) if it traces, else eager."""
        import tensorflow as tf

        sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]

        def joint(flat: Any) -> Any:
            parts = tf.split(flat, sizes)
            return self.f(*[tf.reshape(p * c, s)
                            for p, c, s in zip(parts, self.scales, self.shapes)])

        if not self.compile:
            return joint
        compiled = tf.function(joint, autograph=False)
        compiled._gradexp_light_traces = True  # a few checks a run (compiled.light_traces)
        try:
            y = compiled.get_concrete_function(flat).structured_outputs
        except Exception:  # noqa: BLE001 - user code that only runs eagerly is checked eagerly
            return joint
        if tf.is_symbolic_tensor(y) and y.dtype.is_floating and y.shape.is_fully_defined():
            self.traced = y
        return compiled


def direction_scales(sizes: Sequence[int]) -> list[float]:
    """c_k = sqrt(n / (m n_k)): every input gets an equal share of the direction's length."""
    n, m = sum(sizes), len(sizes)
    return [math.sqrt(n / (m * s)) for s in sizes]


def check_jointly(f: Callable[..., Any], xs: Sequence[Any], *, names: Sequence[str],
                  probes: int = 4, seed: int = 0, dtype: Any = None,
                  joint: JointFunction | None = None) -> GradCheckReport:
    """check_gradients(f, xs, method="probe") with one probe set over all of ``xs``.

    ``xs`` are floating tensors (already in the dtype to check in); ``joint`` is a kept
    JointFunction of f for these shapes (built here if not given): with it, f itself is only
    called where the joint probes fail but no element can be located (each input is then
    probed on its own). Entries are per input, as check_gradients gives them: all get the joint
    verdict when it passes; when it fails, the input of the element bisection located is named
    with it, and every other input gets its own verdict on its part of the probes, a failing
    one its own worst element (breakdown.py; a note on the report says how far each was
    taken). f and ``joint`` are
    checked as they are (compile=False): the runner decides what it compiles (JointFunction).
    """
    import tensorflow as tf

    xs = [tf.convert_to_tensor(x) for x in xs]
    shapes = [tuple(int(d) for d in x.shape) for x in xs]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    if len(xs) < 2 or 0 in sizes:  # nothing to join
        return check_gradients(f, xs, method="probe", probes=probes, seed=seed, dtype=dtype,
                               names=names, compile=False)
    scales = direction_scales(sizes)
    if joint is None:
        joint = JointFunction(f, shapes, scales)
    # In numpy, one conversion: the same IEEE divisions as TensorFlow's, without the ~10 eager
    # ops (~0.3 ms a check) that reshaping, dividing and concatenating tensors cost.
    flat = tf.constant(np.concatenate([np.asarray(x).reshape(-1) / c
                                       for x, c in zip(xs, scales)]))

    # The shares from the gradient in θ', c_k g_k input by input. Compiled, they come from the
    # probes' own VJPs, asked for here (the VJP function keeps the call for the probes): for a
    # scalar loss VJP(v) is v times the gradient, and a share is a ratio of norms. The output's
    # shape and dtype come from the trace, without calling it (~0.7 ms of a later check).
    y = joint.output(flat)
    vjp = compiled_vjp(joint.function, [0])
    if vjp is not None and y.shape.num_elements() == 1:
        cotangents = scalar_cotangents(np.random.default_rng(seed), tuple(y.shape),
                                       y.dtype.as_numpy_dtype)
        ((grad,), _) = vjp([flat], [tf.constant(c, y.dtype) for c in cotangents])
        cotangent = cotangents[0]  # grad is the VJP of this one (the probes' v)
        shares_pass = 0  # counted by the probes
    elif vjp is not None:  # two cotangents, as the probes' VJPs: one trace serves both
        ones = tf.ones(y.shape, y.dtype)
        ((grad,), _) = vjp([flat], [ones, ones])
        cotangent = np.ones(tuple(y.shape))
        shares_pass = 1
    else:
        with tf.GradientTape() as tape:
            tape.watch(flat)
            y = joint(flat)
        grad = tape.gradient(y, flat, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        cotangent = np.ones(tuple(y.shape))
        shares_pass = 1
    precision = _coarsest([xs[0].dtype.name, y.dtype.name])
    # The norms in numpy from one copy (not 3 eager ops and a sync per input); they set only
    # the tolerance's share, where rounding in the last digit does not matter.
    grad = np.asarray(grad, np.float64)
    parts = np.split(grad, np.cumsum(sizes)[:-1])
    weights = np.array([math.sqrt(float(p @ p)) for p in parts])
    total = float(np.sqrt(np.sum(weights**2)))
    share = float(np.min(weights)) / total if total > 0 and np.all(np.isfinite(weights)) else 0.0
    rtol0 = _TOLERANCES[precision][1]
    rtol = max(rtol0 * share, rtol0 / _MAX_DILUTION, 10 * _EPS[precision] ** (2 / 3))
    rtol = min(rtol, rtol0)

    # The compiled function itself, not the JointFunction around it: check_gradients takes its
    # compiled fast path (all perturbed evaluations in one call, the VJPs in another) only for
    # a tf.function; given the wrapper it recorded a tape and evaluated probe by probe.
    checked = joint.function if vjp is not None else joint
    with plain_directions():  # the scales c_k are this check's weighting
        report = check_gradients(checked, [flat],
                                 method="probe", probes=probes, seed=seed, dtype=dtype,
                                 rtol=rtol, names=["joint"], compile=False)
    report.backward_passes += shares_pass
    (entry,) = report.entries
    if entry.passed:
        return _split(report, entry, names, shapes, scales, [x.dtype.name for x in xs])
    if entry.worst_input_index is None:  # not one element (mis-shaped, non-linear, NaN...)
        return _per_input(f, xs, names, probes, seed, dtype, report)

    # The wrong input, by the element bisection found.
    j = int(np.ravel_multi_index(entry.worst_input_index, (sum(sizes),)))
    offsets = np.cumsum([0, *sizes])
    k = int(np.searchsorted(offsets, j, side="right") - 1)
    wrong = _entry_for(entry, names[k], shapes[k], xs[k].dtype.name, scales[k])
    wrong.worst_input_index = tuple(int(i) for i in np.unravel_index(j - offsets[k], shapes[k]))
    wrong.joint = False  # its worst element is its own: its reported error is this input's
    if wrong.worst_analytical is not None:  # dθ'/dθ = 1/c_k: back to this input's units
        wrong.worst_analytical /= scales[k]
    if wrong.worst_numerical is not None:
        wrong.worst_numerical /= scales[k]
    # The others judged once each on their own part of these probes (breakdown.py), not by
    # checking the rest jointly again without each wrong one: a wrong gradient deep in a
    # residual network is wrong in every variable before it, and each round cost a failing
    # check's whole diagnosis (the 6-block residual MLP: 15 rounds, 2,754 evaluations, 42 s).
    rest = [i for i in range(len(xs)) if i != k]
    layout = Layout(names, shapes, [x.dtype.name for x in xs], scales, sizes)
    if vjp is None and y.shape.num_elements() == 1:
        # The probes' own cotangent and VJP, as the compiled path has them: the eager check's
        # report must be the compiled one's to the last digits (a passing variable's error is
        # rounding, which VJP(1) / 1 and VJP(v) / v round differently).
        cotangent = scalar_cotangents(np.random.default_rng(seed), tuple(y.shape),
                                      y.dtype.as_numpy_dtype)[0]
        with tf.GradientTape() as tape:
            tape.watch(flat)
            y = joint(flat)
        grad = np.asarray(tape.gradient(y, flat, output_gradients=tf.constant(cotangent, y.dtype),
                                        unconnected_gradients=tf.UnconnectedGradients.ZERO),
                          np.float64)
        report.backward_passes += 1
    screened = screen_variables(checked, flat, cotangent, grad, layout, rest, probes=probes,
                                seed=seed, h=entry.delta, precision=entry.precision)
    entries = list(screened.entries)
    entries.insert(k, wrong)
    failed = [e.name for e in screened.entries if not e.passed]
    notes = [CUT_SHORT.format(named=names[k], count=len(failed), failed=", ".join(failed))
             ] if failed else []
    return dataclasses.replace(
        _report(report, entries), notes=report.notes + notes,
        function_evaluations=report.function_evaluations + screened.function_evaluations,
        seconds=report.seconds + screened.seconds)


def _split(report: GradCheckReport, entry: GradCheckEntry, names: Sequence[str],
           shapes: list[tuple[int, ...]], scales: list[float], dtypes: list[str]
           ) -> GradCheckReport:
    entries = [_entry_for(entry, n, s, d, c) for n, s, d, c in zip(names, shapes, dtypes, scales)]
    return _report(report, entries)


def _entry_for(entry: GradCheckEntry, name: str, shape: tuple[int, ...], dtype: str,
               scale: float) -> GradCheckEntry:
    """The joint entry as this input's: its name and shape, its step in its own units."""
    notes = [f"checked jointly with the other variables: one probe set over all of them "
             f"(its elements scaled by {scale:.3g} in the direction)", *entry.notes]
    return dataclasses.replace(entry, name=name, shape=shape, dtype=dtype,
                               delta=entry.delta * scale, notes=notes, joint=True)


def _report(joint: GradCheckReport, entries: list[GradCheckEntry],
            *more: GradCheckReport) -> GradCheckReport:
    checked = [e for e in entries if e.checked]
    return dataclasses.replace(
        joint, passed=all(e.passed for e in entries), entries=entries,
        max_abs_error=max((e.max_abs_error for e in checked), default=0.0),
        max_rel_error=max((e.max_rel_error for e in checked), default=0.0),
        delta=max((e.delta for e in checked), default=0.0),
        function_evaluations=joint.function_evaluations
        + sum(r.function_evaluations for r in more),
        backward_passes=joint.backward_passes + sum(r.backward_passes for r in more),
        seconds=joint.seconds + sum(r.seconds for r in more),
        notes=joint.notes + [n for r in more for n in r.notes if n not in joint.notes])


def _per_input(f: Callable[..., Any], xs: list[Any], names: Sequence[str], probes: int,
               seed: int, dtype: Any, joint: GradCheckReport) -> GradCheckReport:
    """A joint failure bisection cannot pin on one element: each input probed on its own."""
    report = check_gradients(f, xs, method="probe", probes=probes, seed=seed, dtype=dtype,
                             names=names, compile=False)
    if report.passed:  # the joint probes saw what the separate ones did not: keep it failed
        for e in report.entries:
            e.passed = False
            e.notes.append("the joint probe over all variables failed (see the report's notes);"
                           " probed one by one, none was singled out")
        report.passed = False
        report.notes.extend(joint.entries[0].notes)
    return dataclasses.replace(
        report, function_evaluations=report.function_evaluations + joint.function_evaluations,
        backward_passes=report.backward_passes + joint.backward_passes,
        seconds=report.seconds + joint.seconds)
