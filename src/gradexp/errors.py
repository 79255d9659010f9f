"""Turn what Hydra and OmegaConf raise for a mistyped command line into one line for a person.

Hydra's own reports span several lines (the override, the cause, the full key, the object type, a
hint about HYDRA_FULL_ERROR). A person needs: which key or value, what is wrong, what is accepted.
"""

from __future__ import annotations

import re
from dataclasses import fields

from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from gradexp.schema import SCHEMAS, SweepConfig
from gradexp.validation import did_you_mean, group_keys

USER_ERRORS = (HydraException, OmegaConfBaseException)


def known_keys() -> list[str]:
    """Every dotted key some option of some group accepts."""
    keys = {f"{group}.{f.name}" for group, options in SCHEMAS.items()
            for schema in options.values() for f in fields(schema)}
    return sorted(keys | {f"sweep.{f.name}" for f in fields(SweepConfig)})


def one_line(error: BaseException) -> str:
    """The message for a composition or config error, without Hydra's extra lines."""
    cause = error.__cause__ or error.__context__
    text = str(error)
    if isinstance(error, MissingConfigException):
        return _missing_option(text)
    if isinstance(error, OverrideParseException):
        return f"cannot read the override {error.override}: {_first_line(text)}"
    override = re.search(r"(?:override|Could not override) '?([^'\s]+)'?", text)
    shown = override.group(1) if override else None
    appended = re.search(r"use \+(\S+)", text)  # Hydra: To append to your config use +k=v
    if appended and shown and appended.group(1).startswith(shown + "="):
        shown = appended.group(1)
    if isinstance(cause, ConfigKeyError) or "Could not override" in text:
        key = getattr(cause, "full_key", None) or (shown or "").split("=")[0]
        return _unknown_key(key, shown)
    if isinstance(cause, ValidationError):
        return f"{shown or cause.full_key}: {_plain_validation(cause)}"
    if isinstance(error, OmegaConfBaseException):
        key = getattr(error, "full_key", None)
        message = _first_line(getattr(error, "msg", None) or text)
        return f"{key}: {message}" if key else message
    return _first_line(text) + (f": {_first_line(str(cause))}" if cause else "")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else text


def _missing_option(text: str) -> str:
    """Hydra: In 'config': Could not find 'optimizer/adamm' + the available options, one a line."""
    found = re.search(r"Could not find '([^']+)'", text)
    wanted = found.group(1) if found else "?"
    group, _, option = wanted.rpartition("/")
    listed = text.split("Config search path")[0]  # Hydra appends its search path after the list
    options = [line.strip() for line in listed.splitlines() if line.startswith("\t")]
    if not group:
        return f"{wanted}: no such config"
    accepted = ", ".join(options) if options else "none"
    return f"{group}={option}: no such option; available: {accepted}"


def _unknown_key(key: str, override: str | None) -> str:
    group = key.split(".")[0]
    if key in known_keys():
        return (f"{override or key}: the chosen {group} option has no key {key} "
                f"(other {group} options do; see python -m gradexp --cfg job {group}=OPTION)")
    value = override.split("=", 1)[1] if override and "=" in override else "OPTION"
    accepted = group_keys(group) if "." in key else list(SCHEMAS)
    where = f"{group} options accept" if "." in key else "groups are"
    hint = did_you_mean(key, value)
    return f"{override or key}: unknown key ({where}: {', '.join(accepted)}){hint}"


def _plain_validation(error: ValidationError) -> str:
    """OmegaConf: Value 'abc' of type 'str' could not be converted to Float -> must be a float."""
    message = _first_line(getattr(error, "msg", "") or str(error))
    kind = re.search(r"could not be converted to (\w+)", message)
    if kind:
        return f"must be {_article(kind.group(1).lower())} {kind.group(1).lower()}"
    invalid = re.search(r"Invalid value '([^']*)', expected one of \[([^\]]*)\]", message)
    if invalid:
        return f"must be one of {invalid.group(2)}"
    return message


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def target_error(error: BaseException, cfg) -> str | None:
    """A `_target_` that cannot be imported (a typo, user code not in the launch folder), as
    one line naming its key; None for any other error (a bug inside the target stays a
    traceback)."""
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
