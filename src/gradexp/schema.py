"""Config schemas: what every config group accepts, checked before TensorFlow loads.

Each group option in conf/ starts its defaults list with its schema from here (for example
`/schema/optimizer/adam@_here_`), so Hydra rejects a wrong type or an unknown key at composition
and names the full key. `check_ranges` then checks the values Hydra cannot (learning_rate > 0, ...).
Enums stand for closed choices: hydra-core 1.3 has no Literal.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf


class Activation(str, Enum):
    relu = "relu"
    tanh = "tanh"
    sigmoid = "sigmoid"
    gelu = "gelu"
    elu = "elu"
    softplus = "softplus"
    swish = "swish"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    gpu = "gpu"
    mirrored = "mirrored"


class CheckMethod(str, Enum):
    jacobian = "jacobian"
    probe = "probe"
    both = "both"


class CheckWrt(str, Enum):
    variables = "variables"
    inputs = "inputs"
    both = "both"


class OnFail(str, Enum):
    warn = "warn"
    fail = "fail"


class Tracker(str, Enum):
    mlflow = "mlflow"
    none = "none"


# ---------------------------------------------------------------- data
class Task(str, Enum):
    regression = "regression"
    classification = "classification"


@dataclass
class SyntheticData:
    """Drawn from a generator: n_samples training rows, n_val validation rows (0 = none)."""

    _target_: str = MISSING
    name: str = MISSING
    task: Task = Task.regression
    n_samples: int = 100
    n_val: int = 100
    seed: int = 0


@dataclass
class LinearData(SyntheticData):
    _target_: str = "gradexp.data.linear"
    name: str = "linear"
    n_features: int = 1
    slope: float = 3.0
    intercept: float = 4.0
    noise: float = 0.1
    outliers: float = 0.0
    outlier_scale: float = 10.0


@dataclass
class SineData(SyntheticData):
    _target_: str = "gradexp.data.sine"
    name: str = "sine"
    n_samples: int = 256
    frequency: float = 1.0
    noise: float = 0.1


@dataclass
class BlobsData(SyntheticData):
    _target_: str = "gradexp.data.blobs"
    name: str = "blobs"
    task: Task = Task.classification
    n_samples: int = 300
    n_features: int = 2
    n_classes: int = 3
    spread: float = 1.0


@dataclass
class TabularData:
    """Rows read from a file, split at random into train / val / test."""

    _target_: str = MISSING
    name: str = MISSING
    task: Task = Task.regression
    val_fraction: float = 0.2
    test_fraction: float = 0.0
    split_seed: int = 0
    standardize: bool = True


@dataclass
class CsvData(TabularData):
    _target_: str = "gradexp.data.csv_table"
    name: str = "csv"
    path: str = MISSING
    target: str = MISSING


@dataclass
class CustomData(TabularData):
    _target_: str = MISSING  # your loader, e.g. my_data.load (a module in the launch folder)
    name: str = "custom"
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to your loader


@dataclass
class SklearnData(TabularData):
    _target_: str = "gradexp.data.sklearn"
    name: str = "diabetes"
    task: Any = None  # null = the data set's own (diabetes: regression, the others: classification)


# ---------------------------------------------------------------- model
@dataclass
class LinearModel:
    _target_: str = "gradexp.models.linear"
    name: str = "linear"
    init_scale: float = 1.0
    seed: int = 0


@dataclass
class MlpModel:
    _target_: str = "gradexp.models.mlp"
    name: str = "mlp"
    hidden: list[int] = field(default_factory=lambda: [32, 32])
    activation: Activation = Activation.tanh
    dropout: float = 0.0
    seed: int = 0


@dataclass
class BuggyLinearModel(LinearModel):
    _target_: str = "gradexp.models.buggy_linear"
    name: str = "buggy_linear"
    bug_scale: float = 1.1


@dataclass
class SequentialModel:
    _target_: str = "gradexp.models.sequential"
    name: str = "keras"
    layers: list[Any] = field(default_factory=list)  # each {_target_: keras.layers.X, ...}
    output_layer: bool = True
    seed: int = 0


@dataclass
class CustomModel:
    _target_: str = MISSING  # your builder, e.g. my_models.build
    name: str = "custom"
    kwargs: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- loss
@dataclass
class Loss:
    _target_: str = MISSING
    name: str = MISSING


@dataclass
class HuberLoss(Loss):
    delta: float = 1.0


@dataclass
class CrossEntropyLoss(Loss):
    from_logits: bool = True


# ---------------------------------------------------------------- optimizer
class ScheduleName(str, Enum):
    none = "none"
    cosine = "cosine"
    exponential = "exponential"
    piecewise = "piecewise"
    warmup_cosine = "warmup_cosine"


@dataclass
class Schedule:
    name: ScheduleName = ScheduleName.none
    alpha: float = 0.0  # cosine: the final rate, as a fraction of learning_rate
    warmup_epochs: float = 5.0  # warmup_cosine
    decay_epochs: float = 10.0  # exponential: epochs per factor of decay_rate
    decay_rate: float = 0.5  # exponential
    boundaries: list[float] = field(default_factory=lambda: [50.0])  # piecewise, epochs
    factors: list[float] = field(default_factory=lambda: [1.0, 0.1])  # piecewise: one more


@dataclass
class Optimizer:
    _target_: str = MISSING
    name: str = MISSING
    learning_rate: float = 0.1
    schedule: Schedule = field(default_factory=Schedule)


@dataclass
class SgdOptimizer(Optimizer):
    momentum: float = 0.0
    nesterov: bool = False


@dataclass
class AdamOptimizer(Optimizer):
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7


@dataclass
class AdamWOptimizer(AdamOptimizer):
    weight_decay: float = 0.004


@dataclass
class RmspropOptimizer(Optimizer):
    rho: float = 0.9
    momentum: float = 0.0
    epsilon: float = 1e-7


@dataclass
class AdagradOptimizer(Optimizer):
    initial_accumulator_value: float = 0.1
    epsilon: float = 1e-7


# ---------------------------------------------------------------- the rest
@dataclass
class DeviceConfig:
    name: Device = Device.auto
    cpu_replicas: int = 0  # mirrored without a GPU: split the CPU into this many devices


@dataclass
class EarlyStoppingConfig:
    enabled: bool = False
    monitor: str = "auto"  # a logged metric; auto = the sweep objective (val/mse, val/accuracy)
    patience: int = 10  # epochs without improvement
    min_delta: float = 0.0
    restore_best: bool = True


@dataclass
class TrainerConfig:
    name: str = "default"
    epochs: int = 100
    batch_size: int | None = None
    seed: int = 0
    log_every: int = 10
    compile: bool = True
    jit_compile: bool = False
    deterministic: bool = False
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    checkpoint_every: int | None = None  # epochs; null = about once a minute; 0 = never
    resume: str | None = None  # an MLflow run id to continue


@dataclass
class GradcheckConfig:
    name: str = "default"
    enabled: bool = True
    method: CheckMethod = CheckMethod.probe
    probes: int = 4
    every_n_epochs: int | None = None
    at_start: bool = True
    at_end: bool = True
    wrt: CheckWrt = CheckWrt.variables
    on_fail: OnFail = OnFail.warn
    dtype: str = "float64"
    max_jacobian_size: int = 2000
    plots: bool = True


@dataclass
class TrackingConfig:
    name: Tracker = Tracker.mlflow
    uri: str | None = None
    experiment: str = "gradexp"
    run_name: str | None = None
    max_points: int = 10_000
    log_model: bool = True


@dataclass
class EvalConfig:
    metrics: Any = None  # a list of metric names or {_target_: ...}; null = the task's defaults
    every: int | None = None  # epochs; null = at the progress points and the last epoch


class Direction(str, Enum):
    auto = "auto"
    minimize = "minimize"
    maximize = "maximize"


@dataclass
class SweepConfig:
    skip_finished: bool = False
    continue_on_failure: bool = True
    objective: str = "auto"  # a logged metric, e.g. val/mse; auto = val/mse or val/accuracy
    direction: Direction = Direction.auto
    best_per: list[str] = field(default_factory=list)  # params, e.g. [optimizer.name]


@dataclass
class Config:
    data: Any = MISSING
    model: Any = MISSING
    loss: Any = MISSING
    optimizer: Any = MISSING
    device: Any = MISSING
    trainer: Any = MISSING
    gradcheck: Any = MISSING
    tracking: Any = MISSING
    eval: EvalConfig = field(default_factory=EvalConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)


SCHEMAS: dict[str, dict[str, type]] = {
    "data": {"linear": LinearData, "sine": SineData, "blobs": BlobsData, "csv": CsvData,
             "sklearn": SklearnData, "custom": CustomData},
    "model": {"linear": LinearModel, "mlp": MlpModel, "buggy_linear": BuggyLinearModel,
              "keras": SequentialModel, "custom": CustomModel},
    "loss": {"plain": Loss, "huber": HuberLoss, "crossentropy": CrossEntropyLoss},
    "optimizer": {
        "sgd": SgdOptimizer,
        "adam": AdamOptimizer,
        "adamw": AdamWOptimizer,
        "rmsprop": RmspropOptimizer,
        "adagrad": AdagradOptimizer,
    },
    "device": {"device": DeviceConfig},
    "trainer": {"trainer": TrainerConfig},
    "gradcheck": {"gradcheck": GradcheckConfig},
    "tracking": {"tracking": TrackingConfig},
}


def register_schemas() -> None:
    """Store every schema in Hydra's ConfigStore as `schema/<group>/<name>`."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="config_schema", node=Config)
    for group, options in SCHEMAS.items():
        for name, node in options.items():
            store.store(group=f"schema/{group}", name=name, node=node)


