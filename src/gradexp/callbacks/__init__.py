"""Callbacks: everything a run does besides training observes the trainer through these.

The run loop (gradexp.experiment) trains in compiled stretches of epochs and tells each callback,
in order: training begins · a stretch of epochs ended (its per-epoch arrays) · training ended,
however it ended (FINISHED, FAILED, KILLED). A callback also names the epochs at which it needs
the host (`stops`): a gradient check, an evaluation, a checkpoint; the trainer's compiled calls end
there and nowhere else. A new feature is a new callback and its config keys.
"""

from __future__ import annotations

from typing import Any

from gradexp.callbacks.base import Callback
from gradexp.callbacks.checkpoints import Checkpoints
from gradexp.callbacks.checks import GradientChecks
from gradexp.callbacks.early_stopping import EarlyStopping
from gradexp.callbacks.evaluation import HeldOutEvaluation, eval_epochs
from gradexp.callbacks.progress import Progress
from gradexp.callbacks.tracking import MetricLogger

__all__ = ["Callback", "build_callbacks"]


def build_callbacks(run: Any) -> list[Callback]:
    """The run's callbacks. Order matters: metrics are logged before evaluations, evaluations
    come before early stopping (which reads them) and before the progress line (which shows
    them); checkpoints come last, so they save what the others decided."""
    cfg = run.cfg
    callbacks: list[Callback] = [MetricLogger(), HeldOutEvaluation()]
    if cfg.trainer.early_stopping.enabled:
        callbacks.append(EarlyStopping(cfg.trainer.early_stopping, run.objective,
                                       eval_epochs(cfg)))
    if not run.quiet:
        callbacks.append(Progress(cfg))
    if cfg.gradcheck.enabled:
        callbacks.append(GradientChecks(cfg))
    if run.checkpoint_dir is not None:
        callbacks.append(Checkpoints(cfg.trainer.checkpoint_every, run.checkpoint_dir))
    return callbacks
