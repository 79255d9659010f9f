"""Config schemas: what every config group accepts, with each key's default, doc and range.

Each group option in conf/ starts its defaults list with its schema from here (for example
`/schema/optimizer/adam@_here_`), so Hydra rejects a wrong type or an unknown key at composition
and names the full key. Every field is declared with `setting(default, doc, rule)`: the default
is written here once (an option file sets only `name`, `_target_` and what differs), the one-line
doc and the range rule sit on the field, and `gradexp.config_checks.check_ranges` applies the rules
before TensorFlow loads. Read them programmatically with `describe(SchemaClass)` (a docs page can
be generated from it). Enums stand for closed choices (hydra-core 1.3 has no Literal); they are
StrEnums, so a value read from the config is already its text (`cfg.device.name == "cpu"`,
`f"{cfg.device.name}"` is `cpu`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING

from gradexp.schema_fields import (  # noqa: F401  (re-exported: gradexp.schema.setting, ...)
    BOUNDARIES,
    COLUMNS,
    COUNT_MAX,
    FACTORS,
    MOMENTUM,
    NAME,
    NON_NEGATIVE,
    RUN_ID,
    SEED,
    SEED_MAX,
    WIDTHS,
    Described,
    Rule,
    _is_int,
    accepted_words,
    at_least,
    describe,
    fraction,
    positive,
    setting,
)


# ---------------------------------------------------------------- closed sets
class StrEnum(str, Enum):
    """A closed set whose members are their text (`f"{Device.cpu}"` is `cpu`): enum.StrEnum,
    which Python 3.10 (supported) does not have."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Activation(StrEnum):
    relu = "relu"
    tanh = "tanh"
    sigmoid = "sigmoid"
    gelu = "gelu"
    elu = "elu"
    softplus = "softplus"
    swish = "swish"


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    gpu = "gpu"
    mirrored = "mirrored"


class CheckMethod(StrEnum):
    auto = "auto"  # probes; the exact Jacobian too where it costs about 2 epochs or less
    jacobian = "jacobian"
    probe = "probe"
    both = "both"


class CheckWrt(StrEnum):
    variables = "variables"
    inputs = "inputs"
    both = "both"


class CheckMode(StrEnum):
    train = "train"  # the training-mode computation: what a training step differentiates
    inference = "inference"
    both = "both"


class CheckDtype(StrEnum):
    # float16/bfloat16 are refused: their finite differences are too coarse (rtol 5e-2 and 1e-1
    # in gradexp.gradcheck) to judge a hand-written gradient by.
    float64 = "float64"
    float32 = "float32"


class OnFail(StrEnum):
    warn = "warn"
    fail = "fail"


class Tracker(StrEnum):
    mlflow = "mlflow"
    none = "none"


class Task(StrEnum):
    regression = "regression"
    classification = "classification"


class ScheduleName(StrEnum):
    none = "none"
    cosine = "cosine"
    exponential = "exponential"
    piecewise = "piecewise"
    warmup_cosine = "warmup_cosine"


class Direction(StrEnum):
    auto = "auto"
    minimize = "minimize"
    maximize = "maximize"


class Pruner(StrEnum):
    # Optuna's own pruners (gradexp.pruning builds them): stop a sweep's job early
    none = "none"
    median = "median"  # MedianPruner
    percentile = "percentile"  # PercentilePruner
    asha = "asha"  # SuccessiveHalvingPruner
    hyperband = "hyperband"  # HyperbandPruner


# ---------------------------------------------------------------- data
NAME_DOC = "the option's name (set by its file in conf/); user code renames it to its _target_"
TARGET_DOC = "the code that builds it, module.Name (set by the option file; yours: my_module.f)"


@dataclass
class SyntheticData:
    """Drawn from a generator: n_samples training rows, n_val validation rows (0 = none)."""

    _target_: str = setting(MISSING, TARGET_DOC)
    name: str = setting(MISSING, NAME_DOC)
    task: Task = setting(Task.regression, "regression | classification: picks the default "
                         "metrics and the sweep objective")
    n_samples: int = setting(100, "training rows", at_least(2))
    n_val: int = setting(100, "validation rows from the same generator (own stream); 0 = none",
                         at_least(0, " (0: no validation set)"))
    seed: int = setting(0, "numpy seed of the data", SEED)
    resample: bool = setting(True, "with the master `seed` set, data.seed derives from it "
                             "(false: data.seed stays: the same data for every seed)")


