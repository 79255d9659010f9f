"""The end-of-run summary in the terminal (a FINISHED run, not quiet): the final loss, W and b,
the held-out metrics, the objective, the gradient-check verdict (the worst check of the run),
where the run is and how to open it in the MLflow UI."""

from __future__ import annotations

from gradexp import console
from gradexp.callbacks.base import Callback
from gradexp.callbacks.checks import checked_mode
from gradexp.run_view import RunView


class Summary(Callback):
    def on_train_end(self, run: RunView, status: str) -> None:
        if status == "FINISHED" and not run.quiet:
            print_summary(run)


def verdict(run: RunView) -> str | None:
    if not run.checks:
        return None
    if run.checks[-1].unchecked:  # the loss is random at a point: no verdict, see its warning
        return "not checked (the loss is random at a fixed point; see its warning)"
    failed = [check.epoch for check in run.checks if not check.passed]
    # The reported error (GradCheckEntry.reported_error), as the console and MLflow.
    worst = max(run.checks, key=lambda check: check.error_to_tolerance)
    error = worst.worst()
    count = len(run.checks) + run.earlier_checks  # both parts of a resumed run
    # As the console's warning: a failure of the second-order check alone says so.
    second = all(check.only_second_order_failed for check in run.checks if not check.passed)
    return (("passed" if not failed else
             f"FAILED{' (second order)' if second else ''} at "
             f"epoch{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))}")
            + f" ({count} check{'s' if count > 1 else ''}"
            + ("" if error is None else f"; worst at epoch {worst.epoch}: {error[1].describe()}")
            # "model" only for a keras.Model, as the check's warning says (QA: a wrapper layer)
            + "".join(f"; wrong {'model' if v.model else 'layer'}: {v.name}"
                      for v in worst.culprits)
            + (f"; in {worst.mode} mode, see its warning" if worst.mode != checked_mode(run)
               else "") + ")")


def print_summary(run: RunView) -> None:
    from gradexp.mlflow_store import runs_view_link
    from gradexp.tracking_uri import redact_uri

    result = run.result()
    objective = result.objective_value
    # Early stopping put its best epoch's weights back: every final value below is theirs
    # (QA: the table's loss and val/mse were not the last progress line's, with no word why)
    restored = run.restored_epoch
    weights = "after the last step" if restored is None else f"best epoch {restored}'s weights"
    rows = {f"final loss ({weights})": result.final_loss, **result.scalars,
            **result.metrics,
            f"objective ({result.direction[:3]})": None if objective is None
            else f"{result.objective} = {objective:.6g}",
            "epochs": result.epochs if restored is None
            else f"{result.epochs} (ended with epoch {restored}'s weights: early stopping's best)",
            "gradient check": verdict(run), "mlflow run": result.run_id}
    console.print_summary(rows)
    if result.run_id:
        uri = result.tracking_uri
        out = console.console()
        ui = f"open {redact_uri(uri)}" if uri.startswith("http") else \
            f"mlflow ui --backend-store-uri {uri}"
        out.print(f"open the MLflow UI: {ui}", highlight=False)
        out.print(f"then this experiment's runs: {runs_view_link(uri, result.experiment_id)}",
                  highlight=False)
