"""How fast a config error answers: `python -m gradexp trainer.epochs=-1` end to end (a process,
no TensorFlow), and gradexp's own checks of a composed config in-process (check_ranges: the
rules on the schema fields and the unknown-key check). Prints a table of medians.

The unknown-key check walks each schema node's keys against its dataclass fields
(config_checks.check_known_keys). Issue 19 item 5 asked for a structured merge per group
instead; this benchmark keeps that alternative (`merge_check`, below, not in gradexp) and times
both side by side, in a fresh process (what one launch pays) and again in the same process (what
each further job of a sweep pays), so the choice can be measured again.

    PYTHONPATH=src python benchmarks/bench_config_errors.py [--runs 5]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import fields, is_dataclass
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError

from gradexp.app import register_configs
from gradexp.config_checks import ARGUMENT_GROUPS, check_known_keys, check_ranges, user_target
from gradexp.resources import resource_dir
from gradexp.schema import SCHEMAS, Config, ConfigError

OVERRIDES = ([], ["model=mlp", "optimizer=adam", "data=blobs"], ["trainer.deterministic=true"])
# Both ways must refuse these, naming the same key (checked before timing).
UNKNOWN = {"+trainer.patience=10": "trainer.patience", "+foo=1": "foo",
           "+trainer.early_stopping.patiance=3": "trainer.early_stopping.patiance",
           "+model.anything=1": "model.anything"}


# ---------------------------------------------------------------- the alternative: a merge
@functools.cache
def _schema_node(schema: type) -> DictConfig:
    """A private copy of the node Hydra's ConfigStore built from `schema` (register_schemas):
    ~1 ms a schema, where OmegaConf.structured builds it again in ~4 ms. Made once a process."""
    if schema is Config:
        return ConfigStore.instance().load("config_schema.yaml").node
    path = next((f"schema/{group}/{name}.yaml" for group, options in SCHEMAS.items()
                 for name, node in options.items() if node is schema), None)
    # eval and sweep are stored only inside Config: built afresh
    return ConfigStore.instance().load(path).node if path else OmegaConf.structured(schema)


def _keys(node: DictConfig) -> dict[str, Any]:
    """`node`'s keys, into its schema blocks, each `???`: merged, MISSING changes no value and
    passes any type, so only the keys are judged. (The composed node itself cannot be merged:
    OmegaConf takes a node already of the schema's type with whatever keys it has.)"""
    keys: dict[str, Any] = {}
    for key in node:
        inner = None if OmegaConf.is_missing(node, key) else node[key]
        nested = isinstance(inner, DictConfig) and is_dataclass(OmegaConf.get_type(inner))
        keys[str(key)] = _keys(inner) if nested else MISSING
    return keys


def _merge(keys: dict[str, Any], schema: type, prefix: str) -> None:
    try:
        OmegaConf.unsafe_merge(_schema_node(schema), keys)
    except ConfigKeyError as error:
        raise ConfigError(f"{prefix}{error.full_key}=...: no such key "
                          f"({', '.join(f.name for f in fields(error.object_type))})") from None


def merge_check(cfg: DictConfig) -> None:
    """check_known_keys as a structured merge per group: the group names into Config, each
    group's keys into its own schema's node (cached); OmegaConf refuses what a schema lacks."""
    groups = [group for group in cfg if group != "hydra"]
    _merge({group: MISSING for group in groups}, Config, "")
    trusted = {group for group in ARGUMENT_GROUPS if user_target(cfg, group)}
    for group in groups:
        node = None if OmegaConf.is_missing(cfg, group) else cfg[group]
        if group not in trusted and isinstance(node, DictConfig) \
                and is_dataclass(OmegaConf.get_type(node)):
            _merge(_keys(node), OmegaConf.get_type(node), f"{group}.")


WAYS = {"walk": check_known_keys, "merge": merge_check}


# ---------------------------------------------------------------- timing
def _configs(overrides: tuple[list[str], ...] = OVERRIDES) -> list[DictConfig]:
    register_configs()
    with initialize_config_dir(config_dir=str(resource_dir("conf")), version_base="1.3"):
        return [compose(config_name="config", overrides=list(o)) for o in overrides]


def _check_same_refusals() -> None:
    for cfg, key in zip(_configs(tuple([o] for o in UNKNOWN)), UNKNOWN.values()):
        for way, check in WAYS.items():
            try:
                check(cfg)
            except ConfigError as error:
                assert str(error).startswith(f"{key}="), (way, str(error))
            else:
                raise AssertionError(f"{way} let {key} through")


def _cli_seconds(runs: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(runs):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "gradexp", "trainer.epochs=-1"],
                                  cwd=folder, capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            assert done.returncode == 2 and "trainer.epochs=-1" in done.stderr, done.stderr
    return times


def _first_ms(way: str, runs: int) -> list[float]:
    """The first unknown-key check of a fresh process (what one launch pays), each way."""
    times = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, __file__, "--first", way],
                              capture_output=True, text=True, check=True)
        times.append(float(done.stdout))
    return times


def _later_ms(runs: int) -> dict[str, list[float]]:
    """The check again in the same process, each way in turn (a sweep's further jobs)."""
    configs = _configs()
    for check in WAYS.values():
        check(configs[0])
    times: dict[str, list[float]] = {way: [] for way in [*WAYS, "check_ranges"]}
    for _ in range(runs):
        for way, check in [*WAYS.items(), ("check_ranges", check_ranges)]:
            start = time.perf_counter()
            for _ in range(10):
                for cfg in configs:
                    check(cfg)
            times[way].append(1000 * (time.perf_counter() - start) / (10 * len(configs)))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--first", choices=list(WAYS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first:
        cfg = _configs()[0]
        start = time.perf_counter()
        WAYS[args.first](cfg)
        print(1000 * (time.perf_counter() - start))
        return
    _check_same_refusals()
    cli = _cli_seconds(args.runs)
    first = {way: [] for way in WAYS}
    for _ in range(args.runs):  # alternated, so both ways meet the same load
        for way in WAYS:
            first[way] += _first_ms(way, 1)
    later = _later_ms(args.runs)
    rows = [("python -m gradexp trainer.epochs=-1 (s)", cli),
            ("check_ranges on a composed config (ms)", later["check_ranges"]),
            ("unknown keys, walk: first in a process (ms)", first["walk"]),
            ("unknown keys, merge: first in a process (ms)", first["merge"]),
            ("unknown keys, walk: again (ms)", later["walk"]),
            ("unknown keys, merge: again (ms)", later["merge"])]
    print(f"{'what':<46} {'median':>9} {'min':>9}")
    for what, times in rows:
        print(f"{what:<46} {statistics.median(times):>9.3f} {min(times):>9.3f}")


if __name__ == "__main__":
    main()
