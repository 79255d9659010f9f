"""Setups that compose but cannot train what the person meant, said before any run opens.

Each check either refuses in one line naming the keys (a ConfigError: the setup cannot work, or
the config would record keys that did nothing) or, where the setup is legitimate but unusual
(mse on one-hot classes trains, and is rarely what is meant), prints one warning line and lets
the run go on. Nothing here is silent.

    check_config(cfg)            the config alone, before TensorFlow loads (also per sweep job)
    check_against_data(cfg, data)  the loss against the data's task, a model not sized from the
                                 data (yours, model=keras, model=digits_cnn) against the data's
                                 features and targets (builds that model once), and its call
                                 and own losses traced as the compiled training step traces them
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradexp.config_checks import NO_OPTION, check_option_names, options_built_by, shipped_target
from gradexp.endings import reason_of
from gradexp.losses import check_loss_returns, from_logits_of, loss_kind, outputs_of
from gradexp.metrics import check_metric_values
from gradexp.schedules import check_boundary_steps
from gradexp.schema import ConfigError
from gradexp.xla_checks import check_xla_batches, check_xla_settings

# Groups whose option's keys go to the option's own code only: a person's `_target_` in their
# place is called with `kwargs` (model=custom, data=custom), never with the option's keys.
BUILT_BY_OPTION = ("model", "data")
# Keras' losses by the last part of their dotted path (class or function), lower-cased.
SPARSE = {"sparsecategoricalcrossentropy", "sparse_categorical_crossentropy"}
# gradexp's builders that size the model from the data (n_features in, n_outputs out): nothing
# to check. gradexp.models.sequential (model=keras, model=digits_cnn) is not among them: its
# layers are written for some data (digits_cnn reshapes 64 pixels into 8x8) and may not fit.
SIZED_FROM_DATA = tuple(f"{__package__}.models.{name}"  # spelled once: tests/test_tag_keys.py
                        for name in ("linear", "buggy_linear", "mlp"))


# The shapes (verdict_key) whose training-step check passed in this process: a sweep's jobs of
# one shape trace it once. A bounded, ordered dict of short tuples (no models), oldest out.
VERDICTS_KEPT = 64
_PASSED: dict[tuple, None] = {}


def forget_user_code() -> None:
    """Drop the verdicts on a person's code (a key whose last element, its launch, is not None):
    a later launch never reuses them."""
    for key in [key for key in _PASSED if key[-1] is not None]:
        del _PASSED[key]


def warning_line(message: str) -> None:
    """One line about a setup that runs but is probably not what was meant."""
    from rich.console import Console

    Console(file=sys.stderr, soft_wrap=True, highlight=False).print(
        f"[bold yellow]warning:[/bold yellow] {message}", markup=True)


def check_config(cfg: DictConfig) -> None:
    """What the config alone shows: a `_target_` set on a group option that does not read it,
    a piecewise schedule whose factors do not match its boundaries, a built-in callback
    removed while its job is on (gradexp.callbacks.check_jobs_kept)."""
    from gradexp.callbacks import check_jobs_kept

    check_option_names(cfg)  # first: a renamed option's name is no longer its code's
    for group in BUILT_BY_OPTION:
        check_target_is_read(cfg, group)
    check_piecewise(cfg)
    check_jobs_kept(cfg)
    check_xla_settings(cfg)


def check_piecewise(cfg: DictConfig) -> None:
    """A piecewise schedule has one factor per stretch: one more than its boundaries. Keras
    would say otherwise only once the optimizer is built, inside an open run (a FAILED run and
    a traceback)."""
    schedule = OmegaConf.select(cfg, "optimizer.schedule", default=None)
    if schedule is None or str(schedule.name) != "piecewise":
        return  # the other schedules do not read boundaries and factors
    boundaries = OmegaConf.to_container(schedule.boundaries)
    factors = OmegaConf.to_container(schedule.factors)
    if len(factors) != len(boundaries) + 1:
        raise ConfigError(
            f"optimizer.schedule.factors={factors} has {len(factors)} value"
            f"{'s' if len(factors) != 1 else ''} for optimizer.schedule.boundaries={boundaries}"
            f" ({len(boundaries)}): piecewise needs one factor more than boundaries, "
            f"{len(boundaries) + 1} here (one per stretch between them)")


def check_target_is_read(cfg: DictConfig, group: str) -> None:
    """`model._target_=my.build` on model=linear: build_model calls my.build with the sizes and
    model.kwargs only, so model.init_scale and model.seed would be recorded but never read.
    Refused, naming those keys and the option that reads a person's code (GROUP=custom)."""
    shipped = shipped_target(cfg, group)
    node = OmegaConf.select(cfg, group, default=None)
    if shipped is None or shipped is NO_OPTION:
        return  # no such option's file (a labelled run)
    target = str(node["_target_"])
    if target == shipped:
        return  # the option's own code
    owners = options_built_by(group, target)
    if owners:  # another option's builder takes that option's keys (QA: a traceback, a hang)
        named = [f"{group}={owner}" for owner in owners]
        takes = "takes that option's" if len(owners) == 1 else "take those options'"
        raise ConfigError(
            f"{group}._target_={target} is the code of {' and '.join(named)}, which {takes} "
            f"keys, not {group}={node.name}'s: choose {' or '.join(named)}")
    if shipped == "???" or target.startswith("gradexp."):
        return  # the option that takes your code, or another of gradexp's
    # name and task are gradexp's (the run's label, the data's kind), read whatever the code
    unread = [f"{group}.{key}" for key in node
              if key not in ("_target_", "name", "kwargs", "task")]
    keys = f" and would not read {', '.join(unread)}" if unread else ""
    raise ConfigError(
        f"{group}._target_={target}: {group}={node.name} builds with its own code "
        f"({shipped}){keys}; for your code use {group}=custom {group}._target_={target} "
        f"(its arguments as +{group}.kwargs.NAME=VALUE)")


