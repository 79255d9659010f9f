"""A sweep's checks before its parent run opens (gradexp.sweeps' callback runs them): every job
composed and checked as its run would be, the optimizing sweeper's direction, the objective
every job must log, and the keys the summary groups by. A mistake every job would make ends
here in one line, before any run exists.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from gradexp.metrics import objective


def plugin_name(node: DictConfig) -> str:
    """OptunaSweeper, JoblibLauncher, RayLauncher, ... (the class name of a sweeper or launcher)."""
    return str(node._target_).rsplit(".", 1)[-1]


def check_sweeper_direction(config: DictConfig) -> None:
    """An optimizing sweeper (Optuna) must push the objective the right way: maximizing a
    val/mse, or minimizing a val/accuracy, would search for the worst run; so would maximizing
    the final_loss each job returns when the config leaves no run its objective (data.n_val=0)."""
    from gradexp.metrics import FALLBACK, missing_split, sweeper_direction
    from gradexp.schema import ConfigError

    wanted = OmegaConf.select(config, "hydra.sweeper.direction", default=None)
    if wanted is None:
        return  # the basic sweeper runs every job; nothing is optimized
    # QA: a misspelt direction (minimise) or a list of two was said to contradict the objective
    if isinstance(wanted, ListConfig | list | tuple):
        raise ConfigError(
            f"hydra.sweeper.direction=[{','.join(str(d) for d in wanted)}]: a multi-objective "
            "search is not supported; the sweeper optimizes one objective, sweep.objective: "
            "give one direction, minimize or maximize, or leave it to the objective's own "
            "(the default, '${gradexp.direction:}')")
    written = str(getattr(wanted, "name", wanted))
    if written.lower() not in ("minimize", "maximize"):
        raise ConfigError(
            f"hydra.sweeper.direction={written}: {written} is not a direction; accepted: "
            "minimize, maximize (the default, '${gradexp.direction:}', is sweep.objective's own)")
    metric, direction = objective(config)
    wanted = written.lower()
    if wanted == sweeper_direction(config):
        return
    missing = missing_split(config, metric)
    if missing:  # each job hands the sweeper its final_loss instead
        raise ConfigError(
            f"hydra.sweeper.direction={wanted}, but no run can log sweep.objective {metric} "
            f"({missing}), so each job returns its {FALLBACK}, which is to "
            "minimize: set hydra.sweeper.direction='${gradexp.direction:}', or give the runs "
            "held-out rows")
    raise ConfigError(
        f"hydra.sweeper.direction={wanted}, but sweep.objective {metric} is to {direction}: "
        "set hydra.sweeper.direction='${gradexp.direction:}' (or sweep.direction)")


def check_launcher(config: DictConfig) -> None:
    """hydra.sweep.dir can be made. hydra/launcher=packed: `hydra.launcher.processes` counts
    the processes that run its jobs, this one included, so it is 1 or more, and at most the
    machine's cores (2 on a machine of fewer). hydra/launcher=
    joblib: `hydra.launcher.n_jobs` is not 0. hydra/launcher=ray or ray_cluster: the Ray the
    jobs would run on answers, and plain `ray` would not join a running cluster (QA: a
    traceback and a KILLED parent, or minutes of hanging: gradexp.launcher_checks)."""
    from gradexp.launcher_checks import check_joblib_launcher, check_sweep_dir
    from gradexp.schema import ConfigError

    check_sweep_dir(config)
    if plugin_name(config.hydra.launcher) == "JoblibLauncher":
        check_joblib_launcher(config)
    if plugin_name(config.hydra.launcher) == "RayLauncher":
        from gradexp.launcher_checks import check_ray_launcher

        check_ray_launcher(config)
    processes = OmegaConf.select(config, "hydra.launcher.processes", default=None)
    if plugin_name(config.hydra.launcher) == "PackedLauncher" and processes is not None:
        cores = os.cpu_count() or 1
        if processes < 1:
            raise ConfigError(
                f"hydra.launcher.processes={processes}: the processes that run a packed sweep's "
                "jobs, this one included, are 1 or more (1, the default: this one alone)")
        if processes > max(cores, 2):  # QA: 999 started 998 helpers of ~0.6 GB each
            raise ConfigError(
                f"hydra.launcher.processes={processes}: at most {max(cores, 2)} here, this "
                f"machine's cores ({cores}): a job's replay keeps a core busy, so more processes "
                "than cores only take turns, each holding ~0.6 GB")


def check_search(config: DictConfig) -> None:
    """A sweeper that searches (Optuna) needs something to search: with no key swept, each of
    its trials is the same run. And it takes `seed=0,1,2` as one more hyperparameter: it tunes
    the seed, each trial one seed, and reports the luckiest as the best parameters. Replicates
    (sweep.aggregate_over, default [seed]) are a grid's, so an optimizing sweeper is refused
    them in one line."""
    from gradexp.schema import ConfigError

    name = plugin_name(config.hydra.sweeper)
    if name == "BasicSweeper":
        return
    if not swept_keys(config):  # each trial the same config: n_trials copies of one run
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = list(OmegaConf.select(config, "hydra.sweeper.params", default=None) or {})
        fixes = [o.input_line for o in OverridesParser.create().parse_overrides(
            list(config.hydra.overrides.task)) if o.key_or_group in params]
        why = ("hydra.sweeper.params is empty" if not params else
               f"the command line's {', '.join(fixes)} fixes what hydra.sweeper.params searches"
               if fixes else "hydra.sweeper.params holds no search")
        raise ConfigError(
            f"{name} has nothing to search: no key is swept ({why} and no override is a "
            "range): give it one, e.g. 'optimizer.learning_rate=tag(log, interval(0.0001, "
            "0.5))'")
    over = OmegaConf.select(config, "sweep.aggregate_over", default=None)
    over = ["seed"] if over is None else [str(key) for key in over]
    replicated = [key for key in swept_keys(config) if key.lstrip("+~") in over]
    if replicated:
        key = replicated[0].lstrip("+~")
        raise ConfigError(
            f"{key} is swept under {name}, which would tune it as a hyperparameter (each trial "
            f"one {key}, the luckiest reported as the best), not repeat each trial over it as "
            f"replicates (sweep.aggregate_over): fix {key}=N for the search, or sweep the "
            f"replicates with the basic sweeper (-m {key}=0,1,2 and a grid of values)")


def check_every_job(config: DictConfig) -> dict[str, bool]:
    """Compose each job of a basic sweep as Hydra will (its overrides and hydra.sweeper.params)
    and check it as its run would before TensorFlow loads: `-m optimizer=sgd,adamm` ends here,
    in one line, before the parent run or any child exists; so does a sweep.objective that no
    job logs (`val/msee`, or val/accuracy on a regression), which every job would fail on. The
    Optuna sweeper's search is checked by hydra_plugins.gradexp_optuna.checks, each value it may
    choose through checked_job too.

    Returns the keys of the jobs' configs (config_keys), {} when the jobs were not composed."""
    from hydra.core.global_hydra import GlobalHydra

    from gradexp.metrics import task_of

    jobs = grid_jobs(config)
    if jobs is None:
        return {}
    loader = GlobalHydra.instance().config_loader()
    keys: dict[str, bool] = {}
    tasks: dict[str, str] = {}  # each task's first job, as its swept overrides
    swept = set(swept_keys(config))
    for job in jobs:
        job_cfg = checked_job(config, loader, job)
        if task_is_the_configs(job_cfg):
            tasks.setdefault(task_of(job_cfg.data), ",".join(
                o for o in job if o.split("=")[0].lstrip("+~") in swept))
        keys.update(config_keys(job_cfg))
    _warn_of_mixed_tasks(config, tasks)
    return keys