# ---------------------------------------------------------------- range checks
class ConfigError(ValueError):
    """A value a person chose that gradexp cannot use; its message is one line for them."""


def _positive(value: Any) -> bool:
    return value > 0


def _at_least(minimum: int):
    return lambda value: isinstance(value, int) and value >= minimum


def _non_negative(value: Any) -> bool:
    return value >= 0


def _fraction(value: Any) -> bool:
    return 0 <= value < 1


def _non_empty(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _widths(value: Any) -> bool:
    return all(isinstance(width, int) and width >= 1 for width in value)


# (key, check, what is accepted). A missing key (other data or model option) is skipped.
RANGE_RULES: list[tuple[str, Any, str]] = [
    ("optimizer.learning_rate", _positive, "must be a number > 0"),
    ("optimizer.momentum", _non_negative, "must be a number >= 0"),
    ("optimizer.weight_decay", _non_negative, "must be a number >= 0"),
    ("optimizer.epsilon", _positive, "must be a number > 0"),
    ("optimizer.beta_1", _fraction, "must be a number in [0, 1)"),
    ("optimizer.beta_2", _fraction, "must be a number in [0, 1)"),
    ("optimizer.rho", _fraction, "must be a number in [0, 1)"),
    ("loss.delta", _positive, "must be a number > 0"),
    ("trainer.epochs", _at_least(1), "must be an integer >= 1"),
    ("trainer.batch_size", _at_least(1), "must be an integer >= 1, or null for the full batch"),
    ("trainer.log_every", _at_least(1), "must be an integer >= 1"),
    ("gradcheck.probes", _at_least(1), "must be an integer >= 1"),
    ("tracking.max_points", _at_least(1), "must be an integer >= 1"),
    ("gradcheck.every_n_epochs", _at_least(1), "must be an integer >= 1, or null for never"),
    ("gradcheck.max_jacobian_size", _at_least(1), "must be an integer >= 1"),
    ("data.n_samples", _at_least(2), "must be an integer >= 2"),
    ("data.n_val", _at_least(0), "must be an integer >= 0 (0: no validation set)"),
    ("data.val_fraction", _fraction, "must be a fraction in [0, 1)"),
    ("data.test_fraction", _fraction, "must be a fraction in [0, 1)"),
    ("data.split_seed", _at_least(0), "must be an integer >= 0"),
    ("eval.every", _at_least(1), "must be an integer >= 1, or null for the progress points"),
    ("data.n_features", _at_least(1), "must be an integer >= 1"),
    ("data.n_classes", _at_least(2), "must be an integer >= 2"),
    ("data.noise", _non_negative, "must be a number >= 0"),
    ("data.spread", _positive, "must be a number > 0"),
    ("data.outliers", _fraction, "must be a fraction in [0, 1)"),
    ("model.hidden", _widths, "must be a list of integers >= 1, e.g. [32,32]"),
    ("model.init_scale", _non_negative, "must be a number >= 0"),
    ("model.dropout", _fraction, "must be a fraction in [0, 1)"),
    ("device.cpu_replicas", _at_least(0), "must be an integer >= 0 (0: GPUs only)"),
    ("trainer.early_stopping.patience", _at_least(1), "must be an integer >= 1 (epochs)"),
    ("trainer.early_stopping.min_delta", _non_negative, "must be a number >= 0"),
    ("trainer.checkpoint_every", _at_least(0), "must be an integer >= 0 (0: never), or null"),
    ("optimizer.schedule.alpha", _fraction, "must be a fraction in [0, 1)"),
    ("optimizer.schedule.warmup_epochs", _positive, "must be a number of epochs > 0"),
    ("optimizer.schedule.decay_epochs", _positive, "must be a number of epochs > 0"),
    ("optimizer.schedule.decay_rate", _positive, "must be a number > 0"),
    ("tracking.experiment", _non_empty, "must be a name (not empty)"),
]

# What a gradient check may evaluate in. float16/bfloat16 are refused: their finite differences
# are too coarse (rtol 5e-2 and 1e-1 in gradexp.gradcheck) to judge a hand-written gradient by.
GRADCHECK_DTYPES = ("float64", "float32")

# Every seed (data.seed, model.seed, trainer.seed, any *_seed): what numpy and TensorFlow accept.
SEED_MAX = 2**32 - 1


def check_ranges(cfg: DictConfig, *, missing_ok: bool = False) -> None:
    """Raise ConfigError on the first value outside its range, naming key, value and the range.

    missing_ok: a sweep's base config, whose swept keys (data.path=a.csv,b.csv) come per job."""
    check_known_keys(cfg)
    missing = [] if missing_ok else sorted(OmegaConf.missing_keys(cfg))
    if missing:
        key = missing[0]
        raise ConfigError(f"{key} is required here: set it on the command line, {key}=VALUE")
    check_seeds(cfg)
    check_finite(cfg)
    for key, accepted, accepted_text in RANGE_RULES:
        value = OmegaConf.select(cfg, key, default=None)
        if value is None:
            continue
        if isinstance(value, bool) or not accepted(value):
            shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
            raise ConfigError(f"{key}={shown}: {accepted_text}")
    dtype = OmegaConf.select(cfg, "gradcheck.dtype", default=None)
    if dtype is not None and dtype not in GRADCHECK_DTYPES:
        raise ConfigError(f"gradcheck.dtype={dtype}: must be float64 or float32 (float16 and "
                          "bfloat16 finite differences are too coarse to check gradients with)")


def check_seeds(cfg: DictConfig) -> None:
    """Every key named seed or *_seed is an integer in [0, 2**32 - 1] (numpy's and TF's range)."""
    for key, value in _leaves(cfg, ""):
        name = key.rsplit(".", 1)[-1]
        if (name == "seed" or name.endswith("_seed")) and value is not None and (
                isinstance(value, bool) or not isinstance(value, int)
                or not 0 <= value <= SEED_MAX):
            raise ConfigError(f"{key}={value}: must be an integer in [0, {SEED_MAX}]")


def check_finite(cfg: DictConfig) -> None:
    """No number may be NaN or infinite (data.slope=nan would only show up as a diverged run)."""
    for key, value in _leaves(cfg, ""):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value}: must be a finite number")