def check_against_data(cfg: DictConfig, data: Any, say=warning_line) -> None:
    """The loss against the data's task, and a person's model against the data's shapes."""
    check_loss_fits_task(cfg, data, say)
    if not check_classes(cfg, data, say):  # a price read as classes: said, and that is why
        check_training_classes(cfg, data, say)
    check_label_spellings(cfg, data, say)
    check_label_like_target(cfg, data, say)
    check_target_size(cfg, data, say)
    check_model_fits_data(cfg, data)
    check_loss_returns(cfg.loss, data.n_outputs)
    check_metric_values(cfg, data)  # a per-class metric (F1Score's average=None), its direction
    check_optimizer_builds(cfg)
    batch_size = data.batch_size or cfg.trainer.batch_size
    check_boundary_steps(cfg.optimizer.schedule, data.steps_per_epoch(batch_size))
    if data.stream is None:  # a tf.data set's batches are its own
        check_xla_batches(cfg, len(data.x), batch_size)


def _target_named(cfg: DictConfig, otherwise: str = "the target") -> str:
    """How a data warning names the target: the csv's key, else in words (a loader's y)."""
    return f"data.target={cfg.data.target}" if cfg.data.get("target") else otherwise


# Past this, a target's square (mse's) is past float32's largest number, ~3.4e38: inf.
SQUARE_OVERFLOWS = 1.8e19


def check_target_size(cfg: DictConfig, data: Any, say=warning_line) -> None:
    """Targets train in float32: one past its range (1e39) became inf once read, and one past
    SQUARE_OVERFLOWS (1e30) makes mse inf. Both ended the run told "NaN at the starting weights:
    a log or sqrt of a negative number?", nothing pointing at the value."""
    import numpy as np

    if data.task != "regression" or data.stream is not None:
        return
    largest = max(float(np.max(np.abs(split.y), initial=0.0))
                  for split in data.splits().values())
    where = _target_named(cfg, "the targets")
    if not np.isfinite(largest):
        raise ConfigError(f"{where}: a value past float32's range (~3.4e38), in which gradexp "
                          "trains: rescale the target (divide it by a power of 10)")
    if largest > SQUARE_OVERFLOWS:
        say(f"{where}: values up to {largest:.3g}, whose squares are past float32's range "
            "(~3.4e38), in which gradexp trains: mse of them is inf; rescale the target "
            "(divide it by a power of 10)")