def grid_jobs(config: DictConfig) -> list[list[str]] | None:
    """The overrides of each job of a basic sweep (hydra.sweeper.params, then the command
    line's), in Hydra's order; None for another sweeper, or outside a Hydra launch."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if plugin_name(config.hydra.sweeper) != "BasicSweeper" \
            or not GlobalHydra.instance().is_initialized():
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    parsed = OverridesParser.create(
        config_loader=GlobalHydra.instance().config_loader()).parse_overrides(
        [*(f"{key}={value}" for key, value in params.items()), *config.hydra.overrides.task])
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def checked_job(config: DictConfig, loader: Any, overrides: list[str]) -> DictConfig:
    """One job of the sweep `config` composed as the launcher will compose it (kept: the sweeper
    and the launcher ask for it again, gradexp.sweep_configs) and checked as its run would check
    it before TensorFlow loads; its config as the job's task sees it. A ConfigError (one line)
    for a mistake. The basic sweeper's every job, and each value an Optuna search may choose
    (hydra_plugins.gradexp_optuna.checks)."""
    from gradexp.callbacks import check_jobs_kept
    from gradexp.config_checks import check_ranges
    from gradexp.config_errors import is_config_error, one_line
    from gradexp.metrics import check_monitor, check_objective, missing_split, task_of
    from gradexp.schema import ConfigError
    from gradexp.setup_checks import check_config
    from gradexp.sweep_configs import compose_job
    from gradexp.user_code import check_modules_exist

    try:
        job_cfg = compose_job(loader, config, overrides)  # as the job's task sees it
    except Exception as error:  # GROUP=null is Hydra's ValueError (QA)
        if not is_config_error(error, overrides):
            raise
        raise ConfigError(one_line(error, overrides)) from None
    check_ranges(job_cfg)
    check_modules_exist(job_cfg, Path.cwd())
    check_config(job_cfg)
    check_jobs_kept(job_cfg, sweep=True)  # its pruner and objective read held-out metrics
    if task_is_the_configs(job_cfg):
        check_objective(job_cfg, task_of(job_cfg.data))
        # the monitor's name, before any data loads; a config that holds out no validation
        # rows (data.n_val=0) has train/ metrics only, as its run finds (QA: every job failed
        # on early stopping's val/ monitor, the parent FAILED, where one run was refused)
        splits = ("train",) if missing_split(job_cfg, "val/") else ("train", "val")
        check_monitor(job_cfg, task_of(job_cfg.data), splits)
    return job_cfg


def _warn_of_mixed_tasks(config: DictConfig, tasks: dict[str, str]) -> None:
    """sweep.objective=auto is the launch config's task's objective (val/mse for a regression,
    val/accuracy for a classification): jobs of the other task do not log it and rank last, so
    say so in one line (the runs stand; each is recorded in full)."""
    from gradexp.console import console
    from gradexp.metrics import DEFAULT_OBJECTIVE

    if config.sweep.objective != "auto" or len(tasks) < 2:
        return
    metric, _ = objective(config)
    others = [f"{task} jobs (e.g. {job})" for task, job in sorted(tasks.items())
              if DEFAULT_OBJECTIVE[task] != metric]
    console().print(f"[yellow]warning:[/yellow] this sweep's jobs are of {len(tasks)} tasks: "
                    f"sweep.objective=auto ranks them by {metric}, which its "
                    f"{', '.join(others)} do not log: they rank last. Sweep one task at a "
                    "time to rank each by its own objective", highlight=False)


def check_shared_objective(config: DictConfig) -> None:
    """For a sweeper whose jobs are not composed up front (Optuna): when the sweep varies
    nothing that decides which metrics a run logs (data.*, eval.*, sweep.*), every job would
    fail on the same sweep.objective, so the launch config answers for all of them."""
    from gradexp.metrics import check_objective, task_of

    if task_is_the_configs(config) and not any(
            key.split(".")[0].lstrip("+~") in ("data", "eval", "sweep", "experiment")
            for key in swept_keys(config)):
        check_objective(config, task_of(config.data))


def task_is_the_configs(config: DictConfig) -> bool:
    """Whether the data's task (which decides the metrics a run logs) is known before the data
    loads: it is the config's (data.task, a scikit-learn set's own) for gradexp's data options,
    but a person's loader may return a gradexp.data.Dataset of its own task."""
    return str(config.data.get("_target_", "")).startswith(f"{__package__}.")


