"""The public entry points: check_gradients and check_variables.

Each validates its options, builds a target (a function of tensors, or a loss of variables),
runs the chosen method over every input and assembles the GradCheckReport.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gradexp.gradcheck import connected, plain_functions, second_order
from gradexp.gradcheck.checked_function import (
    _FunctionTarget,
    _skip_reason,
    _Target,
    _VariableTarget,
)
from gradexp.gradcheck.entries import _noisy
from gradexp.gradcheck.forward import check_modes, forward_entries
from gradexp.gradcheck.jacobian import _jacobian_entries
from gradexp.gradcheck.options import _coarsest, _Options
from gradexp.gradcheck.probe import _probe_entries
from gradexp.gradcheck.report import GradCheckEntry, GradCheckReport


class NoGradientError(ValueError, LookupError):
    """The checked function computes an op TensorFlow has no gradient for (``op``, its type):
    there is no analytical gradient to check. A LookupError, as TensorFlow's own error was;
    a ValueError, as the checker's other refusals."""

    def __init__(self, message: str, op: str) -> None:
        super().__init__(message)
        self.op = op


def _no_gradient_said(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A check that raises NoGradientError in one line where TensorFlow raised its LookupError
    through ~31 frames of the checker (QA: tf.linalg.lu, tf.linalg.logm,
    tf.image.adjust_saturation, tf.image.resize(method="area")); ``what`` names the function."""

    def decorate(check: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(check)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                return check(*args, **kwargs)
            except LookupError as error:
                said = _no_gradient(error, what)
                if said is None:
                    raise
            raise said  # outside the except: without TensorFlow's frames as its context

        return checked

    return decorate


def _no_gradient(error: LookupError, what: str) -> NoGradientError | None:
    """TensorFlow's "no gradient" error (eager: the registry's; traced: the op's) said in one
    line naming the op; None for any other LookupError (and for one already said)."""
    from gradexp.endings import missing_gradient

    found = None if isinstance(error, NoGradientError) else missing_gradient(error)
    if found is None:
        return None
    op, node = found
    where = "" if node is None or node == op else f" (at {node})"
    return NoGradientError(
        f"TensorFlow has no gradient for the op {op}{where} in {what}, so there is no gradient "
        "to check; compute that step with ops that have one, or give it one "
        "(tf.custom_gradient, tf.RegisterGradient)", op)


@_no_gradient_said("f")
def check_gradients(
    f: Callable[..., Any],
    xs: Sequence[Any],
    *,
    method: str = "probe",
    probes: int = 4,
    delta: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    seed: int = 0,
    dtype: Any = None,
    max_jacobian_size: int = 20_000,
    names: Sequence[str] | None = None,
    compile: bool = True,
    order: int = 1,
    modes: Sequence[str] = ("rev",),
) -> GradCheckReport:
    """Check the gradients of ``f(*xs)`` with respect to each floating-point input.

    ``f`` returns one tensor of any shape; ``xs`` are tensors or arrays (a single one is accepted
    too). Integer inputs are listed but not checked. See the package docstring for the methods;
    ``dtype="float64"`` (or ``"float32"``) casts float inputs to that dtype and evaluates ``f``
    there unless ``f`` fails or does not return that dtype, in which case the inputs' own
    dtypes are used and the report says so.

    ``compile=True`` probes a plain callable as ``tf.function(f)`` from its second check on
    (its first runs eagerly, cheaper than a trace; kept per f, so repeated checks trace it once;
    f's Python code runs when it is traced, not at every evaluation; each later check first
    compares one VJP of the kept trace with f as it is now, and traces f anew when code it
    reaches changed), which makes a probe check a few compiled calls instead of one eager call
    per evaluation.
    If f does not trace or its compiled check raises, f is checked eagerly instead, silently:
    the report is the eager one. ``compile=False`` checks f eagerly; the jacobian method
    always calls f as given.

    ``order=2`` checks second derivatives instead: the Jacobian of the gradient function
    g(xs) = d(vᵀf)/dxs (v = 1 for a scalar f, else a fixed random cotangent), i.e. the
    Hessian-vector products of f's backward pass against finite differences of g (see
    gradcheck/second_order.py; checked eagerly). ``modes=("rev", "fwd")`` also compares
    forward-mode JVPs with reverse mode and finite differences (gradcheck/forward.py). Inputs
    the tape gives no gradient are named in ``report.disconnected``.
    """
    import tensorflow as tf

    opts = _Options.make(method, probes, delta, atol, rtol, seed, dtype, max_jacobian_size,
                         compile)
    order, modes = second_order.check_order(order), check_modes(modes)
    if isinstance(xs, (list, tuple)):
        xs = list(xs)
    else:
        xs = [xs]
    tensors = [tf.convert_to_tensor(x) for x in xs]
    names = _names(names, [f"x{i}" for i in range(len(tensors))])
    _refuse_unchecked("f", "input", names, [(t.dtype, t.shape.num_elements()) for t in tensors])
    notes: list[str] = []
    if order == 2:  # the first-order check of the gradient function, eagerly
        checked = [k for k, t in enumerate(tensors)
                   if _skip_reason(t.dtype, t.shape.num_elements()) is None]
        g = second_order.gradient_of(f, tensors, checked, opts.seed)
        if opts.dtype is not None:
            tensors = _try_dtype(g, tensors, opts.dtype, notes)
        notes.append(second_order.describe(g, names, [int(np.size(t)) for t in tensors]))
        return _run(_FunctionTarget(g, tensors, names), opts, notes, modes, g)
    if opts.dtype is not None:
        tensors = _try_dtype(f, tensors, opts.dtype, notes)
    # The jacobian method stays tf.test.compute_gradient on f as given: the exact reference for
    # small inputs, 2·n calls either way (compiled, float32 rounding differs by fused ops).
    wrapped = plain_functions.compiled(f, tensors) if opts.compile and opts.method == "probe" \
        else None
    if wrapped is not None:
        try:
            return _run(_FunctionTarget(wrapped, tensors, names), opts, list(notes), modes)
        except Exception:  # noqa: BLE001 - f that does not trace: checked eagerly below
            report = _run(_FunctionTarget(f, tensors, names), opts, notes, modes)  # f's error
            plain_functions.forget(f)  # it runs eagerly but not compiled: eagerly from now on
            return report
    return _run(_FunctionTarget(f, tensors, names), opts, notes, modes)


@_no_gradient_said("loss_fn")
def check_variables(
    loss_fn: Callable[[], Any],
    variables: Sequence[Any],
    *,
    method: str = "probe",
    probes: int = 4,
    delta: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    seed: int = 0,
    dtype: Any = None,
    max_jacobian_size: int = 20_000,
    names: Sequence[str] | None = None,
    order: int = 1,
    modes: Sequence[str] = ("rev",),
) -> GradCheckReport:
    """Check the gradients of ``loss_fn()`` (any output shape) with respect to ``variables``.

    The variables (tf.Variable or Keras 3 variables) are perturbed in place by assignment and
    always restored to their original values, also when ``loss_fn`` raises. Default names are
    the Keras variable path, else ``variable.name`` without ``:0``. ``dtype=`` cannot change
    a variable's dtype: variables are checked in their own dtype and the report says so.
    ``order`` and ``modes`` as for check_gradients.
    """
    opts = _Options.make(method, probes, delta, atol, rtol, seed, dtype, max_jacobian_size)
    order, modes = second_order.check_order(order), check_modes(modes)
    variables = list(variables)
    handles = [_variable_handle(v) for v in variables]
    names = _names(names, [_variable_name(v) for v in variables])
    _refuse_unchecked("loss_fn", "variable", names,
                      [(h.dtype, h.shape.num_elements()) for h in handles])
    notes: list[str] = []
    if opts.dtype is not None:
        other = [n for n, h in zip(names, handles)
                 if h.dtype.is_floating and h.dtype.name != opts.dtype]
        if other:
            notes.append(
                f"dtype={opts.dtype!r} requested, but variables keep their dtype "
                f"({', '.join(other)} are not {opts.dtype}); checked in their own dtype."
            )
    g = None
    if order == 2:  # the first-order check of the gradient function
        checked = [k for k, h in enumerate(handles)
                   if _skip_reason(h.dtype, h.shape.num_elements()) is None]
        g = second_order.gradient_of(loss_fn, [], checked, opts.seed, handles)
        notes.append(second_order.describe(g, names, [int(np.prod(h.shape)) for h in handles]))
    target = _VariableTarget(g or loss_fn, handles, names)
    try:
        return _run(target, opts, notes, modes, g)
    finally:
        target.restore()


def _variable_handle(v: Any) -> Any:
    """The tf.Variable behind a tf.Variable or a Keras 3 variable (which tapes cannot watch)."""
    import tensorflow as tf

    if isinstance(v, tf.Variable):
        return v
    inner = getattr(v, "value", None)
    if isinstance(inner, tf.Variable):
        return inner
    raise TypeError(f"check_variables expects tf.Variable or Keras variables, got {type(v)!r}")


def _variable_name(v: Any) -> str:
    path = getattr(v, "path", None)  # Keras 3: "dense/kernel" is clearer than "kernel"
    name = path if isinstance(path, str) and path else str(getattr(v, "name", "variable"))
    return name.removesuffix(":0")


def _names(given: Sequence[str] | None, default: list[str]) -> list[str]:
    if given is None:
        names = default
    else:
        names = [str(n) for n in given]
        if len(names) != len(default):
            raise ValueError(f"names has {len(names)} entries for {len(default)} inputs")
    seen: dict[str, int] = {}
    unique = []
    for n in names:  # keep report keys (and MLflow metric keys) distinct
        seen[n] = seen.get(n, 0) + 1
        unique.append(n if seen[n] == 1 else f"{n}_{seen[n] - 1}")
    return unique


def _refuse_unchecked(what: str, kind: str, names: list[str], dtypes: list[tuple[Any, Any]]
                      ) -> None:
    """No verdict where nothing would be checked: with only a complex or an integer input the
    report said "Gradient check PASSED" about a check that never ran (QA). One line naming each
    input and why, as check_model's "not checked: ..." (no floating-point tensor to step)."""
    why = [_skip_reason(dtype, size) for dtype, size in dtypes]
    if any(w is None for w in why):
        return
    listed = "; ".join(f"{n}: {'empty ' if size == 0 else ''}{dtype.name}"
                       for n, (dtype, size) in zip(names, dtypes)) or f"no {kind}s given"
    complex_hint = ("; check a complex input as its real and imaginary parts, two float "
                    "inputs (f(tf.complex(re, im)))"
                    if any(dtype.is_complex for dtype, _ in dtypes) else "")
    raise ValueError(f"not checked: no {kind} of {what} is a non-empty floating-point tensor "
                     f"({listed}), so there is no gradient to check{complex_hint}")


