"""Write docs/config.md, the configuration reference, from the schemas (gradexp.schema).

    python docs/make_config_reference.py          # rewrite docs/config.md
    python docs/make_config_reference.py --check  # exit 1 if docs/config.md is out of date

Every key of every option in conf/ (the option's own values where its file sets them, else the
schema's defaults), its type, what it accepts and its one-line doc, all read from the schema
fields (`gradexp.schema.describe`); tests/test_config_reference.py keeps the page in sync.
"""

from __future__ import annotations

import sys
import types
import typing
from enum import Enum
from pathlib import Path

from omegaconf import OmegaConf

from gradexp.schema import MISSING, SCHEMAS, Config, EvalConfig, SweepConfig, describe

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "config.md"
GROUPS = ("data", "model", "loss", "optimizer", "device", "trainer", "gradcheck", "tracking")

HEADER = """# Configuration reference

Generated from the schemas in [`src/gradexp/schema.py`](../src/gradexp/schema.py) by
`python docs/make_config_reference.py` (a test fails when this page and the schemas disagree).
Each key is set on the command line as `group.key=value`; `--cfg job` prints the composed config.
A value the schema does not accept is refused in one line before TensorFlow loads.
"""


def type_name(kind) -> str:
    """int, float | null, relu | tanh | ..., list of int."""
    if isinstance(kind, type) and issubclass(kind, Enum):
        return " \\| ".join(member.value for member in kind)
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        names = [type_name(arg) for arg in typing.get_args(kind) if arg is not type(None)]
        return " \\| ".join(names) + " \\| null"
    if origin in (list, tuple):
        (item,) = typing.get_args(kind)[:1] or (typing.Any,)
        return f"list of {type_name(item)}"
    if origin is dict:
        return "mapping"
    if kind is typing.Any:
        return "any"
    return getattr(kind, "__name__", str(kind))


def shown(value) -> str:
    if value is MISSING or value == "???":
        return "*required*"
    if isinstance(value, Enum):
        value = value.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return f"`{value}`" if value != "" else '`""`'


def schema_of(option_file: Path, group: str) -> type | None:
    """The schema an option file starts its defaults list with (/schema/GROUP/NAME@_here_)."""
    for entry in OmegaConf.load(option_file).get("defaults", []):
        text = str(entry)
        if text.startswith(f"/schema/{group}/"):
            return SCHEMAS[group][text.split("/")[3].split("@")[0]]
    return None


def table(schema: type, values, only: tuple[str, ...] = (), stem: str = "") -> list[str]:
    rows = ["| key | type | default | accepts | meaning |", "|---|---|---|---|---|"]
    for row in describe(schema):
        # `name` and `_target_` label the option and are left out, but where a person sets the
        # name: sklearn's picks its data set (custom options say their _target_ in their doc).
        picks = row.key == "name" and values is not None and values.get("name") != stem
        if (row.key in ("name", "_target_") and not picks) or (only and row.key not in only):
            continue
        value = OmegaConf.select(values, row.key, default=row.default) if values else row.default
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value)
        doc = row.doc.replace("|", "\\|")
        rows.append(f"| `{row.key}` | {type_name(row.type)} | {shown(value)} | "
                    f"{row.accepted.replace('|', chr(92) + '|')} | {doc} |")
    return rows


# What an option's table cannot say by itself.
NOTES = {"tracking=none": "It records nothing: the keys below are not read."}


def reference() -> str:
    lines = [HEADER]
    for group in GROUPS:
        lines += [f"## {group}", ""]
        for option_file in sorted((ROOT / "conf" / group).glob("*.yaml")):
            schema = schema_of(option_file, group)
            if schema is None:
                continue
            values = OmegaConf.load(option_file)
            target = values.get("_target_")
            title = f"### `{group}={option_file.stem}`"
            lines += [title, ""]
            if schema.__doc__ and not schema.__doc__.startswith(schema.__name__ + "("):
                lines += [" ".join(schema.__doc__.split()), ""]
            if target and target != "???":
                lines += [f"Runs `{target}`.", ""]
            if f"{group}={option_file.stem}" in NOTES:
                lines += [NOTES[f"{group}={option_file.stem}"], ""]
            lines += [*table(schema, values, stem=option_file.stem), ""]
    for name, schema in (("eval", EvalConfig), ("sweep", SweepConfig)):
        lines += [f"## {name}", "", f"Set in [`conf/config.yaml`](../conf/config.yaml) or a "
                  f"preset: `{name}.KEY=VALUE`.", "", *table(schema, None), ""]
    lines += ["## seed", "", "The master seed, at the top level: `seed=N` ([sweeps.md]"
              "(sweeps.md#seeds-and-error-bars)).", "", *table(Config, None, only=("seed",)), ""]
    lines += ["## callbacks", "",
              "Named entries built by `_target_` ([`conf/callbacks/default.yaml`]"
              "(../conf/callbacks/default.yaml), [callbacks.md](callbacks.md)).", ""]
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    text = reference()
    if "--check" in sys.argv[1:]:
        if PAGE.read_text() != text:
            sys.exit(f"{PAGE} is out of date: python docs/make_config_reference.py")
        return
    PAGE.write_text(text)
    print(f"wrote {PAGE} ({len(text.splitlines())} lines)")


if __name__ == "__main__":
    main()