@dataclass
class LinearData(SyntheticData):
    """y = slope·x + intercept + noise·N(0,1), x uniform in [0,1): seed 004's data set."""

    n_features: int = setting(1, "columns of x (W and b are logged as metrics only for 1)",
                              at_least(1))
    slope: float = setting(3.0, "true W (every feature gets the same slope)")
    intercept: float = setting(4.0, "true b")
    noise: float = setting(0.1, "std of the Gaussian noise added to y", NON_NEGATIVE)
    outliers: float = setting(0.0, "fraction of rows whose y is pushed far off", fraction())
    outlier_scale: float = setting(10.0, "how far: outlier rows get + outlier_scale·|N(0,1)|")


@dataclass
class SineData(SyntheticData):
    """y = sin(2π·frequency·x) + noise·N(0,1), x uniform in [-1, 1)."""

    n_samples: int = setting(256, "training rows", at_least(2))
    frequency: float = setting(1.0, "periods per unit of x")
    noise: float = setting(0.1, "std of the Gaussian noise added to y", NON_NEGATIVE)


@dataclass
class BlobsData(SyntheticData):
    """Gaussian blobs around random centres in [-5, 5]; the target is one-hot."""

    task: Task = setting(Task.classification, "regression | classification")
    n_samples: int = setting(300, "training rows", at_least(2))
    n_features: int = setting(2, "dimensions of each point", at_least(1))
    n_classes: int = setting(3, "blobs", at_least(2))
    spread: float = setting(1.0, "std of each blob around its centre", positive())


@dataclass
class TabularData:
    """Rows read from a file, split at random into train / val / test."""

    _target_: str = setting(MISSING, TARGET_DOC)
    name: str = setting(MISSING, NAME_DOC)
    task: Task = setting(Task.regression, "regression | classification (the target holds "
                         "class labels)")
    val_fraction: float = setting(0.2, "share of rows held out for validation (val/<metric>)",
                                  fraction())
    test_fraction: float = setting(0.0, "share held out until training ends (test/<metric>, "
                                   "once)", fraction())
    split_seed: int = setting(0, "seed of the shuffle before the split", SEED)
    resample: bool = setting(True, "with the master `seed` set, split_seed derives from it "
                             "(false: split_seed stays: the same split for every seed)")
    standardize: bool = setting(True, "scale each feature by the training rows' mean and std "
                                "(held-out rows unseen)")


@dataclass
class CsvData(TabularData):
    """Your own table: data=csv data.path=houses.csv data.target=price."""

    path: str = setting(MISSING, "the csv file, relative to the launch folder or absolute")
    target: str = setting(MISSING, "the column to predict")
    features: list[str] | None = setting(None, "the feature columns, e.g. [area,rooms]; null = "
                                         "every column but the target (a text feature is an "
                                         "error)", COLUMNS)


@dataclass
class CustomData(TabularData):
    """Your own loader: data=custom data._target_=my_data.load."""

    kwargs: dict[str, Any] = setting({}, "arguments for your loader, e.g. "
                                     "+data.kwargs.n_rows=500")
    materialize_mb: float = setting(1024, "a tf.data.Dataset is read into memory up to this "
                                    "many MB; a larger or infinite one is streamed",
                                    positive("a number of megabytes"))
    steps_per_epoch: int | None = setting(None, "batches an epoch of a streamed Dataset; null = "
                                          "one pass (an infinite .repeat() Dataset needs it)",
                                          at_least(1, ", or null for one pass"))


@dataclass
class SklearnData(TabularData):
    """A data set bundled with scikit-learn; `name` picks it."""

    name: str = setting(MISSING, "the data set: diabetes | iris | wine | breast_cancer | digits")
    task: Task | None = setting(None, "null = the data set's own (diabetes: regression, the "
                                "others: classification)")


# ---------------------------------------------------------------- model
@dataclass
class LinearModel:
    """y = x·W + b, seed 004's model: a Keras model whose two variables are named W and b."""

    _target_: str = setting(MISSING, TARGET_DOC)
    name: str = setting(MISSING, NAME_DOC)
    init_scale: float = setting(1.0, "W and b start as init_scale·N(0,1) (seed 004)",
                                NON_NEGATIVE)
    seed: int = setting(0, "seed of the initial values", SEED)


@dataclass
class MlpModel:
    """Keras Dense hidden layers, then a linear output layer (logits for a classification)."""

    _target_: str = setting(MISSING, TARGET_DOC)
    name: str = setting(MISSING, NAME_DOC)
    hidden: list[int] = setting([32, 32], "widths of the hidden layers", WIDTHS)
    activation: Activation = setting(Activation.tanh, "the hidden layers' activation")
    dropout: float = setting(0.0, "Dropout after each hidden layer while training; 0 = none",
                             fraction())
    seed: int = setting(0, "seed of the initial values (Glorot uniform weights, zero biases)",
                        SEED)


