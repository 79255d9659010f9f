"""Gradient checks: are the gradients that training uses right, and if not, where are they wrong?

Training trusts whatever automatic differentiation (and every ``tf.custom_gradient`` in the model)
returns. This package compares those analytical gradients with central finite differences of the
function itself and reports, per input or per variable, whether they agree, which element disagrees
most and by how much, and which dtype, step and tolerances the verdict rests on.

Two methods (``method=``):

``"jacobian"``
    The full numerical Jacobian against the full analytical one: ``tf.test.compute_gradient`` per
    input for :func:`check_gradients`; the same central differences by temporarily assigning
    perturbed values for :func:`check_variables`. Exact, and it points at one (output, input)
    element, but it costs 2·n evaluations for an input of n elements (5,000 inputs take seconds,
    90,000 take minutes), so inputs above ``max_jacobian_size`` are refused.
``"probe"``
    Randomized directional checks. For a random output cotangent v and a Gaussian direction u,
    the analytical vᵀJu (one backward pass, shared by all inputs) is compared with the central
    difference vᵀ(f(x + hu) - f(x - hu)) / 2h, one input at a time. A wrong gradient g' = g + e
    makes the two differ by e·u, a Gaussian with standard deviation ‖e‖, so it escapes one probe
    only if that Gaussian lands inside the tolerance; see :func:`miss_probability`. The cost does
    not grow with n: per probe two evaluations per input (four where a probe fails at first
    sight, to measure the finite-difference error) and one backward pass, which a scalar
    output's probes share (docs/gradcheck.md). When a probe
    fails, the failing input is narrowed down by bisection (probes restricted to halves of it),
    then exact central differences on the last few elements and the exact Jacobian column of the
    worst one name the wrong (output, input) element.

Both methods also check two things gradient checkers usually leave out, because they are where
hand-written backward functions go wrong:

* The backward pass must be linear in its upstream gradient: VJP(-v/2) must equal -VJP(v)/2. A
  backward that ignores its upstream gradient (or takes its absolute value) fails this exactly.
* Cotangents are random and non-uniform, never all ones, and a scalar output gets a random
  cotangent of magnitude 1.5 to 2.5; a backward that ignores its upstream gradient is therefore
  wrong against the finite differences too, even when it sits right at a scalar loss.

Finite differences are noise-limited in low precision (float32: about 1e-3 relative at best), so
``dtype="float64"`` evaluates the function in float64 when it allows it (``dtype="float32"``
asks for float32, e.g. to check code as it trains). Either way the step is cbrt(machine
epsilon) · max(1, rms(x)) and the tolerances come from the dtype evaluated in; the probe method
also measures the finite-difference error (steps h and 2h, where a probe fails at step h alone)
and widens its tolerance by it, so a noisy function is reported as noisy instead of wrong. Kinks
(relu or |x| at 0) inside the step make finite differences wrong, not the gradient: a failing
probe whose analytical gradient jumps within the step is repeated with smaller steps and the
report says so; one (or a scalar output's Jacobian column) still failing is judged against the
mean of the analytical gradient along its step, which a central difference measures exactly.

The package, one module per part, imports flowing one way (each only from those above it):

    options.py   the keyword options, dtypes, eps and tolerances, steps, rounding, cotangents
    report.py    GradCheckReport, GradCheckEntry, to_dict(), the text of str(report)
    directions.py  probe directions, drawn once per (seed, input, probe) and kept
    compiled.py  a tf.function's compiled calls: all VJPs in one, all f(x ± h·u) in another
    py_functions.py  tf.py_function, whose gradient runs once per forward: a forward per VJP
    checked_function.py what is checked: a function of tensors or a loss of variables; its VJPs
    entries.py   one entry per input: its step and tolerances, shared judgements
    jacobian.py  the jacobian method
    bisection.py bisection to the wrong element of a failing probe
    probe.py     the probe method, miss_probability
    connected.py which inputs get no gradient at all (report.disconnected)
    forward.py   modes=("rev", "fwd"): forward-mode JVPs against reverse mode and differences
    second_order.py  order=2: the gradient as a function, checked to first order
    plain_functions.py  compile=True: a plain callable probed as a tf.function (eager fallback)
    checker.py   check_gradients, check_variables; NoGradientError (an op without a gradient)
    joint.py     check_jointly: one probe set over several inputs (a run's checks use it)
    breakdown.py which other inputs of a failing joint check are wrong, at a bounded cost
    keras_model.py  check_model: a Keras model's training loss, in training mode, as a run checks
    culprits.py  find_culprits: which layer of a Keras model is wrong, each checked alone

TensorFlow is imported inside the functions that need it, so importing this package is cheap.
"""

from gradexp.gradcheck.checker import NoGradientError, check_gradients, check_variables
from gradexp.gradcheck.keras_model import check_model
from gradexp.gradcheck.options import EVALUATION_DTYPES as EVALUATION_DTYPES  # public, as before
from gradexp.gradcheck.options import METHODS as METHODS  # public, as before
from gradexp.gradcheck.probe import miss_probability
from gradexp.gradcheck.report import GradCheckEntry, GradCheckReport

__all__ = [
    "GradCheckEntry",
    "GradCheckReport",
    "NoGradientError",
    "check_gradients",
    "check_model",
    "check_variables",
    "miss_probability",
]
