"""Each job of a basic sweep composed once, not three times, and each composition cheaper
(issue 20, item 1).

Hydra composes a job's config from scratch (the defaults list, every config file read and
parsed again, the schemas merged) each time it is asked, ~0.2-0.4 s a composition here. A basic
sweep asked three times a job: gradexp's own check of every job before the parent run opens
(gradexp.sweeps.check_every_job), the basic sweeper's `validate_batch_is_legal`, and the
launcher before it runs the job. So the check keeps what it composed, and the sweeper's and
the launcher's requests for the same overrides get a deep copy of it (~15 ms): the same config,
since a composition depends only on the sweep's master config and the job's overrides, and each
caller gets its own object to change (the launcher sets hydra.job.*). An entry goes after its
second use (the validation, then the launch), so a sweep holds at most MAX_KEPT composed
configs at a time; a request for anything not kept composes as before.
"""

from __future__ import annotations

import copy
from typing import Any

from omegaconf import DictConfig, OmegaConf

MAX_KEPT = 512  # composed job configs held at once (a few hundred KiB each)
USES = 2  # the sweeper's validation and the launcher's composition


class _Kept:
    def __init__(self, loader: Any, master: DictConfig) -> None:
        self.loader, self.master = loader, master  # held, so their ids are not reused
        self.configs: dict[tuple[str, ...], list[Any]] = {}  # overrides -> [config, uses left]


# By the loader's id, in this process only: launchers that pickle the loader to other
# processes (joblib) carry nothing of this, and compose there as before.
_KEPT: dict[int, _Kept] = {}
_original: Any = None


def _patch() -> Any:
    """ConfigLoaderImpl.load_sweep_config, answered from what is kept for the loader's sweep;
    returns Hydra's own."""
    global _original
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    if _original is None:
        _original = ConfigLoaderImpl.load_sweep_config

        def load_sweep_config(self: Any, master_config: DictConfig,
                              sweep_overrides: list[str]) -> DictConfig:
            kept = _KEPT.get(id(self))
            key = tuple(sweep_overrides)
            entry = kept.configs.get(key) if kept is not None \
                and kept.master is master_config else None
            if entry is None:
                return _original(self, master_config, sweep_overrides)
            entry[1] -= 1
            if entry[1] <= 0:
                del kept.configs[key]
                return entry[0]  # its last use: no copy needed
            return _copy(entry[0], master_config)

        ConfigLoaderImpl.load_sweep_config = load_sweep_config
    return _original


def compose_job(loader: Any, master: DictConfig, overrides: list[str]) -> DictConfig:
    """Job `overrides` of the sweep `master`, composed as the launcher would compose it; kept
    for the sweeper's and the launcher's requests. The caller gets its own copy."""
    original = _patch()
    kept = _KEPT.get(id(loader))
    if kept is None or kept.master is not master or kept.loader is not loader:
        kept = _KEPT[id(loader)] = _Kept(loader, master)
    composed = original(loader, master, list(overrides))
    if len(kept.configs) < MAX_KEPT:
        kept.configs[tuple(overrides)] = [composed, USES]
        return _copy(composed, master)
    return composed


def forget() -> None:
    """Drop every kept config (the sweep ended); later requests compose as Hydra does."""
    _KEPT.clear()


def _copy(config: DictConfig, master: DictConfig) -> DictConfig:
    copied = copy.deepcopy(config)
    # As load_sweep_config does: resolved values (timestamps) the same as the master's.
    OmegaConf.copy_cache(from_config=master, to_config=copied)
    return copied


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
