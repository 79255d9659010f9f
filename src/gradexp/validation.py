"""Config checks Hydra cannot make, run before TensorFlow loads: values in range (learning_rate
> 0, seeds in numpy's range, nothing NaN), no key that gradexp would not read, and which option
files name which `_target_` (to tell gradexp's code from a person's).

The types and the known keys come from the dataclass schemas in gradexp.schema.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradexp.resources import resource_dir
from gradexp.schema import SCHEMAS, ConfigError


# ---------------------------------------------------------------- range checks
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
    ("gradcheck.max_rows", _at_least(1), "must be an integer >= 1, or null for all rows"),
    ("gradcheck.order", lambda v: v in (1, 2), "must be 1 (gradients) or 2 (second derivatives)"),
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
    ("data.materialize_mb", _positive, "must be a number of megabytes > 0"),
    ("data.steps_per_epoch", _at_least(1), "must be an integer >= 1, or null for one pass"),
    ("data.features", lambda v: len(v) > 0 and all(isinstance(n, str) for n in v),
     "must be a list of column names, e.g. [area,rooms], or null for every other column"),
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
    ("tracking.stale_after", _positive, "must be a number of minutes > 0"),
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


def _nested_key(group: str, name: str) -> str | None:
    """`group.block.name` when one of the group's blocks (trainer.early_stopping) has `name`."""
    top = group.split(".")[0]
    for schema in SCHEMAS.get(top, {}).values():
        for block in fields(schema):
            inner = block.default_factory() if callable(block.default_factory) else None
            if is_dataclass(inner) and name in {f.name for f in fields(inner)}:
                return f"{top}.{block.name}.{name}"
    return None


def did_you_mean(key: str, value: Any, accepted: list[str] | None = None) -> str:
    """'; did you mean ...?' for a key no schema declares, or ''. A top-level key may be a
    misspelt group (`optimzer=adam` -> the group optimizer=adam) or a key of some group
    (`lr` -> optimizer.learning_rate); a group's key is matched against `accepted` (default:
    the keys of any of the group's options)."""
    group, _, name = key.rpartition(".")
    if group:
        hint = closest_key(name, group_keys(group) if accepted is None else accepted)
        if hint:
            return f"; did you mean {group}.{hint}?"
        nested = _nested_key(group, name)  # trainer.patience -> trainer.early_stopping.patience
        return f"; did you mean {nested}?" if nested else ""
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


# ---------------------------------------------------------------- options and user code
NO_OPTION = object()  # `name` is no option's file


def shipped_target(cfg: DictConfig, group: str) -> Any:
    """The `_target_` of conf/<group>/<name>.yaml; NO_OPTION if there is no such file; None if
    the group has no `_target_` or `name`."""

    node = OmegaConf.select(cfg, group, default=None)
    if not isinstance(node, DictConfig) or "_target_" not in node or "name" not in node:
        return None
    option = resource_dir("conf") / group / f"{node.name}.yaml"
    if not option.is_file():
        return NO_OPTION
    # As plain data: a `???` target (data=custom, model=custom) is the text "???", not a miss.
    return OmegaConf.to_container(OmegaConf.load(option)).get("_target_")


def user_target(cfg: DictConfig, group: str) -> bool:
    """Does `<group>._target_` name code other than the chosen option's own (user code)?

    True when the `_target_` differs from the option file's, or when `name` is no option's file
    (a labelled run, or a name the person chose), so the answer is the same after labelling.
    """
    shipped = shipped_target(cfg, group)
    if shipped is None:
        return False
    node = OmegaConf.select(cfg, group)
    return shipped is NO_OPTION or node["_target_"] != shipped
