"""What a `hydra/sweeper=optuna` sweep checks before its parent run opens, as a basic sweep checks
its every job (gradexp.sweep_checks.check_every_job): gradexp.sweeps' callback calls
check_search_space before the parent run, the study or any trial exists.

- The search space reads as Optuna distributions (search_space: `interval(1.0,0.1)`,
  `tag(log, interval(0,1))`, `range(1,0)`, `tag(lg, ...)` are one line each), and the grid
  sampler is given discrete values only.
- Every value the search may choose composes and passes the checks a job's run makes before
  TensorFlow loads (`optimizer=sgd,adamm` ends here, not in a trial). Optuna chooses its trials
  as it runs, so a choice's values are checked as a grid's values, and an interval or range by
  its two ends: every combination of the choices, each with the numeric keys all at their low
  ends and all at their high ends; when that is more than MAX_JOBS jobs, fewer jobs that still
  hold each value once.
- hydra.sweeper.n_trials and n_jobs are 1 or more; the sampler is a node whose _target_ is an Optuna
  sampler class, with that class's arguments and an integer seed (or none), and its own
  packages are installed (cmaes); hydra.sweeper.storage is a database Optuna can open
  (study.check_storage).
- The study the search continues (study.stored_study), when there is one: it searched the same
  choices, and a grid study has points left to try (else one note, exit 0, nothing recorded).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradexp.schema import ConfigError

from .search_space import Space, grid, job_overrides, searched
from .study import (
    as_written,
    changed_key,
    check_storage,
    grid_done_line,
    stored_study,
    study_label,
    untried_points,
)

MAX_JOBS = 32  # jobs composed for the check (a composition is ~0.2-0.4 s, a copy ~15 ms)


def check_search_space(config: DictConfig) -> None:
    """The sweep's search space and each value it may choose; a ConfigError (one line) for the
    first mistake, before anything is recorded."""
    from hydra.core.global_hydra import GlobalHydra

    check_n_trials(config)
    check_sampler(config)
    check_sampler_installed(config)
    check_storage(OmegaConf.select(config, "hydra.sweeper.storage", default=None))
    loader = GlobalHydra.instance().config_loader() \
        if GlobalHydra.instance().is_initialized() else None
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    space = searched(params, list(config.hydra.overrides.task), loader)
    if _is_grid(config):
        grid(space.distributions)  # a continuous interval cannot be listed
    if loader is not None:
        for job in candidate_jobs(space.distributions):
            try:
                check_job(config, loader, list(job_overrides(job, space.fixed)))
            except ConfigError as error:
                raise ConfigError(_with_its_sweep(str(error), job, space)) from None
    check_study(config, space)


def _is_grid(config: DictConfig) -> bool:
    sampler = str(OmegaConf.select(config, "hydra.sweeper.sampler._target_", default=""))
    return sampler.endswith(".GridSampler")


def check_n_trials(config: DictConfig) -> None:
    """QA: n_trials=0 or -1 ran nothing, said nothing, and left an empty parent run; n_jobs=0
    ran one trial at a time as if it were 1."""
    for key, what, default in (("n_trials", "the trials this sweep runs", 20),
                               ("n_jobs", "the trials asked and launched at once", 1)):
        value = OmegaConf.select(config, f"hydra.sweeper.{key}", default=1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"hydra.sweeper.{key}={value}: {what} must be an integer >= 1 "
                              f"(default {default})")


SAMPLER_KEY = "hydra.sweeper.sampler"
_HYDRA_KEYS = ("_target_", "_partial_", "_args_", "_recursive_", "_convert_")


def check_sampler(config: DictConfig) -> None:
    """The sampler the sweeper builds when the sweep starts, after the parent run opened (QA:
    hydra.sweeper.sampler=tpe, a misspelt _target_ or sampler.seed=abc each ended in a traceback
    or a garbled line, and a FAILED parent run). One line naming the key, the value and what
    is accepted: a node with the _target_ of an Optuna sampler class (hydra/sweeper/sampler=
    NAME picks one of SAMPLERS), that class's arguments, and an integer seed or null."""
    import inspect
    import pydoc

    import optuna

    from .optuna_sweeper import SAMPLERS

    presets = f"hydra/sweeper/sampler={'|'.join(SAMPLERS)}"
    node = OmegaConf.select(config, SAMPLER_KEY, default=None)
    if not isinstance(node, DictConfig) or "_target_" not in node:
        meant = f"did you mean hydra/sweeper/sampler={node}?" if str(node) in SAMPLERS \
            else "e.g. hydra/sweeper/sampler=tpe"
        raise ConfigError(
            f"{SAMPLER_KEY}={node}: the sampler is a node with the _target_ of an Optuna "
            f"sampler class and its arguments; choose one with {presets} (a config group: "
            f"'/', not '.'): {meant}")
    target = str(node._target_)
    try:
        found = pydoc.locate(target)
    except pydoc.ErrorDuringImport as error:
        found, reason = None, f" ({type(error.value).__name__}: {error.value})"
    else:
        reason = ""
    if not (isinstance(found, type) and issubclass(found, optuna.samplers.BaseSampler)):
        classes = [f"optuna.samplers.{name}" for name in optuna.samplers.__all__
                   if name.endswith("Sampler") and not name.startswith("Base")]
        close = _closest(target, classes)
        what = "is not an Optuna sampler class" if found is not None else \
            f"no such class can be imported{reason}"
        raise ConfigError(
            f"{SAMPLER_KEY}._target_={target}: {what}; accepted: an Optuna sampler class, "
            f"e.g. optuna.samplers.TPESampler, or {presets}"
            + (f"; did you mean {close}?" if close else ""))
    arguments = {key: node[key] for key in node if key not in _HYDRA_KEYS}
    seed = arguments.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ConfigError(f"{SAMPLER_KEY}.seed={seed}: the sampler's seed is an integer, or null "
                          "for a new seed each sweep")
    known = [name for name in inspect.signature(found).parameters if name != "search_space"]
    try:
        inspect.signature(found).bind_partial(**arguments)
    except TypeError:
        unknown = next((key for key in arguments if key not in known), None)
        if unknown is None:
            return  # the sampler's own error, when it is built
        raise ConfigError(
            f"{SAMPLER_KEY}.{unknown}={arguments[unknown]}: {found.__name__} takes no argument "
            f"{unknown}; its arguments: {', '.join(known)}") from None


