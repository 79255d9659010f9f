"""What a run is judged on: its evaluation metrics and the sweep objective, by name only.

Every run is measured on the same yardstick whatever its training loss: metrics computed on the
held-out rows (`val/<metric>` during training, `test/<metric>` once at the end), `train/<metric>`
beside them. This module knows the names, the defaults by task and which way is better; the
TensorFlow side (gradexp.evaluation) computes them. No TensorFlow here: config errors answer fast
(check_metric_values, which builds the metrics against the data, loads it when called).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradexp.schema import ConfigError

# Built-in metrics: the Keras metric each is (gradexp.evaluation computes it with that metric's
# Keras function on the model's outputs, logits for a classification; one output: the binary
# kind; r2 alone is ours) and its direction, as that Keras class declares it (its `_direction`,
# up or down; tests/test_evaluation.py checks they agree). Written here so that sweeps and early
# stopping know it before TensorFlow loads. Anything else: a `{_target_: ...}` entry, e.g.
# {_target_: keras.metrics.AUC}.
BUILTIN_METRICS: dict[str, tuple[tuple[str, ...], str]] = {
    "mse": (("keras.metrics.MeanSquaredError",), "minimize"),
    "mae": (("keras.metrics.MeanAbsoluteError",), "minimize"),
    "rmse": (("keras.metrics.RootMeanSquaredError",), "minimize"),
    "r2": (("keras.metrics.R2Score",), "maximize"),  # its direction; the values are ours
    "accuracy": (("keras.metrics.BinaryAccuracy", "keras.metrics.CategoricalAccuracy"),
                 "maximize"),
    "crossentropy": (("keras.metrics.BinaryCrossentropy", "keras.metrics.CategoricalCrossentropy"),
                     "minimize"),
}
DEFAULT_METRICS = {"regression": ["mse", "mae", "r2"],
                   "classification": ["accuracy", "crossentropy"]}
DEFAULT_OBJECTIVE = {"regression": "val/mse", "classification": "val/accuracy"}
SPLITS = ("train", "val", "test")
# Keras' own metric classes that declare a direction (`_direction`, up or down; checked against
# Keras by tests/test_metric_targets.py), by class name in lower case, the name a
# `{_target_: keras.metrics.F1Score}` entry is logged under. QA: a `_target_`'s direction was
# guessed from its name's ending, and f1score, r2score, cosinesimilarity came out minimize: a
# sweep tagged its worst run best, and early stopping kept the epoch of the lowest F1.
KERAS_DIRECTIONS: dict[str, str] = {
    **dict.fromkeys((
        "accuracy", "auc", "binaryaccuracy", "binaryiou", "categoricalaccuracy",
        "concordancecorrelation", "cosinesimilarity", "f1score", "fbetascore", "iou", "meaniou",
        "onehotiou", "onehotmeaniou", "pearsoncorrelation", "precision", "precisionatrecall",
        "r2score", "recall", "recallatprecision", "sensitivityatspecificity",
        "sparsecategoricalaccuracy", "sparsetopkcategoricalaccuracy", "specificityatsensitivity",
        "topkcategoricalaccuracy"), "maximize"),
    **dict.fromkeys((
        "binarycrossentropy", "categoricalcrossentropy", "categoricalhinge", "hinge",
        "kldivergence", "logcosherror", "meanabsoluteerror", "meanabsolutepercentageerror",
        "meansquarederror", "meansquaredlogarithmicerror", "poisson", "rootmeansquarederror",
        "sparsecategoricalcrossentropy", "squaredhinge"), "minimize"),
}
DECLARED = {"up": "maximize", "down": "minimize"}  # a Keras metric's `_direction`
# Any other metric (a function of yours, a name logged elsewhere): better when larger if its
# name ends in one of these; every other (errors, losses) when smaller.
HIGHER_IS_BETTER = ("accuracy", "r2", "auc", "precision", "recall", "f1", "iou")
FALLBACK = "final_loss"  # the objective when no run has the one asked for, labelled as such


def task_of(data_cfg: DictConfig) -> str:
    """regression or classification, as the data option declares it (scikit-learn's sets know
    their own)."""
    task = OmegaConf.select(data_cfg, "task", default=None)
    if task is None:
        from gradexp.data import SKLEARN_SETS

        return SKLEARN_SETS.get(data_cfg.name, (None, "regression"))[1]
    return str(task)


def metric_name(spec: Any) -> str:
    """The name a metric is logged under: the string itself, or a `_target_` entry's `name`
    (else the last part of its `_target_`, lower case: keras.metrics.AUC -> auc)."""
    if isinstance(spec, str):
        return spec
    return str(spec.get("name") or spec["_target_"].rsplit(".", 1)[-1].lower())


def metric_specs(cfg: DictConfig, task: str) -> list[Any]:
    """eval.metrics as plain values, or the task's defaults; each checked (ConfigError)."""
    specs = cfg.eval.metrics
    if specs is None:
        return list(DEFAULT_METRICS[task])
    specs = OmegaConf.to_container(specs, resolve=True) if OmegaConf.is_config(specs) else specs
    if not isinstance(specs, list) or not specs:
        raise ConfigError(f"eval.metrics={specs}: must be a non-empty list, e.g. [mse,mae]")
    for spec in specs:
        if isinstance(spec, dict) and "_target_" in spec:
            continue
        if spec not in BUILTIN_METRICS:
            raise ConfigError(f"eval.metrics: {spec!r} is not a metric gradexp knows; use one of "
                              f"{', '.join(BUILTIN_METRICS)} or {{_target_: keras.metrics.AUC}}")
    return specs


