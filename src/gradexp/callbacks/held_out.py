"""Held-out evaluation as a callback: train/ and val/ metrics at the evaluation epochs (every
eval.every epochs, or at the progress lines, and after the last). The trainer computes them
inside its compiled calls (gradexp.trainer); HeldOutEvaluation records them. FinalEvaluation,
once training FINISHED: the final training loss and the one-feature line's W and b, the train/
and val/ metrics again if early stopping put back its best weights (at the last step, after the
values measured there, so they are the run's final ones in MLflow; history.parquet keeps the
measured ones), and the test split, held out until now and evaluated once with whatever weights
training ended on."""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig

from gradexp.callbacks.base import Callback
from gradexp.callbacks.divergence import kept_part
from gradexp.run_view import RunView

NAME = "held_out_evaluation"  # its plan in a checkpoint's callbacks' states (gradexp.resume)


def print_every(cfg: DictConfig) -> int:
    """About ten progress lines a run, at multiples of trainer.log_every."""
    log_every = cfg.trainer.log_every
    return log_every * max(1, round(cfg.trainer.epochs / 10 / log_every))


def eval_epochs(cfg: DictConfig) -> set[int]:
    every = cfg.eval.every or print_every(cfg)
    return set(range(every, cfg.trainer.epochs, every)) | {cfg.trainer.epochs}


def logged_eval_epochs(cfg: DictConfig) -> set[int]:
    """The evaluation epochs whose metrics go to MLflow: at most tracking.max_points of them,
    evenly spaced, the last among them (gradexp.callbacks.epoch_history.kept_epochs over their
    positions). The history keeps every evaluation."""
    from gradexp.callbacks.epoch_history import kept_epochs

    grid = sorted(eval_epochs(cfg))
    return {grid[i - 1] for i in kept_epochs(0, len(grid), cfg.tracking.max_points)}


class HeldOutEvaluation(Callback):
    """Records the evaluations of each stretch; MLflow gets them thinned as the per-epoch
    metrics are (eval.every=1 over a long run would otherwise be bounded by sqlite's ~250 µs a
    point), and the last one made whatever the thinning, so MLflow's series end where
    training did."""

    def __init__(self) -> None:
        self.logged: set[int] = set()
        self.unlogged: tuple[int, dict[str, float]] | None = None  # the last, if thinned out

    def on_train_begin(self, run: RunView) -> None:
        # A resume goes on along the planned evaluations, within the points its earlier
        # sessions left (an interrupt's spread: QA), as the per-epoch metrics do.
        from gradexp.callbacks.epoch_history import resumed_plan

        planned = np.array(sorted(logged_eval_epochs(run.cfg)), dtype=np.int64)
        state = run.resumed.get(NAME)
        before = None if state is None else np.asarray(state["logged"], dtype=np.int64)
        kept = resumed_plan(before, run.epoch, planned, run.cfg.tracking.max_points,
                            np.array(sorted(eval_epochs(run.cfg)), dtype=np.int64))
        self.keep(run, kept)

    def keep(self, run: RunView, epochs) -> None:
        """The evaluation epochs logged (or to be), also kept with the next checkpoint."""
        self.logged = {int(epoch) for epoch in epochs}
        run.resumable[NAME] = {"logged": np.array(sorted(self.logged), dtype=np.int64)}

    def on_stretch_end(self, run: RunView, stretch, logs) -> None:
        # the evaluations before a NaN epoch too (divergence, later, ends the run), none after
        for epoch, metrics in kept_part(stretch).evaluations.items():
            log = epoch in self.logged
            run.record_evaluation(epoch, metrics, log=log)
            self.unlogged = None if log else (epoch, metrics)

    def on_train_end(self, run: RunView, status: str) -> None:
        if self.unlogged is not None:
            epoch, metrics = self.unlogged
            for key, value in metrics.items():
                run.log_metric(key, value, epoch)
        made = [step for step, _ in next(iter(run.evaluations.values()), [])]
        if not made or made[-1] >= run.cfg.trainer.epochs:
            return
        # A run that ended early logged the planned grid's evaluations up to there (2 of 320
        # for an early stop at epoch 108 of 100,000): those over the ones it made, too; an
        # interrupted one within its share of the points (epoch_history.share).
        from gradexp.callbacks.epoch_history import kept_epochs, share

        logged = [step for step in self.logged if step <= made[-1]]  # earlier sessions' too
        budget = max(share(run, made[-1], status) - len(logged) - 1, 1)
        more = {made[i - 1] for i in kept_epochs(0, len(made), budget)} - {*logged, made[-1]}
        for key, values in run.evaluations.items():
            for step, value in values:
                if step in more:
                    run.log_metric(key, value, step)
        self.keep(run, self.logged | more | {made[-1]})  # what a resume finds logged


class FinalEvaluation(Callback):
    def on_train_end(self, run: RunView, status: str) -> None:
        if status != "FINISHED":
            return
        if run.restored_epoch is not None:  # early stopping put the best weights back:
            measured_first(run)
            evaluate(run, ("train", "val"))  # what the run ends on
        run.final_loss = run.trainer.final_loss()
        evaluate(run, ("test",))
        run.scalars = {key: float(value) for key, value in run.model.scalars().items()}
        # After early stopping's restore, W and b again too (after measured_first's millisecond):
        # their latest values were the stopped epoch's, not the weights the run ended with (QA)
        restored = run.scalars if run.restored_epoch is not None else {}
        for key, value in {"final_loss": run.final_loss, **restored,
                           **{f"final_{k}": v for k, v in run.scalars.items()}}.items():
            run.log_metric(key, value, run.epoch)


def measured_first(run: RunView) -> None:
    """The last epoch's values as measured, stored before the restored weights' are made:
    both are points at the last step, and MLflow takes a metric's latest value by step, then
    time in milliseconds, then the larger value. Written in one batch, both carried one time, so
    a run's val/mse in MLflow was the stopped epoch's, not the restored weights' (its val/r2 the
    restored one's). The later millisecond goes to the restored values, the run's final ones
    (gradexp.history keeps the measured ones in the run's history.parquet)."""
    import time

    run.store_now()  # everything handed so far, written (stamped) now; no-op untracked
    stamped = int(time.time() * 1000)  # as gradexp.mlflow_store stamps a metric
    while int(time.time() * 1000) <= stamped:  # at most a millisecond
        time.sleep(0.0002)


def evaluate(run: RunView, splits: tuple[str, ...]) -> None:
    """Metrics of the current parameters on whole splits, recorded at step = epochs done."""
    run.record_evaluation(run.epoch, run.evaluator(splits))
