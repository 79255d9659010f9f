"""Per-epoch metrics into MLflow, thinned: every key of a stretch's per-epoch `values` (loss,
grad_norm, lr, ...) at no more than tracking.max_points evenly spaced epochs a metric, the first
and the last epoch among them; the one-feature line's W and b (a stretch's `latest`) at stretch
ends, as sparsely. Every epoch at full resolution goes to the run's history.parquet
(gradexp.history), not here.

Why thin: the MLflow UI's charts draw at most 320 points a metric (conf/tracking/mlflow.yaml says
where that number comes from), while sqlite takes ~250 µs a point. Which epochs are kept depends
only on the epochs to train, never on how the trainer cuts them into compiled stretches.
"""

from __future__ import annotations

import numpy as np

from gradexp.callbacks.base import Callback


def kept_epochs(start: int, end: int, budget: int) -> np.ndarray:
    """At most `budget` epochs of start + 1 .. end, evenly spaced, the first and last among them
    (just the last when budget is 1): epoch round(start + 1 + i·(end − start − 1)/(budget − 1))."""
    if end - start <= budget:
        return np.arange(start + 1, end + 1)
    if budget <= 1:
        return np.array([end])
    return np.unique(np.round(np.linspace(start + 1, end, budget)).astype(np.int64))


def latest_stride(span: int, budget: int) -> int:
    """Epochs between two logged `latest` points so that a span of `span` epochs gives at most
    `budget` of them, counting the last one logged when training ends."""
    return 1 if span <= budget else -(-(span - 1) // max(budget - 2, 1))


class MetricLogger(Callback):
    def __init__(self) -> None:
        self.start = 0  # epochs done before training began (a resume: > 0)
        self.kept = np.zeros(0, dtype=np.int64)  # the epochs whose values go to MLflow
        self.stride = 1  # epochs between two logged `latest` points
        self.last: tuple[int, dict[str, float]] | None = None  # the last epoch run, its values
        self.latest: tuple[int, dict[str, float]] | None = None  # W, b after the last stretch
        self.latest_at: dict[str, int] = {}  # the epoch of each one's last logged point

    def on_train_begin(self, run) -> None:
        # The same epochs as a run that was never interrupted: a resume goes on along the grid
        # of all trainer.epochs (one that raised trainer.epochs adds the new grid's points).
        epochs, points = run.cfg.trainer.epochs, run.cfg.tracking.max_points
        self.start = run.trainer.epoch
        self.kept = kept_epochs(0, epochs, points)
        self.stride = latest_stride(epochs, points)

    def on_stretch_end(self, run, stretch) -> None:
        epochs = stretch.epochs
        if not len(epochs):
            return
        keep = np.isin(epochs, self.kept)
        if keep.any():
            run.tracker.log_history(epochs[keep], {key: values[keep]
                                                   for key, values in stretch.values.items()})
        last = int(epochs[-1])
        self.last = (last, {key: float(values[-1]) for key, values in stretch.values.items()})
        latest = {key: value for key, value in stretch.latest.items()
                  if key not in stretch.values}  # a per-epoch W is logged with the others
        if latest:
            self.latest = (last, latest)
            for key, value in latest.items():
                if last - self.latest_at.get(key, self.start - self.stride) >= self.stride:
                    run.tracker.log_metric(key, value, last)
                    self.latest_at[key] = last

    def on_train_end(self, run, status: str) -> None:
        # An early stop, an interrupt or a divergence ends between kept epochs: the last epoch
        # run is logged too, so MLflow's series end where training did.
        if self.last is not None and self.last[0] not in self.kept:
            epoch, values = self.last
            for key, value in values.items():
                run.tracker.log_metric(key, value, epoch)
        if self.latest is not None:
            epoch, values = self.latest
            for key, value in values.items():
                if self.latest_at.get(key) != epoch:
                    run.tracker.log_metric(key, value, epoch)
                    self.latest_at[key] = epoch
