"""Losses by `_target_`: a Keras loss class, or any callable (y_true, y_pred), user code included.

    loss=huber                                      keras.losses.Huber(delta=1.0), from conf/loss/
    loss._target_=mylosses.PseudoHuber              a class: the other keys go to its constructor
    loss._target_=mylosses.pseudo_huber             a function: the other keys are bound to it

`name` is gradexp's label for the run (see gradexp.user_code.label_by_target), never an argument:
passing it is what made `loss._target_=mylosses.pseudo_huber` fail with "unexpected keyword
argument 'name'". A function's result is averaged, as Keras does for `compile(loss=fn)`, so a
function returning one loss per sample trains like one returning their mean.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradexp.schema import ConfigError
from gradexp.user_code import locate

KEY = "loss._target_"
LABELS = ("_target_", "name")  # what the config says about the loss, not arguments to it


def loss_arguments(cfg: DictConfig) -> dict[str, Any]:
    """The keys that go to the loss: everything but `_target_` and `name`."""
    values = OmegaConf.to_container(cfg, resolve=True)
    return {key: value for key, value in values.items() if key not in LABELS}


def check_loss(cfg: DictConfig) -> None:
    """Raise ConfigError (one line naming loss._target_) unless the target imports and can be
    called as a loss: a class built with the config's keys whose instances take (y_true,
    y_pred), or a function taking (y_true, y_pred) plus the config's keys. Cheap: no call."""
    path = str(cfg["_target_"])
    target = locate(KEY, path)
    arguments = {k: v for k, v in loss_arguments(cfg).items() if not _hydra_key(k)}
    shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    name = getattr(target, "__name__", path)
    if inspect.isclass(target):
        _check_call(path, target, (), arguments, f"{name}({shown})")
        for method in ("__call__", "call"):  # Keras losses: __call__ calls call(y_true, y_pred)
            function = _defined(target, method)
            if function is not None:
                _check_call(path, function, (None, None, None), {},
                            f"{name}.{method}(self, y_true, y_pred)")
        if _defined(target, "__call__") is None:
            raise ConfigError(f"{KEY}={path}: instances of {name} cannot be called; a loss class "
                              "needs __call__(y_true, y_pred), e.g. a keras.losses.Loss")
    elif callable(target):
        _check_call(path, target, (None, None), arguments,
                    f"{name}(y_true, y_pred{', ' + shown if shown else ''})")
    else:
        raise ConfigError(f"{KEY}={path}: is a {type(target).__name__}, not a loss class or a "
                          "function (y_true, y_pred)")


def independent_outputs(cfg: DictConfig) -> bool:
    """Does the loss `cfg` judge each output column on its own (a binary crossentropy: yes/no
    per column, several labels a row allowed)? Then accuracy and crossentropy are binary per
    column and the served model takes a sigmoid per column, as Keras' `fit` picks the binary
    accuracy for a binary crossentropy."""
    return str(cfg.get("_target_", "")).rsplit(".", 1)[-1].lower().startswith("binary")


REGRESSION_LOSSES = {"meansquarederror", "mean_squared_error", "mse", "meanabsoluteerror",
                     "mean_absolute_error", "mae", "huber", "logcosh", "log_cosh",
                     "meansquaredlogarithmicerror", "mean_squared_logarithmic_error",
                     "meanabsolutepercentageerror", "mean_absolute_percentage_error"}
CLASSIFICATION_LOSSES = {"binarycrossentropy", "binary_crossentropy",
                         "categoricalcrossentropy", "categorical_crossentropy",
                         "binaryfocalcrossentropy", "binary_focal_crossentropy",
                         "categoricalfocalcrossentropy", "categorical_focal_crossentropy",
                         "sparsecategoricalcrossentropy", "sparse_categorical_crossentropy",
                         "categoricalhinge", "categorical_hinge", "hinge", "squaredhinge",
                         "squared_hinge"}  # (poisson and KL divergence: either task)


def loss_kind(target: str) -> str | None:
    """"regression", "classification", or None for a loss gradexp does not know (yours)."""
    last = str(target).rsplit(".", 1)[-1].lower()
    if last in REGRESSION_LOSSES:
        return "regression"
    if last in CLASSIFICATION_LOSSES:
        return "classification"
    return None


def from_logits_of(cfg: DictConfig) -> bool | None:
    """The loss's `from_logits`: the config's, else its class's or function's own default (Keras'
    `BinaryFocalCrossentropy` and `keras.losses.binary_crossentropy` default to False:
    probabilities), else None: the loss does not say."""
    if "from_logits" in cfg:
        return bool(cfg.from_logits)
    target = locate(KEY, str(cfg["_target_"]))
    try:  # a class's signature is its constructor's
        parameter = inspect.signature(target).parameters.get("from_logits")
    except (TypeError, ValueError):  # a builtin without a signature
        return None
    return parameter.default if parameter is not None and isinstance(parameter.default,
                                                                      bool) else None