def direction_of(metric: str, cfg: DictConfig | None = None) -> str:
    """maximize for accuracy, r2, auc and the like; minimize for errors and losses. A metric of
    `cfg`'s eval.metrics that is a Keras class by `_target_` (under any `name`): the direction
    that class declares; a built-in: the one its Keras class declares; any other: a Keras
    class's of that name (f1score), else from how its name ends. Nothing is imported."""
    leaf = metric.rsplit("/", 1)[-1]
    target = _target_logged_as(leaf, cfg) if cfg is not None else None
    if target is not None and (declared := keras_direction(target)):
        return declared
    leaf = leaf.lower()
    if leaf in BUILTIN_METRICS:
        return BUILTIN_METRICS[leaf][1]
    if leaf in KERAS_DIRECTIONS:
        return KERAS_DIRECTIONS[leaf]
    return "maximize" if leaf.endswith(HIGHER_IS_BETTER) else "minimize"


def keras_direction(target: str) -> str | None:
    """The direction a Keras metric class declares (keras.metrics.F1Score: maximize), from
    KERAS_DIRECTIONS; None for anything else (a function, a class of yours)."""
    module, _, name = str(target).rpartition(".")
    if module.split(".")[0] not in ("keras", "tf", "tensorflow") or not name[:1].isupper():
        return None
    return KERAS_DIRECTIONS.get(name.lower())


def _target_logged_as(name: str, cfg: DictConfig) -> str | None:
    """The `_target_` of the eval.metrics entry logged as `name`, if one is."""
    specs = OmegaConf.select(cfg, "eval.metrics", default=None)
    if OmegaConf.is_config(specs):
        specs = OmegaConf.to_container(specs, resolve=True)
    for spec in specs if isinstance(specs, list) else ():
        if isinstance(spec, dict) and "_target_" in spec and metric_name(spec) == name:
            return str(spec["_target_"])
    return None


def objective(cfg: DictConfig, task: str | None = None) -> tuple[str, str]:
    """(metric, direction) that sweeps rank runs by: sweep.objective and sweep.direction, with
    `auto` resolved from the task (val/mse for a regression, val/accuracy for a classification)
    or, when eval.metrics leaves that one out, the first of them on val (QA: eval.metrics=[mae]
    was refused for a sweep.objective the person never set)."""
    task = task or task_of(cfg.data)
    metric = cfg.sweep.objective
    if metric == "auto":
        metric = DEFAULT_OBJECTIVE[task]
        if cfg.eval.metrics is not None:
            logged = [metric_name(spec) for spec in metric_specs(cfg, task)]
            if metric.partition("/")[2] not in logged:
                metric = f"val/{logged[0]}"
    direction = cfg.sweep.direction
    return metric, direction_of(metric, cfg) if direction == "auto" else direction


