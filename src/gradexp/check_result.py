"""What one pass of a run's gradient checks found (gradexp.run_checks makes it): every report,
the verdict, the worst error, the notes, and the layers found wrong; what the console, the
report json, the heatmaps and MLflow's gradcheck/* metrics are made from."""

from __future__ import annotations

from dataclasses import dataclass, field

from gradexp.gradcheck import GradCheckReport
from gradexp.gradcheck.culprits import LayerVerdict
from gradexp.gradcheck.report import ReportedError


@dataclass
class CheckResult:
    """Every report of one check pass (one epoch), keyed "variables/probe", "inputs/jacobian"...

    ``culprits``: when the check failed, the layers whose own backward is wrong, each checked
    alone (gradcheck/culprits.py); empty when no layer is wrong alone (e.g. the loss is).
    ``culprits_searched`` says whether that search ran (it runs only on a failure)."""

    epoch: int
    reports: dict[str, GradCheckReport] = field(default_factory=dict)
    dtype: str = "float64"  # what the loss and model were evaluated in
    mode: str = "train"  # the model's mode checked: train | inference | both
    notes: list[str] = field(default_factory=list)  # e.g. why not in the requested dtype
    rows: int = 0  # training rows the loss was checked on (gradcheck.max_rows)
    rows_total: int = 0  # of this many
    order: int = 1  # gradcheck.order: 2 adds the "<target>/order2/<method>" reports
    disconnected: list[str] = field(default_factory=list)  # no gradient (asked at the first)
    culprits: list[LayerVerdict] = field(default_factory=list)
    culprits_searched: bool = False
    unchecked: str | None = None  # why nothing could be checked (then no report, no verdict)
    held: tuple[type, ...] = ()  # layer classes held in inference mode (gradexp.random_layers)

    @property
    def passed(self) -> bool:
        """No report failed (True when nothing was checked: `verdict` tells the two apart)."""
        return all(report.passed for report in self.reports.values())

    @property
    def verdict(self) -> bool | None:
        """passed, or None when nothing could be checked."""
        return None if self.unchecked else self.passed

    @property
    def max_abs_error(self) -> float:
        return max((r.max_abs_error for r in self.reports.values()), default=0.0)

    @property
    def max_rel_error(self) -> float:
        """The largest reported relative error of any entry (GradCheckEntry.reported_error)."""
        return max((e.rel_error for _, e in self._reported()), default=0.0)

    def worst(self) -> tuple[str, ReportedError] | None:
        """(report key, reported error) of the entry furthest beyond (or nearest to) its
        tolerance: the one number the console, the summary, the json and MLflow show."""
        return max(self._reported(), key=lambda item: item[1].error_to_tolerance, default=None)

    @property
    def error_to_tolerance(self) -> float:
        worst = self.worst()
        return worst[1].error_to_tolerance if worst else 0.0

    def _reported(self) -> list[tuple[str, ReportedError]]:
        return [(key, entry.reported_error()) for key, report in self.reports.items()
                for entry in report.entries if entry.checked]

    @property
    def only_second_order_failed(self) -> bool:
        """Whether every failing report is a second-order one (gradcheck.order=2): the
        gradients are right but their own derivatives are not. The console says so, since
        "gradient check failed" alone reads as wrong gradients, and the culprit search then
        checks the layers' second derivatives."""
        failed = [report for report in self.reports.values() if not report.passed]
        return bool(failed) and all(report.order == 2 for report in failed)

    @property
    def affected(self) -> list[str]:
        """Failing variables (or inputs) that are no culprit's own: wrong only because a wrong
        backward's error flows into them."""
        own = {name for verdict in self.culprits for name in verdict.variables}
        failing = [e.name for r in self.reports.values() for e in r.entries if not e.passed]
        return [name for name in dict.fromkeys(failing) if name not in own]

    def metrics(self) -> dict[str, float]:
        """MLflow metrics: the overall errors and verdict, then per variable (or input)."""
        if self.unchecked:  # no verdict: gradcheck/passed would read as a pass
            return {}
        worst = self.worst()
        values = {
            "gradcheck/max_abs_error": self.max_abs_error,
            "gradcheck/max_rel_error": self.max_rel_error,
            "gradcheck/error_to_tolerance": self.error_to_tolerance,
            "gradcheck/tolerance": worst[1].tolerance if worst else 0.0,
            "gradcheck/passed": float(self.passed),
            "gradcheck/rows": float(self.rows),
            "gradcheck/order": float(self.order),
        }
        for report in self.reports.values():
            for entry in report.entries:
                if entry.joint:  # the probe set's numbers, the same for every variable: shown
                    continue  # per variable they read as each one's own margin
                prefix = f"gradcheck/{entry.name}"
                reported = entry.reported_error()
                for key, value in (("max_abs_error", entry.max_abs_error),
                                   ("max_rel_error", reported.rel_error),
                                   ("error_to_tolerance", reported.error_to_tolerance),
                                   ("passed", float(entry.passed))):
                    name = f"{prefix}/{key}"
                    worse = min if key == "passed" else max
                    values[name] = worse(values.get(name, value), value)
        return values

    def to_dict(self) -> dict:
        worst = self.worst()
        return {"epoch": self.epoch, "passed": self.verdict, "max_abs_error": self.max_abs_error,
                "max_rel_error": self.max_rel_error,
                "error": None if worst is None else {"report": worst[0], **worst[1].to_dict()},
                "culprits": [v.name for v in self.culprits] if self.culprits_searched else None,
                "culprit_checks": [v.to_dict() for v in self.culprits],
                "affected": self.affected if self.culprits_searched else None,
                "dtype": self.dtype, "mode": self.mode, "notes": self.notes,
                "rows": self.rows, "rows_total": self.rows_total, "unchecked": self.unchecked,
                "order": self.order, "disconnected": self.disconnected,
                "reports": {key: report.to_dict() for key, report in self.reports.items()}}

    def failures(self) -> list[str]:
        """One readable line per failing input or variable: which element, how far off."""
        lines = []
        for key, report in self.reports.items():
            for entry in report.entries:
                if not entry.passed:
                    where = entry.describe_worst() or f"max abs error {entry.max_abs_error:.3g}"
                    lines.append(f"{key}: {entry.name}: {where}")
        return lines
