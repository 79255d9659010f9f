"""The callback interface: the events a run tells its callbacks about."""

from __future__ import annotations

from typing import Any


class Callback:
    """Observes a run; override the events you need. `run` holds the config, data, model,
    trainer, tracker and what the run has measured so far (gradexp.experiment._Run); `stretch`
    is a gradexp.trainer.EpochMetrics."""

    def stops(self, epochs: int) -> set[int]:
        """Epochs (counted from 1) after which this callback needs the host."""
        return set()

    def on_train_begin(self, run: Any) -> None:
        """Before the first epoch (after a resume: before the first epoch still to run)."""

    def on_stretch_end(self, run: Any, stretch: Any) -> None:
        """After a compiled stretch of epochs; `run.trainer.epoch` epochs are done."""

    def on_train_end(self, run: Any, status: str) -> None:
        """Once, however training ended: FINISHED, FAILED or KILLED."""