def check_optimizer_builds(cfg: DictConfig) -> None:
    """Build the optimizer once, as the run will: arguments an optimizer refuses only in its
    constructor (optimizer._target_=keras.optimizers.Lion given sgd's momentum) ended the run
    FAILED with Hydra's traceback, and a sweep's whole batch with Hydra's error after its last
    job. One line now, before any run."""
    from hydra.errors import InstantiationException

    from gradexp.schedules import build_optimizer

    try:
        build_optimizer(cfg.optimizer, 1, int(cfg.trainer.epochs))
    except InstantiationException as error:
        cause = error.__cause__
        if not isinstance(cause, (ValueError, TypeError)):
            raise
        raise ConfigError(f"optimizer={cfg.optimizer.name}: {cfg.optimizer._target_} refused "
                          f"its arguments ({type(cause).__name__}: {reason_of(cause)[:200]})"
                          ) from None


# A classification with fewer rows than this a class, on average, warns: its target is most
# likely a real-valued one (a price, a measurement) read as class labels, one class a value.
MIN_ROWS_PER_CLASS = 4


def check_classes(cfg: DictConfig, data: Any, say=warning_line) -> bool:
    """data.task=classification on a real-valued target makes every distinct value a class of
    its own: it trains, at chance accuracy, and nothing said why. One warning when the labels
    are numbers, and fractional or nearly as many as the rows (text labels are labels).
    Whether it warned."""
    if data.task != "classification" or not data.labels or data.stream is not None:
        return False
    if not all(isinstance(label, int | float) and not isinstance(label, bool)
               for label in data.labels):
        return False  # text ('setosa') or true/false: labels, however few rows each has
    rows = sum(len(split.x) for split in data.splits().values())
    fractional = sum(isinstance(label, float) and not label.is_integer()
                     for label in data.labels)
    if not fractional and len(data.labels) * MIN_ROWS_PER_CLASS <= rows:
        return False
    target = _target_named(cfg)
    some = f", {fractional} of them fractional numbers" if fractional else ""
    say(f"data.task=classification: {target} has {len(data.labels)} distinct values in {rows} "
        f"rows{some}, each a class of its own: a real-valued target read as class labels? "
        "data.task=regression fits it as numbers")
    return True


def _one_class_a_row(y: Any) -> bool:
    import numpy as np

    y = np.asarray(y)
    return bool(len(y)) and bool(np.all((y == 0) | (y == 1))) and bool(np.all(y.sum(axis=1) == 1))


def check_label_spellings(cfg: DictConfig, data: Any, say=warning_line) -> None:
    """Text labels that differ only in case or spaces ('Setosa', 'setosa') are classes of their
    own, as scikit-learn and Keras take them; one warning, in case it is one class spelt twice."""
    if data.task != "classification" or not data.labels:
        return
    spellings: dict[str, list[str]] = {}
    for label in data.labels:
        if isinstance(label, str):
            spellings.setdefault(" ".join(label.casefold().split()), []).append(label)
    twins = [names for names in spellings.values() if len(names) > 1]
    if twins:
        where = _target_named(cfg)
        shown = "; ".join(" and ".join(repr(name) for name in names) for names in twins[:3])
        say(f"{where}: {shown} differ in case or spaces only, and are classes of their own: "
            "one class spelt two ways?")


def check_training_classes(cfg: DictConfig, data: Any, say=warning_line) -> None:
    """Every class should have training rows. A split that leaves a class only in the held-out
    rows trains without it (accuracy 1 on training, 0 on that class, and nothing said why);
    training rows of one class alone are refused as a one-class target is (gradexp.data)."""
    import numpy as np

    if data.task != "classification" or not data.labels or data.stream is not None:
        return
    y = np.asarray(data.y).reshape(len(data.y), -1)
    if data.n_outputs == 1 and len(data.labels) == 2:  # yes/no in one column of 0s and 1s
        trained = np.array([np.any(y < 0.5), np.any(y >= 0.5)])
    elif len(data.labels) == data.n_outputs:  # one-hot
        trained = y.sum(axis=0) > 0
    else:
        return
    missing = [label for label, seen in zip(data.labels, trained) if not seen]
    if not missing:
        return
    where = _target_named(cfg)
    held = ", ".join(repr(label) for label in missing[:5]) + (" ..." if len(missing) > 5 else "")
    split = "" if cfg.data.get("split_seed") is None else " (another data.split_seed, or more rows)"
    if trained.sum() < 2:
        only = next(label for label, seen in zip(data.labels, trained) if seen)
        raise ConfigError(f"{where}: the {len(data.y)} training rows hold one class only "
                          f"({only!r}); {held} only in the held-out rows: a classification "
                          f"needs 2 or more classes to train on{split}")
    these = f"classes {held} have" if len(missing) > 1 else f"class {held} has"
    say(f"{where}: {these} no training row, only held-out ones: the model cannot learn "
        f"{'them' if len(missing) > 1 else 'it'}{split}")


