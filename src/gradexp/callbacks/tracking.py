"""Per-epoch metrics into MLflow: every epoch's loss, grad_norm (and lr) thinned to at most
tracking.max_points steps a metric (and the one-feature line's W and b)."""

from __future__ import annotations

from gradexp.callbacks.base import Callback


class MetricLogger(Callback):
    def on_stretch_end(self, run, stretch) -> None:
        # At most tracking.max_points steps per metric: MLflow writes ~5,000 points a second to
        # sqlite, a compiled epoch takes ~20 µs, so long runs are thinned evenly.
        stride = -(-run.cfg.trainer.epochs // run.cfg.tracking.max_points)  # ceil
        keep = stretch.epochs % stride == 0
        run.tracker.log_history(stretch.epochs[keep],
                                {key: values[keep] for key, values in stretch.values.items()})
