"""Config checks Hydra cannot make, run before TensorFlow loads: values in range (the rules on
the schema fields: learning_rate > 0, ...; seeds in numpy's range, nothing NaN), no key that
gradexp would not read, and which option files name which `_target_` (to tell gradexp's code
from a person's).

The types, the known keys and the range rules come from the dataclass schemas in gradexp.schema;
nothing here lists a key.
"""

from __future__ import annotations

import difflib
import functools
import math
from dataclasses import fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradexp.resources import resource_dir
from gradexp.schema import SCHEMAS, SEED_MAX, Config, ConfigError


# ---------------------------------------------------------------- range checks
def check_ranges(cfg: DictConfig, *, missing_ok: bool = False) -> None:
    """Raise ConfigError on the first value outside its range, naming key, value and the range.

    The ranges are the rules on the schema fields (gradexp.schema.setting), applied to every
    node that came from a schema. missing_ok: a sweep's base config, whose swept keys
    (data.path=a.csv,b.csv) come per job."""
    check_known_keys(cfg)
    missing = [] if missing_ok else sorted(OmegaConf.missing_keys(cfg))
    if missing:
        key = missing[0]
        raise ConfigError(f"{key} is required here: set it on the command line, {key}=VALUE")
    check_seeds(cfg)
    check_finite(cfg)
    for key in cfg:
        if key != "hydra" and not OmegaConf.is_missing(cfg, key) \
                and isinstance(cfg[key], DictConfig):
            _check_rules(cfg[key], f"{key}.")


def _check_rules(node: DictConfig, prefix: str) -> None:
    """Apply each field's rule to its value, into nested schema blocks (trainer.early_stopping)."""
    schema = OmegaConf.get_type(node)
    if not is_dataclass(schema):
        return  # a free-form node (data.kwargs, callbacks): nothing declared to check
    for item in fields(schema):
        if item.name not in node or OmegaConf.is_missing(node, item.name):
            continue
        value = node[item.name]
        if isinstance(value, DictConfig):
            _check_rules(value, f"{prefix}{item.name}.")
            continue
        rule = item.metadata.get("rule")
        if rule is None or value is None:
            continue
        if isinstance(value, bool) or not rule.test(value):
            raise ConfigError(f"{prefix}{item.name}={_shown(value)}: {rule.accepted}")


def _shown(value: Any) -> str:
    """A value as given: a list[float]'s whole numbers as typed ([3, 1], not OmegaConf's
    [3.0, 1.0])."""
    if not OmegaConf.is_list(value):
        return str(value)
    return str([int(item) if isinstance(item, float) and item.is_integer() else item
                for item in OmegaConf.to_container(value)])


def check_seeds(cfg: DictConfig) -> None:
    """Every key named seed or *_seed is an integer in [0, 2**32 - 1] (numpy's and TF's range)."""
    for key, value in _leaves(cfg, ""):
        name = key.rsplit(".", 1)[-1]
        if (name == "seed" or name.endswith("_seed")) and value is not None and (
                isinstance(value, bool) or not isinstance(value, int)
                or not 0 <= value <= SEED_MAX):
            null = ", or null" if key == "seed" else ""  # the master seed's default: unset
            raise ConfigError(f"{key}={value}: must be an integer in [0, {SEED_MAX}]{null}")


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
    """The keys some option of `group` accepts, in schema order: a group's options (optimizer),
    a block of the root config (sweep, eval: no options), or a node of Hydra's (hydra.sweeper)."""
    if group.split(".")[0] == "hydra":
        return _hydra_keys(group)
    schemas = list(SCHEMAS.get(group, {}).values())
    block = next((f.default_factory for f in fields(Config) if f.name == group), None)
    if not schemas and is_dataclass(block):  # sweep, eval: one schema, no options to choose
        schemas = [block]
    keys: dict[str, None] = {}
    for schema in schemas:
        keys.update((f.name, None) for f in fields(schema))
    return list(keys)