# A regression whose one target column holds at most this many distinct integers warns: most
# likely class labels (1, 2, 3) left at data.task=regression, fit as numbers.
MAX_LABEL_LIKE_VALUES = 10


def check_label_like_target(cfg: DictConfig, data: Any, say=warning_line) -> None:
    """data.task=regression on a column of a few integers (grades 1..3, classes coded 0..9)
    trains a line through class codes, with no word: one warning naming the values (some
    counts and ratings are meant as numbers: it trains either way)."""
    if data.task != "regression" or data.stream is not None or data.n_outputs != 1:
        return
    import numpy as np

    values = np.unique(np.concatenate([split.y[:, 0] for split in data.splits().values()]))
    rows = sum(len(split.x) for split in data.splits().values())
    if len(values) > MAX_LABEL_LIKE_VALUES or not np.all(values == np.round(values)) \
            or rows < 4 * len(values):
        return
    target = _target_named(cfg)
    shown = ", ".join(f"{value:g}" for value in values)
    say(f"data.task=regression: {target} holds only {len(values)} distinct integers ({shown}) "
        f"in {rows} rows: class labels? data.task=classification learns them as classes")


def check_loss_fits_task(cfg: DictConfig, data: Any, say=warning_line) -> None:
    """Crossentropy on a regression's real-valued targets cannot work: refused. A regression
    loss on one-hot classes trains (Keras lets you compile it), but is rarely meant: a warning.
    Categorical crossentropy over one output is 0 whatever the model does: refused. So is
    loss.from_logits=false with one of gradexp's models, whose outputs are logits: the loss
    would read them as probabilities (clipped to [0, 1]) and train on nonsense, silently."""
    target = str(cfg.loss["_target_"])
    kind, task = loss_kind(target), data.task
    where = f"loss={cfg.loss.name} ({target})"
    data_name = f"data={cfg.data.name}"
    model = str(cfg.model["_target_"])
    if kind == "classification" and task == "regression":
        raise ConfigError(
            f"{where} is a classification loss, but {data_name} is a regression (data.task="
            "regression, real-valued targets): use loss=mse, mae, huber or log_cosh, or "
            "data.task=classification if y holds class labels")
    if kind == "regression" and task == "classification":
        say(f"{where} is a regression loss on {data_name}'s one-hot classes (data.task="
            "classification): it trains, but loss=categorical_crossentropy is the usual choice")
    last = target.rsplit(".", 1)[-1].lower()
    if task == "classification" and last in SPARSE:
        raise ConfigError(
            f"{where} takes class indices, but gradexp gives one-hot targets ({data_name}, "
            f"{data.n_outputs} columns): use loss=categorical_crossentropy")
    if last.startswith("categorical") and "crossentropy" in last and data.n_outputs == 1:
        raise ConfigError(
            f"{where} over one output column ({data_name}) is 0 whatever the model predicts: "
            "use loss=binary_crossentropy, or give the targets one column per class")
    if last.startswith("binary") and "crossentropy" in last and data.n_outputs > 2 \
            and data.stream is None and _one_class_a_row(data.y):
        say(f"{where} on {data_name}'s {data.n_outputs} classes, one a row: it trains each "
            "class as a yes/no of its own (multi-label: probabilities that need not sum to 1); "
            "loss=categorical_crossentropy trains one class a row")
    # last: a loss that cannot take the data at all says so first (a sparse one's indices)
    if task == "classification" and outputs_of(cfg.loss) == "probabilities" \
            and model.startswith(f"{__package__}.models.") \
            and cfg.model.get("output_layer", True) is not False:  # model=keras may end as told
        told = ("loss.from_logits=false" if "from_logits" in cfg.loss
                else f"{where} reads probabilities (its from_logits defaults to false)")
        raise ConfigError(
            f"{told}: model={cfg.model.name} outputs logits (its last layer is "
            "a Dense with no softmax or sigmoid), which the loss would read as probabilities; "
            "set loss.from_logits=true, or use model=custom with a model that "
            "ends in a softmax")


