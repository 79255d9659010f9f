"""Pruning (sweep.pruner): a sweep's job reports its objective to its Optuna trial at each
held-out evaluation and stops when Optuna's pruner says the job is not promising.

With a pruner on, each evaluation epoch ends a compiled call (`stops`), so the pruner judges
the epoch just trained and no epoch is trained past it. A pruned job ends FINISHED, as early
stopping's do: its objective at that epoch is logged as usual, the tag gradexp.pruned_at_epoch
holds the last epoch it trained, and its trial is told PRUNED. Off (and costing nothing) with
sweep.pruner=none, in a single run, and in a sweep that has no study (gradexp.pruning)."""

from __future__ import annotations

import math

from gradexp.callbacks.base import Callback
from gradexp.callbacks.held_out import eval_epochs
from gradexp.pruning import JobTrial, open_trial, pruner_name
from gradexp.run_view import RunView
from gradexp.tag_keys import PRUNED_TAG


class Pruning(Callback):
    def __init__(self) -> None:
        self.trial: JobTrial | None = None
        self.epochs: set[int] = set()
        self.pruned_at: int | None = None

    def on_train_begin(self, run: RunView) -> None:
        self.trial = open_trial(run.cfg)
        if self.trial is not None:
            self.epochs = eval_epochs(run.cfg)

    def stops(self, epochs: int) -> set[int]:
        return self.epochs  # empty when off: the compiled calls stay as long as they were

    def on_stretch_end(self, run: RunView, stretch, logs) -> None:
        if self.trial is None:
            return
        history = run.evaluations.get(run.objective)
        epoch = run.epoch
        if not history or history[-1][0] != epoch:
            return  # no evaluation at this stretch's end
        if self.trial.judge(history[-1][1], epoch, last=epoch >= run.cfg.trainer.epochs):
            self.pruned_at = epoch
            run.stop_training = True
            run.set_tags({PRUNED_TAG: epoch})
            if not run.quiet:
                from gradexp.console import console

                console().print(f"pruned at epoch {epoch} by sweep.pruner="
                                f"{pruner_name(run.cfg)} (Optuna trial {self.trial.number}: "
                                f"{run.objective} {history[-1][1]:.6g})", highlight=False)

    def on_train_end(self, run: RunView, status: str) -> None:
        if self.trial is None:
            return
        if self.pruned_at is not None and status == "FINISHED":
            self.trial.tell("PRUNED")
        elif status == "FINISHED":
            self.trial.tell("COMPLETE", objective_value(run))
        else:
            self.trial.tell("FAIL")


def objective_value(run: RunView) -> float:
    """The objective the job returns to its sweeper (gradexp.run_view.RunResult's)."""
    if run.objective == "final_loss":
        return run.final_loss if run.final_loss is not None else math.nan
    return run.latest_evaluation().get(run.objective, math.nan)
