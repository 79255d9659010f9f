"""Each job of a basic sweep composed once, not three times, and each composition cheaper
(issue 20, item 1).

Hydra composes a job's config from scratch (the defaults list, every config file read and
parsed again, the schemas merged) each time it is asked, ~0.2-0.4 s a composition here. A basic
sweep asked three times a job: gradexp's own check of every job before the parent run opens
(gradexp.sweep_checks.check_every_job), the basic sweeper's `validate_batch_is_legal`, and the
launcher before it runs the job. So the check keeps what it composed: the sweeper's validation
of a job the check composed is that composition (composing it again proves nothing), and the
launcher's request for the same overrides gets the kept config itself: the same config, since a
composition depends only on the sweep's master config and the job's overrides. An entry goes at
that use, so a sweep holds at most MAX_KEPT composed configs at a time; a request for anything
not kept composes as before.

The check itself reads a copy of the job's config without its `hydra` node, as the job's task
sees it (`task_config`: half the cost of copying the whole, which Hydra's run_job does).

Jobs that choose the same options (`optimizer=adam`) and differ only in values
(`optimizer.learning_rate=0.1`, `trainer.seed=3`) are not composed from scratch either: the
first such job is composed by Hydra, and the next ones are a copy of it with their own values
set as Hydra sets them (its `_apply_overrides_to_config`, after the defaults list) and their own
`hydra.overrides.task` and `hydra.job.override_dirname`. Choices, `+`/`~` overrides, `hydra.*`
overrides and dict values are part of what must match (`_signature`); anything else composes
as before. tests/test_sweep_configs.py compares the two ways key by key.
"""

from __future__ import annotations

import copy
from typing import Any

from omegaconf import DictConfig, OmegaConf

MAX_KEPT = 512  # composed job configs held at once (a few hundred KiB each)


class _Kept:
    def __init__(self, loader: Any, master: DictConfig) -> None:
        self.loader, self.master = loader, master  # held, so their ids are not reused
        self.configs: dict[tuple[str, ...], DictConfig] = {}  # overrides -> the composition
        self.templates: dict[tuple, DictConfig] = {}  # _signature -> a job composed by Hydra


# By the loader's id, in this process only: launchers that pickle the loader to other
# processes (joblib) carry nothing of this, and compose there as before.
_KEPT: dict[int, _Kept] = {}
_original: Any = None