def _hydra_keys(node: str) -> list[str]:
    """The keys of Hydra's node `node` (hydra, hydra.job, ...). hydra.sweeper and hydra.launcher
    are the chosen plugin's config, and where a composition failed nothing says which one was
    chosen: so every installed sweeper's (launcher's) keys, its `_target_` aside."""
    from typing import get_type_hints

    from hydra.conf import HydraConf

    path = node.split(".")[1:]
    if path in (["sweeper"], ["launcher"]):
        from hydra.core.config_store import ConfigStore
        from hydra.core.plugins import Plugins

        Plugins.instance()  # each installed plugin stores its configs when first scanned
        options = ConfigStore.instance().repo["hydra"][path[0]].values()
        return list(dict.fromkeys(key for option in options if hasattr(option, "node")
                                  for key in option.node if key not in ("_target_", "defaults")))
    schema: Any = HydraConf
    for name in path:
        schema = get_type_hints(schema).get(name)
        if not is_dataclass(schema):
            return []
    return [f.name for f in fields(schema) if f.name != "defaults"]


def _nested_key(group: str, name: str) -> str | None:
    """`group.block.name` when one of the group's blocks (trainer.early_stopping) has `name`."""
    top = group.split(".")[0]
    for schema in SCHEMAS.get(top, {}).values():
        for block in fields(schema):
            inner = block.default_factory() if callable(block.default_factory) else None
            if is_dataclass(inner) and name in {f.name for f in fields(inner)}:
                return f"{top}.{block.name}.{name}"
    return None