def evaluated(cfg: DictConfig, task: str, splits: tuple[str, ...] = ("train", "val")
              ) -> list[str]:
    """The `<split>/<metric>` names a run evaluates at its evaluation epochs (eval.every) and
    logs: eval.metrics (or the task's defaults) on each of `splits`."""
    logged = [metric_name(spec) for spec in metric_specs(cfg, task)]
    return [f"{split}/{name}" for split in splits for name in logged]


def check_objective(cfg: DictConfig, task: str) -> None:
    """The objective must name what a run logs: eval.metrics on a split (`val/accuracy`) or
    final_loss. Any other name (`accuracy`, `val_accuracy`, a typo) is in no run's results, so
    each job would hand the sweeper its final_loss instead, in the objective's direction: a
    maximized loss, its worst run reported as the best."""
    metric, _ = objective(cfg, task)
    logged = [metric_name(spec) for spec in metric_specs(cfg, task)]
    split, _, name = metric.partition("/")
    if metric == FALLBACK or (split in SPLITS and name in logged):
        return
    hint = _meant_objective(metric, logged)
    meant = f"; did you mean {hint}?" if hint else ""
    if split in SPLITS and name:
        raise ConfigError(f"sweep.objective={metric}: the runs log {split}/ "
                          f"{', '.join(logged)} (eval.metrics); pick one of those{meant}")
    raise ConfigError(f"sweep.objective={metric}: no run logs a metric of that name; the runs log "
                      f"train/, val/ and (with a test split) test/ {', '.join(logged)} "
                      f"(eval.metrics), and {FALLBACK}{meant}")


def _meant_objective(metric: str, logged: list[str]) -> str | None:
    """The objective a person most likely meant: a logged metric under Keras' name (val_accuracy)
    or with no split (accuracy: its val/ value), else the closest spelling."""
    import difflib
    import re

    named = re.fullmatch(rf"({'|'.join(SPLITS)})[/_.-](.+)", metric)
    split, name = named.groups() if named else ("val", metric)
    if name in logged:
        return f"{split}/{name}"
    accepted = [f"{where}/{each}" for where in SPLITS for each in logged] + [FALLBACK]
    close = difflib.get_close_matches(f"{split}/{name}", accepted, n=1, cutoff=0.7)
    return close[0] if close else None


def missing_split(cfg: DictConfig, metric: str) -> str | None:
    """Why no run can log `metric` (a `<split>/<metric>` name), when the config already says so:
    gradexp's own data options hold out no rows of its split (`data.n_val=0`). None when the
    split may have rows: always for train, and for a loader of yours, which may split its own."""
    split = metric.partition("/")[0]
    if split not in ("val", "test") or \
            not str(cfg.data.get("_target_", "")).startswith("gradexp."):
        return None
    sizes = ("n_val", "val_fraction") if split == "val" else ("test_fraction",)
    for key in sizes:
        if key in cfg.data and cfg.data[key] == 0:
            return f"data.{key}={cfg.data[key]}"
    if not any(key in cfg.data for key in sizes):
        return f"data={cfg.data.name} holds out no {split} rows"
    return None


def sweeper_direction(cfg: DictConfig) -> str:
    """The direction of what each job hands the sweeper: the objective's, or minimize when the
    config shows that no run can log it (data.n_val=0): every job then hands it final_loss, a
    loss, which maximized would pick the worst run."""
    metric, direction = objective(cfg)
    return "minimize" if missing_split(cfg, metric) else direction


def check_monitor(cfg: DictConfig, task: str, splits: tuple[str, ...]) -> None:
    """trainer.early_stopping.monitor must name a metric the run evaluates on a split it has
    (`splits`: train, and val when there are held-out rows): early stopping reads only those,
    so any other name (a typo, `loss`, a val/ metric without validation rows) would never stop
    the run, silently. Checked when early stopping is on, or when monitor is set at all."""
    stopping = cfg.trainer.early_stopping
    chosen = str(stopping.monitor)
    if not stopping.enabled and chosen == "auto":
        return
    monitor = objective(cfg, task)[0] if chosen == "auto" else chosen
    if not stopping.enabled:  # a name left set while off: only a typo is worth a refusal
        splits = ("train", "val")
    accepted = evaluated(cfg, task, tuple(s for s in ("train", "val") if s in splits))
    if monitor in accepted:
        return
    shown = f"auto (sweep.objective={monitor})" if chosen == "auto" else monitor
    missing = " (the data has no validation rows)" if monitor.startswith("val/") and \
        "val" not in splits else ""
    raise ConfigError(f"trainer.early_stopping.monitor={shown}: not a metric this run "
                      f"evaluates{missing}; early stopping can monitor {', '.join(accepted)} "
                      "(eval.metrics on the train and val splits)")