@dataclass
class BuggyLinearModel(LinearModel):
    """The linear model with a deliberately wrong custom gradient for W."""

    bug_scale: float = setting(1.1, "the backward pass multiplies dLoss/dW by this (1.0 = "
                               "correct)")


@dataclass
class SequentialModel:
    """Any keras.Sequential, its layers written with _target_ (Hydra instantiates each)."""

    _target_: str = setting(MISSING, TARGET_DOC)
    name: str = setting(MISSING, NAME_DOC)
    layers: list[Any] = setting([], "the hidden layers, input to output, each "
                                "{_target_: keras.layers.X, ...}")
    output_layer: bool = setting(True, "add Dense(n_outputs) at the end (false: your last "
                                 "layer is the output)")
    seed: int = setting(0, "keras.utils.set_random_seed before the layers are built", SEED)


@dataclass
class CustomModel:
    """Your own builder: model=custom model._target_=my_models.build."""

    _target_: str = setting(MISSING, "your builder's dotted path, called build(n_features=..., "
                            "n_outputs=..., **kwargs)")
    name: str = setting(MISSING, NAME_DOC)
    kwargs: dict[str, Any] = setting({}, "arguments for your builder besides the sizes")


# ---------------------------------------------------------------- loss
@dataclass
class Loss:
    """A Keras loss (or yours) by `_target_`; its other keys are the loss's arguments."""

    _target_: str = setting(MISSING, TARGET_DOC)
    name: str = setting(MISSING, NAME_DOC)


@dataclass
class HuberLoss(Loss):
    delta: float = setting(1.0, "where the loss turns from quadratic to linear", positive())


@dataclass
class CrossEntropyLoss(Loss):
    from_logits: bool = setting(True, "the models output logits (no sigmoid/softmax layer)")


# ---------------------------------------------------------------- optimizer
@dataclass
class Schedule:
    """The learning rate over the run, counted in epochs (every optimizer has it)."""

    name: ScheduleName = setting(ScheduleName.none, "the schedule's shape")
    alpha: float = setting(0.0, "cosine, warmup_cosine: final (and warmup's first) rate / "
                           "learning_rate", fraction())
    warmup_epochs: float = setting(5.0, "warmup_cosine: epochs rising to learning_rate",
                                   positive("a number of epochs"))
    decay_epochs: float = setting(10.0, "exponential: the rate is multiplied by decay_rate "
                                  "every decay_epochs", positive("a number of epochs"))
    decay_rate: float = setting(0.5, "exponential: the factor per decay_epochs", positive())
    boundaries: list[float] = setting([50.0], "piecewise: epochs after which the rate changes "
                                      "(b: epochs 1..b at the old rate, b+1 on at the next)",
                                      BOUNDARIES)
    factors: list[float] = setting([1.0, 0.1], "piecewise: learning_rate times these, one more "
                                   "than boundaries (checked before the run)", FACTORS)


@dataclass
class Optimizer:
    """A Keras optimizer by `_target_`; its other keys are the optimizer's arguments."""

    _target_: str = setting(MISSING, TARGET_DOC)
    name: str = setting(MISSING, NAME_DOC)
    learning_rate: float = setting(0.1, "step size (seed 004: 0.1)", positive())
    schedule: Schedule = setting(Schedule, "the learning rate over the run")


@dataclass
class SgdOptimizer(Optimizer):
    momentum: float = setting(0.0, "fraction of the previous step kept", MOMENTUM)
    nesterov: bool = setting(False, "Nesterov momentum")


@dataclass
class AdamOptimizer(Optimizer):
    beta_1: float = setting(0.9, "decay of the first-moment estimate", fraction("a number"))
    beta_2: float = setting(0.999, "decay of the second-moment estimate", fraction("a number"))
    epsilon: float = setting(1e-7, "added to the denominator for stability", positive())


@dataclass
class AdamWOptimizer(AdamOptimizer):
    weight_decay: float = setting(0.004, "decoupled weight decay per step", NON_NEGATIVE)


@dataclass
class RmspropOptimizer(Optimizer):
    rho: float = setting(0.9, "decay of the squared-gradient average", fraction("a number"))
    momentum: float = setting(0.0, "fraction of the previous step kept", MOMENTUM)
    epsilon: float = setting(1e-7, "added to the denominator for stability", positive())


