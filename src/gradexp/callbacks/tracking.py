"""Per-epoch metrics into MLflow, thinned: every key of a stretch's per-epoch `values` (loss,
grad_norm, lr, the one-feature line's W and b) at no more than tracking.max_points evenly spaced
epochs a metric, the first and the last epoch among them. Every epoch at full resolution goes to
the run's history.parquet (gradexp.history), not here.

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


class MetricLogger(Callback):
    def __init__(self) -> None:
        self.kept = np.zeros(0, dtype=np.int64)  # the epochs whose values go to MLflow
        self.last: tuple[int, dict[str, float]] | None = None  # the last epoch run, its values

    def on_train_begin(self, run) -> None:
        # The same epochs as a run that was never interrupted: a resume goes on along the grid
        # of all trainer.epochs (one that raised trainer.epochs adds the new grid's points).
        self.kept = kept_epochs(0, run.cfg.trainer.epochs, run.cfg.tracking.max_points)

    def on_stretch_end(self, run, stretch) -> None:
        epochs = stretch.epochs
        if not len(epochs):
            return
        keep = np.isin(epochs, self.kept)
        if keep.any():
            run.tracker.log_history(epochs[keep], {key: values[keep]
                                                   for key, values in stretch.values.items()})
        self.last = (int(epochs[-1]), {key: float(values[-1])
                                       for key, values in stretch.values.items()})
        run.tracker.heartbeat()  # "still alive", at most every 30 s (gradexp.liveness)

    def on_train_end(self, run, status: str) -> None:
        # An early stop, an interrupt or a divergence ends between kept epochs: the last epoch
        # run is logged too, so MLflow's series end where training did.
        if self.last is not None and self.last[0] not in self.kept:
            epoch, values = self.last
            for key, value in values.items():
                run.tracker.log_metric(key, value, epoch)
