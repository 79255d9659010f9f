"""Gradient checks: are the gradients that training uses right, and if not, where are they wrong?

Training trusts whatever automatic differentiation (and every ``tf.custom_gradient`` in the model)
returns. This module compares those analytical gradients with central finite differences of the
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
    not grow with n: per probe one backward pass plus four evaluations per input. When a probe
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
also measures the finite-difference error (steps h and 2h) and widens its tolerance by it, so a
noisy function is reported as noisy instead of wrong. Kinks (relu or |x| at 0) inside the step
make finite differences wrong, not the gradient: a failing probe whose analytical gradient jumps
within the step is repeated with smaller steps and the report says so.

TensorFlow is imported inside the functions that need it, so importing this module is cheap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

__all__ = [
    "GradCheckEntry",
    "GradCheckReport",
    "check_gradients",
    "check_variables",
    "miss_probability",
]

METHODS = ("jacobian", "probe")

# What ``dtype=`` may ask to evaluate in. Inputs already in float16/bfloat16 are still checked
# in their own dtype (with the wide tolerances below); asking for it is refused.
EVALUATION_DTYPES = ("float64", "float32")

# Machine epsilon of each floating dtype the checker evaluates in.
_EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}

# (atol, rtol) per evaluation dtype. rtol is where finite differences stop being trustworthy
# with some margin: float64 central differences are good to ~1e-10, float32 to ~1e-4 at best.
_TOLERANCES = {
    "float64": (1e-8, 1e-5),
    "float32": (1e-5, 3e-3),
    "float16": (1e-3, 5e-2),
    "bfloat16": (1e-2, 1e-1),
}

# How often a probe that stepped over a kink is repeated with a smaller step.
_KINK_RETRIES = 3

# Bisection stops at this many elements; they are then checked one by one (4 evaluations each).
_NARROW_BLOCK = 4


@dataclass
class GradCheckEntry:
    """The verdict for one input (check_gradients) or one variable (check_variables).

    Errors are those of the method: Jacobian elements (jacobian), or directional derivatives
    vᵀJu normalised by ‖u‖·‖v‖ (probe), so both are on the scale of one Jacobian element.
    ``max_rel_error`` divides by max(|numerical|, atol/rtol), so values far below the absolute
    tolerance do not produce huge relative errors. ``worst_*`` names the element that disagrees
    most: ``worst_output_index`` / ``worst_input_index`` are indices into the output's and this
    input's shapes; ``worst_output_index`` is None when the element is of the cotangent-weighted
    gradient vᵀJ (the Jacobian column could not be formed), see ``worst_kind``.
    ``dtype`` is the dtype the input was evaluated in; ``precision`` the coarser of it and the
    output's dtype, which sets the default ``delta`` (the step), ``atol`` and ``rtol``.
    ``error_to_tolerance`` is the largest error divided by its tolerance (> 1 fails): how close
    a passing check came to failing. ``noise`` is the probe's measured finite-difference error
    relative to the directional derivative; ``linearity_error`` the relative gap between
    VJP(-v/2) and -VJP(v)/2.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    passed: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    checked: bool = True
    delta: float = 0.0
    atol: float = 0.0
    rtol: float = 0.0
    precision: str = ""
    probes: int = 0
    probes_failed: int = 0
    linearity_error: float = 0.0
    noise: float = 0.0
    error_to_tolerance: float = 0.0
    worst_output_index: tuple[int, ...] | None = None
    worst_input_index: tuple[int, ...] | None = None
    worst_analytical: float | None = None
    worst_numerical: float | None = None
    worst_kind: str = ""
    notes: list[str] = field(default_factory=list)
    # Full Jacobians (output size x input size) of the jacobian method, for heat maps.
    # Kept out of to_dict(): they can be large and are not JSON.
    analytical: np.ndarray | None = field(default=None, repr=False, compare=False)
    numerical: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (plain Python types only, no Jacobian arrays)."""
        skip = {"analytical", "numerical"}
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in skip}

    def describe_worst(self) -> str:
        """One line naming the worst element and how far apart its two values are."""
        if self.worst_input_index is None or self.worst_analytical is None:
            return ""
        a, n = self.worst_analytical, self.worst_numerical
        gap = abs(a - n) if n is not None else float("nan")
        rel = gap / abs(n) if n else float("inf")
        where = f"{self.name}{list(self.worst_input_index)}"
        if self.worst_output_index is not None:
            out = f"out{list(self.worst_output_index)}" if self.worst_output_index else "out"
            what = f"d {out} / d {where}"
        else:
            what = f"(v^T J)[{where}] with random cotangent v"
        return (f"worst element: {what}: analytical {a:.6g}, numerical {n:.6g} "
                f"(abs diff {gap:.2e}, rel diff {rel:.2e})")


@dataclass
class GradCheckReport:
    """Everything one gradient check found; ``passed`` is True only if every entry passed.

    ``delta``, ``atol`` and ``rtol`` are the largest used over the entries (each entry has its own,
    they depend on each input's dtype and scale). ``function_evaluations`` and
    ``backward_passes`` count what the check cost.
    """

    passed: bool
    method: str
    entries: list[GradCheckEntry]
    max_abs_error: float
    max_rel_error: float
    dtype_used: str
    dtype_requested: str | None
    delta: float
    atol: float
    rtol: float
    probes: int
    seed: int
    output_shape: tuple[int, ...]
    function_evaluations: int = 0
    backward_passes: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def failed_entries(self) -> list[GradCheckEntry]:
        """The entries whose gradients disagree with finite differences."""
        return [e for e in self.entries if not e.passed]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (plain Python types only), e.g. for an MLflow artifact."""
        out = {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name != "entries"}
        out["entries"] = [e.to_dict() for e in self.entries]
        return out

    def __str__(self) -> str:
        failed = self.failed_entries
        checked = [e for e in self.entries if e.checked]
        verdict = "PASSED" if self.passed else f"FAILED: {len(failed)} of {len(checked)} disagree"
        how = f"method={self.method}"
        if self.method == "probe":
            how += f", {self.probes} probes, seed={self.seed}"
        requested = f" (requested {self.dtype_requested})" if self.dtype_requested else ""
        lines = [
            f"Gradient check {verdict} ({how})",
            f"  evaluated in {self.dtype_used}{requested}; output shape {list(self.output_shape)}",
            (f"  max abs error {self.max_abs_error:.3e}, max rel error {self.max_rel_error:.3e}; "
             f"cost {self.function_evaluations} evaluations + {self.backward_passes} backward "
             f"passes, {self.seconds:.2f} s"),
        ]
        lines += [f"  note: {n}" for n in self.notes]
        for e in self.entries:
            lines += _entry_lines(e, self.method)
        return "\n".join(lines)


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
) -> GradCheckReport:
    """Check the gradients of ``f(*xs)`` with respect to each floating-point input.

    ``f`` returns one tensor of any shape; ``xs`` are tensors or arrays (a single one is accepted
    too). Integer inputs are listed but not checked. See the module docstring for the methods;
    ``dtype="float64"`` (or ``"float32"``) casts float inputs to that dtype and evaluates ``f``
    there unless ``f`` fails or does not return that dtype, in which case the inputs' own
    dtypes are used and the report says so.
    """
    import tensorflow as tf

    opts = _Options.make(method, probes, delta, atol, rtol, seed, dtype, max_jacobian_size)
    if isinstance(xs, (list, tuple)):
        xs = list(xs)
    else:
        xs = [xs]
    tensors = [tf.convert_to_tensor(x) for x in xs]
    names = _names(names, [f"x{i}" for i in range(len(tensors))])
    notes: list[str] = []
    if opts.dtype is not None:
        tensors = _try_dtype(f, tensors, opts.dtype, notes)
    target = _FunctionTarget(f, tensors, names)
    return _run(target, opts, notes)


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
) -> GradCheckReport:
    """Check the gradients of ``loss_fn()`` (any output shape) with respect to ``variables``.

    The variables (tf.Variable or Keras 3 variables) are perturbed in place by assignment and
    always restored to their original values, also when ``loss_fn`` raises. Default names are
    the Keras variable path, else ``variable.name`` without ``:0``. ``dtype=`` cannot change
    a variable's dtype: variables are checked in their own dtype and the report says so.
    """
    opts = _Options.make(method, probes, delta, atol, rtol, seed, dtype, max_jacobian_size)
    variables = list(variables)
    handles = [_variable_handle(v) for v in variables]
    names = _names(names, [_variable_name(v) for v in variables])
    notes: list[str] = []
    if opts.dtype is not None:
        other = [n for n, h in zip(names, handles)
                 if h.dtype.is_floating and h.dtype.name != opts.dtype]
        if other:
            notes.append(
                f"dtype={opts.dtype!r} requested, but variables keep their dtype "
                f"({', '.join(other)} are not {opts.dtype}); checked in their own dtype."
            )
    target = _VariableTarget(loss_fn, handles, names)
    try:
        return _run(target, opts, notes)
    finally:
        target.restore()


