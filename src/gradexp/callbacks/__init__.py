"""Callbacks: everything a run does besides training, each one job, built from config.

The loop (gradexp.loop) builds the parts, trains in compiled stretches of epochs and emits the
events of gradexp.run_view.EVENTS to each callback in order; callbacks read the run's view
(gradexp.run_view.RunView), add metrics to a stretch's `logs`, and hand tags, artifacts and the
model to the recorder, the only MLflow writer. A callback also names the epochs at which it needs
the host (`stops`): a gradient check, an evaluation, a checkpoint; the trainer's compiled calls
end there and nowhere else.

They come from conf/callbacks/default.yaml (`callbacks.NAME: {_target_: ..., args}`), built by
hydra.utils.instantiate; yours joins with `+callbacks.NAME._target_=my_module.MyCallback`, and
`~callbacks.NAME` (or `callbacks.NAME=null`) turns one off. The order is fixed, whatever the
order in the config: BEFORE_YOURS, yours (in the order given), AFTER_YOURS. So held-out
evaluation comes before early stopping (which reads it) and the progress line (which shows it),
yours see all of those, and checkpoints and the recorder come last: what yours put in `logs` is
recorded in the same event.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradexp.callbacks.base import Callback
from gradexp.schema import ConfigError

__all__ = ["AFTER_YOURS", "BEFORE_YOURS", "Callback", "build_callbacks", "check_callbacks",
           "check_jobs_kept"]

# divergence after the callbacks that record a stretch (each keeps the epochs before a NaN)
# and before those that would work on its NaN weights (gradient checks, checkpoints)
BEFORE_YOURS = ("epoch_history", "held_out_evaluation", "early_stopping", "progress",
                "divergence", "gradient_checks")
AFTER_YOURS = ("checkpoints", "final_evaluation", "pruning", "artifacts", "model_logger",
               "recorder", "summary")


def _entries(cfg: DictConfig) -> dict[str, Any]:
    """callbacks.* of the config; the shipped default list for a config recorded before there
    was one (trainer.resume of an older run)."""
    if "callbacks" not in cfg:
        from gradexp.resources import resource_dir

        return dict(OmegaConf.load(resource_dir("conf") / "callbacks" / "default.yaml"))
    entries = cfg.callbacks
    if entries is None:
        return {}
    if not isinstance(entries, DictConfig):
        raise ConfigError(f"callbacks={entries}: expected named entries, e.g. "
                          "+callbacks.mine._target_=my_module.MyCallback")
    return {name: entries[name] for name in entries}


def ordered(cfg: DictConfig) -> Iterator[tuple[str, Any]]:
    """(name, config) of each callback that is on, in the order the run tells them."""
    entries = {name: node for name, node in _entries(cfg).items() if node is not None}
    built_in = set(BEFORE_YOURS) | set(AFTER_YOURS)
    yours = [name for name in entries if name not in built_in]
    for name in [*BEFORE_YOURS, *yours, *AFTER_YOURS]:
        if name in entries:
            yield name, entries[name]


def check_jobs_kept(cfg: DictConfig, sweep: bool | None = None) -> None:
    """A built-in callback that does a job the config turns on elsewhere is not removed
    (~callbacks.NAME, callbacks.NAME=null): one line naming both keys, before the run opens.
    QA: callbacks.early_stopping=null with trainer.early_stopping.enabled=true trained every
    epoch, ~callbacks.held_out_evaluation left early stopping nothing to decide on, and
    ~callbacks.checkpoints with trainer.checkpoint_every=2 wrote none (a resume started over),
    silently, while the run's params said each job was on. `sweep`: whether `cfg` is a sweep's
    job (its pruner and objective then count); None: as Hydra runs it (multirun)."""
    kept = {name for name, _ in ordered(cfg)}
    for turned_on, needed, turn_off in _jobs_on(cfg, _in_sweep() if sweep is None else sweep):
        for name in needed:
            if name not in kept:
                raise ConfigError(f"{turned_on}, but callbacks.{name} is removed: put it back, "
                                  f"or {turn_off}")


def _jobs_on(cfg: DictConfig, sweep: bool) -> Iterator[tuple[str, tuple[str, ...], str]]:
    """(the key that turns a job on, the callbacks doing it, how to turn it off) of each job
    this config turns on. held_out_evaluation records the train/ and val/ metrics that early
    stopping, a sweep's pruner and its objective read."""
    stopping = OmegaConf.select(cfg, "trainer.early_stopping.enabled", default=False)
    if stopping:
        yield ("trainer.early_stopping.enabled=true", ("early_stopping", "held_out_evaluation"),
               "set trainer.early_stopping.enabled=false")
    every = OmegaConf.select(cfg, "trainer.checkpoint_every", default=None)
    tracking = OmegaConf.select(cfg, "tracking.name", default="none")
    tracking = str(getattr(tracking, "value", tracking))
    if tracking != "none":  # QA: ~callbacks.recorder recorded nothing, said nothing, exit 0
        yield f"tracking={tracking}", ("recorder",), "use tracking=none"
    if every and tracking != "none":  # tracking=none: no run
        yield (f"trainer.checkpoint_every={every}", ("checkpoints",),  # to resume, none saved
               "set trainer.checkpoint_every=0")
    if OmegaConf.select(cfg, "gradcheck.enabled", default=False):
        yield "gradcheck.enabled=true", ("gradient_checks",), "use gradcheck=off"
    if not sweep:
        return  # a single run has no pruner, and ranks against nothing
    pruner = OmegaConf.select(cfg, "sweep.pruner", default="none")
    pruner = str(getattr(pruner, "value", pruner))
    if pruner != "none":
        yield (f"sweep.pruner={pruner}", ("pruning", "held_out_evaluation"),
               "set sweep.pruner=none")
    chosen = str(OmegaConf.select(cfg, "sweep.objective", default="final_loss"))
    if chosen == "auto" or chosen.split("/")[0] in ("train", "val"):
        yield (f"sweep.objective={chosen} (a held-out metric the sweep ranks its jobs by)",
               ("held_out_evaluation",), "set sweep.objective=final_loss")


