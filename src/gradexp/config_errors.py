"""Turn what Hydra and OmegaConf raise for a mistyped command line into one line for a person.

Hydra's own reports span several lines (the override, the cause, the full key, the object type, a
hint about HYDRA_FULL_ERROR). A person needs: which key or value, what is wrong, what is accepted:
read from the exceptions' attributes and the schemas, not from the reports' text.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from enum import Enum
from types import UnionType
from typing import Union, get_args, get_origin, get_type_hints

from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    ConfigTypeError,
    OmegaConfBaseException,
    ValidationError,
)

from gradexp.config_checks import ROOT_KEYS, closest_key, did_you_mean, group_keys
from gradexp.resources import resource_dir
from gradexp.schema import SCHEMAS, SweepConfig, accepted_words
from hydra_plugins.gradexp_optuna.dict_params import unreadable_search

USER_ERRORS = (HydraException, OmegaConfBaseException)


def known_keys() -> list[str]:
    """Every dotted key some option of some group accepts."""
    keys = {f"{group}.{f.name}" for group, options in SCHEMAS.items()
            for schema in options.values() for f in fields(schema)}
    return sorted(keys | {f"sweep.{f.name}" for f in fields(SweepConfig)})


AMBIGUOUS = "Ambiguous value for argument"  # Hydra's words for a,b in a single run
SWEEP_HINT = ": to sweep over it, add -m"


def one_line(error: BaseException, overrides: Sequence[str] = ()) -> str:
    """The message for a composition or config error, without Hydra's extra lines.

    Read from the exceptions' own attributes (OmegaConf's full_key, value and object_type,
    Hydra's missing_cfg_file and options); `overrides` (the command line's) supply the value
    of a key that does not exist, which OmegaConf does not carry."""
    search = unreadable_search(overrides)  # {key:interval(...)}: OmegaConf's words name neither
    if search is not None:
        return search
    null = null_group(error, overrides)
    if null is not None:
        return null
    cause = error.__cause__ or error.__context__
    if isinstance(error, MissingConfigException):
        return _missing_option(error)
    if isinstance(error, OverrideParseException):
        # a space or a comma too many: the grammar's words ("mismatched input '<EOF>'") say
        # less than the mistake does (QA)
        problem = _shell_mistake(error.override, overrides) or _bare_word(error.override) \
            or _parse_problem(error.message)
        return f"cannot read the override {error.override}: {problem}" + (
            "" if "did you mean" in problem or problem.startswith(SHELL)
            else _quoting_hint(error.override))
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):  # Could not override 'k'
        return _unknown_key(cause, overrides)
    if isinstance(cause, ValidationError):
        block = _block_given_a_value(cause, overrides)
        if block is not None:
            return block
        # null as the person typed it (OmegaConf carries Python's None)
        value = "null" if cause.value is None else cause.value
        return f"{cause.full_key}={value}: {_plain_validation(cause)}"
    if isinstance(cause, ConfigTypeError) and _removed(cause.full_key, error, overrides):
        return _not_removable(cause)
    appended = re.search(r"An item is already at '([^']+)'", str(error))
    if appended:  # +trainer.epochs=2: Hydra's words were "Could not append to config" (QA)
        return _already_there(appended.group(1), overrides)
    if isinstance(error, OmegaConfBaseException):
        key = getattr(error, "full_key", None)
        message = _first_line(getattr(error, "msg", None) or str(error))
        return f"{key}: {message}" if key else message
    text = _first_line(str(error))
    if text.startswith(AMBIGUOUS):  # a,b without -m; Hydra's own hint is on a later line
        return f"{text}{SWEEP_HINT} (python -m gradexp -m {shlex.join(overrides)})"
    return text + (f": {_first_line(str(cause))}" if cause else "")


def _parse_problem(message: str) -> str:
    """What Hydra says is wrong with an override, on one line. Hydra's exception carries it only
    as text: a first line that may say only "Error parsing override", then the problem and what
    is accepted (`Unknown function 'intervl'`, `Available: bool,choice,...`), to which a
    did-you-mean is added."""
    lines = [line.strip() for line in message.strip().splitlines()
             if line.strip().strip("^") and not line.strip().startswith("See https://")]
    if len(lines) > 1 and lines[0].startswith("Error parsing override"):
        lines = lines[1:]
    if not lines:
        return _first_line(message)
    problem = re.sub(r"^\w+ while evaluating '.*?': ", "", lines[0])
    unknown = re.match(r"Unknown function '(\w+)'", problem)
    available = lines[1].removeprefix("Available:").strip() if len(lines) > 1 else ""
    if unknown and available:
        names = available.split(",")
        close = difflib.get_close_matches(unknown.group(1), names, n=1)
        return (f"{problem} (sweep functions: {', '.join(names)})"
                + (f"; did you mean {close[0]}(...)?" if close else ""))
    return "; ".join([problem, *lines[1:]])


SHELL = ("the shell split", "it ends in a comma")  # _shell_mistake's words


def _shell_mistake(override: str, overrides: Sequence[str]) -> str:
    """An override the shell split at a space (`model.hidden=[8, 8]` unquoted), or one with a
    trailing comma (`trainer.batch_size=32,`): what to type instead; '' for any other."""
    split = _split_by_shell(override, overrides)
    key, equals, value = override.partition("=")
    if not split and equals and value.endswith(","):
        return ("it ends in a comma; drop it (values a,b are a sweep, which takes -m: "
                f"-m {key}={value.rstrip(',')},VALUE)")
    return split


# gradexp's commands besides a run (`gradexp compare ...`)
COMMANDS = ("compare",)


def _bare_word(override: str) -> str:
    """A word with no `=` (`gradexp compre`, `python -m gradexp adam`): a command misspelt, an
    option given without its group, or else what an override is; '' for anything else (QA:
    Hydra's grammar said only "missing EQUAL at '<EOF>'")."""
    if not re.fullmatch(r"[A-Za-z_][\w.-]*", override):
        return ""
    command = difflib.get_close_matches(override, COMMANDS, n=1, cutoff=0.7)
    if command:
        return f"not KEY=VALUE; did you mean gradexp {command[0]}?"
    groups = [group for group in SCHEMAS if override in _options(group)]
    if groups:
        return f"an override is KEY=VALUE; did you mean {groups[0]}={override}?"
    return ("an override is KEY=VALUE (e.g. optimizer=adam, trainer.epochs=3; python -m gradexp "
            "--help lists them)")


def flag_line(arguments: Sequence[str]) -> str | None:
    """The line for the first `--name` (or `--name=value`) that is none of Hydra's options
    (`--epochs 3`, `--lr=0.1`): gradexp's settings are KEY=VALUE overrides, and the key it
    likely means. None when there is no such argument. (QA: argparse's usage and
    "unrecognized arguments: --epochs".)"""
    from hydra._internal.utils import get_args_parser

    known = get_args_parser()._option_string_actions
    for index, argument in enumerate(arguments):
        flag, _, value = argument.partition("=")
        if not re.fullmatch(r"--?[A-Za-z][\w-]*", flag) or flag in known:
            continue
        following = arguments[index + 1] if index + 1 < len(arguments) else ""
        if not value and following and "=" not in following and not following.startswith("-"):
            value = following
        hint = did_you_mean(flag.lstrip("-").replace("-", "_"), value or "VALUE")
        if hint and value and "=" not in hint and " or " not in hint:
            hint = f"{hint[:-1]}={value}?"  # "; did you mean trainer.epochs=3?"
        return (f"{flag}: not an option of gradexp, whose settings are KEY=VALUE overrides "
                f"(e.g. trainer.epochs=3){hint}")
    return None


# The quoting hint's words, for the shell; gradexp.api says it for a Python string instead.
SHELL_QUOTES = "quote it for Hydra inside the shell's quotes: "


def _quoting_hint(override: str) -> str:
    """How to give a value Hydra's grammar cannot read (~/data.csv, price($)) as text: quotes
    Hydra sees, so inside the shell's own (the shell takes `data.path='~/x.csv'`'s). Not for a
    list or an unclosed bracket: quotes make it a string (QA: "model.hidden='[8,'")."""
    key, equals, value = override.partition("=")
    if not equals or not value or value[0] in "'\"[{(" or not _balanced(value):
        return ""
    return f"; to give it as text, {SHELL_QUOTES}\"{key}='{value}'\""


def _balanced(value: str) -> bool:
    return all(value.count(a) == value.count(b) for a, b in ("[]", "{}", "()"))


def _split_by_shell(override: str, overrides: Sequence[str]) -> str:
    """What to type when `override` is a piece of one the shell split at a space (unquoted
    `model.hidden=[8, 8]` -> `model.hidden=[8,` and `8]`; `tracking.run_name=my run` -> `run`,
    which Hydra read as an override missing its `=`): the whole, quoted for the shell."""
    words = list(overrides)
    if override not in words:
        return ""
    start = end = words.index(override)
    while start > 0 and "=" not in words[start] and not words[start - 1].startswith("-"):
        start -= 1  # back to the piece with the key=
    end += 1
    while end < len(words) and "=" not in words[end] and not words[end].startswith("-"):
        end += 1  # on to the pieces after it
    if end - start < 2 or "=" not in words[start]:
        return ""
    whole = " ".join(words[start:end])
    key, _, value = whole.partition("=")
    if "," in value and value[0] not in "[{(":  # a,b: a sweep, and Hydra reads it unspaced
        compact = f"{key}={','.join(part.strip() for part in value.split(','))}"
        return (f"the shell split {whole!r} at a space; write it without spaces, {compact} "
                "(values a,b are a sweep: with -m)")
    return (f"the shell split {whole!r} at a space; quote the whole override: "
            f"{shlex.quote(whole)}")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else text


def _override(key: str, overrides: Sequence[str]) -> str | None:
    """The override `key=value` (with or without + or ~) that set `key`, else one that set a
    key inside it (callbacks.mine._target_=... fails at callbacks.mine), if one did."""
    for inside in (False, True):
        for override in overrides:
            name, equals, _ = override.lstrip("+~").partition("=")
            if equals and (name.startswith(f"{key}.") if inside else name == key):
                return override.lstrip("+~")
    return None


def _groups():
    """Hydra's repository of config groups as a launch sees it: conf/, the presets
    (experiment), the plugins' (hydra/launcher=joblib, hydra/sweeper=optuna)."""
    from hydra._internal.config_repository import ConfigRepository
    from hydra._internal.utils import create_config_search_path

    return ConfigRepository(create_config_search_path(str(resource_dir("conf"))))


# Hydra's ValueError (no HydraException, so a traceback) for GROUP=null
NULL_GROUP = "Config group override must be a string or a list"


def null_group(error: BaseException, overrides: Sequence[str] = ()) -> str | None:
    """The line for `optimizer=null` (`-m optimizer=null,adam`): a group takes one of its
    options. Hydra raises a plain ValueError for it (QA: a traceback, exit 1); None for any
    other error, or when no override on the command line sets a group to null."""
    if not isinstance(error, ValueError) or not str(error).startswith(NULL_GROUP):
        return None
    from hydra.core.object_type import ObjectType

    repo = _groups()
    for override in overrides:
        group, equals, value = override.lstrip("+~").partition("=")
        if not equals or "null" not in value.split(",") or not repo.group_exists(group):
            continue
        options = repo.get_group_options(group, ObjectType.CONFIG)
        unset = {"experiment": "; for none, leave experiment= out",
                 "callbacks": "; to turn one off: ~callbacks.NAME"}.get(group, "")
        return (f"{group}=null: a config group takes one of its options "
                f"({', '.join(options)}), not null{unset}")
    return None


def is_config_error(error: BaseException, overrides: Sequence[str] = ()) -> bool:
    """A mistake on the command line that one_line says in one line (exit 2): Hydra's and
    OmegaConf's errors, and Hydra's ValueError for GROUP=null."""
    return isinstance(error, USER_ERRORS) or null_group(error, overrides) is not None


def _options(group: str) -> list[str]:
    return sorted(path.stem for path in (resource_dir("conf") / group).glob("*.yaml"))


def _option_schema(group: str, option: str) -> type | None:
    """conf/<group>/<option>.yaml's schema (its `/schema/GROUP/NAME@_here_`)."""
    text = (resource_dir("conf") / group / f"{option}.yaml").read_text()
    found = re.search(r"/schema/\w+/(\w+)@_here_", text)
    return SCHEMAS.get(group, {}).get(found.group(1)) if found else None


def _option_keys(group: str, option: str) -> set[str]:
    """The keys conf/<group>/<option>.yaml accepts: its schema's."""
    schema = _option_schema(group, option)
    return {f.name for f in fields(schema)} if schema else set()


def _lacking_option(group: str, schema: object, overrides: Sequence[str]) -> str | None:
    """The option of `group` whose node lacked the key: the one with the node's schema (in a
    sweep data=linear,sine it is sine's job that fails, not the chosen linear: QA), the first
    the command line names where options share a schema (sgd, momentum)."""
    chosen = (_chosen_option(group, overrides) or "").split(",")
    lacking = [option for option in _options(group) if _option_schema(group, option) is schema]
    if lacking:
        return next((option for option in chosen if option in lacking), lacking[0])
    return chosen[0] if len(chosen) == 1 and chosen[0] else None


def _chosen_option(group: str, overrides: Sequence[str]) -> str | None:
    """The option of `group` the command line chose, else conf/config.yaml's default."""
    for override in overrides:
        name, equals, value = override.partition("=")
        if equals and name.lstrip("+~") == group:
            return value
    found = re.search(rf"^\s*-\s*{group}:\s*(\w+)", (resource_dir("conf") / "config.yaml")
                      .read_text(), re.M)
    return found.group(1) if found else None


def _missing_option(error: MissingConfigException) -> str:
    """Hydra: Could not find 'optimizer/adamm', with the available options."""
    wanted = error.missing_cfg_file or "?"
    group, _, option = wanted.rpartition("/")
    if not group:
        return f"{wanted}: no such config"
    accepted = ", ".join(error.options) if error.options else "none"
    return f"{group}={option}: no such option; available: {accepted}"


def _unknown_key(cause: ConfigAttributeError | ConfigKeyError,
                 overrides: Sequence[str] = ()) -> str:
    key = cause.full_key
    override = _override(key, overrides)
    said = override or key
    group, _, name = key.partition(".")
    if key in known_keys():
        option = _lacking_option(group, cause.object_type, overrides)
        having = [other for other in _options(group) if name in _option_keys(group, other)]
        return (f"{said}: {group}={option or 'this option'} has no key {name} "
                f"({', '.join(f'{group}={o}' for o in having) or f'other {group} options'} "
                f"{'has' if len(having) == 1 else 'have'} it; its keys: "
                f"python -m gradexp --cfg job {group}={option or 'OPTION'})")
    value = override.split("=", 1)[1] if override else "OPTION"
    parent, _, name = key.rpartition(".")
    if _holds_your_keys(parent) or (parent.count(".") and cause.object_type is dict):
        # model.kwargs.width=8, callbacks.recorder.every=5: the person's own keys (a function's
        # or a class's arguments), and a new key takes a +
        return f"{said}: {parent} has no key {name} yet; add it with a +: +{said}"
    if parent == "callbacks":
        return _unknown_callback(name, override, cause.parent_node)
    if "." in parent:  # trainer.early_stopping.patiance: that block's keys, not trainer's (QA)
        return _unknown_nested_key(key, said, value, cause.parent_node)
    accepted = group_keys(group) if parent else [*SCHEMAS, *ROOT_KEYS]
    where = f"{group} options accept" if parent else "top-level keys are"
    hint = did_you_mean(key, value)
    return f"{said}: unknown key ({where}: {', '.join(accepted)}){hint}"


def _unknown_callback(name: str, override: str | None, node: object) -> str:
    """callbacks.progres=null, callbacks.mine._target_=...: the callbacks are the person's to
    name, so the node lists the run's callbacks and says how to add one (QA: "callbacks options
    accept: " and nothing)."""
    names = [str(callback) for callback in node] if isinstance(node, DictConfig) else []
    close = closest_key(name, names)
    hint = f"; did you mean callbacks.{close}?" if close else ""
    own = (f"+{override}" if override and override.startswith(f"callbacks.{name}.")
           else f"+callbacks.{name}._target_=module.Class")
    return (f"{override or f'callbacks.{name}'}: no callback {name} (the callbacks: "
            f"{', '.join(names)}){hint}; to add your own, with a +: {own}")


def _unknown_nested_key(key: str, said: str, value: str, node: object) -> str:
    """An unknown key in a block (trainer.early_stopping, optimizer.schedule, hydra.sweeper):
    the block's own keys, from the node it is missing from."""
    parent = key.rpartition(".")[0]
    hydra = parent.startswith("hydra.")
    accepted = [str(k) for k in node if not (hydra and k == "_target_")] \
        if isinstance(node, DictConfig) else group_keys(parent)
    hint = did_you_mean(key, value, accepted)
    if not hint and hydra:  # hydra.sweeper.n_trial: a key of another sweeper (optuna)
        hint = did_you_mean(key, value, group_keys(parent))
        plugin = _plugin_having(parent, hint.rpartition(".")[2].rstrip("?"))
        hint = hint.replace("?", f" (with {plugin})?") if plugin else hint
    return f"{said}: unknown key ({parent} accepts: {', '.join(accepted)}){hint}"


def _plugin_having(node: str, key: str) -> str | None:
    """hydra/sweeper=optuna for ('hydra.sweeper', 'n_trials'): the plugin whose config has it."""
    from hydra.core.config_store import ConfigStore

    kind = node.split(".")[1:]
    if not key or kind not in (["sweeper"], ["launcher"]):
        return None
    options = ConfigStore.instance().repo.get("hydra", {}).get(kind[0], {})
    return next((f"hydra/{kind[0]}={name.removesuffix('.yaml')}"
                 for name, option in options.items()
                 if key in getattr(option, "node", {})), None)


def _holds_your_keys(key: str) -> bool:
    """`group.field` declared as a free dict in some option's schema (model.kwargs,
    data.kwargs): its keys are the person's, so none is unknown, only not yet added."""
    group, _, name = key.partition(".")
    if not name or "." in name:
        return False
    return any(get_origin(get_type_hints(schema).get(name)) is dict
               for schema in SCHEMAS.get(group, {}).values())


def _block_given_a_value(error: ValidationError, overrides: Sequence[str]) -> str | None:
    """trainer.early_stopping=true, optimizer.schedule=cosine: one value for a block of keys
    (QA: "bool is not a subclass of EarlyStoppingConfig"). Its keys, and the one the value fits
    (an option's name, a switch) as a did-you-mean; None where the key is no block."""
    schema = error.object_type
    if not is_dataclass(schema) or error.key is None:
        return None
    block = _unwrapped(get_type_hints(schema).get(str(error.key)))
    if not is_dataclass(block):
        return None
    key = error.full_key
    override = _override(key, overrides)
    typed = override.split("=", 1)[1] if override else _typed(error.value)
    hints = get_type_hints(block)
    fits = next((item.name for item in fields(block)
                 if _fits(_unwrapped(hints[item.name]), error.value)), None)
    hint = f"; did you mean {key}.{fits}={typed}?" if fits else ""
    return (f"{override or f'{key}={typed}'}: {key} is a block of keys, not one value (its "
            f"keys: {', '.join(item.name for item in fields(block))}){hint}")


def _unwrapped(kind: object) -> object:
    """int for int | None."""
    if get_origin(kind) in (Union, UnionType):
        options = [a for a in get_args(kind) if a is not type(None)]
        return options[0] if len(options) == 1 else kind
    return kind


def _fits(kind: object, value: object) -> bool:
    """Whether `value` is one of an Enum field's words or a boolean field's: a value that
    says which key of a block it was meant for (cosine: schedule.name, true: enabled)."""
    if isinstance(kind, type) and issubclass(kind, Enum):
        return str(value) in {str(member.value) for member in kind}
    return kind is bool and isinstance(value, bool)


def _typed(value: object) -> str:
    """A value as it is typed on the command line: true, null."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else \
        str(value)


def _removed(key: str, error: BaseException, overrides: Sequence[str]) -> bool:
    """Whether the failed override was `~key` (read from the command line, else Hydra's text)."""
    return any(override.partition("=")[0] == f"~{key}" for override in overrides) or \
        str(error).startswith(f"Error merging override ~{key}")


def _not_removable(error: ConfigTypeError) -> str:
    """~trainer.epochs: a schema's key can be set, not removed (QA: "TrainerConfig
    (DictConfig) does not support deletion")."""
    key = error.full_key
    now = error.child_node
    if isinstance(now, DictConfig):
        return (f"~{key}: {key} cannot be removed (gradexp reads it), only its keys set: "
                f"{key}.KEY=VALUE (its keys: {', '.join(str(name) for name in now)})")
    value = _typed(now._value() if hasattr(now, "_value") else now)
    return f"~{key}: {key} cannot be removed (gradexp reads it), only set: {key}=VALUE " \
        f"(now {value})"


def _already_there(key: str, overrides: Sequence[str]) -> str:
    """+trainer.epochs=2 where trainer.epochs is in the config: the + adds a new key only."""
    said = next((override for override in overrides
                 if override.startswith("+") and override.lstrip("+").partition("=")[0] == key),
                f"+{key}=VALUE")
    return (f"{said}: {key} is already in the config, and a + adds a new key: set it without "
            f"the +: {said.lstrip('+')}")


# How a value of the wrong type is answered, by the field's declared type.
KINDS = {float: "a float", int: "an integer", bool: "a boolean", str: "a string"}


def _plain_validation(error: ValidationError) -> str:
    """What the field accepts, from its schema: `must be a float`, `must be one of a, b`."""
    schema = error.object_type
    rule = None
    if is_dataclass(schema) and error.key is not None:
        words = accepted_words(schema, str(error.key))
        if words:
            return words
        kind = get_type_hints(schema).get(str(error.key))
        rule = next((item.metadata.get("rule") for item in fields(schema)
                     if item.name == str(error.key)), None)
    elif get_args(getattr(error, "ref_type", None)):  # an item of a typed list: List[int]
        kind = get_args(error.ref_type)[0]
    else:
        return _first_line(error.msg or str(error))
    nullable = ""
    if get_origin(kind) in (Union, UnionType):  # int | None: say int, or null
        options = [a for a in get_args(kind) if a is not type(None)]
        nullable = ", or null" if len(options) < len(get_args(kind)) else ""
        kind = options[0] if len(options) == 1 else kind
    # its range too (seed=abc: [0, 2**32 - 1]), a list's example (data.features=abc)
    if rule is not None and (kind in (int, float) or get_origin(kind) is list):
        return rule.accepted + ("" if "null" in rule.accepted else nullable)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return f"must be one of {', '.join(member.value for member in kind)}"
    if get_origin(kind) is list:
        (item,) = get_args(kind) or (None,)
        return f"must be a list of {KINDS[item][2:].lstrip('n ')}s" if item in KINDS else \
            "must be a list"
    return f"must be {KINDS[kind]}{nullable}" if kind in KINDS else \
        _first_line(error.msg or str(error))


def target_error(error: BaseException, cfg) -> str | None:
    """A `_target_` that cannot be imported (a typo, user code not in the launch folder), as
    one line naming its key; None for any other error (a bug inside the target stays a
    traceback). A fallback: gradexp's own builders locate their `_target_` first
    (gradexp.user_code.instantiate), so this meets only one Hydra instantiated itself, and
    Hydra's InstantiationException carries the target in its text alone."""
    from hydra.errors import InstantiationException
    from omegaconf import OmegaConf

    found = re.search(r"Error locating target '([^']+)'", str(error))
    if not isinstance(error, InstantiationException) or not found:
        return None
    target = found.group(1)
    keys = [f"{group}._target_" for group in cfg
            if OmegaConf.select(cfg, f"{group}._target_", default=None) == target]
    cause = error.__cause__
    reason = _first_line(str(cause.__cause__ or cause)) if cause else "cannot import it"
    return (f"{keys[0] if keys else '_target_'}={target}: cannot import it ({reason}); a "
            "_target_ is module.Name, and user modules go in the launch folder")
