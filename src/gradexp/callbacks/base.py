"""The callback interface and the list a run uses, in the order they must see each event."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradexp.experiment import _Run
    from gradexp.trainer import EpochMetrics


class Callback:
    """Observes a run; override the events you need. `run` holds the config, data, model,
    trainer, tracker and what the run has measured so far (gradexp.experiment._Run)."""

    def stops(self, epochs: int) -> set[int]:
        """Epochs (counted from 1) after which this callback needs the host."""
        return set()

    def on_train_begin(self, run: _Run) -> None:
        """Before the first epoch (after a resume: before the first epoch still to run)."""

    def on_stretch_end(self, run: _Run, stretch: EpochMetrics) -> None:
        """After a compiled stretch of epochs; `run.trainer.epoch` epochs are done."""

    def on_train_end(self, run: _Run, status: str) -> None:
        """Once, however training ended: FINISHED, FAILED or KILLED."""


def build_callbacks(run: _Run) -> list[Callback]:
    """The run's callbacks. Order matters: metrics are logged before evaluations, evaluations
    come before early stopping (which reads them) and before the progress line (which shows
    them); checkpoints come last, so they save what the others decided."""
    from gradexp.callbacks.checkpoints import Checkpoints
    from gradexp.callbacks.checks import GradientChecks
    from gradexp.callbacks.early_stopping import EarlyStopping
    from gradexp.callbacks.evaluation import HeldOutEvaluation
    from gradexp.callbacks.progress import Progress
    from gradexp.callbacks.tracking import MetricLogger

    cfg = run.cfg
    callbacks: list[Callback] = [MetricLogger(), HeldOutEvaluation(cfg)]
    if cfg.trainer.early_stopping.enabled:
        callbacks.append(EarlyStopping(cfg.trainer.early_stopping, run.objective))
    if not run.quiet:
        callbacks.append(Progress(cfg))
    if cfg.gradcheck.enabled:
        callbacks.append(GradientChecks(cfg))
    if run.checkpoint_dir is not None:
        callbacks.append(Checkpoints(cfg.trainer.checkpoint_every, run.checkpoint_dir))
    return callbacks
