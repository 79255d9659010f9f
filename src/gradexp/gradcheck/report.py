"""What a gradient check found: GradCheckReport, one GradCheckEntry per input or variable.

Plain dataclasses with their JSON-ready ``to_dict()`` and their text (``str(report)``, one line
per entry, ``describe_worst()``), and the one reported error of an entry (ReportedError).
Imports only options.py of the checker (the dtypes' tolerances).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from gradexp.gradcheck.options import _TOLERANCES


@dataclass(frozen=True)
class ReportedError:
    """One definition of "the error" of an entry: a relative error, the tolerance it is held
    to on the same scale, and their ratio (> 1: wrong), so error = ratio x tolerance.

    ``element`` True: the numbers of the element the check names as wrong (``worst_*``: a
    Jacobian element, also where the probe method located it by bisection):
    rel_error = |analytical - numerical| / max(|numerical|, atol/rtol) and
    tolerance = (atol + rtol·|numerical|) / max(|numerical|, atol/rtol), with the entry's
    atol and rtol (for a located element at least the dtype's: a joint probe's narrower rtol
    is for directional derivatives). Otherwise (a passing
    entry, or one whose wrong element could not be isolated) the method's own numbers:
    ``max_rel_error`` and ``error_to_tolerance`` over the elements it compared (Jacobian
    elements, or the probes' directional derivatives), tolerance = their quotient.
    """

    name: str
    rel_error: float
    tolerance: float
    error_to_tolerance: float
    element: bool

    def describe(self) -> str:
        """The words the console and the run's summary use for it."""
        if not math.isfinite(self.rel_error):  # NaN or inf compared: no gradient to judge
            return (f"relative error {self.rel_error:.2e}: the values compared are NaN or "
                    "infinite (the loss or its gradient is not finite at this point, e.g. the "
                    "model's output on the data), no gradient to judge")
        ratio = self.error_to_tolerance
        times = f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.2f}x"
        return f"relative error {self.rel_error:.2e} = {times} its tolerance {self.tolerance:.1e}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rel_error": _plain(self.rel_error),
                "tolerance": _plain(self.tolerance),
                "error_to_tolerance": _plain(self.error_to_tolerance), "element": self.element}


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
    mode: str = "rev"  # "fwd": forward-mode JVPs against reverse mode and finite differences
    # The verdict of one probe set over several inputs (gradcheck.joint), copied to each: its
    # errors are the set's, not this input's own
    joint: bool = False
    # Full Jacobians (output size x input size) of the jacobian method, for heat maps.
    # Kept out of to_dict(): they can be large and are not JSON.
    analytical: np.ndarray | None = field(default=None, repr=False, compare=False)
    numerical: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (plain Python types only, no Jacobian arrays)."""
        skip = {"analytical", "numerical"}
        out = {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in skip}
        out["reported_error"] = self.reported_error().to_dict()
        return out

    def reported_error(self) -> ReportedError:
        """The entry's error as gradexp reports it (console, summary, json, MLflow): see
        ReportedError."""
        a, n = self.worst_analytical, self.worst_numerical
        if not self.passed and a is not None and n is not None and math.isfinite(a - n):
            atol, rtol = self.atol, self.rtol
            if self.probes and self.precision in _TOLERANCES:
                # An element located by bisection: held to the dtype's element-wise tolerances
                # (a joint probe narrows rtol for directional derivatives, not for elements).
                atol, rtol = (max(t, own) for t, own in zip(_TOLERANCES[self.precision],
                                                             (atol, rtol)))
            floor = atol / rtol if rtol > 0 else 0.0
            scale = max(abs(n), floor) or float(np.finfo(np.float64).tiny)
            rel, tolerance = abs(a - n) / scale, (atol + rtol * abs(n)) / scale
            if tolerance > 0 and rel > tolerance:  # the element is clearly wrong: its numbers
                return ReportedError(self.name, rel, tolerance, rel / tolerance, True)
        ratio = self.error_to_tolerance
        tolerance = self.max_rel_error / ratio if ratio > 0 and math.isfinite(ratio) else self.rtol
        return ReportedError(self.name, self.max_rel_error, tolerance, ratio, False)

    def describe_worst(self) -> str:
        """One line naming the worst element and how far apart its two values are."""
        if self.worst_input_index is None or self.worst_analytical is None:
            return ""
        a, n = self.worst_analytical, self.worst_numerical
        gap = abs(a - n) if n is not None else float("nan")
        rel = gap / abs(n) if n else (0.0 if gap == 0 else float("inf"))  # 0/0: they agree
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
    ``backward_passes`` count what the check cost. ``order`` is 1 (first derivatives) or 2
    (second: the Jacobian of the gradient, second_order.py); ``modes`` the differentiation modes
    compared (``"fwd"`` adds entries with ``mode="fwd"``, forward.py); ``disconnected`` names the
    inputs the tape gave no gradient at all (None: they do not reach the output).
    ``culprits`` (check_model only): when its check failed, the layers whose own backward is
    wrong, each checked alone (culprits.py), as a run's check names them; [] when no layer is
    wrong alone (e.g. the loss is); None when not searched (the check passed, or a plain
    function). ``culprit_checks`` are those layers' verdicts (culprits.LayerVerdict).
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
    order: int = 1
    modes: tuple[str, ...] = ("rev",)
    disconnected: list[str] = field(default_factory=list)
    culprits: list[str] | None = None
    culprit_checks: list[Any] = field(default_factory=list)

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
        if self.order != 1 or tuple(self.modes) != ("rev",):
            how += f", order {self.order}, modes {'+'.join(self.modes)}"
        requested = f" (requested {self.dtype_requested})" if self.dtype_requested else ""
        lines = [
            f"Gradient check {verdict} ({how})",
            f"  evaluated in {self.dtype_used}{requested}; output shape {list(self.output_shape)}",
            (f"  max abs error {self.max_abs_error:.3e}, max rel error {self.max_rel_error:.3e}; "
             f"cost {self.function_evaluations} evaluations + {self.backward_passes} backward "
             f"passes, {self.seconds:.2f} s"),
        ]
        lines += [f"  note: {n}" for n in self.notes]
        if self.culprits is not None:
            lines.append("  wrong layer(s), each checked alone: "
                         + (", ".join(self.culprits) or "none (no layer is wrong alone)"))
        for e in self.entries:
            lines += _entry_lines(e, self.method)
        return "\n".join(lines)


def _plain(value: Any) -> Any:
    """Turn numpy scalars, tuples and non-finite floats into JSON-ready Python values (and
    objects with a to_dict, e.g. culprits.LayerVerdict, into theirs)."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
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
