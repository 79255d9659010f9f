"""Held-out evaluation as a callback: train/ and val/ metrics at the evaluation epochs (every
eval.every epochs, or at the progress lines, and after the last). The trainer computes them
inside its compiled calls (gradexp.trainer); this callback records them. The test split is
evaluated once, after training (gradexp.experiment), with whatever weights training ended on."""

from __future__ import annotations

from omegaconf import DictConfig

from gradexp.callbacks.base import Callback


def print_every(cfg: DictConfig) -> int:
    """About ten progress lines a run, at multiples of trainer.log_every."""
    log_every = cfg.trainer.log_every
    return log_every * max(1, round(cfg.trainer.epochs / 10 / log_every))


def eval_epochs(cfg: DictConfig) -> set[int]:
    every = cfg.eval.every or print_every(cfg)
    return set(range(every, cfg.trainer.epochs, every)) | {cfg.trainer.epochs}


class HeldOutEvaluation(Callback):
    def on_stretch_end(self, run, stretch) -> None:
        for epoch, metrics in stretch.evaluations.items():
            run.record_evaluation(epoch, metrics)