def _leaves(node: DictConfig, prefix: str):
    for key in node.keys():
        if OmegaConf.is_missing(node, key) or (prefix == "" and key == "hydra"):
            continue
        value = node[key]
        if isinstance(value, DictConfig):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


# ---------------------------------------------------------------- keys nobody reads
# Groups whose options may name user code (issue 9): `_target_` is always theirs to set.
USER_CODE_GROUPS = ("data", "model", "loss")
# Groups whose other keys are arguments of their `_target_`: with user code there, the code's
# signature judges them (gradexp.losses.check_loss, one line before any run), not a schema.
ARGUMENT_GROUPS = ("loss",)

# Names people bring from other tools, and the key gradexp calls it.
ALIASES = {"lr": "learning_rate", "bs": "batch_size", "batch": "batch_size",
           "n_epochs": "epochs", "num_epochs": "epochs", "max_epochs": "epochs",
           "steps": "epochs", "wd": "weight_decay", "eps": "epsilon", "beta1": "beta_1",
           "beta2": "beta_2", "hidden_sizes": "hidden", "layers": "hidden"}


def closest_key(name: str, accepted: list[str]) -> str | None:
    """The accepted key a person most likely meant by `name` (an alias, else a close spelling)."""
    if ALIASES.get(name) in accepted:
        return ALIASES[name]
    close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.7)
    return close[0] if close else None