def _patch() -> Any:
    """ConfigLoaderImpl.load_sweep_config answered from what is kept for the loader's sweep, and
    Sweeper.validate_batch_is_legal skipping the jobs kept (the check composed them); returns
    Hydra's own load_sweep_config."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.plugins.sweeper import Sweeper

    global _original
    if _original is None:
        _original = ConfigLoaderImpl.load_sweep_config
        validate = Sweeper.validate_batch_is_legal

        def load_sweep_config(self: Any, master_config: DictConfig,
                              sweep_overrides: list[str]) -> DictConfig:
            kept = _KEPT.get(id(self))
            if kept is None or kept.master is not master_config:
                return _original(self, master_config, sweep_overrides)
            composed = kept.configs.pop(tuple(sweep_overrides), None)
            return composed if composed is not None \
                else _original(self, master_config, sweep_overrides)

        def validate_batch_is_legal(self: Any, batch: Any) -> None:
            loader = getattr(self, "hydra_context", None)
            kept = _KEPT.get(id(loader.config_loader)) if loader is not None else None
            if kept is not None and kept.master is self.config:
                batch = [job for job in batch if tuple(job) not in kept.configs]
            validate(self, batch)

        ConfigLoaderImpl.load_sweep_config = load_sweep_config
        Sweeper.validate_batch_is_legal = validate_batch_is_legal
    return _original


def compose_job(loader: Any, master: DictConfig, overrides: list[str]) -> DictConfig:
    """Job `overrides` of the sweep `master`, composed as the launcher would compose it (kept
    for the launcher's request); the caller gets its own copy of the job's task config (no
    `hydra` node, as the job's task sees it)."""
    original = _patch()
    kept = _KEPT.get(id(loader))
    if kept is None or kept.master is not master or kept.loader is not loader:
        kept = _KEPT[id(loader)] = _Kept(loader, master)
    composed = _from_template(kept, master, list(overrides))
    if composed is None:
        composed = original(loader, master, list(overrides))
        signature = _signature(loader, overrides)
        if signature is not None and len(kept.templates) < MAX_KEPT:
            kept.templates[signature[0]] = copy.deepcopy(composed)
    task = task_config(composed)
    if len(kept.configs) < MAX_KEPT:
        kept.configs[tuple(overrides)] = composed
    return task


def _signature(loader: Any, overrides: list[str]) -> tuple[tuple, list[Any]] | None:
    """What a job's composition depends on besides its plain values (its choices, additions,
    deletions, hydra.* and dict overrides, in order, and the keys of its values), and those
    value overrides (Hydra's parsed Overrides); None when Hydra's parser refuses them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    try:
        parsed = OverridesParser.create().parse_overrides(overrides=list(overrides))
    except Exception:  # noqa: BLE001 - Hydra's own composition says what is wrong
        return None
    fixed, keys, values = [], [], []
    for override in parsed:
        plain = (override.type == OverrideType.CHANGE and not override.is_hydra_override()
                 and not override.is_sweep_override()
                 and not isinstance(override.value(), dict)
                 and not loader.repository.group_exists(override.key_or_group))
        if plain:
            keys.append(override.key_or_group)
            values.append(override)
        else:
            fixed.append(override.input_line)
    return (tuple(fixed), tuple(keys)), values


def _from_template(kept: _Kept, master: DictConfig, overrides: list[str]) -> DictConfig | None:
    """Job `overrides` as a copy of an earlier job of the same choices with these values set;
    None when no such job was composed."""
    if not kept.templates:
        return None
    signature = _signature(kept.loader, overrides)
    if signature is None or signature[0] not in kept.templates:
        return None
    from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg = copy.deepcopy(kept.templates[signature[0]])
    ConfigLoaderImpl._apply_overrides_to_config(signature[1], cfg)
    # As Hydra's _load_configuration_impl fills them from the job's overrides (the master's
    # hydra overrides are the same for every job, and in the template already)
    parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    task = [override for override in parsed if not override.is_hydra_override()]
    cfg.hydra.overrides.task = [override.input_line for override in task]
    dirname = cfg.hydra.job.config.override_dirname
    cfg.hydra.job.override_dirname = get_overrides_dirname(
        overrides=task, kv_sep=dirname.kv_sep, item_sep=dirname.item_sep,
        exclude_keys=dirname.exclude_keys)
    OmegaConf.copy_cache(from_config=master, to_config=cfg)
    return cfg


def forget() -> None:
    """Drop every kept config (the sweep ended); later requests compose as Hydra does."""
    _KEPT.clear()


def task_config(config: DictConfig) -> DictConfig:
    """A deep copy of a job's `config` without its `hydra` node: what Hydra's run_job gives the
    job's task (a deep copy of the whole, then `del task_cfg["hydra"]`), without copying the
    hydra node, half of the whole (~3 of ~6 ms here)."""
    content = config.__dict__["_content"]  # OmegaConf's own nodes, by key, in order
    items = list(content.items())
    del content["hydra"]
    try:
        return copy.deepcopy(config)
    finally:
        content.clear()
        content.update(items)  # the config as it was, keys in their order


def share_the_config_store() -> None:
    """Every Hydra composition stops deep-copying the whole ConfigStore (gradexp's schemas and
    every experiments/ preset, ~0.05-0.1 s of each composition here).

    Hydra deep-copies its config repository at the start of each composition (its sources'
    search paths are set per composition), and the structured-config source in it holds the
    process's one ConfigStore. Nothing changes that copy: ConfigStore.load hands out a deep
    copy of each node it is asked for. So the copied source shares the store."""
    from hydra._internal.core_plugins.structured_config_source import StructuredConfigSource

    if "__deepcopy__" in vars(StructuredConfigSource):
        return

    def __deepcopy__(self: Any, memo: dict) -> Any:
        copied = copy.copy(self)  # its provider, its path and the one ConfigStore
        memo[id(self)] = copied
        return copied

    StructuredConfigSource.__deepcopy__ = __deepcopy__
