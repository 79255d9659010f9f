"""Held-out evaluation: the metrics of gradexp.metrics, computed in compiled code.

`Evaluator(model, specs, splits)` keeps each split's rows on the device and evaluates every
metric on whole splits. During training the trainer calls `tensors` inside its own compiled calls
(gradexp.trainer), so an evaluation never ends a call; after training (the test split, restored
weights) the Evaluator is called itself: eagerly for its first EAGER_CALLS calls, which cost less
than a trace, compiled after. The built-in names are Keras' metric functions
(gradexp.metrics.BUILTIN_METRICS; r2 alone is ours, see _r2), a `_target_` any Keras metric or
function. A classification's outputs are logits (gradexp's models; a loss with from_logits=true)
or probabilities (a model that ends in a softmax or sigmoid, its loss told from_logits=false): the
binary accuracy's threshold (0 or 0.5) and the crossentropy's from_logits follow
(gradexp.losses.outputs_are_logits); the categorical accuracy is the argmax either way. A
`_target_` metric is given probabilities, the softmax or sigmoid of logits, as the logged model
gives them (gradexp.export).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from gradexp.data import Split
from gradexp.metrics import metric_name
from gradexp.user_code import instantiate, with_autograph

MetricFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
EAGER_CALLS = 30  # evaluations run eagerly before the compiled function takes over


def _r2(y: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
    """1 - SS_res / SS_tot per output column, averaged (scikit-learn's r2_score). Not Keras'
    R2Score: it sums y and y² in one pass, and SS_tot = Σy² - (Σy)²/n loses float32 digits when
    the targets' mean is large beside their spread (1.6e-6 relative already at y = 2 ± 1.1,
    tests/test_evaluation.py); this subtracts the mean first.

    A column whose targets are all equal (one row, or equal values) has no variance to explain:
    SS_tot is 0, and dividing by it (or by a small floor) gave -1e12 and the like. It scores as
    r2_score's force_finite does, 1.0 if its predictions are exact, else 0.0. Equal targets are
    told by max == min, not by SS_tot == 0: in float32 their mean can miss them by an ulp, which
    leaves SS_tot at ~1e-15 instead of 0. (One row: r2_score gives NaN and a warning; a NaN
    would poison a sweep's objective, so one row is counted as equal targets.)"""
    residual = tf.reduce_sum(tf.square(y - p), axis=0)
    total = tf.reduce_sum(tf.square(y - tf.reduce_mean(y, axis=0)), axis=0)
    constant = tf.logical_or(tf.equal(tf.reduce_max(y, axis=0), tf.reduce_min(y, axis=0)),
                             tf.equal(total, 0.0))  # 0 also when float32 squares underflow
    exact = tf.cast(tf.equal(residual, 0.0), residual.dtype)
    explained = 1.0 - residual / tf.where(constant, tf.ones_like(total), total)
    return tf.reduce_mean(tf.where(constant, exact, explained))


def _keras_builtin(name: str, n_outputs: int, independent: bool = False,
                   logits: bool = True) -> MetricFn:
    """A built-in name (gradexp.metrics.BUILTIN_METRICS) as Keras computes it, on logits (or
    on probabilities, `logits=False`): Keras' per-row metric functions averaged over the split
    (what its stateful classes accumulate, without their variables: cheaper to trace, and the
    same numbers). `independent` (a binary crossentropy's columns, each its own label): binary
    per column, averaged over columns and rows, as Keras' `fit` picks for that loss."""
    import keras

    binary = n_outputs == 1 or independent  # a binary label a column: the logit's sign
    threshold = 0.0 if logits else 0.5
    per_row = {
        "mse": keras.metrics.mean_squared_error,
        "rmse": keras.metrics.mean_squared_error,
        "mae": keras.metrics.mean_absolute_error,
        "accuracy": (lambda y, p: keras.metrics.binary_accuracy(y, p, threshold=threshold))
        if binary else keras.metrics.categorical_accuracy,
        "crossentropy": (lambda y, p: keras.metrics.binary_crossentropy(
            y, p, from_logits=logits)) if binary
        else (lambda y, p: keras.metrics.categorical_crossentropy(y, p, from_logits=logits)),
    }[name]

    def compute(y: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
        mean = tf.reduce_mean(tf.cast(per_row(y, p), tf.float32))
        return tf.sqrt(mean) if name == "rmse" else mean

    return compute


def _on_whole_split(metric: Any) -> MetricFn:
    """A stateful Keras metric as a function of one whole split: reset, update, result."""
    def compute(y: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
        metric.reset_state()
        metric.update_state(y, p)
        return tf.cast(metric.result(), tf.float32)

    return compute


def build_metric(spec: Any, n_outputs: int = 1, independent: bool = False,
                 logits: bool = True) -> MetricFn:
    """A built-in by name (a Keras metric; r2 our own), or a `_target_`: a Keras metric
    (stateful: reset, update, result on the whole split) or any callable (y_true, y_pred)
    whose result is averaged. `independent`: the outputs are labels of their own
    (gradexp.losses.independent_outputs); `logits`: the outputs are logits, not probabilities
    (gradexp.losses.outputs_are_logits). A `_target_` is given probabilities either way, and
    its Keras `_direction` (up, down or None) is kept on the function as `declared`."""
    if spec == "r2":
        return _r2
    if isinstance(spec, str):
        return _keras_builtin(spec, n_outputs, independent, logits)
    made = instantiate("eval.metrics", {key: value for key, value in spec.items()
                                        if key != "name"})
    if hasattr(made, "update_state") and hasattr(made, "result"):
        compute = _on_whole_split(made)
    else:
        user_metric = with_autograph(made)  # the trainer's compiled loop calls it (no autograph)

        def compute(y: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
            return tf.reduce_mean(tf.cast(user_metric(y, p), tf.float32))

    metric = compute
    if logits:
        # QA: AUC, Precision and Recall read gradexp's logits as probabilities (val/auc 0.92
        # logged, 0.95 from the logged model): a `_target_` reads what the logged model gives,
        # its softmax or sigmoid as gradexp.export adds it.
        squash = tf.sigmoid if n_outputs == 1 or independent else tf.nn.softmax

        def metric(y: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
            return compute(y, squash(p))

    metric.declared = getattr(made, "_direction", None)
    return metric


class Evaluator:
    """Every metric on whole splits, one compiled call per evaluation."""

    def __init__(self, model: Callable[[tf.Tensor], tf.Tensor], specs: Iterable[Any],
                 splits: Mapping[str, Split], independent_outputs: bool = False,
                 logits: bool = True):
        self.model = model
        self.logits = logits  # the outputs are logits (False: probabilities)
        self.splits = {name: (tf.constant(split.x), tf.constant(split.y))
                       for name, split in splits.items()}
        outputs = next((y.shape[-1] for _, y in self.splits.values()), 1)
        self.metrics = {metric_name(spec): build_metric(spec, outputs, independent_outputs,
                                                        logits)
                        for spec in specs}
        self._compiled = tf.function(self._evaluate)
        self.calls = 0

    def __call__(self, split_names: Iterable[str]) -> dict[str, float]:
        """{"<split>/<metric>": value} for the named splits that exist."""
        names = tuple(name for name in split_names if name in self.splits)
        if not names:
            return {}
        self.calls += 1
        # Tracing the compiled evaluation costs ~0.2-0.4 s, an eager one a few ms: a run calls
        # this once or twice (the test split, restored best weights), so only a caller that
        # evaluates many times pays for a trace.
        evaluate = self._compiled if self.calls > EAGER_CALLS else self._evaluate
        return {key: float(value) for key, value in evaluate(names).items()}

    def keys(self, split_names: Iterable[str]) -> tuple[str, ...]:
        """The "<split>/<metric>" names an evaluation of these splits gives."""
        return tuple(f"{split}/{metric}" for split in split_names if split in self.splits
                     for metric in self.metrics)

    def tensors(self, split_names: Iterable[str]) -> dict[str, tf.Tensor]:
        """The metrics as tensors, for a caller's own compiled code (the trainer's epochs)."""
        return self._evaluate(tuple(name for name in split_names if name in self.splits))

    def _evaluate(self, names: tuple[str, ...]) -> dict[str, tf.Tensor]:
        values = {}
        for split in names:
            x, y = self.splits[split]
            predictions = self.model(x)
            # A float64 model's outputs beside the float32 targets: the metrics are computed in
            # the model's dtype, their values reported in float32 as every other metric's.
            y = tf.cast(y, predictions.dtype)
            for metric, compute in self.metrics.items():
                values[f"{split}/{metric}"] = tf.cast(compute(y, predictions), tf.float32)
        return values

    def predictions(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(targets, model outputs) of a split, for plots such as the confusion matrix."""
        x, y = self.splits[split]
        return y.numpy(), self.model(x).numpy()