# The root config's own keys besides the groups (gradexp.schema.Config)
ROOT_KEYS = ["seed", "eval", "sweep", "callbacks"]


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
    own = difflib.get_close_matches(name, ROOT_KEYS, n=1, cutoff=0.7)
    if own:  # the config's own keys: `seeds=0,1` -> seed
        return f"; did you mean {own[0]}={value}?"
    # a key of some group (`epochs` -> trainer.epochs) or its alias (`lr`), every group that
    # has it (`kwargs` -> data.kwargs or model.kwargs)
    wanted = ALIASES.get(name, name)
    found = [f"{other}.{wanted}" for other in SCHEMAS
             if wanted not in ("name", "_target_") and wanted in group_keys(other)]
    return f"; did you mean {' or '.join(found)}?" if found else ""


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse a key that no schema declares, with or without `+` (`+trainer.patience=10`).

    gradexp reads only what the schemas declare; any other key would do nothing, yet the run
    would record it as a param, as if it had. Each node that came from a schema is compared with
    its schema's fields, so a field added to a schema is accepted at once. (Merging each group's
    keys into a cached OmegaConf.structured node of its schema refuses the same keys, but costs
    3-4x this walk, over 20 ms a launch: benchmarks/bench_config_errors.py times both ways.)
    """
    declared = [f.name for f in fields(Config)]
    trusted = {group for group in ARGUMENT_GROUPS if user_target(cfg, group)}
    for group in cfg:
        if group == "hydra":  # Hydra's own node (callbacks see it)
            continue
        if group not in declared:
            _refuse(cfg, str(group), declared)
        if group not in trusted and not OmegaConf.is_missing(cfg, group) \
                and isinstance(cfg[group], DictConfig):
            found = _undeclared(cfg[group], f"{group}.")
            if found and group == "loss":  # +loss.label_smoothing: Keras' constructor reads it
                found = _not_constructor_arguments(cfg[group], found[1])
            if found:
                _refuse(cfg, *found)


def _not_constructor_arguments(node: DictConfig, accepted: list[str]
                               ) -> tuple[str, list[str]] | None:
    """The first key of a shipped loss option that neither its schema nor its class's
    constructor takes, and the keys both take; None if every key is taken. build_loss passes
    every key but the labels to the class, so `loss=categorical_crossentropy
    +loss.label_smoothing=0.1` trains as Keras' own argument says (QA: it was refused, "gradexp
    would not read it", though the same class reached by `_target_` took it). Only on this path
    is the class imported (TensorFlow loads): a config without such a key pays nothing."""
    import inspect

    from gradexp.losses import LABELS
    from gradexp.user_code import locate

    target = locate("loss._target_", str(node["_target_"]))
    parameters = inspect.signature(target.__init__).parameters if inspect.isclass(target) \
        else {}
    takes = [name for name, p in parameters.items() if name not in ("self", "dtype", *LABELS)
             and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    accepted = [*accepted, *(name for name in takes if name not in accepted)]
    extra = [key for key in node if key not in accepted]
    return (f"loss.{extra[0]}", accepted) if extra else None


def _undeclared(node: DictConfig, prefix: str) -> tuple[str, list[str]] | None:
    """The first key of `node` (or of a block inside it) that its schema lacks, and the keys the
    schema has; None for a node from no schema (free-form: data.kwargs, callbacks)."""
    schema = OmegaConf.get_type(node)
    if not is_dataclass(schema):
        return None
    accepted = [f.name for f in fields(schema)]
    for key in node:
        if key not in accepted:
            return f"{prefix}{key}", accepted
        if not OmegaConf.is_missing(node, key) and isinstance(node[key], DictConfig):
            found = _undeclared(node[key], f"{prefix}{key}.")
            if found:
                return found
    return None


def _refuse(cfg: DictConfig, key: str, accepted: list[str]) -> None:
    group, _, _ = key.rpartition(".")
    value = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
    # an option of a group (`trainer=default`); a block no option fills (`sweep.`) by its key
    where = (f"{group}={_option(cfg, group)}" if group in SCHEMAS else f"{group}." if group
             else "the config")
    shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    meant = did_you_mean(key, shown, accepted if group else None)
    raise ConfigError(f"{key}={shown}: no such key, gradexp would not read it "
                      f"({where} accepts: {', '.join(accepted)}){meant}")


def _option(cfg: DictConfig, group: str) -> str:
    name = OmegaConf.select(cfg, f"{group}.name", default=None)
    return str(name) if name is not None else "..."


# ---------------------------------------------------------------- options and user code
NO_OPTION = object()  # `name` is no option's file


def shipped_target(cfg: DictConfig, group: str) -> Any:
    """The `_target_` of conf/<group>/<name>.yaml; NO_OPTION if there is no such file; None if
    the group has no `_target_` or `name`."""

    node = OmegaConf.select(cfg, group, default=None)
    if not isinstance(node, DictConfig) or "_target_" not in node or "name" not in node:
        return None
    return _option_target(group, str(node.name))


@functools.lru_cache(maxsize=256)
def _option_target(group: str, name: str) -> Any:
    """conf/<group>/<name>.yaml's `_target_` (NO_OPTION: no such file), read once a process:
    the shipped options do not change while it runs, and a sweep asks for every job."""
    option = resource_dir("conf") / group / f"{name}.yaml"
    if not option.is_file():
        return NO_OPTION
    # As plain data: a `???` target (data=custom, model=custom) is the text "???", not a miss.
    return OmegaConf.to_container(OmegaConf.load(option)).get("_target_")


# Groups whose `name` only labels the run: the option is chosen with GROUP=NAME.
LABELLED_GROUPS = ("model", "data", "loss", "optimizer", "gradcheck")


def check_option_names(cfg: DictConfig, choices: Any = None) -> None:
    """`optimizer.name=adam` on optimizer=sgd renames the run's optimizer, and SGD trains (QA:
    a run named adam that trained SGD; `gradcheck.name=off` recorded while the checks ran): a
    `name` that is another option of its group is refused, naming GROUP=NAME. `choices`: the
    options chosen (Hydra's runtime choices; by default the running job's, if any)."""
    if choices is None:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return
        choices = HydraConfig.get().runtime.choices
    for group in LABELLED_GROUPS:
        chosen = choices.get(group)
        name = OmegaConf.select(cfg, f"{group}.name", default=None)
        if chosen is None or name is None or str(name) == str(chosen) \
                or _option_target(group, str(name)) is NO_OPTION:
            continue  # the option's own name, or a label of the person's
        raise ConfigError(f"{group}.name={name} only renames the run's {group}, and "
                          f"{group}={chosen} would run: choose the option with {group}={name}")


def options_built_by(group: str, target: str) -> list[str]:
    """The shipped options of `group` whose `_target_` is `target` (model=keras and
    model=digits_cnn for gradexp.models.sequential), by name."""
    return [path.stem for path in sorted((resource_dir("conf") / group).glob("*.yaml"))
            if _option_target(group, path.stem) == target]


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