# ----------------------------------------------------------------------------------------------
# Options and small helpers


@dataclass
class _Options:
    method: str
    probes: int
    delta: float | None
    atol: float | None
    rtol: float | None
    seed: int
    dtype: str | None
    max_jacobian_size: int

    @classmethod
    def make(cls, method, probes, delta, atol, rtol, seed, dtype, max_jacobian_size) -> _Options:
        """Validate the keyword options once, with messages that say what would be accepted."""
        if method not in METHODS:
            raise ValueError(f"method={method!r}: expected one of {', '.join(METHODS)}")
        if not isinstance(probes, (int, np.integer)) or probes < 1:
            raise ValueError(f"probes={probes!r}: expected an integer >= 1")
        for key, value in (("delta", delta), ("atol", atol), ("rtol", rtol)):
            if value is not None and not (float(value) >= 0 and math.isfinite(float(value))):
                raise ValueError(f"{key}={value!r}: expected None or a finite number >= 0")
        if delta is not None and float(delta) == 0:
            raise ValueError("delta=0: the finite-difference step must be > 0 (or None)")
        if dtype is not None:
            import tensorflow as tf

            name = tf.as_dtype(dtype).name
            if name not in EVALUATION_DTYPES:
                raise ValueError(
                    f"dtype={dtype!r}: expected None, 'float64' or 'float32' (float16 and "
                    "bfloat16 finite differences are too coarse to judge a gradient by)")
            dtype = name
        if max_jacobian_size < 1:
            raise ValueError(f"max_jacobian_size={max_jacobian_size!r}: expected an integer >= 1")
        return cls(method, int(probes), _opt_float(delta), _opt_float(atol), _opt_float(rtol),
                   int(seed), dtype, int(max_jacobian_size))


