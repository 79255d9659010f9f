"""Early stopping: end training when the monitored held-out metric (default: the sweep
objective, e.g. val/mse) has not improved by min_delta for `patience` epochs; optionally put back
the weights of its best epoch. It reads the evaluations the run already makes (eval.every) and
decides on the host, so the trainer's compiled calls end at those epochs and nowhere else for it;
patience is counted in epochs between those evaluations."""

from __future__ import annotations

import math

from gradexp.callbacks.base import Callback
from gradexp.callbacks.held_out import eval_epochs
from gradexp.metrics import direction_of
from gradexp.run_view import RunView
from gradexp.tag_keys import STOPPED_EARLY_TAG

NAME = "early_stopping"  # its state's name in a checkpoint


class EarlyStopping(Callback):
    """On with trainer.early_stopping.enabled=true; its keys are trainer.early_stopping's."""

    def __init__(self) -> None:
        self.enabled = False
        self.epochs: set[int] = set()  # the evaluation epochs: each is a decision, on the host
        self.best = math.inf  # sign · value: smaller is better
        self.best_epoch: int | None = None
        self.best_weights = None

    def on_train_begin(self, run: RunView) -> None:
        cfg = run.cfg.trainer.early_stopping
        self.enabled = bool(cfg.enabled)
        if not self.enabled:
            return
        self.epochs = eval_epochs(run.cfg)
        self.monitor = run.objective if cfg.monitor == "auto" else cfg.monitor
        # a Keras metric class by _target_ as that class declares it, under any name (QA)
        self.sign = -1.0 if direction_of(self.monitor, run.cfg) == "maximize" else 1.0
        self.patience = cfg.patience
        self.min_delta = cfg.min_delta
        self.restore_best = cfg.restore_best
        state = run.resumed.get(NAME)  # a resumed run: the best so far, as the checkpoint had it
        if state is not None:
            self.best, self.best_epoch = float(state["best"]), int(state["best_epoch"])
            self.best_weights = state.get("weights")
            run.resumable[NAME] = state

    def stops(self, epochs: int) -> set[int]:
        return self.epochs

    def on_stretch_end(self, run: RunView, stretch, logs) -> None:
        if not self.enabled:
            return
        history = run.evaluations.get(self.monitor)
        epoch = run.epoch
        if not history or history[-1][0] != epoch:
            return  # no evaluation at this stretch's end
        value = self.sign * history[-1][1]
        if value < self.best - self.min_delta:
            self.best, self.best_epoch = value, epoch
            if self.restore_best:
                self.best_weights = run.model.network.get_weights()
            # kept with the next checkpoint (gradexp.callbacks.checkpoints): QA, a run resumed
            # after Ctrl-C forgot its best epoch and stopped 200 epochs later, on worse weights
            run.resumable[NAME] = {"best": self.best, "best_epoch": epoch,
                                   **({"weights": self.best_weights} if self.restore_best else {})}
        elif self.best_epoch is not None and epoch - self.best_epoch >= self.patience:
            run.stop_training = True
            run.log_metric("stopped_epoch", epoch, epoch)
            run.set_tags({STOPPED_EARLY_TAG: f"{self.monitor} did not improve by "
                                  f"{self.min_delta} in {epoch - self.best_epoch} epochs"})

    def on_train_end(self, run: RunView, status: str) -> None:
        if self.best_epoch is None:
            return
        run.log_metric("best_epoch", self.best_epoch, self.best_epoch)
        if self.restore_best and self.best_weights is not None and status == "FINISHED":
            run.last_weights = run.model.network.get_weights()  # a final checkpoint's
            run.model.network.set_weights(self.best_weights)
            run.restored_epoch = self.best_epoch