def _try_dtype(f: Callable[..., Any], tensors: list[Any], dtype: str, notes: list[str]
               ) -> list[Any]:
    """Cast float inputs to `dtype` if f accepts them and returns `dtype`; else keep them."""
    import tensorflow as tf

    cast = [tf.cast(t, dtype) if t.dtype.is_floating else t for t in tensors]
    if all(c is t for c, t in zip(cast, tensors)):
        return tensors
    try:
        y = tf.convert_to_tensor(f(*cast))
        reason = None if y.dtype == dtype else f"f returned {y.dtype.name} for {dtype} inputs"
    except Exception as exc:  # noqa: BLE001 - whatever f raises means: not in this dtype
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        reason = f"f raised {type(exc).__name__} for {dtype} inputs ({first})"
    if reason is None:
        return cast
    notes.append(f"dtype={dtype!r} requested, but {reason}; checked in the inputs' own dtypes.")
    return tensors


def _run(target: _Target, opts: _Options, notes: list[str], modes: tuple[str, ...] = ("rev",),
         gradient: second_order.Gradient | None = None) -> GradCheckReport:
    start = time.perf_counter()
    if opts.method == "jacobian":
        _refuse_large(target, opts.max_jacobian_size)
    target.start(values=opts.method != "probe")
    try:
        if target.out0.size == 0:
            notes.append("the output is empty: there is nothing to check.")
        entries = _reverse_entries(target, opts)
        # Only a failing check pays the evaluation that asks (a passing one is not wrong)
        if not all(e.passed for e in entries):
            if _judged_as_float32(target, notes):
                entries = _reverse_entries(target, opts)
            else:
                entries = _rounded_like_float32(target, opts, entries, notes)
        if "fwd" in modes:
            entries += forward_entries(target, opts)
        disconnected = _disconnected(target, entries, gradient)
    finally:
        target.close()
    checked = [e for e in entries if e.checked]
    dtype_used = _coarsest([e.precision for e in checked] + [target.out_dtype])
    if any(_noisy(e) for e in checked if e.passed):
        notes.append("finite differences were noisy for some entries (see their notes): only "
                     "gradient errors larger than that noise can be seen there.")
    return GradCheckReport(
        passed=all(e.passed for e in entries),
        method=opts.method,
        entries=entries,
        max_abs_error=max((e.max_abs_error for e in checked), default=0.0),
        max_rel_error=max((e.max_rel_error for e in checked), default=0.0),
        dtype_used=dtype_used,
        dtype_requested=opts.dtype,
        delta=max((e.delta for e in checked), default=0.0),
        atol=max((e.atol for e in checked), default=0.0),
        rtol=max((e.rtol for e in checked), default=0.0),
        probes=opts.probes if opts.method == "probe" else 0,
        seed=opts.seed,
        output_shape=tuple(int(d) for d in target.out0.shape),
        function_evaluations=target.evaluations,
        backward_passes=target.backward_passes,
        seconds=time.perf_counter() - start,
        notes=notes,
        order=1 if gradient is None else 2,
        modes=modes,
        disconnected=disconnected,
    )