def _opt_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _plain(value: Any) -> Any:
    """Turn numpy scalars, tuples and non-finite floats into JSON-ready Python values."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


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


def _defaults(dtype_name: str, opts: _Options, scale: float) -> tuple[float, float, float]:
    """Step, atol and rtol for one input: the user's values, else chosen from the dtype.

    The step cbrt(eps) balances truncation error (~h²) against rounding error (~eps/h); it is
    scaled by max(1, rms(x)) so large inputs get proportionally large steps.
    """
    eps = _EPS[dtype_name]
    atol0, rtol0 = _TOLERANCES[dtype_name]
    delta = opts.delta if opts.delta is not None else eps ** (1 / 3) * max(1.0, scale)
    atol = opts.atol if opts.atol is not None else atol0
    rtol = opts.rtol if opts.rtol is not None else rtol0
    return delta, atol, rtol


def _rounding(values: np.ndarray, eps: float) -> np.ndarray:
    """A-priori rounding error of computed outputs: 4 eps x max(|f|, median |f|).

    A function rounds at every operation, not only at its output (measured on float32 MLPs,
    losses and linear algebra: up to ~2 eps x |f|, so 4 leaves a margin); the median floor keeps
    an output that cancels to ~0 from claiming no rounding at all.
    """
    mag = np.abs(values)
    return 4.0 * eps * np.maximum(mag, np.median(mag) if mag.size else 0.0)


def _coarsest(names: list[str]) -> str:
    return max(names, key=lambda n: _EPS[n]) if names else "float64"


def _cotangent(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A random output cotangent, rounded to the output dtype, as float64.

    Gaussian for non-scalar outputs; for one-element outputs a random sign times 1.5 to 2.5, so
    a backward that ignores its upstream gradient (i.e. assumes it is 1) cannot pass.
    """
    size = int(np.prod(shape, dtype=np.int64))
    if size == 1:
        raw = np.full(shape, rng.choice([-1.0, 1.0]) * rng.uniform(1.5, 2.5))
    else:
        raw = rng.standard_normal(shape)
    return raw.astype(dtype).astype(np.float64)


# ----------------------------------------------------------------------------------------------
# What is being checked: a function of tensors, or a loss of variables