@contextmanager
def keras_names_kept() -> Iterator[None]:
    """Keras names unnamed layers by a process-wide count (dense, dense_1, ...): the model built
    only to be checked must not move it, or the trained model's variables (and so the gradient
    checks' and MLflow's names for them) would differ from a run without the check."""
    try:
        from keras.src.backend.common import global_state
    except ImportError:  # another Keras layout: names may move on by one model
        yield
        return
    uids = global_state.get_global_attribute("object_name_uids")
    saved = None if uids is None else collections.defaultdict(int, uids)
    try:
        yield
    finally:
        global_state.set_global_attribute("object_name_uids", saved)


def check_model_fits_data(cfg: DictConfig, data: Any) -> None:
    """Build the model once and call it on two rows of zeros: a model whose input does not take
    the data's features, or whose output is not one column per target, is refused now (a
    (rows, 3) output against (rows, 1) targets would broadcast in mse and train silently).
    gradexp's options sized from the data are skipped; the model built here is dropped."""
    from gradexp.models import build_model
    from gradexp.user_code import raised_by_own_code

    target = str(cfg.model["_target_"])
    if target in SIZED_FROM_DATA:
        return
    # gradexp's own builder (model=keras, digits_cnn) is named by its option, yours by its code
    where = f"model={cfg.model.name}" if target.startswith("gradexp.") else \
        f"model._target_={target}"
    with keras_names_kept():
        try:
            model = build_model(cfg.model, data.n_features, data.n_outputs)
        except (ValueError, TypeError) as error:
            if isinstance(error, ConfigError):
                raise
            why = reason_of(error)
            # Keras words any error of a layer's call while building as "could not infer the
            # output shape" (a mismatch with the data's rows too); an unknown shape is the one
            # compute_output_shape mends: a tf.numpy_function's output.
            if "unknown TensorShape" in why or "unknown rank" in why:
                raise ConfigError(
                    f"{where}: {why}; give the layer a compute_output_shape(input_shape) "
                    "method (a tf.numpy_function or tf.py_function returns a tensor of unknown "
                    "shape)") from None
            if raised_by_own_code(error):  # QA: a builder's own check read as a shape's
                raise ConfigError(f"{where}: the builder raised {type(error).__name__}: {why}") \
                    from None
            # Sequential builds its layers on keras.Input((n_features,)) as it is made: a
            # layer written for other data fails here (digits_cnn's Reshape on 1 feature)
            raise ConfigError(
                f"{where}: its layers do not take data={cfg.data.name}'s rows of "
                f"{_features(data)} ({why})") from None
        _check_built(cfg, data, where, model)


def _features(data: Any) -> str:
    return f"{data.n_features} feature{'s' if data.n_features != 1 else ''}"