# An input whose probes passed only within finite differences too noisy to see a few percent
# (a float32 step next to a kink) is judged by its exact Jacobian instead, up to this many
# elements (two evaluations each). The probe's last resort, the mean of the gradient along the
# step, takes its tolerance from that noise: a 5% bug in float32 beside a relu at 0 passed.
EXACT_WHEN_NOISY = 512


def _reverse_entries(target: _Target, opts: _Options) -> list[GradCheckEntry]:
    """The entries of the VJP checks by the method asked for, from the seed's draws."""
    rng = np.random.default_rng(opts.seed)
    if opts.method == "jacobian":
        return _jacobian_entries(target, opts, rng)
    entries = _probe_entries(target, opts, rng)
    _judge_noisy_probes_exactly(target, opts, rng, entries)
    return entries


def _judged_as_float32(target: _Target, notes: list[str]) -> bool:
    """A float64 function that computes in float32 inside (a cast, an image op through
    convert_image_dtype) rounds like float32: judged with float64's steps (6e-6) and
    tolerances, its finite differences were float32 rounding, and a correct
    tf.image.rgb_to_grayscale failed both methods, the probe blaming an element (QA, where
    compute_gradient passed). Its outputs tell: at a point moved off the float32 grid (1e-6 of
    each element), every value is still a float32 number, which a computation in float64
    leaves them almost never. Then its entries take float32's steps and tolerances (True). Two
    evaluations; integer outputs (a count, a sign) tell nothing and change nothing."""
    first = next((i for i, x in enumerate(target.values) if target.skip[i] is None
                  and x.dtype == np.float64 and x.size), None)
    if target.out_dtype != "float64" or target.out_precision or first is None:
        return False
    x = target.values[first]
    moved = target.evaluate(first, x * (1 + 1e-6) + 1e-9)
    # Only the values the move changed tell (review: an output piecewise constant in the input
    # moved, a threshold's, kept the other inputs' float32 numbers and said nothing of f)
    changed = moved != target.evaluate(first, x)
    finite = moved[changed & np.isfinite(moved)]
    if not finite.size or np.all(finite == np.round(finite)) or not np.array_equal(
            finite.astype(np.float32).astype(np.float64), finite):
        return False
    target.out_precision = "float32"
    notes.append("f returns float64, but its values are float32 numbers (it computes in "
                 "float32 inside: a cast, a float32 layer or op): judged with float32's steps "
                 "and tolerances")
    return True


