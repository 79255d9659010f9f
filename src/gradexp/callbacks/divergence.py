"""Divergence (Keras' TerminateOnNaN): a stretch whose loss or gradient norm became NaN or
infinite ends the run FAILED, with why and at which epoch; the good epochs before it are kept
(gradexp.callbacks.epoch_history comes first)."""

from __future__ import annotations

from gradexp.callbacks.base import Callback
from gradexp.endings import Diverged
from gradexp.run_view import RunView
from gradexp.tag_keys import FAILURE_EPOCH_TAG, FAILURE_TAG


class Divergence(Callback):
    def on_stretch_end(self, run: RunView, stretch, logs) -> None:
        bad_epoch = stretch.first_nonfinite_epoch()
        if bad_epoch is None:
            return
        run.set_tags({FAILURE_TAG: "diverged", FAILURE_EPOCH_TAG: bad_epoch})
        trainer = run.trainer
        if bad_epoch == 1 and trainer is not None and trainer.stream is None \
                and trainer.n_batches == 1:
            # Full batch: epoch 1's loss and gradient are measured at the starting weights,
            # before any update, so no learning rate made them NaN.
            raise Diverged(
                "the loss or its gradient is NaN or infinite at the starting weights (epoch 1, "
                "before any update), so not because of the learning rate: the model or the loss "
                "gives NaN or inf on the training rows (a log or sqrt of a negative number, a "
                "division by zero?)")
        lr = run.cfg.optimizer.learning_rate
        raise Diverged(
            f"the loss or its gradient became NaN or infinite at epoch {bad_epoch}: "
            f"the learning rate is probably too high (optimizer.learning_rate={lr}); "
            "try a smaller one")
