"""How many keys of the option files in conf/ restate their schema's default (issue 19 item 5:
each default written once). Prints a table: per option file, its keys and those that restate.

    PYTHONPATH=src python benchmarks/count_config_defaults.py
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

from omegaconf import OmegaConf

from gradexp.resources import resource_dir
from gradexp.schema import SCHEMAS, Config, describe


def _leaves(node: dict, prefix: str = ""):
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _plain(value):
    return value.value if isinstance(value, Enum) else value


def _schema_of(option: dict) -> type | None:
    for entry in option.get("defaults", []):
        if isinstance(entry, str) and entry.startswith("/schema/"):
            _, _, group, name = entry.split("@")[0].split("/")
            return SCHEMAS[group][name]
    return None


def count(conf: Path) -> list[tuple[str, int, list[str]]]:
    rows = []
    files = [(path, _schema_of(OmegaConf.to_container(OmegaConf.load(path))))
             for path in sorted(conf.glob("*/*.yaml"))]
    files.append((conf / "config.yaml", Config))
    for path, schema in files:
        if schema is None:
            continue
        option = OmegaConf.to_container(OmegaConf.load(path))
        option.pop("defaults", None)
        option.pop("hydra", None)
        defaults = {row.key: _plain(row.default) for row in describe(schema)}
        keys = list(_leaves(option))
        same = [key for key, value in keys if key in defaults and defaults[key] == value
                and defaults[key] != "???"]
        rows.append((str(path.relative_to(conf)), len(keys), same))
    return rows


def main() -> None:
    rows = count(resource_dir("conf"))
    width = max(len(name) for name, _, _ in rows)
    print(f"{'option file':<{width}}  keys  restate the schema's default")
    for name, keys, same in rows:
        print(f"{name:<{width}}  {keys:>4}  {len(same):>2} {' '.join(same)}")
    total = sum(keys for _, keys, _ in rows)
    restated = sum(len(same) for _, _, same in rows)
    print(f"{'total':<{width}}  {total:>4}  {restated:>2}")
    sys.exit(0)


if __name__ == "__main__":
    main()
