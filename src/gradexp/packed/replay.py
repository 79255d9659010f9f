"""A packed job's ordinary run, fed what the packed program trained.

The packed launcher trains a group first (gradexp.packed.program), then runs each job as the
sequential launcher would, through gradexp.loop and its callbacks, so the job's child run gets
the same params, metrics, artifacts and status from the same code. Only the training differs:
the loop's trainer is wrapped in a `ReplayTrainer`, whose `train(stops)` yields the packed
epochs' values stretch by stretch, puts the job's trained weights in its model at each stop
(gradient checks, the end) and computes the held-out metrics with the job's own Evaluator, on the
weights of each evaluation epoch: all of a stretch's in one compiled call.

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

    def _evaluate(self, epochs: list[int]) -> dict[int, dict[str, float]]:
        """The held-out metrics at each of `epochs`, on that epoch's trained weights, all in one
        compiled call (an evaluator call an epoch was a fifth of a replayed line job on a loaded
        machine), as the sequential trainer computes them inside its own calls: float32."""
        if not epochs:
            return {}
        params = self._trainer.model.params
        stacked = [np.stack([self.trained.weights[epoch][k] for epoch in epochs])
                   for k in range(len(params))]
        keys = self._trainer.eval_keys
        values = [array.numpy() for array in _epochs_evaluation(self._trainer)(stacked)]
        return {epoch: {key: float(column[row]) for key, column in zip(keys, values)}
                for row, epoch in enumerate(epochs)}

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
                evaluations = self._evaluate(trainer.eval_epochs[
                    (trainer.eval_epochs > first) & (trainer.eval_epochs <= stop)].tolist())
            self._put(stop)
            self.epoch = stop
            self.calls += 1
            yield EpochMetrics(first, values, evaluations)


def _epochs_evaluation(trainer: Any) -> Any:
    """A compiled function: stacked weights (one row an epoch, a tensor a variable) in, each
    eval key's value at each row out. Kept on the evaluator, which the jobs of one shape share
    (gradexp.shared_programs), so they share its trace too."""
    import tensorflow as tf

    evaluator, params, keys = trainer.evaluator, list(trainer.model.params), trainer.eval_keys
    kept = getattr(evaluator, "_gradexp_epochs", None)
    if kept is not None and kept[0] == (tuple(map(id, params)), keys):
        return kept[1]

    def evaluate(stacked: list[tf.Tensor]) -> tuple[tf.Tensor, ...]:
        count = tf.shape(stacked[0])[0]

        def row(i, arrays):
            for variable, values in zip(params, stacked):
                variable.assign(values[i])
            metrics = evaluator.tensors(("train", "val"))
            return i + 1, tuple(array.write(i, tf.cast(metrics[key], tf.float32))
                                for array, key in zip(arrays, keys))

        arrays = tuple(tf.TensorArray(tf.float32, size=count) for _ in keys)
        _, arrays = tf.while_loop(lambda i, _: i < count, row, (tf.constant(0), arrays))
        return tuple(array.stack() for array in arrays)

    signature = [[tf.TensorSpec((None, *v.shape), tf.as_dtype(v.dtype)) for v in params]]
    compiled = tf.function(evaluate, input_signature=signature, autograph=False)
    evaluator._gradexp_epochs = ((tuple(map(id, params)), keys), compiled)
    return compiled