def _check_built(cfg: DictConfig, data: Any, where: str, model: Any) -> None:
    import numpy as np

    features = _features(data)
    inputs = getattr(model.network, "inputs", None) or []
    declared = [tuple(tensor.shape) for tensor in inputs]
    if len(declared) > 1:
        names = ", ".join(getattr(t, "name", "?").split(":")[0] for t in inputs)
        raise ConfigError(
            f"{where}: takes {len(declared)} inputs ({names}), but gradexp feeds a model one "
            f"tensor of (rows, {data.n_features}) (a dict of named features joined into its "
            "columns): build one keras.Input((n_features,)) and slice it inside where layers "
            "take parts apart")
    if len(declared) == 1 and declared[0] and declared[0][0] is not None:  # QA: a stateful RNN
        raise ConfigError(  # was "does not take ...'s rows of 64 features", though they fit
            f"{where}: its input has a fixed batch size of {declared[0][0]} (batch_size= or "
            "batch_shape=, as a stateful RNN needs), but gradexp calls a model on batches of "
            "trainer.batch_size rows and checks it on other row counts: build "
            "keras.Input((n_features,)) with no batch size (stateful RNNs are not supported)")
    if len(declared) == 1 and len(declared[0]) > 2:  # images, sequences: gradexp feeds flat rows
        row = declared[0][1:]
        given = getattr(data, "raw_shape", None)
        flattened = f" (its rows of shape {given}, flattened)" if given else ""
        raise ConfigError(
            f"{where}: its input takes rows of shape {row}, but gradexp gives a model flat "
            f"rows: data={cfg.data.name} has {features}{flattened}; build "
            f"keras.Input((n_features,)), then keras.layers.Reshape({given or row}) first")
    if len(declared) == 1 and declared[0][-1] not in (None, data.n_features):
        raise ConfigError(
            f"{where}: its input takes rows of {declared[0][-1]} features, but "
            f"data={cfg.data.name} has {features}: build keras.Input((n_features,))")
    rows = np.zeros((2, data.n_features), np.float32)
    try:
        out = model(rows)
    except Exception as error:  # noqa: BLE001 - the shapes' mismatch, unless TensorFlow's rule
        _refuse_custom_gradient(where, error)
        raise ConfigError(
            f"{where}: does not take data={cfg.data.name}'s rows of "
            f"{features} ({type(error).__name__}: {reason_of(error)[:200]})") from None
    _refuse_standardized_ids(cfg, data, where, model)
    if not model.network.trainable_variables:  # built by now, a subclassed one too;
        # Keras' optimizer fails on none (a traceback)
        raise ConfigError(f"{where}: the model has no trainable weights (every layer frozen, "
                          "trainable=False?): there is nothing to train or check")
    if isinstance(out, (dict, list, tuple)):  # its shape read as (): "build the last layer
        kind = "dict" if isinstance(out, dict) else type(out).__name__  # with n_outputs units"
        names = f" ({', '.join(map(str, out))})" if isinstance(out, dict) else ""
        raise ConfigError(
            f"{where}: returns a {kind} of {len(out)} output{'s' * (len(out) != 1)}{names}, but "
            f"gradexp trains a model of one output, a tensor of (rows, {data.n_outputs}): return "
            "that tensor alone (keras.Model(inputs, outputs))")
    try:  # its own losses eagerly, as the run's final loss reads them after training: a
        model.own_loss(out)  # regularizer's tf.custom_gradient on its weight fails only there
    except Exception as error:  # noqa: BLE001 - only TensorFlow's custom_gradient rule is ours
        _refuse_custom_gradient(where, error)
    shape = tuple(getattr(out, "shape", ()))
    if len(shape) != 2 or shape[-1] != data.n_outputs:
        raise ConfigError(
            f"{where}: returns outputs of shape {shape} for 2 rows, but "
            f"data={cfg.data.name} has {data.n_outputs} target column"
            f"{'s' if data.n_outputs != 1 else ''} ({data.task}): build the last layer with "
            "n_outputs units")
    if from_logits_of(cfg.loss) is True and hasattr(out, "_keras_logits"):
        # Keras marks what its softmax and sigmoid return; a loss with from_logits=true would
        # squash it again: it trains poorly, and the logged model's probabilities (squashed a
        # second time when it is served) never reach 1. Keras' own loss only warns.
        raise ConfigError(
            f"{where}: its output comes out of a softmax or sigmoid (probabilities), but "
            f"loss.from_logits=true reads it as logits and applies another: set "
            "loss.from_logits=false, or end the model without the activation")
    key = verdict_key(cfg, data)
    if key in _PASSED:  # an earlier job of this shape passed: the same trace would pass
        return
    if cfg.trainer.compile:
        check_compiles(where, model, rows)
    else:
        check_trains_eagerly(where, model, rows)
    _PASSED[key] = None
    while len(_PASSED) > VERDICTS_KEPT:
        del _PASSED[next(iter(_PASSED))]  # the oldest


def _refuse_standardized_ids(cfg: DictConfig, data: Any, where: str, model: Any) -> None:
    """A model whose inputs are ids (an integer Input, an Embedding on them) trained on
    standardized features: ids 0-19 became -1.7 to 1.7, which the Embedding cast back to about
    3 ids, and the run trained to a worse fit with no word (QA: val/r2 0.68 against 0.95)."""
    from gradexp.check_notes import masking_layer, token_inputs

    if getattr(data, "standardization", None) is None:
        return
    ids = token_inputs(model)
    if ids is not None:
        raise ConfigError(
            f"{where}: {ids} (ids, not quantities), but data.standardize=true rescales the "
            "features, which turns ids into fractions: set data.standardize=false")
    layer = masking_layer(model)  # its padding value, rescaled, masks nothing (silently)
    if layer is not None:
        raise ConfigError(
            f"{where}: its Masking layer {layer.name} skips steps equal to "
            f"{layer.mask_value!s}, but data.standardize=true rescales the features, so "
            "padding no longer equals it: set data.standardize=false")