def group_keys(group: str) -> list[str]:
    """The keys some option of `group` accepts, in schema order."""
    keys: dict[str, None] = {}
    for schema in SCHEMAS.get(group, {}).values():
        keys.update((f.name, None) for f in fields(schema))
    return list(keys)


def did_you_mean(key: str, value: Any, accepted: list[str] | None = None) -> str:
    """'; did you mean ...?' for a key no schema declares, or ''. A top-level key may be a
    misspelt group (`optimzer=adam` -> the group optimizer=adam) or a key of some group
    (`lr` -> optimizer.learning_rate); a group's key is matched against `accepted` (default:
    the keys of any of the group's options)."""
    group, _, name = key.rpartition(".")
    if group:
        hint = closest_key(name, group_keys(group) if accepted is None else accepted)
        return f"; did you mean {group}.{hint}?" if hint else ""
    close = difflib.get_close_matches(name, list(SCHEMAS), n=1, cutoff=0.7)
    if close:
        return f"; did you mean the group {close[0]}={value}?"
    for other in SCHEMAS:
        hint = ALIASES.get(name) if ALIASES.get(name) in group_keys(other) else None
        if hint:
            return f"; did you mean {other}.{hint}?"
    return ""


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse a key that no schema declares, with or without `+` (`+trainer.patience=10`).

    gradexp reads only what the schemas declare; any other key would do nothing, yet the run
    would record it as a param, as if it had. Driven by the schemas' fields, so a field added to
    a schema is accepted here at once.
    """
    from gradexp.targets import user_target  # lazy: gradexp.targets imports this module

    trusted = {group for group in ARGUMENT_GROUPS if user_target(cfg, group)}
    found = _unknown_key(cfg, "", trusted)
    if found is None:
        return
    key, value, accepted = found
    group, _, name = key.rpartition(".")
    where = f"{group}={_option(cfg, group)}" if group else "the config"
    shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    meant = did_you_mean(key, shown, accepted if group else None)
    raise ConfigError(f"{key}={shown}: no such key, gradexp would not read it "
                      f"({where} accepts: {', '.join(accepted)}){meant}")


def _option(cfg: DictConfig, group: str) -> str:
    name = OmegaConf.select(cfg, f"{group}.name", default=None)
    return getattr(name, "value", name) if name is not None else "..."


def _unknown_key(node: DictConfig, prefix: str, trusted: set[str] | None = None
                 ) -> tuple[str, Any, list[str]] | None:
    """The first (dotted key, value, accepted keys) that the node's schema does not declare;
    the top-level groups in `trusted` (keys that go to user code) are not looked into."""
    schema = OmegaConf.get_type(node)
    if not is_dataclass(schema):
        return None  # not from a schema (a free-form value): nothing to compare with
    accepted = [f.name for f in fields(schema)]
    for key in node.keys():
        if prefix == "" and key in (trusted or ()):
            continue
        if key in accepted or (key == "_target_" and prefix.rstrip(".") in USER_CODE_GROUPS):
            if not OmegaConf.is_missing(node, key) and isinstance(node[key], DictConfig):
                found = _unknown_key(node[key], f"{prefix}{key}.")
                if found:
                    return found
            continue
        if prefix == "" and key == "hydra":  # Hydra's own node (callbacks see it)
            continue
        value = None if OmegaConf.is_missing(node, key) else node[key]
        return f"{prefix}{key}", value, accepted
    return None
