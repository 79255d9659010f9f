"""The callback interface: the events a run's loop emits (gradexp.run_view.EVENTS)."""

from __future__ import annotations

from typing import Any

from gradexp.run_view import RunView


class Callback:
    """Observes a run; override the events you need. `run` is the run as callbacks see it
    (gradexp.run_view.RunView: run.cfg, run.model, run.epoch, run.stop_training, ...);
    `stretch` is a gradexp.trainer.EpochMetrics; put a metric in `logs` and it is recorded at
    step run.epoch."""

    def stops(self, epochs: int) -> set[int]:
        """Epochs (counted from 1) after which this callback needs the host; asked after
        on_train_begin."""
        return set()

    def on_run_begin(self, run: RunView) -> None:
        """Before the parts are built (no model yet): the recorder opens the MLflow run."""

    def on_train_begin(self, run: RunView) -> None:
        """Before the first epoch (after a resume: before the first epoch still to run)."""

    def on_stretch_end(self, run: RunView, stretch: Any, logs: dict[str, float]) -> None:
        """After a compiled stretch of epochs; `run.epoch` epochs are done."""

    def on_check(self, run: RunView, check: Any) -> None:
        """After a gradient check (gradexp.run_checks's result: .passed, .epoch, ...)."""

    def on_train_end(self, run: RunView, status: str) -> None:
        """Once, however the run ended: FINISHED, FAILED or KILLED (perhaps before training
        began: then run.model may be None)."""