@dataclass
class AdagradOptimizer(Optimizer):
    # Keras' Adagrad takes a negative one (its docs say non-negative) and the run went NaN at
    # epoch 2, blamed on the learning rate (QA)
    initial_accumulator_value: float = setting(0.1, "starting sum of squared gradients",
                                               NON_NEGATIVE)
    epsilon: float = setting(1e-7, "added to the denominator for stability", positive())


# ---------------------------------------------------------------- the rest
# device.cpu_replicas' largest: TensorFlow makes one logical CPU device per replica, and 10**20
# of them grew memory for minutes before any run opened (QA). A test of the mirrored code path
# needs a few; 64 is as many GPUs as a large machine has.
CPU_REPLICAS_MAX = 64


@dataclass
class DeviceConfig:
    name: Device = setting(MISSING, "auto | cpu | gpu | mirrored (set by the option file)")
    cpu_replicas: int = setting(0, "device=mirrored only (any other device refuses a value "
                                "above 0): without a GPU, split the CPU into this many logical "
                                "devices; 0 = GPUs only",
                                at_least(0, " (0: GPUs only)", maximum=CPU_REPLICAS_MAX))


@dataclass
class EarlyStoppingConfig:
    enabled: bool = setting(False, "stop when `monitor` has not improved for `patience` epochs")
    monitor: str = setting("auto", "a metric the run evaluates: train/ or val/ and one of "
                           "eval.metrics, e.g. val/mae (any other name is refused before the "
                           "run); auto = the sweep objective")
    patience: int = setting(10, "epochs without an improvement of at least min_delta (checked "
                            "at the evaluations: eval.every)", at_least(1, " (epochs)"))
    min_delta: float = setting(0.0, "the smallest change that counts as an improvement",
                               NON_NEGATIVE)
    restore_best: bool = setting(True, "end with the weights of the best epoch")


@dataclass
class TrainerConfig:
    name: str = setting(MISSING, NAME_DOC)
    epochs: int = setting(100, "passes over the data (seed 004: 100)", at_least(1))
    batch_size: int | None = setting(None, "rows per step; null = the full batch, one step an "
                                     "epoch (seed 004)",
                                     at_least(1, ", or null for the full batch"))
    seed: int = setting(0, "TensorFlow seed: batch shuffling", SEED)
    log_every: int = setting(10, "progress lines fall on multiples of this (every epoch's "
                             "metrics are kept either way)", at_least(1))
    compile: bool = setting(True, "run the steps inside tf.function (false: eager, as seed 004)")
    jit_compile: bool = setting(False, "also compile with XLA")
    deterministic: bool = setting(False, "TensorFlow op determinism and every seed set: "
                                  "identical runs, bit for bit")
    early_stopping: EarlyStoppingConfig = setting(EarlyStoppingConfig, "stop on a plateau")
    checkpoint_every: int | None = setting(
        None, "epochs between checkpoints (checkpoints/RUN_ID/); null = about once a minute; "
        "0 = never", at_least(0, " (0: never), or null"))
    resume: str | None = setting(None, "an MLflow run id: continue that run from its last "
                                 "checkpoint", RUN_ID)


@dataclass
class GradcheckConfig:
    name: str = setting(MISSING, NAME_DOC)
    enabled: bool = setting(True, "check gradients at all")
    method: CheckMethod = setting(CheckMethod.auto, "auto: probes, plus the exact Jacobian "
                                  "where it costs about 2 epochs or less; both: probes plus "
                                  "every Jacobian up to max_jacobian_size")
    probes: int = setting(4, "random directions per variable", at_least(1))
    every_n_epochs: int | None = setting(None, "also check every N epochs; null = only at start "
                                         "and end", at_least(1, ", or null for never"))
    at_start: bool = setting(True, "check before the first step")
    at_end: bool = setting(True, "check after the last step (early stopping's too)")
    wrt: CheckWrt = setting(CheckWrt.variables, "what the loss is differentiated by (seed 000 "
                            "checks dLoss/dinputs)")
    mode: CheckMode = setting(CheckMode.train, "the model's mode checked; train = what a "
                              "training step differentiates")
    on_fail: OnFail = setting(OnFail.warn, "fail: the run ends FAILED, non-zero exit, report "
                              "kept")
    dtype: CheckDtype = setting(
        CheckDtype.float64, "evaluate the check in this dtype (code that cannot run in float64 "
        "is checked in the dtype it trains in)",
        accepted="must be float64 or float32 (float16 and bfloat16 finite differences are too "
                 "coarse to check gradients with)")
    max_jacobian_size: int = setting(2000, "largest variable given the exact Jacobian, in "
                                     "elements", at_least(1))
    max_rows: int | None = setting(512, "training rows checked (a fixed seeded subset); null = "
                                   "all; a model over 131,072 parameters checks at most "
                                   "2**26/parameters rows, never fewer than 64 (metric "
                                   "gradcheck/rows)", at_least(1, ", or null for all rows"))
    plots: bool = setting(True, "heat maps of Jacobian-checked variables of 2 to 400 elements")
    order: int = setting(1, "1: gradients; 2: second derivatives too (about 3x the cost)",
                         Rule(lambda v: v in (1, 2),
                              "must be 1 (gradients) or 2 (second derivatives)"))


