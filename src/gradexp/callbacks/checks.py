"""Gradient checks during a run: at the start, every gradcheck.every_n_epochs and at the end;
each recorded (metrics, json report, heat maps where they help), a failure warned about or, with
gradcheck.on_fail=fail, ending the run FAILED."""

from __future__ import annotations

import math

from gradexp import console
from gradexp.callbacks.base import Callback
from gradexp.endings import GradientCheckFailed
from gradexp.run_view import RunView
from gradexp.tag_keys import (
    CULPRITS_TAG,
    DISCONNECTED_TAG,
    FAILURE_EPOCH_TAG,
    FAILURE_TAG,
    GRADCHECK_DTYPE_TAG,
    GRADCHECK_MODE_TAG,
    GRADCHECK_TAG,
)

# The console names at most this many affected variables (the json report has them all).
MAX_AFFECTED = 6
# Below this many times its tolerance, a failing model check is too faint for the culprit
# search's verdict "no layer is wrong" to mean more than "none was seen" (QA: a 1e-5 bug in a
# layer failed the model at 1.5x and was blamed on the loss).
FAINT = 10.0


def checked_mode(run: RunView) -> str:
    """The mode gradcheck.mode asks for: train, inference or both."""
    mode = run.cfg.gradcheck.mode
    return str(getattr(mode, "value", mode))


class GradientChecks(Callback):
    """On with gradcheck.enabled; its keys are gradcheck's (conf/gradcheck/)."""

    def __init__(self) -> None:
        self.epochs: set[int] = set()
        self.at_end = False

    def on_train_begin(self, run: RunView) -> None:
        gc, epochs = run.cfg.gradcheck, run.cfg.trainer.epochs
        if not gc.enabled:
            return
        self.epochs = set(range(gc.every_n_epochs, epochs, gc.every_n_epochs)) \
            if gc.every_n_epochs else set()
        if gc.at_start:
            self.epochs.add(0)
        self.at_end = bool(gc.at_end)
        if gc.at_end:
            self.epochs.add(epochs)
        if self.epochs:
            from gradexp.run_checks import row_cap_line

            line = row_cap_line(gc, run.model, len(run.data.x))
            if line is not None:
                console.note_line(line)
        if 0 in self.epochs and run.epoch == 0:
            self.check(run, 0)

    def stops(self, epochs: int) -> set[int]:
        return {epoch for epoch in self.epochs if epoch > 0}

    def on_stretch_end(self, run: RunView, stretch, logs) -> None:
        # The last step is also where early stopping ends training (it decides first; QA: the
        # end check was skipped, and a run stopped at 42 of 200 said "passed (1 check)")
        if run.epoch > 0 and (run.epoch in self.epochs or (self.at_end and run.stop_training)):
            self.check(run, run.epoch)

    def check(self, run: RunView, epoch: int) -> None:
        from gradexp.run_checks import check_training_gradients, disconnected_variables

        # Compiled, whatever the number of checks: a job of a sweep that shares an earlier
        # job's model (gradexp.shared_programs) reuses its traces, and a compiled float64
        # graph can round differently from the eager ops, so a run alone takes the same path
        # to record the same gradcheck/* values bit for bit (tests/test_shared_programs.py).
        result = check_training_gradients(run.cfg.gradcheck, run.model, run.cfg.loss,
                                          run.data, epoch)
        if not run.checks:  # asked at the first check only: said once
            result.disconnected = disconnected_variables(run.cfg.gradcheck, run.model,
                                                         run.cfg.loss, run.data)
        run.checks.append(result)
        if result.disconnected:
            run.set_tags({DISCONNECTED_TAG: ", ".join(result.disconnected)})
            run.say_untrained(result.disconnected)
        if result.notes and len(run.checks) == 1:  # e.g. user code that only runs in float32
            if result.unchecked:  # random at a point in every mode: no verdict, no dtype
                run.set_tags({GRADCHECK_TAG: "unchecked"})
            else:
                run.set_tags({GRADCHECK_DTYPE_TAG: result.dtype})
            if not result.unchecked and result.mode != checked_mode(run):  # not as the params
                run.set_tags({GRADCHECK_MODE_TAG: result.mode})
            for note in [] if run.quiet else result.notes:
                console.console().print(f"[yellow]warning:[/yellow] {note}", highlight=False)
        for key, value in result.metrics().items():
            run.log_metric(key, value, epoch)
        run.log_artifact("dict", result.to_dict(), f"gradcheck/report_epoch_{epoch:05d}.json")
        # Heat maps where they help: after training, and whenever a check fails. Training
        # also ends where early stopping stops it (QA: its end check drew none); a check at
        # that step is the run's last.
        last = epoch == run.cfg.trainer.epochs or (epoch > 0 and run.stop_training)
        if run.cfg.gradcheck.plots and result.reports and (last or not result.passed):
            self.log_heatmaps(run, result)
        if not result.passed:
            run.set_tags({GRADCHECK_TAG: "failed"})
            if result.culprits_searched:  # empty: no layer is wrong alone (the loss may be)
                run.set_tags({CULPRITS_TAG: ",".join(v.name for v in result.culprits)})
            message = "\n".join(failure_lines(result))
            if run.cfg.gradcheck.on_fail == "fail":
                run.set_tags({FAILURE_TAG: "gradcheck", FAILURE_EPOCH_TAG: epoch})
                raise GradientCheckFailed(message)
            if not run.quiet:
                from rich.markup import escape

                console.console().print(f"[yellow]warning:[/yellow] {escape(message)}",
                                        highlight=False)

    @staticmethod
    def log_heatmaps(run: RunView, result) -> None:
        from gradexp.heatmaps import heatmaps
        from gradexp.plots import jacobian_heatmaps

        for name, maps in heatmaps(result).items():
            safe = name.replace("/", "_")
            figure = jacobian_heatmaps(name, maps.analytical, maps.numerical, worst=maps.worst,
                                       shape=maps.shape)  # a failure's worst element outlined
            run.log_artifact("figure", figure,
                             f"gradcheck/heatmap_{safe}_epoch_{result.epoch:05d}.png")