class _Target:
    """The thing under check: evaluate it with one input replaced, and its VJPs.

    Subclasses fill ``names``, ``values`` (numpy, evaluation dtype), ``dtypes`` and
    ``skip`` (a reason per input, or None if it is checked).
    """

    names: list[str]
    values: list[np.ndarray]
    dtypes: list[str]
    skip: list[str | None]

    def __init__(self) -> None:
        self.evaluations = 0
        self.backward_passes = 0
        self._tape: Any = None
        self._y: Any = None
        self.out0: np.ndarray = np.zeros(())
        self.out_dtype = "float64"
        self.out_numpy_dtype: Any = np.float64
        self.grad_shape_errors: dict[int, str] = {}

    # -- subclass hooks
    def _forward(self, i: int | None = None, value: np.ndarray | None = None) -> Any:
        raise NotImplementedError

    def _sources(self) -> list[Any]:
        raise NotImplementedError

    # -- shared machinery
    def _call(self, i: int | None = None, value: np.ndarray | None = None) -> Any:
        import tensorflow as tf

        self.evaluations += 1
        y = self._forward(i, value)
        if isinstance(y, (list, tuple, dict)):
            raise TypeError("the checked function must return one tensor, not a list/tuple/dict")
        y = tf.convert_to_tensor(y)
        if not y.dtype.is_floating:
            raise TypeError(f"the checked function returned {y.dtype.name}; expected a float")
        return y

    def evaluate(self, i: int, value: np.ndarray) -> np.ndarray:
        """Output (float64, flat) with input ``i`` replaced by ``value``."""
        return self._call(i, value).numpy().astype(np.float64).reshape(-1)

    def start(self) -> None:
        """One recorded forward pass; every VJP afterwards is a backward pass on this tape."""
        import tensorflow as tf

        with tf.GradientTape(persistent=True) as tape:
            tape.watch([s for s, why in zip(self._sources(), self.skip) if why is None])
            y = self._call()
        self._tape, self._y = tape, y
        self.out0 = y.numpy().astype(np.float64)
        self.out_dtype = y.dtype.name
        self.out_numpy_dtype = y.dtype.as_numpy_dtype
        if self.out_dtype not in _EPS:
            raise TypeError(f"unsupported output dtype {self.out_dtype}")

    def close(self) -> None:
        self._tape = self._y = None

    def vjps(self, cotangents: list[np.ndarray]) -> list[list[np.ndarray]]:
        """VJPs (float64, flat, one per input) for each cotangent, from the recorded forward."""
        import tensorflow as tf

        checked = [k for k, why in enumerate(self.skip) if why is None]
        sources = [self._sources()[k] for k in checked]
        out = []
        for c in cotangents:
            grads = self._tape.gradient(
                self._y, sources, output_gradients=tf.constant(c, dtype=self._y.dtype),
                unconnected_gradients=tf.UnconnectedGradients.ZERO,
            ) if sources else []
            self.backward_passes += 1
            flat = [np.zeros(x.size) for x in self.values]
            for k, g in zip(checked, grads):
                flat[k] = self._flat_grad(k, g)
            out.append(flat)
        return out

    def _flat_grad(self, i: int, g: Any) -> np.ndarray:
        import tensorflow as tf

        shape = self.values[i].shape
        if g is None:
            return np.zeros(self.values[i].size)
        g = tf.convert_to_tensor(g)  # IndexedSlices (gathers, embeddings) -> dense
        if tuple(g.shape) != tuple(shape):
            self.grad_shape_errors[i] = (
                f"the analytical gradient has shape {list(g.shape)} but the input has shape "
                f"{list(shape)} (a transposed or mis-shaped gradient)"
            )
            return np.full(self.values[i].size, np.nan)
        return g.numpy().astype(np.float64).reshape(-1)

    def vjp_at(self, i: int, value: np.ndarray, cotangent: np.ndarray) -> np.ndarray:
        """VJP for input ``i`` (float64, flat) with that input replaced by ``value``."""
        import tensorflow as tf

        source = self._replaced_source(i, value)
        try:
            with tf.GradientTape() as tape:
                tape.watch(source)
                y = self._call(i, source)
            g = tape.gradient(y, source, output_gradients=tf.constant(cotangent, y.dtype),
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        finally:
            self._restore(i)
        self.backward_passes += 1
        return tf.convert_to_tensor(g).numpy().astype(np.float64).reshape(-1)

    def _replaced_source(self, i: int, value: np.ndarray) -> Any:
        raise NotImplementedError

    def _restore(self, i: int) -> None:
        """Undo _replaced_source (variables only)."""

    def column(self, i: int, j: int, cotangent: np.ndarray) -> np.ndarray | None:
        """Analytical Jacobian column d out / d input_i[j], by differentiating the VJP in v.

        The VJP is linear in v, so its derivative with respect to v is the column: one forward
        and two backward passes, through any custom gradient. None if that is not possible.
        """
        import tensorflow as tf

        sources = self._sources()
        try:
            v = tf.constant(cotangent, dtype=self.out_dtype)
            with tf.GradientTape() as outer:
                outer.watch(v)
                with tf.GradientTape() as inner:
                    inner.watch(sources[i])
                    y = self._call()
                g = inner.gradient(y, sources[i], output_gradients=v)
                if g is None:
                    return np.zeros(self.out0.size)
                gj = tf.reshape(tf.convert_to_tensor(g), [-1])[j]
            col = outer.gradient(gj, v)
            self.backward_passes += 2
        except Exception:  # noqa: BLE001 - e.g. an op without a second-order gradient
            return None
        if col is None:
            return np.zeros(self.out0.size)
        return tf.convert_to_tensor(col).numpy().astype(np.float64).reshape(-1)

    def jacobians(self, i: int, delta: float) -> tuple[np.ndarray, np.ndarray]:
        """(analytical, numerical) Jacobians, output size x input size, by central differences.

        Each element is perturbed by ±delta in the input's dtype; the difference is divided by
        the step actually realised after rounding, which matters in float32.
        """
        m, n = self.out0.size, self.values[i].size
        rows = [np.eye(1, m, r).reshape(self.out0.shape) for r in range(m)]
        analytical = np.stack([g[i] for g in self.vjps(rows)]) if m else np.zeros((0, n))
        numerical = np.zeros((m, n))
        x = self.values[i]
        work = x.copy().reshape(-1)
        dt = x.dtype
        for j in range(n):
            orig = work[j]
            plus = dt.type(float(orig) + delta)
            minus = dt.type(float(orig) - delta)
            step = float(plus) - float(minus)
            work[j] = plus
            fp = self.evaluate(i, work.reshape(x.shape))
            work[j] = minus
            fm = self.evaluate(i, work.reshape(x.shape))
            work[j] = orig
            numerical[:, j] = (fp - fm) / step if step else 0.0
        return analytical, numerical


class _FunctionTarget(_Target):
    def __init__(self, f: Callable[..., Any], tensors: list[Any], names: list[str]) -> None:
        super().__init__()
        self.f = f
        self.tensors = tensors
        self.names = names
        self.values = [t.numpy() for t in tensors]
        self.dtypes = [t.dtype.name for t in tensors]
        self.skip = [_skip_reason(t.dtype, t.shape.num_elements()) for t in tensors]

    def _sources(self) -> list[Any]:
        return self.tensors

    def _forward(self, i: int | None = None, value: Any = None) -> Any:
        import tensorflow as tf

        args = list(self.tensors)
        if i is not None:
            args[i] = value if tf.is_tensor(value) else tf.constant(value, self.tensors[i].dtype)
        return self.f(*args)

    def _replaced_source(self, i: int, value: np.ndarray) -> Any:
        import tensorflow as tf

        return tf.constant(value, dtype=self.tensors[i].dtype)

    def jacobians(self, i: int, delta: float) -> tuple[np.ndarray, np.ndarray]:
        """TensorFlow's own full-Jacobian check, on input ``i`` with the others held fixed."""
        import tensorflow as tf

        def f_i(x: Any) -> Any:
            self.evaluations += 1
            args = list(self.tensors)
            args[i] = x
            return self.f(*args)

        (analytical,), (numerical,) = tf.test.compute_gradient(f_i, [self.tensors[i]], delta)
        self.backward_passes += self.out0.size
        return np.asarray(analytical, np.float64), np.asarray(numerical, np.float64)


class _VariableTarget(_Target):
    def __init__(self, loss_fn: Callable[[], Any], handles: list[Any], names: list[str]) -> None:
        super().__init__()
        self.loss_fn = loss_fn
        self.handles = handles
        self.names = names
        self.values = [h.numpy() for h in handles]
        self.dtypes = [h.dtype.name for h in handles]
        self.skip = [_skip_reason(h.dtype, h.shape.num_elements()) for h in handles]

    def _sources(self) -> list[Any]:
        return self.handles

    def _forward(self, i: int | None = None, value: Any = None) -> Any:
        if i is None or value is self.handles[i]:
            return self.loss_fn()
        self.handles[i].assign(value)
        try:
            return self.loss_fn()
        finally:
            self.handles[i].assign(self.values[i])

    def _replaced_source(self, i: int, value: np.ndarray) -> Any:
        self.handles[i].assign(value)  # undone by _restore, also on error
        return self.handles[i]

    def _restore(self, i: int) -> None:
        self.handles[i].assign(self.values[i])

    def restore(self) -> None:
        """Put every variable back to the value it had before the check."""
        for h, v in zip(self.handles, self.values):
            h.assign(v)


def _skip_reason(dtype: Any, size: int | None) -> str | None:
    if not dtype.is_floating:
        return f"not checked: {dtype.name} is not a floating-point dtype"
    if dtype.name not in _EPS:
        return f"not checked: dtype {dtype.name} is not supported"
    if size == 0:
        return "not checked: empty"
    return None


# ----------------------------------------------------------------------------------------------
# Running a check


def _run(target: _Target, opts: _Options, notes: list[str]) -> GradCheckReport:
    start = time.perf_counter()
    if opts.method == "jacobian":
        _refuse_large(target, opts.max_jacobian_size)
    target.start()
    try:
        rng = np.random.default_rng(opts.seed)
        if target.out0.size == 0:
            notes.append("the output is empty: there is nothing to check.")
        if opts.method == "jacobian":
            entries = _jacobian_entries(target, opts, rng)
        else:
            entries = _probe_entries(target, opts, rng)
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
    )


