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
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
    ValidationError,
)

from gradexp.config_checks import ROOT_KEYS, did_you_mean, group_keys
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
    cause = error.__cause__ or error.__context__
    if isinstance(error, MissingConfigException):
        return _missing_option(error)
    if isinstance(error, OverrideParseException):
        problem = _parse_problem(error.message)
        return f"cannot read the override {error.override}: {problem}" + (
            "" if "did you mean" in problem else _quoting_hint(error.override))
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):  # Could not override 'k'
        return _unknown_key(cause.full_key, _override(cause.full_key, overrides), overrides)
    if isinstance(cause, ValidationError):
        # null as the person typed it (OmegaConf carries Python's None)
        value = "null" if cause.value is None else cause.value
        return f"{cause.full_key}={value}: {_plain_validation(cause)}"
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


def _quoting_hint(override: str) -> str:
    """How to give a value Hydra's grammar cannot read (~/data.csv, price($)) as text: quotes
    Hydra sees, so inside the shell's own (the shell takes `data.path='~/x.csv'`'s)."""
    key, equals, value = override.partition("=")
    if not equals or not value or value[0] in "'\"":
        return ""
    return (f"; to give it as text, quote it for Hydra inside the shell's quotes: "
            f"\"{key}='{value}'\"")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else text


def _override(key: str, overrides: Sequence[str]) -> str | None:
    """The override `key=value` (with or without + or ~) that set `key`, if one did."""
    for override in overrides:
        name, equals, _ = override.lstrip("+~").partition("=")
        if name == key and equals:
            return override.lstrip("+~")
    return None


def _options(group: str) -> list[str]:
    return sorted(path.stem for path in (resource_dir("conf") / group).glob("*.yaml"))


def _option_keys(group: str, option: str) -> set[str]:
    """The keys conf/<group>/<option>.yaml accepts: its schema's (`/schema/GROUP/NAME@_here_`)."""
    text = (resource_dir("conf") / group / f"{option}.yaml").read_text()
    found = re.search(r"/schema/\w+/(\w+)@_here_", text)
    schema = SCHEMAS.get(group, {}).get(found.group(1)) if found else None
    return {f.name for f in fields(schema)} if schema else set()


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


def _unknown_key(key: str, override: str | None, overrides: Sequence[str] = ()) -> str:
    group = key.split(".")[0]
    if key in known_keys():
        name = key.split(".", 1)[1]
        chosen = _chosen_option(group, overrides)
        having = [option for option in _options(group) if name in _option_keys(group, option)]
        return (f"{override or key}: {group}={chosen or 'this option'} has no key {name} "
                f"({', '.join(f'{group}={o}' for o in having) or f'other {group} options'} "
                f"{'has' if len(having) == 1 else 'have'} it; its keys: "
                f"python -m gradexp --cfg job {group}={chosen or 'OPTION'})")
    value = override.split("=", 1)[1] if override and "=" in override else "OPTION"
    parent = key.rsplit(".", 1)[0]
    if _holds_your_keys(parent):
        # model.kwargs.width=8: kwargs holds your own keys, and a new key takes a +
        return (f"{override or key}: {parent} has no key {key.rsplit('.', 1)[1]} yet; add it "
                f"with a +: +{override or key}")
    accepted = group_keys(group) if "." in key else [*SCHEMAS, *ROOT_KEYS]
    where = f"{group} options accept" if "." in key else "top-level keys are"
    hint = did_you_mean(key, value)
    return f"{override or key}: unknown key ({where}: {', '.join(accepted)}){hint}"


def _holds_your_keys(key: str) -> bool:
    """`group.field` declared as a free dict in some option's schema (model.kwargs,
    data.kwargs): its keys are the person's, so none is unknown, only not yet added."""
    group, _, name = key.partition(".")
    if not name or "." in name:
        return False
    return any(get_origin(get_type_hints(schema).get(name)) is dict
               for schema in SCHEMAS.get(group, {}).values())


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