def _rounded_like_float32(target: _Target, opts: _Options, entries: list, notes: list[str]
                          ) -> list:
    """A failing float64 check of a function that casts float64 values down inside (a float32
    part summed into a float64 loss: an add_loss penalty cast to float32, as mixed-precision
    code writes it so that fit can sum model.losses; a layer computing one op in float32),
    whose outputs are not float32 numbers (_judged_as_float32): its finite differences at
    float64's steps were that cast's rounding, and a correct model failed the run's check at
    4,842x, blamed on the loss (QA). Its graph tells (the values cannot: a kink bends f as
    much): judged again with float32's steps and tolerances, with a note naming the cast; a
    wrong gradient larger than float32 can see still fails there. Only a failing check pays
    this (a trace of f)."""
    if target.out_dtype != "float64" or target.out_precision:
        return entries
    casts = _casts_down(target)
    if not casts:
        return entries
    target.out_precision = "float32"
    shown = ", ".join(casts[:3]) + (f" and {len(casts) - 3} more" if len(casts) > 3 else "")
    notes.append(f"f computes in float64, but casts float64 values to lower precision inside "
                 f"({shown}): judged with float32's steps and tolerances")
    return _reverse_entries(target, opts)


# Ops past which a value no longer carries a derivative: comparisons (booleans) and a tensor's
# shape. A cast feeding only them (a range guard, a condition) rounds nothing f computes.
_NOT_DIFFERENTIABLE = frozenset({"Less", "LessEqual", "Greater", "GreaterEqual", "Equal",
                                 "NotEqual", "Shape", "ShapeN", "Size", "Rank", "IsFinite",
                                 "IsNan", "IsInf", "Assert"})


