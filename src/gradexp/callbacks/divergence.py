"""Divergence (Keras' TerminateOnNaN): a stretch whose loss or gradient norm became NaN or
infinite ends the run FAILED, with why and at which epoch; the good epochs before it are kept.

A compiled stretch holds several epochs, so the bad one may come after good ones that have
evaluations and progress lines of their own. The callbacks that record those (epoch_history,
held_out_evaluation, progress) come before this one and take the stretch's part before its first
bad epoch (`kept_part`); this one then raises, before the gradient checks and checkpoints, which
would otherwise work on the NaN weights, and before your callbacks, which never see a stretch
that diverged.

Why it diverged, in one line: NaN already at the starting weights is the model's or the loss's
(not the learning rate's); a loss that rose or swung before the NaN is the learning rate's; one
that was still falling points at the model or the loss (a log or sqrt of a negative, a division
by zero) rather than the learning rate."""

from __future__ import annotations

import numpy as np

from gradexp.callbacks.base import Callback
from gradexp.endings import Diverged
from gradexp.run_view import RunView
from gradexp.tag_keys import FAILURE_EPOCH_TAG, FAILURE_TAG

# The epochs before the NaN whose losses say whether it was rising or swinging.
TREND_EPOCHS = 10
# A rise of the loss from one epoch to the next larger than this fraction counts as one (a
# mini-batch epoch's mean wobbles by a few percent while still falling).
RISE = 0.1

CAUSES = "a log or sqrt of a negative number, a division by zero?"


def kept_part(stretch):
    """The stretch up to its first NaN or infinite epoch (the stretch itself when it has none):
    what is recorded of a stretch that diverged."""
    bad_epoch = stretch.first_nonfinite_epoch()
    return stretch if bad_epoch is None else stretch.upto(bad_epoch)


class Divergence(Callback):
    def __init__(self) -> None:
        self.losses = np.zeros(0)  # the last TREND_EPOCHS finite losses
        # The weights before the first update, while the first stretch runs, to ask a
        # mini-batch run whether its loss was NaN there already (None: not asked)
        self.start: list[np.ndarray] | None = None

    def on_train_begin(self, run: RunView) -> None:
        trainer = run.trainer
        # Full batch: epoch 1's loss is the starting weights' own, nothing to keep. A resumed
        # run's first epoch starts from its checkpoint, not from the starting weights.
        if run.epoch == 0 and trainer is not None and run.model is not None \
                and (trainer.stream is not None or trainer.n_batches > 1):
            self.start = run.model.network.get_weights()

    def on_stretch_end(self, run: RunView, stretch, logs) -> None:
        bad_epoch = stretch.first_nonfinite_epoch()
        good = kept_part(stretch).values.get("loss", np.zeros(0))
        self.losses = np.concatenate([self.losses, good])[-TREND_EPOCHS:]
        if bad_epoch is None:
            self.start = None  # past epoch 1: no longer needed
            return
        run.set_tags({FAILURE_TAG: "diverged", FAILURE_EPOCH_TAG: bad_epoch})
        raise Diverged(self.why(run, bad_epoch))

    def why(self, run: RunView, bad_epoch: int) -> str:
        lr = run.cfg.optimizer.learning_rate
        if bad_epoch == 1 and self.nan_at_start(run):
            return ("the loss or its gradient is NaN or infinite at the starting weights (epoch "
                    "1, before any update), so not because of the learning rate: the model or "
                    f"the loss gives NaN or inf on the training rows ({CAUSES})")
        losses = self.losses
        if len(losses) < 2:  # no trend to read: either cause
            return (f"the loss or its gradient became NaN or infinite at epoch {bad_epoch}: the "
                    f"learning rate may be too high (optimizer.learning_rate={lr}), or the model "
                    f"or the loss gives NaN or inf at the weights training reached ({CAUSES})")
        rose = np.diff(losses) > RISE * np.abs(losses[:-1])
        # rising or swinging: the steps overshoot. Or climbing slowly, below RISE an epoch (QA:
        # ~9% an epoch at a rate just past 2/λmax, to 3e36 over 1000 epochs, was said to be
        # "still falling", the model blamed)
        if rose.any() or losses[-1] - losses[0] > RISE * abs(losses[0]):
            return (f"the loss or its gradient became NaN or infinite at epoch {bad_epoch}: "
                    f"the learning rate is probably too high (optimizer.learning_rate={lr}); "
                    "try a smaller one")
        first = bad_epoch - len(losses)
        trend = "still falling" if losses[-1] < losses[0] else "level"  # a plateau (review)
        return (f"the loss or its gradient became NaN or infinite at epoch {bad_epoch} while "
                f"the loss was {trend} ({losses[0]:.4g} at epoch {first}, "
                f"{losses[-1]:.4g} at epoch {bad_epoch - 1}), so probably not because of the "
                f"learning rate (optimizer.learning_rate={lr}): the model or the loss gives NaN "
                f"or inf at the weights training reached ({CAUSES})")

    def nan_at_start(self, run: RunView) -> bool:
        """Was the loss NaN or infinite before the first update? Full batch, epoch 1's loss
        is that one; with mini-batches, the loss at the kept starting weights says."""
        trainer = run.trainer
        if trainer is None:
            return False
        if trainer.stream is None and trainer.n_batches == 1:
            return True
        if self.start is None or run.model is None:
            return False
        network = run.model.network
        reached = network.get_weights()
        try:
            network.set_weights(self.start)
            return not np.isfinite(trainer.final_loss())
        except Exception:  # noqa: BLE001 - a diagnosis only: without it, the trend decides
            return False
        finally:
            network.set_weights(reached)  # the run's model as training left it