def config_keys(config: DictConfig, prefix: str = "") -> dict[str, bool]:
    """Every key of a config, dotted (`optimizer`, `optimizer.name`, `seed`): True for a value,
    False for a group of keys; hydra.* left out."""
    keys: dict[str, bool] = {}
    for key in config.keys():
        if prefix == "" and key == "hydra":
            continue
        node = config._get_node(key)
        keys[f"{prefix}{key}"] = not isinstance(node, DictConfig)
        if isinstance(node, DictConfig) and not OmegaConf.is_missing(config, key):
            keys.update(config_keys(node, f"{prefix}{key}."))
    return keys


def check_summary_keys(config: DictConfig, keys: Mapping[str, bool],
                       searched: Sequence[str] = ()) -> None:
    """sweep.best_per and sweep.aggregate_over name keys of the jobs' configs (`keys`, from
    config_keys): a typo would print an empty table or group nothing, and say so nowhere.
    best_per reads each run's params, so it needs a value's key (optimizer.name, not the group
    optimizer); aggregate_over may name a group too (optimizer: its option), and need not be
    swept (its default [seed] groups nothing when seed is not). `searched`: the keys a sweeper
    that chooses its jobs as it runs (Optuna) searches, whose jobs are not composed up front:
    anything under them may exist in its jobs only."""
    from gradexp.config_checks import closest_key
    from gradexp.schema import ConfigError

    values = sorted(key for key, leaf in keys.items() if leaf)
    for setting, wanted, accepted in (("best_per", config.sweep.best_per, values),
                                      ("aggregate_over", config.sweep.aggregate_over,
                                       sorted(keys))):
        for key in wanted:
            if key in accepted or any(str(key) == k or str(key).startswith(f"{k}.")
                                      for k in (s.lstrip("+~") for s in searched)):
                continue
            shown = f"sweep.{setting}=[{','.join(str(k) for k in wanted)}]"
            if key in keys:  # a group, for best_per
                inside = [k for k in values if k.startswith(f"{key}.")]
                raise ConfigError(f"{shown}: {key} is a group of keys; name one of its values, "
                                  f"e.g. {f'{key}.name' if f'{key}.name' in inside else inside[0]}")
            hint = closest_key(str(key), accepted)
            raise ConfigError(f"{shown}: {key} is not a key of the config; name keys of the "
                              "composed config (`--cfg job` lists them), e.g. optimizer.name, "
                              "optimizer.learning_rate, seed"
                              + (f"; did you mean {hint}?" if hint else ""))


def swept_keys(config: DictConfig) -> list[str]:
    """The keys or groups a sweep varies: its comma/range overrides and hydra.sweeper.params,
    less those a plain value on the command line fixes (QA: `experiment=lr_search -m
    optimizer.learning_rate=0.1` under Optuna ran n_trials copies of one run, its only searched
    key counted as swept). The last override of a key decides, as Hydra's sweepers read them:
    hydra.sweeper.params first, then the command line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    try:
        from_params = parser.parse_overrides([f"{key}={value}" for key, value in params.items()])
    except Exception:  # noqa: BLE001 - the sweeper's own check names an unreadable search
        from_params = []
    swept: dict[str, tuple[str, bool]] = {key.lstrip("+~"): (key, True) for key in params}
    for override in [*from_params, *parser.parse_overrides(list(config.hydra.overrides.task))]:
        key = override.key_or_group
        swept[key.lstrip("+~")] = (key, override.is_sweep_override())
    return sorted(key for key, is_swept in swept.values() if is_swept)