def _closest(word: str, choices: list[str]) -> str | None:
    """The choice `word` most likely misspells (TPESamplr: TPESampler)."""
    import difflib

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.8)
    return close[0] if close else None


# The Python packages a sampler imports only when it samples (QA: `pip install ".[optuna]"` had
# no cmaes, and hydra/sweeper/sampler=cmaes failed at its second trial, in a traceback).
SAMPLER_NEEDS = {"CmaEsSampler": ("cmaes",), "GPSampler": ("scipy", "torch")}


def check_sampler_installed(config: DictConfig) -> None:
    """The sampler's own packages are importable, or one line saying which to install."""
    import importlib

    from .optuna_sweeper import SAMPLERS

    target = str(OmegaConf.select(config, "hydra.sweeper.sampler._target_", default=""))
    for module in SAMPLER_NEEDS.get(target.rsplit(".", 1)[-1], ()):
        try:
            importlib.import_module(module)
        except ImportError:
            preset = [name for name, node in SAMPLERS.items() if node["_target_"] == target]
            chosen = (f"hydra/sweeper/sampler={preset[0]}" if preset
                      else f"hydra.sweeper.sampler._target_={target}")
            raise ConfigError(f"{chosen} needs the Python package {module}, which is not "
                              f"installed: pip install {module} (or pip install \".[optuna]\" "
                              "in gradexp's folder), or choose another sampler: "
                              "tpe, random, grid, nsgaii") from None


