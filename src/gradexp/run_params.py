"""A run's MLflow params: its resolved config as dotted keys, secrets masked, as text. Runs
log exactly this, and sweep.skip_finished matches on it, and on the whole of each value MLflow's
limit cut (config_values)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gradexp.mlflow_store import MAX_PARAM_LENGTH
from gradexp.tracking_uri import MASK, redact_uri

if TYPE_CHECKING:
    from omegaconf import DictConfig

SECRET_KEY = re.compile(r"password|passwd|token|secret|(^|[._])(api_?)?key$", re.IGNORECASE)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay whole values."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def mask_secrets(params: Mapping[str, Any]) -> dict[str, Any]:
    """Values whose key looks like a secret (password, token, secret, key) become ***, and
    credentials inside URIs (http://user:pw@host) are cut out."""
    masked = {}
    for key, value in params.items():
        if value is not None and SECRET_KEY.search(key.rsplit(".", 1)[-1]):
            value = MASK
        elif isinstance(value, str) and "://" in value and "@" in value:
            value = redact_uri(value)
        masked[key] = value
    return masked


def masked_value(key: str, value: Any) -> Any:
    """`value` of config key `key` as the params show it: masked when the key looks like a
    secret's, credentials cut out of a URI, and so inside a mapping (data.kwargs={token: ...})."""
    if isinstance(value, Mapping):
        return {name: masked_value(f"{key}.{name}", item) for name, item in value.items()}
    return mask_secrets({key: value})[key]


def masked_override(line: str) -> str:
    """A command-line override as the params show its value: `+data.kwargs.token=***`,
    `tracking.uri=http://***@host`, a mapping holding a secret-looking key (`{token:...}`) as
    ***. Run names and a sweep's `sweep.overrides` are made of overrides: they showed the
    password the params masked (QA)."""
    key, equals, value = line.partition("=")
    if not equals:
        return line
    if value.startswith("{") and any(SECRET_KEY.search(name.strip(" {'\"")) for name in
                                     re.findall(r"[{,]\s*([^:,{}]+):", value)):
        return f"{key}={MASK}"
    shown = masked_value(key.lstrip("+~"), value)
    return line if shown == value else f"{key}={shown}"


def masked_dirname(hydra_cfg: DictConfig, only: Iterable[str] | None = None) -> str:
    """Hydra's override_dirname of the job's overrides (`loss=mae,optimizer=adam`: sorted,
    joined, its separators, its exclude_keys), each line as the params show it (masked_override,
    whole lines: replacing a secret's text within the name also replaced a 1 in every number),
    or of the keys `only` (a sweep's swept keys). Every run name is made here."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    settings = hydra_cfg.job.config.override_dirname
    keep = (lambda key: key in set(only)) if only is not None else (
        lambda key: key not in settings.exclude_keys)
    parsed = OverridesParser.create().parse_overrides(list(hydra_cfg.overrides.task))
    lines = sorted(masked_override(o.input_line) for o in parsed
                   if o.input_line and keep(o.key_or_group))
    return settings.item_sep.join(lines).replace("=", settings.kv_sep)


# Where an override starts in a run name: KEY= (the pieces a list's commas make do not).
_OVERRIDE_START = re.compile(r"[+~]{0,2}[A-Za-z_][\w.@/-]*=")


def renamed(name: str | None, key: str, value: Any, hydra_cfg: DictConfig | None = None) -> str:
    """A run name masked_dirname made, with `key=value` in place of its override of `key`, or
    among its overrides in their sorted place when it had none (`defaults`, no overrides,
    becomes that one): a killed run's restart takes its name, with the trainer.epochs it trains
    to (QA: it said the old one, beside a param with the new). `hydra_cfg`: the separators."""
    settings = hydra_cfg.job.config.override_dirname if hydra_cfg is not None else None
    item_sep = settings.item_sep if settings is not None else ","
    kv_sep = settings.kv_sep if settings is not None else "="
    line = f"{key}={value}"
    items: list[str] = []
    for piece in ([] if name in (None, "", "defaults") else name.split(item_sep)):
        if items and not _OVERRIDE_START.match(piece.replace(kv_sep, "=", 1)):
            items[-1] += item_sep + piece  # a piece of a value: [4,4]
        else:
            items.append(piece)
    keys = [item.split(kv_sep, 1)[0].lstrip("+~") for item in items]
    if key in keys:
        at = keys.index(key)
        items[at] = items[at].split(kv_sep, 1)[0] + kv_sep + str(value)
    else:
        items = sorted([*items, line.replace("=", kv_sep)])
    return item_sep.join(items)


def as_recorded(cfg):
    """A copy of the job's config as its run records it: the seeds derived from `seed`
    (gradexp.seeds) and a person's _target_ naming its group (loss.name=my.fn). What
    sweep.skip_finished and sweep.resume_killed match on, and what a resume compares with."""
    from gradexp.seeds import derive_seeds
    from gradexp.user_code import label_by_target

    recorded = cfg.copy()
    derive_seeds(recorded)
    return label_by_target(recorded)


def config_values(cfg: DictConfig) -> dict[str, str]:
    """The resolved config as config_params has it, each value whole: what a param holds
    before MLflow's limit cuts it (sweep.skip_finished compares the parts cut off)."""
    from gradexp.console import to_plain

    plain = to_plain(cfg)
    # The built-in callbacks (gradexp.callbacks.*) take their settings from the groups'
    # keys, recorded there; a person's own callback and its arguments are recorded.
    callbacks = plain.get("callbacks")
    if isinstance(callbacks, Mapping):
        plain["callbacks"] = {name: node for name, node in callbacks.items()
                              if not (isinstance(node, Mapping) and str(
                                  node.get("_target_", "")).startswith("gradexp."))}
    return {key: str(value) for key, value in mask_secrets(flatten(plain)).items()}


def config_params(cfg: DictConfig) -> dict[str, str]:
    """The resolved config as a run's MLflow params hold it: dotted keys, secrets masked, text
    cut to MLflow's MAX_PARAM_LENGTH. Runs log exactly this, and sweep.skip_finished matches on
    it (and on the whole of a value it cut: gradexp.sweep_reuse)."""
    return cut_params(config_values(cfg))


def cut_params(values: Mapping[str, str]) -> dict[str, str]:
    """config_values as the params hold them: each value cut to MAX_PARAM_LENGTH."""
    return {key: value[:MAX_PARAM_LENGTH] for key, value in values.items()}
