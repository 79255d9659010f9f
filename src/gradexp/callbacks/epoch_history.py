"""Every epoch's values, kept whole for the run's history.parquet (gradexp.history) and handed
to the recorder thinned: every key of a stretch's per-epoch `values` (loss, grad_norm, lr, the
one-feature line's W and b) at no more than tracking.max_points evenly spaced epochs a metric,
the first and the last epoch among them. A stretch that diverged is kept up to its first NaN or
infinite epoch (gradexp.callbacks.divergence then ends the run).

Why thin: the MLflow UI's charts draw at most 320 points a metric (conf/tracking/mlflow.yaml says
where that number comes from), while sqlite takes ~250 µs a point. Which epochs are kept depends
only on the epochs to train, never on how the trainer cuts them into compiled stretches.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gradexp.callbacks.base import Callback
from gradexp.run_view import RunView

NAME = "epoch_history"  # its plan in a checkpoint's callbacks' states (gradexp.resume)


def kept_epochs(start: int, end: int, budget: int) -> np.ndarray:
    """At most `budget` epochs of start + 1 .. end, evenly spaced, the first and last among them
    (just the last when budget is 1): epoch round(start + 1 + i·(end − start − 1)/(budget − 1))."""
    if end - start <= budget:
        return np.arange(start + 1, end + 1)
    if budget <= 1:
        return np.array([end])
    return np.unique(np.round(np.linspace(start + 1, end, budget)).astype(np.int64))


def spread_after(start: int, end: int, budget: int) -> np.ndarray:
    """At most `budget` (>= 1) epochs of start + 1 .. end, evenly spaced after `start`, the last
    among them: start + round(i·(end − start)/budget), i = 1 .. budget."""
    if end - start <= budget:
        return np.arange(start + 1, end + 1)
    steps = np.arange(1, budget + 1) * (end - start) / budget
    return np.unique(start + np.round(steps).astype(np.int64))


def resumed_plan(before: np.ndarray | None, done: int, planned: np.ndarray, budget: int,
                 candidates: np.ndarray | None = None) -> np.ndarray:
    """The epochs a resumed run's series are logged at (sorted): those the run's earlier
    sessions logged up to its checkpoint at `done` (`before`, their plan, saved with it), then
    the `planned` ones after it. When both would pass `budget` (an interrupted session also
    logged its last epoch and its spread: QA, 30 points of 20 after a Ctrl-C and a resume),
    the points left go evenly over the epochs after `done` (or over `candidates` after it),
    the last among them. A raised trainer.epochs (`before` ends before `planned`) adds the
    raised run's planned epochs after `done`, as it did."""
    if before is None or not before.size:  # a checkpoint saved without one (an older run)
        return planned
    prior = before[before <= done]
    later = planned[planned > done]
    if before[-1] < planned[-1] or len(prior) + len(later) <= budget:
        return np.union1d(prior, later)
    left = max(budget - len(prior), 1)  # the last epoch always: MLflow's series end there
    if candidates is None:
        return np.union1d(prior, spread_after(done, int(planned[-1]), left))
    after = candidates[candidates > done]
    return np.union1d(prior, after[spread_after(0, len(after), left) - 1])