def _in_sweep() -> bool:
    """Whether this config is a sweep's job (Hydra's multirun)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def check_callbacks(cfg: DictConfig) -> None:
    """Each callback's `_target_` imports and takes the arguments given: one line otherwise,
    before any MLflow run opens (the launch folder is importable by now)."""
    from gradexp.user_code import locate

    for name, node in ordered(cfg):
        key = f"callbacks.{name}"
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ConfigError(f"{key}={node}: a callback needs a _target_, e.g. "
                              f"+{key}._target_=my_module.MyCallback")
        target = locate(f"{key}._target_", node["_target_"])
        if not callable(target):
            raise ConfigError(f"{key}._target_={node['_target_']}: not a class or a function")
        args = {arg: value for arg, value in node.items() if not str(arg).startswith("_")}
        try:
            inspect.signature(target).bind(**args)
        except TypeError as error:
            raise ConfigError(f"{key}: {node['_target_']} does not take these arguments "
                              f"({', '.join(map(str, args)) or 'none'}): {error}") from None
        except ValueError:  # no signature to read (a builtin): instantiate says
            pass


def build_callbacks(cfg: DictConfig) -> list[Any]:
    """The run's callbacks, built in order (check_callbacks has vetted them)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    built = []
    for name, node in ordered(cfg):
        try:
            built.append(instantiate(node))
        except InstantiationException as error:
            cause = error.__cause__ or error
            text = str(cause).strip().splitlines()
            raise ConfigError(f"callbacks.{name}: {node['_target_']} could not be built "
                              f"({type(cause).__name__}: {text[0] if text else ''})") from None
    return built