def _noisy(entry: GradCheckEntry) -> bool:
    """Is the measured finite-difference error what limits this entry's verdict?"""
    return entry.noise > max(10 * entry.rtol, 0.01)


def _refuse_large(target: _Target, limit: int) -> None:
    for name, x, why in zip(target.names, target.values, target.skip):
        if why is None and x.size > limit:
            raise ValueError(
                f"input '{name}' has {x.size:,} elements, more than max_jacobian_size={limit:,}: "
                f"the jacobian method would need {2 * x.size:,} function evaluations. "
                f'Use method="probe" (randomized directional checks, cost independent of size) '
                f"or raise max_jacobian_size."
            )


def _new_entry(target: _Target, i: int, opts: _Options) -> GradCheckEntry:
    x = target.values[i]
    entry = GradCheckEntry(name=target.names[i], shape=tuple(int(d) for d in x.shape),
                           dtype=target.dtypes[i], passed=True)
    if target.skip[i] is not None:
        entry.checked = False
        entry.notes.append(target.skip[i])
        return entry
    entry.precision = _coarsest([target.dtypes[i], target.out_dtype])
    scale = float(np.sqrt(np.mean(np.square(x.astype(np.float64)))))
    entry.delta, entry.atol, entry.rtol = _defaults(entry.precision, opts, scale)
    return entry