@dataclass
class TrackingConfig:
    name: Tracker = setting(MISSING, "mlflow | none (set by the option file)")
    uri: str | None = setting(None, "null = MLflow's embedded store sqlite:///mlflow.db in the "
                              "launch folder; or a server, http://HOST:PORT")
    experiment: str = setting("gradexp", "MLflow experiment name", NAME)
    run_name: str | None = setting(None, "null = from the overrides, e.g. "
                                   "loss=mae,optimizer=adam")
    max_points: int = setting(320, "per-epoch metrics go to MLflow at no more than this many "
                              "evenly spaced epochs (what the MLflow UI draws)", at_least(1))
    log_model: bool = setting(True, "log the trained model as the run's LoggedModel `model`")
    stale_after: float = setting(10.0, "minutes without a heartbeat after which a RUNNING run "
                                 "elsewhere is dead (marked KILLED)",
                                 positive("a number of minutes"))


@dataclass
class EvalConfig:
    metrics: Any = setting(None, "a list of metric names or {_target_: ...}; null = the task's: "
                           "regression [mse,mae,r2], classification [accuracy,crossentropy]")
    every: int | None = setting(None, "epochs between evaluations; null = at the progress lines "
                                "and after the last epoch",
                                at_least(1, ", or null for the progress points"))


@dataclass
class SweepConfig:
    skip_finished: bool = setting(False, "-m only: skip jobs that already have a FINISHED run "
                                  "with the same config")
    resume_killed: bool = setting(False, "-m only: a job whose run with the same config was "
                                  "KILLED continues it from its checkpoint")
    continue_on_failure: bool = setting(True, "-m only: a failing job does not stop the others; "
                                        "exit non-zero at the end")
    objective: str = setting("auto", "the metric sweeps rank by, e.g. val/mse; auto = val/mse "
                             "(regression) or val/accuracy (classification), or the first of "
                             "eval.metrics on val when they leave that one out")
    direction: Direction = setting(Direction.auto, "auto: maximize accuracy, r2, auc...; "
                                   "minimize the rest")
    best_per: list[str] = setting([], "params to report the best run (with replicates: the "
                                  "best mean) of each value of, e.g. [optimizer.name]")
    aggregate_over: list[str] = setting(["seed"], "swept keys whose jobs are replicates: jobs "
                                        "differing only in these form one group (mean, std, "
                                        "95% interval)")
    pruner: Pruner = setting(Pruner.none, "-m only: stop a job early when Optuna's pruner "
                             "judges its objective at an evaluation (eval.every) unpromising")
    pruner_startup_trials: int = setting(5, "median, percentile: jobs that finish unpruned "
                                         "before any is judged", at_least(0))
    pruner_warmup_epochs: int = setting(0, "median, percentile: epochs before a job is judged",
                                        at_least(0))
    pruner_percentile: float = setting(25.0, "percentile: a job goes on only within the best "
                                       "this many percent of the others at the same epoch",
                                       Rule(lambda v: 0 <= v <= 100,
                                            "must be a number in [0, 100]"))


@dataclass
class Config:
    # The master seed (gradexp.seeds): null keeps every seed as its own key says; set, model.seed,
    # trainer.seed and data.seed (or data.split_seed; data.resample) derive from it, and a
    # builder of yours is called with Keras' global seed derived from it (seeds.builder_seeded).
    seed: int | None = setting(None, "master seed: when set, the weights, dropout, batch order "
                               "and data (data.resample) seeds derive from it; null = each "
                               "seed key as set", SEED)
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
    callbacks: Any = None  # name -> {_target_, __init__ args} (conf/callbacks/, docs/callbacks.md)


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
