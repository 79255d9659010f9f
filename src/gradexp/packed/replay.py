"""A packed job's ordinary run, fed what the packed program trained.

The packed launcher trains a group first (gradexp.packed.program), then runs each job as the
sequential launcher would, through gradexp.loop and its callbacks, so the job's child run gets
the same params, metrics, artifacts and status from the same code. Only the training differs:
the loop's trainer is wrapped in a `ReplayTrainer`, whose `train(stops)` yields the packed
epochs' values stretch by stretch, puts the job's trained weights in its model at each stop
(gradient checks, the end) and computes the held-out metrics with the job's own Evaluator, on the
weights of each evaluation epoch.

The hand-over is a slot the launcher fills just before it runs the job and empties after it
(Hydra's `run_job` leaves no other way to pass a value to one job's task function).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

_slot: dict[str, Any] = {}


@contextmanager
def handed_over(trained: Any) -> Iterator[None]:
    """`trained` (a gradexp.packed.program.Trained, or None) for the job run inside."""
    _slot["trained"] = trained
    _slot["trial"] = getattr(trained, "trial", None)
    try:
        yield
    finally:
        _slot.pop("trained", None)
        _slot.pop("trial", None)


def take_trained() -> Any:
    """What the packed launcher trained for the job being built, once; None otherwise."""
    return _slot.pop("trained", None)


def take_trial() -> Any:
    """The Optuna trial its packed group judged the job being run with (sweep.pruner=asha or
    hyperband: gradexp.pruning.DecidedTrial), once; None otherwise."""
    return _slot.pop("trial", None)


class ReplayTrainer:
    """The job's own gradexp.trainer.Trainer, its training replaced by the packed one's
    results; everything else (final_loss, the evaluator, the optimizer) is the trainer's."""

    def __init__(self, trainer: Any, trained: Any):
        self._trainer = trainer
        self.trained = trained
        self.epoch = 0
        self.calls = 0
        self._put(0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)

    def _put(self, epoch: int) -> None:
        for variable, value in zip(self._trainer.model.params, self.trained.weights[epoch]):
            variable.assign(value)

    def train(self, stops: Iterable[int]) -> Iterator[Any]:
        from gradexp.trainer import EpochMetrics

        trainer = self._trainer
        for stop in sorted(stops):
            if stop <= self.epoch:
                continue
            if stop not in self.trained.weights:
                raise RuntimeError(f"the packed program kept no weights at epoch {stop}")
            first = self.epoch
            values = {key: np.asarray(value[first:stop], np.float32)
                      for key, value in self.trained.values.items()}
            evaluations = {}
            if trainer.eval_keys:
                for epoch in trainer.eval_epochs[(trainer.eval_epochs > first)
                                                 & (trainer.eval_epochs <= stop)].tolist():
                    self._put(int(epoch))
                    evaluations[int(epoch)] = trainer.evaluator(("train", "val"))
            self._put(stop)
            self.epoch = stop
            self.calls += 1
            yield EpochMetrics(first, values, evaluations)