def _linearity(entry: GradCheckEntry, g: np.ndarray, g_half: np.ndarray) -> None:
    """VJP(-v/2) must be -VJP(v)/2; a backward that ignores or rectifies its upstream fails."""
    gap = float(np.max(np.abs(g_half + 0.5 * g), initial=0.0))
    ref = max(float(np.max(np.abs(0.5 * g), initial=0.0)),
              float(np.max(np.abs(g_half), initial=0.0)))
    entry.linearity_error = gap / ref if ref > 0 else 0.0
    if not entry.linearity_error <= _linearity_limit(entry):
        entry.passed = False
        entry.notes.append(
            f"the backward pass is not linear in its upstream gradient: VJP(-v/2) differs from "
            f"-VJP(v)/2 by {entry.linearity_error:.2e} (relative); it ignores, rectifies or "
            "mis-scales the incoming gradient."
        )


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


# -- the jacobian method


def _jacobian_entries(target: _Target, opts: _Options, rng: np.random.Generator
                      ) -> list[GradCheckEntry]:
    c = _cotangent(rng, target.out0.shape, target.out_numpy_dtype)
    g, g_half = target.vjps([c, -0.5 * c])
    entries = []
    for i in range(len(target.values)):
        entry = _new_entry(target, i, opts)
        entries.append(entry)
        if not entry.checked or target.out0.size == 0 or _shape_error(target, i, entry):
            continue
        _linearity(entry, g[i], g_half[i])
        analytical, numerical = target.jacobians(i, entry.delta)
        entry.analytical, entry.numerical = analytical, numerical
        _compare_jacobian(entry, target, i, analytical, numerical, c.reshape(-1), g[i])
    return entries


def _compare_jacobian(entry: GradCheckEntry, target: _Target, i: int, analytical: np.ndarray,
                      numerical: np.ndarray, c: np.ndarray, g: np.ndarray) -> None:
    """Every Jacobian element, then the VJP with the random cotangent c against cᵀ·J_numerical.

    The second comparison is what catches a backward that mishandles its upstream gradient:
    the Jacobian rows are built with one-hot cotangents, which such a backward can get right.
    """
    eps = _EPS[entry.precision]
    # Rounding noise of each output, turned into a derivative error by the step.
    row_noise = _rounding(target.out0.reshape(-1), eps) / entry.delta
    j_abs, j_rel, j_ratio = _errors(analytical, numerical, row_noise[:, None], entry)
    c_norm = float(np.linalg.norm(c)) or 1.0
    row_n = c @ numerical
    r_abs, r_rel, r_ratio = _errors(g / c_norm, row_n / c_norm,
                                    float(np.linalg.norm(c * row_noise)) / c_norm, entry)
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