def verdict_key(cfg: DictConfig, data: Any) -> tuple:
    """What decides whether a model's training call traces: the model's config (its builder,
    kwargs or layers, their regularizers: model.losses) but its seed, which moves only weights,
    the files of the code its `_target_`s name (a module of the same name in another launch
    folder is other code; a person's code within its launch: user_code.user_code_launch),
    the data's sizes and trainer.compile. A short tuple."""
    from gradexp.user_code import targets_in, user_code_launch

    options = OmegaConf.to_container(cfg.model, resolve=True, enum_to_str=True)
    options.pop("seed", None)
    files = tuple(_code_file(target) for target in dict.fromkeys(targets_in(options)))
    return (repr(options), files, data.n_features, data.n_outputs, bool(cfg.trainer.compile),
            user_code_launch(cfg, ("model",)))


def _code_file(target: str) -> str:
    """The file of the (imported) module a dotted `_target_` lives in; "" when none is."""
    parts = target.split(".")
    for end in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:end]))
        if module is not None:
            return str(getattr(module, "__file__", "") or "")
    return ""


def check_compiles(where: str, model: Any, rows: Any) -> None:
    """The model's call and its own losses (model.losses) traced as a compiled training step
    traces them: code that runs only eagerly (a regularizer reading its weights with .numpy())
    fails there, and did so as a traceback from inside an opened run. The rows are closed over
    as the trainer's full batch is, so what that step accepts passes here too."""
    import tensorflow as tf

    x = tf.constant(rows)

    def forward():
        return model(x, training=True)

    def forward_and_own_losses():
        outputs = forward()
        own = model.own_loss(outputs)
        return outputs if own is None else own

    def traces(function) -> BaseException | None:
        try:
            tf.function(function, autograph=False)()
        except Exception as error:  # noqa: BLE001 - whatever fails to trace fails training
            return error
        return None

    failed = traces(forward_and_own_losses)
    if failed is None:
        return
    _refuse_custom_gradient(where, failed)  # TensorFlow's rule, compiled or not
    check_trains_eagerly(where, model, rows)  # failing eagerly too, it is not the compiling
    # Only now is the call traced alone: to say which part of the person's code it is.
    part, them = ("its call", "it") if traces(forward) else (
        "its own losses (model.losses: a regularizer, add_loss)", "them")
    raise ConfigError(
        f"{where}: {part} cannot run in the compiled training step ({type(failed).__name__}: "
        f"{reason_of(failed)[:200]}); write {them} with keras.ops or TensorFlow ops (a value "
        "read with .numpy() or float() carries no gradient either), or set "
        "trainer.compile=false to train eagerly")


def check_trains_eagerly(where: str, model: Any, rows: Any) -> None:
    """The call in training mode and its own losses, eagerly (the call above ran in inference
    mode): TensorFlow's refusal of a tf.custom_gradient on a training-only branch, or any error
    of that branch, is one line before a run. QA: a reshape wrong in training mode only was
    "cannot run in the compiled training step", and trainer.compile=false, as advised, ended
    the run FAILED in a traceback."""
    try:
        outputs = model(rows, training=True)
        model.own_loss(outputs)
    except Exception as error:  # noqa: BLE001 - any failure here fails the first step
        _refuse_custom_gradient(where, error)
        raise ConfigError(f"{where}: its call fails in training mode (dropout, batch "
                          f"statistics, your training branch) on 2 rows of zeros "
                          f"({type(error).__name__}: {reason_of(error)[:200]})") from None


def _refuse_custom_gradient(where: str, error: BaseException) -> None:
    """A tf.custom_gradient whose grad_fn lacks `variables` fails eagerly as compiled: its line
    (gradexp.models.custom_gradient_refusal), not advice to train eagerly."""
    from gradexp.models import custom_gradient_refusal

    refused = custom_gradient_refusal(where, error)
    if refused is not None:
        raise refused from None
