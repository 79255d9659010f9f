"""Config schemas: what every config group accepts, checked before TensorFlow loads.

Each group option in conf/ starts its defaults list with its schema from here (for example
`/schema/optimizer/adam@_here_`), so Hydra rejects a wrong type or an unknown key at composition
and names the full key. `gradexp.validation.check_ranges` then checks what Hydra cannot
(learning_rate > 0, no unread key, ...).
Enums stand for closed choices: hydra-core 1.3 has no Literal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING


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
    auto = "auto"  # probes; the exact Jacobian too where it costs about an epoch or less
    jacobian = "jacobian"
    probe = "probe"
    both = "both"


class CheckWrt(str, Enum):
    variables = "variables"
    inputs = "inputs"
    both = "both"


class CheckMode(str, Enum):
    train = "train"  # the training-mode computation: what a training step differentiates
    inference = "inference"
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
    features: Any = None  # null = every column but the target; else a list of column names


@dataclass
class CustomData(TabularData):
    _target_: str = MISSING  # your loader, e.g. my_data.load (a module in the launch folder)
    name: str = "custom"
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to your loader
    materialize_mb: float = 1024  # a tf.data.Dataset is read into memory up to this size
    steps_per_epoch: int | None = None  # batches per epoch of a streamed (infinite) tf.data.Dataset


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
    method: CheckMethod = CheckMethod.auto
    probes: int = 4
    every_n_epochs: int | None = None
    at_start: bool = True
    at_end: bool = True
    wrt: CheckWrt = CheckWrt.variables
    mode: CheckMode = CheckMode.train
    on_fail: OnFail = OnFail.warn
    dtype: str = "float64"
    max_jacobian_size: int = 2000
    max_rows: int | None = 512  # training rows checked (a fixed seeded subset); null = all
    plots: bool = True
    order: int = 1  # 1: gradients; 2: second derivatives too (gradcheck/second_order.py)


@dataclass
class TrackingConfig:
    name: Tracker = Tracker.mlflow
    uri: str | None = None
    experiment: str = "gradexp"
    run_name: str | None = None
    max_points: int = 320  # what the MLflow UI's charts draw (conf/tracking/mlflow.yaml)
    log_model: bool = True
    stale_after: float = 10.0  # minutes without a heartbeat: a run elsewhere is dead (liveness)


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
    resume_killed: bool = False
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
    callbacks: Any = None  # name -> {_target_, __init__ args} (conf/callbacks/, docs/callbacks.md)
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


# ---------------------------------------------------------------- errors
class ConfigError(ValueError):
    """A value a person chose that gradexp cannot use; its message is one line for them."""