def _errors(analytical: Any, numerical: Any, noise: Any, entry: GradCheckEntry
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Absolute error, relative error and error/tolerance ratio, elementwise.

    Tolerance: atol + rtol·|numerical| + 2·noise (noise = estimated finite-difference error).
    A NaN anywhere gives ratio inf, i.e. a failure.
    """
    a, n = np.asarray(analytical, np.float64), np.asarray(numerical, np.float64)
    diff = np.abs(a - n)
    floor = entry.atol / entry.rtol if entry.rtol > 0 else 0.0
    rel = diff / np.maximum(np.maximum(np.abs(n), floor), np.finfo(np.float64).tiny)
    tol = entry.atol + entry.rtol * np.abs(n) + 2.0 * noise
    ratio = np.where(np.isnan(diff), np.inf, diff / np.maximum(tol, np.finfo(np.float64).tiny))
    diff = np.where(np.isnan(diff), np.inf, diff)
    rel = np.where(np.isnan(rel), np.inf, rel)
    return np.atleast_1d(diff), np.atleast_1d(rel), np.atleast_1d(ratio)


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(k) for k in np.unravel_index(int(flat), shape)) if shape else ()


# -- the probe method


@dataclass
class _Probe:
    """One directional check of one input (values normalised by ‖u‖·‖v‖)."""

    analytical: float
    numerical: float
    fd_error: float  # |difference between the step-h and step-2h estimates|
    rounding: float  # a-priori rounding error of the outputs
    step: float


def _probe_entries(target: _Target, opts: _Options, rng: np.random.Generator
                   ) -> list[GradCheckEntry]:
    vs = [_cotangent(rng, target.out0.shape, target.out_numpy_dtype) for _ in range(opts.probes)]
    grads = target.vjps(vs + [-0.5 * vs[0]])
    entries = []
    for i in range(len(target.values)):
        entry = _new_entry(target, i, opts)
        entries.append(entry)
        if not entry.checked or target.out0.size == 0 or _shape_error(target, i, entry):
            continue
        _linearity(entry, grads[0][i], grads[-1][i])
        _probe_one(entry, target, i, vs, [g[i] for g in grads[:-1]], rng)
    return entries


def _probe_one(entry: GradCheckEntry, target: _Target, i: int, vs: list[np.ndarray],
               gs: list[np.ndarray], rng: np.random.Generator) -> None:
    x = target.values[i]
    x64 = x.astype(np.float64).reshape(-1)
    vs = [v.reshape(-1) for v in vs]
    directions = [rng.standard_normal(x64.size) for _ in vs]
    results = [_measure(target, i, x, x64, u, entry.delta, v, g, entry)
               for u, v, g in zip(directions, vs, gs)]
    ratio, noise = _judge(results, entry)
    # A probe that fails because it stepped over a kink is repeated with smaller steps (fewer
    # kinks inside; more rounding noise, which the tolerance then accounts for).
    shrink = 1 / 64 if _EPS[entry.precision] < 1e-10 else 1 / 8
    kinks: list[int] = []
    retries = [0] * len(results)
    while True:  # re-judged after each round: a retried probe changes the others' tolerance
        todo = [k for k in np.flatnonzero(~(ratio <= 1)) if retries[k] < _KINK_RETRIES]
        for k in todo:
            retries[k] = _KINK_RETRIES
            if _crosses_kink(target, i, x, x64, directions[k], vs[k], gs[k], results[k]):
                retries[k] = kinks.count(k) + 1
                kinks.append(k)
                results[k] = _measure(target, i, x, x64, directions[k],
                                      results[k].step * shrink, vs[k], gs[k], entry)
        if not todo:
            break
        ratio, noise = _judge(results, entry)
    if kinks:
        steps = ", ".join(f"{results[k].step:.1e}" for k in sorted(set(kinks)))
        entry.notes.append(
            f"{len(set(kinks))} probe(s) crossed a kink (the analytical gradient jumps within the "
            "step, e.g. relu at 0), where finite differences are wrong; repeated with smaller "
            f"steps (down to {steps})"
            + (": they agree." if np.all(ratio <= 1) else ": they still disagree.")
        )
    if _noisy(entry):
        entry.notes.append(
            f"finite differences are noisy here: their estimated error is {entry.noise:.1%} of "
            f"the directional derivative, so gradient errors below about {2 * entry.noise:.0%} "
            "cannot be seen (kinks or float32 rounding; dtype='float64' helps)."
        )
    if entry.probes_failed:
        entry.passed = False
    if not entry.passed:
        k = int(np.argmax(ratio))
        noise_abs = noise * float(np.linalg.norm(directions[k]) * np.linalg.norm(vs[k]))
        _narrow(entry, target, i, directions[k], vs[k], gs[k], results[k].step, noise_abs)


def _measure(target: _Target, i: int, x: np.ndarray, x64: np.ndarray, u: np.ndarray, h: float,
             v: np.ndarray, g: np.ndarray, entry: GradCheckEntry) -> _Probe:
    """One probe: directional derivatives at steps h and 2h, normalised by ‖u‖·‖v‖."""
    eps = _EPS[entry.precision]
    norm = float(np.linalg.norm(u) * np.linalg.norm(v)) or 1.0
    (a1, n1), fp, fm = _directional(target, i, x, x64, u, h, v, g)
    (a2, n2), _, _ = _directional(target, i, x, x64, u, 2 * h, v, g)
    rounding = float(np.abs(v) @ (_rounding(fp, eps) + _rounding(fm, eps))) / (2 * h)
    # A gradient error is the same at both steps; the finite-difference error is not.
    fd_error = abs((a1 - n1) - (a2 - n2))
    return _Probe(a1 / norm, n1 / norm, fd_error / norm, rounding / norm, h)


def _judge(results: list[_Probe], entry: GradCheckEntry) -> tuple[np.ndarray, float]:
    """Error/tolerance ratio per probe (> 1 fails); fills the entry's error fields.

    Tolerance: atol + rtol·scale + 2·noise, where scale is the probe's numerical directional
    derivative (at least their rms, so a probe that happens to be ~0 is not judged relatively)
    and noise the largest finite-difference error measured over the probes.
    """
    numerical = np.array([p.numerical for p in results])
    analytical = np.array([p.analytical for p in results])
    noise = max(max(p.fd_error, p.rounding) for p in results)
    rms = float(np.sqrt(np.mean(numerical**2)))
    scale = np.maximum(np.abs(numerical), rms)
    diff = np.abs(analytical - numerical)
    tol = entry.atol + entry.rtol * scale + 2.0 * noise
    ratio = np.where(np.isnan(diff), np.inf, diff / np.maximum(tol, np.finfo(float).tiny))
    floor = entry.atol / entry.rtol if entry.rtol > 0 else np.finfo(float).tiny
    entry.error_to_tolerance = float(np.max(ratio))
    entry.probes = len(results)
    entry.probes_failed = int(np.sum(~(ratio <= 1)))
    entry.max_abs_error = float(np.max(np.where(np.isnan(diff), np.inf, diff)))
    entry.max_rel_error = float(np.max(diff / np.maximum(scale, floor)))
    entry.noise = noise / max(rms, floor)
    return ratio, noise


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
    curve = float((target.vjp_at(i, plus, vv) + target.vjp_at(i, minus, vv) - 2 * g) @ u)
    norm = float(np.linalg.norm(u) * np.linalg.norm(v)) or 1.0
    return abs(curve) / norm >= 0.5 * abs(probe.analytical - probe.numerical)


def _directional(target: _Target, i: int, x: np.ndarray, x64: np.ndarray, u: np.ndarray,
                 h: float, v: np.ndarray, g: np.ndarray
                 ) -> tuple[tuple[float, float], np.ndarray, np.ndarray]:
    """(analytical, numerical) derivative along u with step h, plus the two outputs.

    Both use the perturbation actually realised in the input's dtype, so rounding the
    perturbed input (large in float32) does not count as a gradient error.
    """
    hu = h * u
    plus = (x64 + hu).astype(x.dtype, copy=False)
    minus = (x64 - hu).astype(x.dtype, copy=False)
    fp = target.evaluate(i, plus.reshape(x.shape))
    fm = target.evaluate(i, minus.reshape(x.shape))
    step = plus.astype(np.float64, copy=False) - minus.astype(np.float64, copy=False)
    analytical = float(g @ step) / (2 * h)
    numerical = float(v @ (fp - fm)) / (2 * h)
    return (analytical, numerical), fp, fm


def _narrow(entry: GradCheckEntry, target: _Target, i: int, u: np.ndarray, v: np.ndarray,
            g: np.ndarray, h: float, noise_abs: float) -> None:
    """Point at the wrong element of a failing input, at a cost of O(log n) evaluations.

    Bisection on the failing probe (direction u, cotangent v, analytical VJP g, step h) down to
    _NARROW_BLOCK elements; those are checked one by one with central differences of vᵀf, and
    for the worst one the exact Jacobian column (numerical: the two evaluations just made;
    analytical: derivative of the VJP in v) names the output element too.
    """
    x = target.values[i]
    lo, hi = _bisect(entry, target, i, u, v, g, h, noise_abs)
    r, j, num, col, col_noise = _worst_in_block(entry, target, i, v, g, h, lo, hi)
    analytical_col = None
    if entry.linearity_error <= _linearity_limit(entry):
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
            g: np.ndarray, h: float, noise_abs: float) -> tuple[int, int]:
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

    lo, hi = 0, x64.size
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
            orig = work[j]
            plus, minus = x.dtype.type(float(orig) + step), x.dtype.type(float(orig) - step)
            realised = float(plus) - float(minus)
            work[j] = plus
            fp = target.evaluate(i, work.reshape(x.shape))
            work[j] = minus
            fm = target.evaluate(i, work.reshape(x.shape))
            work[j] = orig
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


# ----------------------------------------------------------------------------------------------
# Text


def _entry_lines(e: GradCheckEntry, method: str) -> list[str]:
    status = "ok  " if e.passed else "FAIL"
    if not e.checked:
        status = "skip"
    head = f"  {status}  {e.name}  shape {list(e.shape)}  {e.dtype}"
    if not e.checked:
        return [head] + [f"        {n}" for n in e.notes]
    head += (f": max abs error {e.max_abs_error:.2e}, max rel error {e.max_rel_error:.2e}; "
             f"step {e.delta:.2e}, atol {e.atol:.0e}, rtol {e.rtol:.0e}")
    if method == "probe":
        head += f"; {e.probes_failed}/{e.probes} probes failed"
    lines = [head]
    worst = e.describe_worst()
    if worst and (not e.passed or method == "jacobian"):
        lines.append(f"        {worst}")
    lines += [f"        note: {n}" for n in e.notes]
    return lines
