"""The parts schema fields are made of: `setting(default, doc, rule)`, the range `Rule`s the
fields share, and `describe`, which reads a schema's keys back (docs/config.md is made from it).
The schemas themselves are in gradexp.schema, which re-exports these names."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import MISSING as NO_DEFAULT
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, NamedTuple, get_type_hints

from omegaconf import MISSING


@dataclass(frozen=True)
class Rule:
    """What a field accepts beyond its type: `test(value)` is true, else `accepted` is said
    (`trainer.epochs=0: must be an integer >= 1 and <= 2147483647`). A null value is not tested."""

    test: Callable[[Any], bool]
    accepted: str


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# The largest count a field takes (epochs, batch sizes, rows, probes, patience, widths, ...):
# int32's, the type a count meets in TensorFlow (a compiled call's epochs, a tensor's shape). An
# int of any size passed the checks and crashed inside the run (QA): trainer.epochs=10**23 with
# an OverflowError and a FAILED run, data.n_samples with numpy's "Maximum allowed dimension
# exceeded".
COUNT_MAX = 2**31 - 1


def at_least(minimum: int, note: str = "", maximum: int = COUNT_MAX) -> Rule:
    """An integer count in [minimum, maximum], saying both bounds (`note` after them)."""
    return Rule(lambda v: _is_int(v) and minimum <= v <= maximum,
                f"must be an integer >= {minimum} and <= {maximum}{note}")


def positive(what: str = "a number") -> Rule:
    return Rule(lambda v: v > 0, f"must be {what} > 0")


def fraction(what: str = "a fraction") -> Rule:
    return Rule(lambda v: 0 <= v < 1, f"must be {what} in [0, 1)")


# Every seed (data.seed, model.seed, trainer.seed, any *_seed): what numpy and TensorFlow accept.
SEED_MAX = 2**32 - 1
NON_NEGATIVE = Rule(lambda v: v >= 0, "must be a number >= 0")
# Keras' SGD refuses a momentum outside [0, 1] when it is built, inside the run (a sweep's job
# with momentum=1.5 ended the whole sweep after it); RMSprop takes any and diverges.
MOMENTUM = Rule(lambda v: 0 <= v <= 1, "must be a number in [0, 1]")
SEED = Rule(lambda v: _is_int(v) and 0 <= v <= SEED_MAX, f"must be an integer in [0, {SEED_MAX}]")
NAME = Rule(lambda v: isinstance(v, str) and v.strip() != "", "must be a name (not empty)")
# `trainer.resume=` with the id left out started a fresh run, silently
RUN_ID = Rule(lambda v: isinstance(v, str) and v.strip() != "",
              "must be an MLflow run id (not empty), or null to start a new run")
COLUMNS = Rule(lambda v: len(v) > 0,
               "must be a list of column names, e.g. [area,rooms], or null for every other column")
WIDTHS = Rule(lambda v: all(_is_int(w) and 1 <= w <= COUNT_MAX for w in v),
              f"must be a list of integers >= 1 and <= {COUNT_MAX}, e.g. [32,32]")
# A piecewise schedule's boundaries and factors: Keras took [3,1] (adding up the overlapping
# stretches: a rate nobody asked for), [-1] (the first stretch never trained) and a factor of -1
# (gradient ascent: the loss grew, silently), and failed on [] inside the run (QA).
BOUNDARIES = Rule(lambda v: len(v) > 0 and all(b > 0 for b in v)
                  and all(a < b for a, b in zip(list(v), list(v)[1:])),
                  "must be one or more epochs > 0 in increasing order, e.g. [50,80]")
FACTORS = Rule(lambda v: len(v) > 0 and all(f > 0 for f in v),
               "must be one or more numbers > 0, e.g. [1,0.1,0.01]")


def setting(default: Any, doc: str, rule: Rule | None = None, *, accepted: str = "") -> Any:
    """A schema field: its default (MISSING: the option file or the person sets it), a one-line
    doc (unit, meaning of null), the rule its values pass. `accepted` words a closed set (an
    Enum) better than OmegaConf's list where a reason helps (gradcheck.dtype)."""
    metadata = {"doc": doc, "rule": rule, "accepted": accepted}
    if isinstance(default, type) and is_dataclass(default):
        return field(default_factory=default, metadata=metadata)
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


class Described(NamedTuple):
    key: str
    type: Any
    default: Any  # MISSING ("???"): set by the option file or required
    doc: str
    accepted: str  # the rule's words, or ""


def describe(schema: type, prefix: str = "") -> list[Described]:
    """Every key of `schema` (nested blocks as dotted keys) with its type, default, doc and
    range, in declaration order: what a reference page of the config is made of."""
    hints = get_type_hints(schema)
    rows: list[Described] = []
    for item in fields(schema):
        kind = hints[item.name]
        if isinstance(kind, type) and is_dataclass(kind):
            rows += describe(kind, f"{prefix}{item.name}.")
            continue
        default = item.default if item.default is not NO_DEFAULT else (
            item.default_factory() if item.default_factory is not NO_DEFAULT else MISSING)
        rule = item.metadata.get("rule")
        accepted = item.metadata.get("accepted") or (rule.accepted if rule else "")
        rows.append(Described(f"{prefix}{item.name}", kind, default,
                              item.metadata.get("doc", ""), accepted))
    return rows


def accepted_words(schema: type, name: str) -> str:
    """How a closed set's field words what it accepts, when it says more than the list."""
    for item in fields(schema):
        if item.name == name:
            return item.metadata.get("accepted", "")
    return ""
