"""What a run is judged on: its evaluation metrics and the sweep objective, by name only.

Every run is measured on the same yardstick whatever its training loss: metrics computed on the
held-out rows (`val/<metric>` during training, `test/<metric>` once at the end), `train/<metric>`
beside them. This module knows the names, the defaults by task and which way is better; the
TensorFlow side (gradexp.evaluation) computes them. No TensorFlow here: config errors answer fast.
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
# Any other metric (a `_target_` one, or a name logged elsewhere): better when larger if its name
# ends in one of these; every other (errors, losses) when smaller.
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


def direction_of(metric: str) -> str:
    """maximize for accuracy, r2 and the like; minimize for errors and losses: a built-in's as
    Keras declares it, any other's from its name."""
    leaf = metric.rsplit("/", 1)[-1].lower()
    if leaf in BUILTIN_METRICS:
        return BUILTIN_METRICS[leaf][1]
    return "maximize" if leaf.endswith(HIGHER_IS_BETTER) else "minimize"


def objective(cfg: DictConfig, task: str | None = None) -> tuple[str, str]:
    """(metric, direction) that sweeps rank runs by: sweep.objective and sweep.direction, with
    `auto` resolved from the task (val/mse for a regression, val/accuracy for a classification)."""
    task = task or task_of(cfg.data)
    metric = cfg.sweep.objective
    if metric == "auto":
        metric = DEFAULT_OBJECTIVE[task]
    direction = cfg.sweep.direction
    return metric, direction_of(metric) if direction == "auto" else direction


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