def outputs_of(cfg: DictConfig, ends_in_probabilities: bool = False) -> str:
    """What a classification model trained with the loss `cfg` outputs: "logits" or
    "probabilities", as the loss reads them (`from_logits_of`). For a loss that does not say:
    "probabilities" from a model that ends in Keras' softmax or sigmoid
    (`ends_in_probabilities`, gradexp.models.Model: a KL divergence or Poisson loss, or yours),
    "scores" from a regression loss (mse on one-hot classes: each output regressed toward its
    0 or 1), else "logits", as gradexp's models output. The held-out accuracy and
    crossentropy, the confusion matrix and the logged model's softmax or sigmoid follow it: a
    model that ends in probabilities is never squashed twice, and scores are not squashed."""
    told = from_logits_of(cfg)
    if told is not None:
        return "logits" if told else "probabilities"
    if ends_in_probabilities:
        return "probabilities"
    return "scores" if loss_kind(str(cfg["_target_"])) == "regression" else "logits"


def outputs_are_logits(cfg: DictConfig, ends_in_probabilities: bool = False) -> bool:
    """`outputs_of(...)` is "logits": a sign says yes or no (a probability or score: 0.5)."""
    return outputs_of(cfg, ends_in_probabilities) == "logits"


def check_loss_returns(cfg: DictConfig, n_outputs: int) -> None:
    """Call the loss once on two rows of zeros: one that returns nothing (a function that
    forgot its `return`) is one line now, not a traceback from deep in the run's first step,
    with a run opened and ended FAILED. What the call raises is left to the run to say."""
    import tensorflow as tf

    loss = build_loss(cfg)
    # The value as the person's code returns it, before Keras' or MeanLoss' reduction of it
    raw = getattr(loss, "function", None) or getattr(loss, "call", None) or loss
    zeros = tf.zeros((2, n_outputs), tf.float32)
    try:
        value = raw(zeros, zeros)
    except Exception:  # noqa: BLE001 - e.g. a sparse loss given one-hot zeros: the run says
        return
    if value is None:
        raise ConfigError(f"{KEY}={cfg['_target_']}: returned None; a loss returns its value "
                          "(the rows' losses or their mean, a tensor): a missing `return`?")


def build_loss(cfg: DictConfig, dtype: str | None = None) -> Callable[[Any, Any], Any]:
    """The loss `cfg` names, called as loss(y_true, y_pred) -> scalar tensor.

    `dtype` (e.g. "float64" for the gradient check) goes to a class that accepts it: Keras
    losses cast their inputs to their own dtype, float32 unless told. Functions follow their
    inputs' dtype.
    """
    from hydra.utils import instantiate

    target = locate(KEY, str(cfg["_target_"]))
    spec = {"_target_": cfg["_target_"], **loss_arguments(cfg)}
    if inspect.isclass(target):
        if dtype is not None and _accepts(target, "dtype"):
            spec["dtype"] = dtype
        return instantiate(spec)
    return MeanLoss(instantiate(spec, _partial_=True))


class MeanLoss:
    """A loss function with the config's keys bound, its result averaged to one number, as a
    Keras Loss averages: in a replica of a mirrored step scaled by 1/replicas (the optimizer sums
    the replicas' gradients; QA: a function trained at twice the rate on 2 replicas, and logged
    twice the loss), and 0, not NaN, over no rows (a replica's empty share of a short batch)."""

    def __init__(self, function: Callable[..., Any]):
        self.function = function

    def __call__(self, y_true: Any, y_pred: Any) -> Any:
        import tensorflow as tf

        values = tf.convert_to_tensor(self.function(y_true, y_pred))
        mean = tf.math.divide_no_nan(tf.reduce_sum(values), tf.cast(tf.size(values), values.dtype))
        replica = tf.distribute.get_replica_context()  # None across replicas: not a share
        replicas = replica.num_replicas_in_sync if replica is not None else 1
        return mean / replicas if replicas > 1 else mean

    def __repr__(self) -> str:
        return f"MeanLoss({self.function!r})"


def _hydra_key(key: str) -> bool:
    """_partial_, _convert_, ...: read by hydra.utils.instantiate, not passed on."""
    return key.startswith("_") and key.endswith("_")


def _defined(cls: type, method: str) -> Callable[..., Any] | None:
    """`cls.method` if a class other than `object` defines it (every class has type's __call__)."""
    for klass in cls.__mro__:
        if klass is not object and method in vars(klass):
            return getattr(cls, method)
    return None


def _check_call(path: str, function: Callable[..., Any], args: tuple, kwargs: dict[str, Any],
                shown: str) -> None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # builtins without a signature: trust them
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as error:
        raise ConfigError(f"{KEY}={path}: cannot be called as {shown}: {error} (its signature "
                          f"is {signature})") from None


def _accepts(cls: type, keyword: str) -> bool:
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in parameters)