def check_study(config: DictConfig, space: Space) -> None:
    """The study this search continues, when there is one: a searched key whose choices changed
    is refused (QA: Optuna raised at the first trial, after the parent opened, and left the
    trial RUNNING); a grid whose every point was tried runs nothing (QA: it ran one point again
    n_trials times), said in one line, exit 0, before any parent run opens."""
    from gradexp.console import note_line

    from .optuna_sweeper import default_study_name

    direction = OmegaConf.select(config, "hydra.sweeper.direction", default="minimize")
    name = OmegaConf.select(config, "hydra.sweeper.study_name", default=None) or \
        default_study_name(config, space.distributions, space.fixed,
                           str(getattr(direction, "name", direction)))  # as the sweeper
    study = stored_study(config, OmegaConf.select(config, "hydra.sweeper.storage", default=None),
                         str(name))
    if study is None:
        return
    label = study_label(config, str(name))
    changed = changed_key(study, space.distributions)
    if changed is not None:
        key, old, new = changed
        raise ConfigError(
            f"{label}: its trials searched {key}={as_written(old)}, and this search has "
            f"{key}={as_written(new)}; Optuna cannot change a key's choices or kind within a "
            f"study: name a new study (hydra.sweeper.study_name=NEW) or search {key} as before")
    if _is_grid(config) and untried_points(study, grid(space.distributions)) == 0:
        note_line(grid_done_line(label, math.prod(len(v) for v in
                                                  grid(space.distributions).values())))
        raise SystemExit(0)  # nothing to run: no parent run opens (gradexp.sweeps)


def candidate_jobs(distributions: dict[str, Any]) -> list[dict[str, Any]]:
    """The trials checked in advance: each choice's every value, each interval or range at its
    low and at its high end (in the order the sweeper gives a trial's values)."""
    from optuna.distributions import CategoricalDistribution

    choices = {key: list(dist.choices) for key, dist in distributions.items()
               if isinstance(dist, CategoricalDistribution)}
    ends = {key: list(dict.fromkeys((dist.low, _highest(dist))))
            for key, dist in distributions.items() if key not in choices}
    sides = [{key: values[0] for key, values in ends.items()},
             {key: values[-1] for key, values in ends.items()}]
    if sides[0] == sides[1]:
        sides = sides[:1]
    if math.prod(len(values) for values in choices.values()) * len(sides) <= MAX_JOBS:
        jobs = [dict(zip(choices, combination)) | side
                for combination in itertools.product(*choices.values()) for side in sides]
    else:  # each value in one job at least, up to MAX_JOBS jobs (then spread over the values)
        values = choices | ends
        count = min(max(len(v) for v in values.values()), MAX_JOBS)
        jobs = [{key: v[round(i * (len(v) - 1) / max(count - 1, 1))] if len(v) > count
                 else v[i % len(v)] for key, v in values.items()} for i in range(count)]
    return [{key: job[key] for key in distributions} for job in jobs]


def _highest(dist: Any) -> Any:
    """The highest value a distribution gives: a range's last value, and for a continuous
    interval the float just below its end (Optuna samples [low, high); so interval(0.0, 1.0)
    fits a dropout rate, which 1.0 itself would not)."""
    from optuna.distributions import FloatDistribution

    if isinstance(dist, FloatDistribution) and dist.step is None and dist.high > dist.low:
        return math.nextafter(dist.high, dist.low)
    return dist.high


def check_job(config: DictConfig, loader: Any, overrides: list[str]) -> None:
    """One job of the sweep `config`, composed as the launcher will compose it and checked as
    a basic sweep's every job is (gradexp.sweep_checks.checked_job)."""
    from gradexp.sweep_checks import checked_job

    checked_job(config, loader, overrides)


def _with_its_sweep(line: str, job: dict[str, Any], space: Space) -> str:
    """A job's line names its value (`optimizer.learning_rate=0.0: must be a number > 0`); a
    value the person did not write (an interval's end) is said to be one of their sweep's."""
    for key, value in job.items():
        dist = space.distributions[key]
        if hasattr(dist, "low") and line.startswith(f"{key.lstrip('+~')}="):
            end = "low" if value == dist.low else "high"
            return f"{line} (the {end} end of {space.lines[key]}, which Optuna may choose)"
    return line
