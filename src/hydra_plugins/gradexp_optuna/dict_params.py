"""`hydra.sweeper.params={key:interval(...)}`: a search written as a dict on the command line.

Hydra evaluates a sweep function inside a dict value to its own object (IntervalSweep, ...) and
then merges the dict into the config, where OmegaConf cannot hold that object: the sweep stopped
at composition with `error: tags=set(): Unexpected type annotation: Set[str]`, naming neither the
key nor what works. gradexp's one-line config errors (gradexp.config_errors.one_line) ask
`unreadable_search` about the command line's overrides first, which names the key and the two
forms that work (the value quoted inside the dict, or the key as an override of its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PARAMS = "hydra.sweeper.params"


def unreadable_search(lines: Sequence[str]) -> str | None:
    """The line for the first `hydra.sweeper.params={...}` override (of the command line's
    `lines`) holding an unquoted sweep function; None when there is none."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = [line for line in lines if line.startswith(PARAMS + "=")]
    try:
        overrides = OverridesParser.create().parse_overrides(lines)
    except Exception:  # noqa: BLE001 - not readable at all: Hydra's own error says so
        return None
    for override in overrides:
        if override.key_or_group != PARAMS or override.is_delete():
            continue
        found = _first_sweep(override.value(), "")
        if found is not None:
            key, written = found
            return (f"{override.input_line}: {key}'s {written} is not read as a search inside a "
                    f"dict (Hydra evaluates it first, to a value the config cannot hold); quote "
                    f"it: {PARAMS}={{{key}:'{written}'}}, or give it as an override of its own: "
                    f"{key}={written}")
    return None


def _first_sweep(value: Any, prefix: str) -> tuple[str, str] | None:
    """(the dotted key, the sweep as written) of the first sweep function in a dict value."""
    from hydra.core.override_parser.types import Sweep

    if not isinstance(value, Mapping):
        return None
    for name, item in value.items():
        key = f"{prefix}{name}"
        if isinstance(item, Sweep):
            return key, _written(item)
        found = _first_sweep(item, f"{key}.")
        if found is not None:
            return found
    return None


def _written(sweep: Any) -> str:
    """A sweep function as the command line writes it: `tag(log,interval(0.001,0.5))`."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    if isinstance(sweep, IntervalSweep):
        text = f"interval({sweep.start},{sweep.end})"
    elif isinstance(sweep, RangeSweep):
        text = f"range({sweep.start},{sweep.stop},{sweep.step})"
    elif isinstance(sweep, ChoiceSweep):
        text = f"choice({','.join(str(value) for value in sweep.list)})"
    else:
        text = "a sweep function"
    tags = sorted(getattr(sweep, "tags", None) or ())
    return f"tag({','.join(tags)},{text})" if tags else text