def failure_lines(result) -> list[str]:
    """A failed check in a few lines: how far off (the reported error, its tolerance and their
    ratio), the wrong layer(s) and the worst element of each, the variables only affected."""
    # Only the second-order reports failing means the gradients are right but their own
    # derivatives are not: a different fix, so the first line says which check it was.
    check = ("second-order gradient check failed at epoch {} (Hessian-vector products; first "
             "order passed)" if result.only_second_order_failed
             else "gradient check failed at epoch {}").format(result.epoch)
    lines = [f"{check}: {_error(result)}"]
    if result.culprits:
        from gradexp.gradcheck.culprits import OWN_LOSSES_WRONG  # loaded: a check has run

        for verdict in result.culprits:
            entry = verdict.worst
            # a Keras wrapper (SpectralNormalization, Bidirectional) holds layers but is one
            what = "model" if verdict.model else "layer"
            # A layer whose first order passed alone is blamed for its second derivatives.
            checked = ("its second derivatives checked alone" if verdict.report is not None
                       and verdict.report.order == 2 else "its own losses checked alone"
                       if verdict.note == OWN_LOSSES_WRONG else "checked alone")
            lines.append(f"  wrong {what}: {verdict.name}, {checked} in {verdict.dtype}"
                         + (f" ({_times(entry.reported_error().error_to_tolerance)} its "
                            "tolerance)" if entry else ""))
            if entry is not None and entry.describe_worst():
                lines.append(f"    {entry.describe_worst()}")
        affected = result.affected
        if affected:
            shown = ", ".join(affected[:MAX_AFFECTED])
            more = f" and {len(affected) - MAX_AFFECTED} more" if len(affected) > MAX_AFFECTED \
                else ""
            lines.append(f"  affected (wrong only through it): {shown}{more}")
        return lines
    worst = result.worst()
    if result.culprits_searched and (worst is None or math.isfinite(worst[1].rel_error)):
        ratio = worst[1].error_to_tolerance if worst is not None else math.inf
        if ratio < FAINT:  # a layer checked alone has a tolerance of its own, no finer
            lines.append(f"  no layer is wrong alone at this size (the model's check failed "
                         f"at {_times(ratio)} its tolerance, near the least a layer's own "
                         "check can see): the search cannot tell whether it is a layer or "
                         "outside them, e.g. in the loss")
        else:
            lines.append("  no layer is wrong alone (each layer and the model pass when "
                         "checked alone): the error is outside the layers, e.g. in the loss")
    failing = [(key, e) for key, report in result.reports.items()
               for e in report.entries if not e.passed]
    if failing:
        key, entry = max(failing, key=lambda item: item[1].reported_error().error_to_tolerance)
        lines.append(f"  worst: {key}: {entry.name}: "
                     f"{entry.describe_worst() or f'max abs error {entry.max_abs_error:.3g}'}")
        names = list(dict.fromkeys(e.name for _, e in failing))
        more = f" and {len(names) - MAX_AFFECTED} more" if len(names) > MAX_AFFECTED else ""
        lines.append(f"  failing: {', '.join(names[:MAX_AFFECTED])}{more}")
    return lines


def _error(result) -> str:
    """The reported error of a check: relative error, its tolerance, their ratio, and where."""
    worst = result.worst()
    if worst is None:
        return "nothing was checked"
    key, error = worst
    return f"{error.describe()} ({error.name}, {key})"


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.2f}x"
