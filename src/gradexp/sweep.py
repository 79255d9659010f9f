"""Sweeps in MLflow: one parent run per multirun (`-m`), each job a child run under it.

A Hydra callback opens the parent run before the first job (so parallel jobs find the store, the
experiment and the parent already made) and leaves its id in the sweep folder, where each job reads
it. When the sweep ends it writes the summary (every child's overrides, final loss, gradient-check
verdict and status; the best child tagged; the loss curves overlaid) and ends the parent. If the
sweep is interrupted, an exit hook still ends the parent (KILLED), so nothing stays RUNNING.
"""

from __future__ import annotations

import atexit
import math
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

SUMMARY_FILE = "sweep_summary.json"


class MlflowSweepCallback(Callback):
    """Hydra callback (hydra.callbacks.mlflow_sweep in conf/config.yaml)."""

    def __init__(self) -> None:
        self.tracker = None
        self.ended = False

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if getattr(config.tracking.name, "value", config.tracking.name) == "none":
            return
        from gradexp.app import parent_run_file
        from gradexp.tracking import MlflowTracker, git_commit, resolve_uri

        launch_dir = Path.cwd()
        overrides = " ".join(config.hydra.overrides.task) or "defaults"
        self.tracker = MlflowTracker(
            resolve_uri(config.tracking.uri, launch_dir), config.tracking.experiment,
            f"sweep: {overrides}",
            tags={"gradexp.sweep": "true", "mlflow.source.git.commit": git_commit(launch_dir),
                  "gradexp.sweeper": config.hydra.sweeper._target_.rsplit(".", 1)[-1],
                  "gradexp.launcher": config.hydra.launcher._target_.rsplit(".", 1)[-1]})
        self.tracker.log_params({"sweep.overrides": overrides})
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        parent_run_file(sweep_dir).write_text(self.tracker.run_id)
        atexit.register(self._end_if_interrupted)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.tracker is None:
            return
        summary = summarize_sweep(self.tracker)
        self.ended = True
        failed = [row for row in summary if row["status"] != "FINISHED"]
        self.tracker.end("FAILED" if failed else "FINISHED")
        print_sweep(summary, self.tracker)
        if failed:
            sys.exit(1)  # every job ran; the sweep as a whole did not succeed

    def _end_if_interrupted(self) -> None:
        if self.tracker is not None and not self.ended:
            self.ended = True
            self.tracker.end("KILLED")


def summarize_sweep(tracker) -> list[dict[str, Any]]:
    """Record the children's table, tag the best, overlay their loss curves; return the table."""
    from gradexp.plots import loss_curves

    client, parent_id = tracker.client, tracker.run_id
    children = client.search_runs([tracker.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent_id}'",
                                  max_results=10_000)
    rows = []
    for child in children:
        metrics = child.data.metrics
        passed = metrics.get("gradcheck/passed")
        rows.append({
            "run_id": child.info.run_id,
            "run_name": child.info.run_name,
            "status": child.info.status,
            "final_loss": metrics.get("final_loss", math.nan),
            "gradcheck": None if passed is None else ("passed" if passed == 1.0 else "failed"),
            "reason": child.data.tags.get("gradexp.status_reason"),
        })
    rows.sort(key=lambda row: (row["status"] != "FINISHED", _sortable(row["final_loss"])))
    tracker.log_dict({"parent_run_id": parent_id, "children": rows}, SUMMARY_FILE)
    finished = [row for row in rows if row["status"] == "FINISHED"
                and math.isfinite(row["final_loss"])]
    if finished:
        best = finished[0]
        client.set_tag(best["run_id"], "gradexp.best_in_sweep", "true")
        tracker.set_tags({"gradexp.best_run_id": best["run_id"],
                          "gradexp.best_run_name": best["run_name"]})
        tracker.log_metric("best_final_loss", best["final_loss"], 0)
    curves = {}
    for row in rows:
        history = client.get_metric_history(row["run_id"], "loss")
        if history:
            history.sort(key=lambda m: m.step)
            curves[row["run_name"]] = ([m.step for m in history], [m.value for m in history])
    if curves:
        import numpy as np

        arrays = {name: (np.asarray(s), np.asarray(v)) for name, (s, v) in curves.items()}
        tracker.log_figure(loss_curves(arrays, "loss of every job"), "plots/sweep_loss_curves.png")
    tracker.log_metric("children", len(rows), 0)
    tracker.log_metric("children_failed", sum(r["status"] != "FINISHED" for r in rows), 0)
    return rows


def _sortable(value: float) -> float:
    return value if math.isfinite(value) else math.inf


def print_sweep(rows: list[dict[str, Any]], tracker) -> None:
    """The sweep's table in the terminal, best first, and where to compare the runs."""
    from rich.table import Table

    from gradexp.console import console
    from gradexp.tracking import runs_view_link

    table = Table(title=f"sweep {tracker.run_id}", title_justify="left")
    for column in ("run", "status", "final loss", "gradient check"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["run_name"], row["status"], f"{row['final_loss']:.6g}",
                      row["gradcheck"] or "-")
    out = console()
    out.print(table)
    out.print(f"compare the runs: {runs_view_link(tracker.uri, tracker.experiment_id)}",
              highlight=False)