class EpochHistory(Callback):
    def __init__(self) -> None:
        self.kept = np.zeros(0, dtype=np.int64)  # the epochs whose values go to MLflow
        self.last: tuple[int, dict[str, float]] | None = None  # the last epoch run, its values

    def on_train_begin(self, run: RunView) -> None:
        # The same epochs as a run that was never interrupted: a resume goes on along the grid
        # of all trainer.epochs, unless an interrupt's points leave no room for it (then those
        # left, evenly: resumed_plan); the plan is kept with each checkpoint for that.
        max_points = run.cfg.tracking.max_points
        planned = kept_epochs(0, run.cfg.trainer.epochs, max_points)
        state = run.resumed.get(NAME)
        before = None if state is None else np.asarray(state["kept"], dtype=np.int64)
        self.kept = resumed_plan(before, run.epoch, planned, max_points)
        run.resumable[NAME] = {"kept": self.kept}

    def on_stretch_end(self, run: RunView, stretch, logs) -> None:
        bad_epoch = stretch.first_nonfinite_epoch()
        if bad_epoch is not None:
            stretch = stretch.upto(bad_epoch)
        epochs = stretch.epochs
        if not len(epochs):
            return
        run.first_epochs.append(stretch.first_epoch)
        for key, values in stretch.values.items():
            run.history.setdefault(key, []).append(values)
        keep = np.isin(epochs, self.kept)
        if keep.any():
            run.log_series(epochs[keep], {key: values[keep]
                                          for key, values in stretch.values.items()})
        self.last = (int(epochs[-1]), {key: float(values[-1])
                                       for key, values in stretch.values.items()})

    def on_train_end(self, run: RunView, status: str) -> None:
        # An early stop, an interrupt or a divergence ends between kept epochs: the last epoch
        # run is logged too, so MLflow's series end where training did.
        if self.last is None:
            return
        epoch, values = self.last
        if epoch not in self.kept:
            for key, value in values.items():
                run.log_metric(key, value, epoch)
        if epoch < run.cfg.trainer.epochs:  # ended early, on a kept epoch or not (review)
            extra = self._spread_over_the_epochs_run(run, epoch, status)
            # what a resume from the checkpoint saved next finds logged (resumed_plan)
            self.kept = np.union1d(self.kept, [*extra, epoch]).astype(np.int64)
            run.resumable[NAME] = {"kept": self.kept}

    def _spread_over_the_epochs_run(self, run: RunView, last: int, status: str) -> np.ndarray:
        """A run that ended before trainer.epochs had logged the planned grid up to there:
        early stopping at epoch 108 of 100,000 left 2 points a series in MLflow, the best epoch
        in none (QA). Its series also get the grid over the epochs it ran, within the points
        the budget has left; an interrupted run (KILLED), which may be resumed, only within
        its share of them, as many as its epochs' share of trainer.epochs: the rest are its
        resume's. Returns the epochs added."""
        history = run.merged_history()
        if not history or not run.first_epochs:
            return np.zeros(0, dtype=np.int64)
        done = run.first_epochs[0]  # epochs done before this session's first: row 0 is done + 1
        logged = self.kept[self.kept <= last]  # a resumed run's earlier sessions' points too
        points = share(run, last, status)
        budget = max(points - len(logged) - 1, 1)
        extra = np.setdiff1d(kept_epochs(done, last, budget), [*logged, last])
        extra = extra[extra - done <= len(next(iter(history.values())))]  # trained ones only
        if extra.size:
            run.log_series(extra, {key: values[extra - done - 1]
                                   for key, values in history.items()})
        return extra


def share(run: RunView, last: int, status: str) -> int:
    """The points a run that ended at epoch `last`, before trainer.epochs, may have logged by
    then: all of tracking.max_points, or for an interrupted run (KILLED: it may be resumed)
    its epochs' share of them, so a resume has the rest (QA: 18 of 20 points went on the 400
    epochs before a Ctrl-C, and its resume logged 12 more)."""
    max_points = run.cfg.tracking.max_points
    if status != "KILLED":
        return max_points
    return round(max_points * last / run.cfg.trainer.epochs)


def history_table(run: RunView):
    """Every epoch's metrics and the evaluations as one table (gradexp.history); a resumed
    run's includes the epochs before its checkpoint, from the copy saved beside it."""
    from gradexp.history import ARTIFACT, build_table, merge, read_table

    start = run.first_epochs[0] if run.first_epochs else run.epoch
    table = build_table(start, run.merged_history(), run.evaluations)
    earlier = read_table(run.resume.folder / ARTIFACT) if run.resume is not None else None
    return table if earlier is None else merge(earlier, table, upto=start)


def save_history(run: RunView, path: Path) -> None:
    from gradexp.history import write_table

    write_table(history_table(run), path)