def register_resolver() -> None:
    """`${gradexp.direction:}` in a config (e.g. an Optuna sweeper's `direction`): the direction
    of this config's sweep objective, so a sweeper maximizes accuracy and minimizes errors (and
    final_loss, when the jobs hand it that in the objective's place: sweeper_direction)."""
    if not OmegaConf.has_resolver("gradexp.direction"):
        OmegaConf.register_new_resolver(
            "gradexp.direction", lambda *, _root_: sweeper_direction(_root_))


def check_metric_values(cfg: DictConfig, data: Any) -> None:
    """Each `_target_` of eval.metrics built once, as the run builds it, and given two rows of
    the data's shape: one that gives several numbers (keras.metrics.F1Score's default
    average=None: one a class) is refused now. QA: the run opened, trained, and ended FAILED
    with a traceback when it logged the metric. One that declares a direction (a function of
    yours that returns a Keras metric) other than the one a sweep or early stopping would rank
    it by is refused too: its best run would be its worst. What a metric raises is left to the
    run to say, as before."""
    specs = [spec for spec in metric_specs(cfg, data.task) if isinstance(spec, dict)]
    if not specs:
        return
    import numpy as np
    import tensorflow as tf

    from gradexp.evaluation import build_metric
    from gradexp.losses import independent_outputs
    from gradexp.setup_checks import keras_names_kept

    rows = tf.constant(np.eye(2, data.n_outputs, dtype=np.float32))
    for spec in specs:
        where = f"eval.metrics: {spec['_target_']}"
        try:
            with keras_names_kept():  # the run's own metric is built later, under the same name
                compute = build_metric(spec, data.n_outputs, independent_outputs(cfg.loss),
                                       logits=False)
            shape = tuple(compute(rows, rows).shape)
        except ConfigError:
            raise
        except Exception:  # noqa: BLE001 - the run reports it, as it did before this check
            continue
        if shape:
            raise ConfigError(
                f"{where} gives {shape[0]} numbers (shape {shape}: one a class or output), but "
                "each metric is logged as one number: have it average them, e.g. "
                "{_target_: keras.metrics.F1Score, average: macro}")
        declared = DECLARED.get(getattr(compute, "declared", None))
        if declared:
            _check_declared(cfg, data.task, metric_name(spec), declared, str(spec["_target_"]))


def _check_declared(cfg: DictConfig, task: str, name: str, declared: str, target: str) -> None:
    """Refuse the metric `name`, whose Keras `_direction` says `declared`, as the objective
    (sweep.direction=auto) or early stopping's monitor when it would be ranked the other way:
    a function of yours that returns a Keras metric is ranked by its name (direction_of)."""
    better = "larger" if declared == "maximize" else "smaller"
    metric, direction = objective(cfg, task)
    if cfg.sweep.direction == "auto" and metric.partition("/")[2] == name \
            and direction != declared:
        raise ConfigError(f"sweep.objective={metric}: {target} (eval.metrics) "
                          f"declares {better} is better, but its name says {direction}: set "
                          f"sweep.direction={declared}")
    stopping = cfg.trainer.early_stopping
    monitor = metric if stopping.monitor == "auto" else str(stopping.monitor)
    # as gradexp.callbacks.early_stopping reads it (direction_of(monitor, cfg)): a function
    # of yours by its name
    if stopping.enabled and monitor.partition("/")[2] == name \
            and direction_of(monitor, cfg) != declared:
        ending = "ends in one of" if declared == "maximize" else "ends in none of"
        raise ConfigError(f"trainer.early_stopping.monitor={monitor}: {target} "
                          f"(eval.metrics) declares {better} is better, but early stopping "
                          f"reads the direction from the name {name}: give it a name that "
                          f"{ending} {', '.join(HIGHER_IS_BETTER)} (eval.metrics name:)")