def _casts_down(target: _Target) -> list[str]:
    """The Cast ops of f's graph that take float64 values to a lower precision on a path of
    data to its output (nested functions included), by name (`functional/penalty/Cast`: the
    layer in it); [] when there are none, or f does not trace (numpy inside: its float64 verdict
    stands). A cast only a guard or a condition reads (an assert, a tf.cond's predicate) is
    not on such a path (review: one made a 0.2% wrong backward pass)."""
    import tensorflow as tf

    target.evaluations += 1  # f's Python body runs in the trace: counted as a call of f
    try:
        graph = tf.function(lambda: target._forward()).get_concrete_function().graph
    except Exception:  # noqa: BLE001 - a function that does not trace says nothing here
        return []
    definition = graph.as_graph_def()
    functions = {function.signature.name: function for function in definition.library.function}
    found: set[str] = set()

    def search(nodes, outputs: list[str], seen_functions: set[str]) -> None:
        by_name = {node.name: node for node in nodes}
        stack, seen = list(outputs), set()
        while stack:
            node = by_name.get(stack.pop())
            if node is None or node.name in seen or node.op in _NOT_DIFFERENTIABLE:
                continue
            seen.add(node.name)
            if node.op == "Cast" and node.attr["SrcT"].type == tf.float64.as_datatype_enum \
                    and node.attr["DstT"].type in _LOWER:
                found.add(node.name)
            for called in _called(node, functions):
                if called not in seen_functions:
                    body = functions[called]
                    search(body.node_def, [ret.split(":")[0] for ret in body.ret.values()],
                           seen_functions | {called})
            stack += [name.split(":")[0] for name in node.input if not name.startswith("^")]

    search(definition.node, [tensor.op.name for tensor in graph.outputs], set())
    return sorted(found)


# Where float64 values lose digits: a Cast from float64 to these (TensorFlow's DataType enum)
_LOWER = frozenset({1, 19, 14})  # float32, float16, bfloat16


def _called(node, functions: dict) -> list[str]:
    """The library functions a node calls: by its op (a function called directly), or named in
    its attributes (PartitionedCall's f, If's branches, While's cond and body)."""
    names = [node.op] if node.op in functions else []
    for value in node.attr.values():
        if value.func.name in functions:
            names.append(value.func.name)
    return names


def _judge_noisy_probes_exactly(target: _Target, opts: _Options, rng: np.random.Generator,
                                entries: list) -> None:
    noisy = [i for i, entry in enumerate(entries)
             if entry.checked and entry.passed and _noisy(entry)
             and target.values[i].size <= EXACT_WHEN_NOISY]
    if not noisy:
        return
    target.close()
    target.start()  # with the output's values, which the columns' rounding noise is read from
    for i, exact in zip(noisy, _jacobian_entries(target, opts, rng, only=noisy)):
        exact.notes.insert(0, f"its probes' finite differences were too noisy to see an error "
                              f"below {2 * entries[i].noise:.0%}: judged by its exact Jacobian "
                              f"instead ({target.values[i].size} columns)")
        entries[i] = exact


def _disconnected(target: _Target, entries: list, gradient: second_order.Gradient | None
                  ) -> list[str]:
    """The inputs the tape gave no gradient, named, and a note on each such entry (order 2
    also notes the inputs whose gradient's own derivative is None)."""
    none = connected.unconnected(target, target.zero_vjps or [])
    lost = none if gradient is None else sorted(gradient.none)
    flat = [] if gradient is None else [k for k in none if k not in gradient.none]
    for k, entry in enumerate(entries[:len(target.names)]):  # the reverse-mode entries
        if k in lost:
            entry.notes.append(connected.NOTE)
        elif k in flat:
            entry.notes.append(second_order.FLAT_NOTE)
    return [target.names[k] for k in lost]


def _refuse_large(target: _Target, limit: int) -> None:
    for name, x, why in zip(target.names, target.values, target.skip):
        if why is None and x.size > limit:
            raise ValueError(
                f"input '{name}' has {x.size:,} elements, more than max_jacobian_size={limit:,}: "
                f"the jacobian method would need {2 * x.size:,} function evaluations. "
                f'Use method="probe" (randomized directional checks, cost independent of size) '
                f"or raise max_jacobian_size."
            )
