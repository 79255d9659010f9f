"""`hydra/sweeper=optuna`: Optuna's ask-and-tell loop over Hydra's launcher.

Each batch of `n_jobs` trials is asked of the study, launched as Hydra jobs (any launcher: basic,
joblib, Ray, SLURM, packed, which trains a batch's trials of one shape in one program), and told
back: the job's returned objective for a job that finished, FAIL for one that failed or returned
no finite value (so samplers learn nothing from it). The study is
stored by default in a journal file beside the MLflow store, named from the experiment and the
search space, so running the same search again continues it with `n_trials` more (a grid study
only with the points it has not tried; study.py). With
sweep.pruner, the study judges its trials with Optuna's pruner and each job reports to its trial
(gradexp.pruning), telling it PRUNED when stopped."""


# No `from __future__ import annotations`: Hydra loads plugins without registering the module,
# and dataclasses then cannot resolve string annotations.
import hashlib
import json
import logging
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import MISSING, DictConfig, OmegaConf

from gradexp.pruning import build_pruner, pruner_name, write_pruning_file

from .search_space import grid, job_overrides, searched
from .study import grid_done_line, open_storage, study_label, untried_points

log = logging.getLogger(__name__)

RESULTS_FILE = "optimization_results.yaml"  # read by gradexp.sweeps for the parent run


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.gradexp_optuna.optuna_sweeper.OptunaSweeper"
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: Any = MISSING          # hydra/sweeper/sampler=tpe|random|cmaes|grid|nsgaii
    direction: Any = "${gradexp.direction:}"  # the sweep objective's own direction
    storage: Any = None             # an Optuna storage URL; null = a journal file beside mlflow.db
    study_name: Any = None          # null = the experiment and a digest of the search space
    n_trials: int = 20              # trials this sweep runs (a continued study runs this many more)
    n_jobs: int = 1                 # trials asked and launched at once (for a parallel launcher)
    params: Any = None              # the search space: key -> choice(...)|range(...)|interval(...)


# Built when the sweep starts (`_partial_`), so that a continued study's seeded sampler does not
# draw again the startup trials it already ran.
SAMPLERS = {
    "tpe": {"_target_": "optuna.samplers.TPESampler", "seed": None, "n_startup_trials": 10,
            "multivariate": False},
    "random": {"_target_": "optuna.samplers.RandomSampler", "seed": None},
    "cmaes": {"_target_": "optuna.samplers.CmaEsSampler", "seed": None},
    "nsgaii": {"_target_": "optuna.samplers.NSGAIISampler", "seed": None, "population_size": 50},
    "grid": {"_target_": "optuna.samplers.GridSampler", "seed": None},
}
for _node in SAMPLERS.values():
    _node["_partial_"] = True

ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf,
                             provider="gradexp")
for _name, _node in SAMPLERS.items():
    ConfigStore.instance().store(group="hydra/sweeper/sampler", name=_name, node=_node,
                                 provider="gradexp")


class OptunaSweeper(Sweeper):
    def __init__(self, sampler: Any, direction: Any, storage: Any, study_name: Any,
                 n_trials: int, n_jobs: int, params: Any) -> None:
        self.sampler = sampler
        self.direction = str(getattr(direction, "name", direction))
        self.storage = storage
        self.study_name = study_name
        self.n_trials = n_trials
        self.n_jobs = max(1, n_jobs)
        self.params = params or {}

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.config = config
        self.config_loader = hydra_context.config_loader  # a glob(...) of options lists them
        self.job_idx = 0
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function)

    def sweep(self, arguments: list[str]) -> None:
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        with _optuna_logs_to(sweep_dir / "optuna.log"):
            self._search(arguments, sweep_dir)

    def _search(self, arguments: list[str], sweep_dir: Path) -> None:
        import optuna

        # A value on the command line fixes a searched key. gradexp.sweeps checked this space,
        # and the study it continues, before the sweep's parent run opened (checks).
        distributions, fixed, _ = searched(self.params, arguments, self.config_loader)
        name = self.study_name or default_study_name(self.config, distributions, fixed,
                                                     self.direction)
        storage, where = open_storage(self.config, self.storage)
        before = _trials_so_far(storage, name)
        sampler, n_trials = self._sampler(distributions, before)
        pruning = pruner_name(self.config) != "none"  # sweep.pruner: jobs report, and stop
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                    direction=self.direction, load_if_exists=True,
                                    pruner=build_pruner(self.config) if pruning else None)
        if isinstance(sampler, optuna.samplers.GridSampler):
            # Only the points the study has not tried (QA: a continued grid study ran one
            # point again n_trials times, GridSampler warning only into optuna.log).
            n_trials = min(n_trials, untried_points(study, grid(distributions)))
            if n_trials == 0:  # the check before the parent run said so, unless it changed since
                from gradexp.console import note_line

                note_line(grid_done_line(study_label(self.config, name), math.prod(
                    len(v) for v in grid(distributions).values())))
        log.info(f"Optuna study {name} in {where}: {before} trials so far, {n_trials} to run "
                 f"({self.direction} the objective)")
        while n_trials > 0:
            batch: list[Any] = []
            try:
                for _ in range(min(self.n_jobs, n_trials)):
                    batch.append(_ask(study, distributions))
                self._run_batch(study, batch, fixed, name, where, sweep_dir)
            except BaseException:
                # Ctrl-C, SIGTERM, a job that stops the sweep, any error once a trial is asked:
                # the batch's trials are not left RUNNING in the study forever (a rerun of the
                # search continues it).
                for trial in batch:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
                raise
            n_trials -= len(batch)
        self._save_results(study, where, sweep_dir)

    def _run_batch(self, study: Any, batch: list, fixed: dict[str, str], name: str, where: str,
                   sweep_dir: Path) -> None:
        """Launch a batch of asked trials as Hydra jobs and tell the study how each ended."""
        import optuna

        overrides = [job_overrides(trial.params, fixed) for trial in batch]
        if pruner_name(self.config) != "none":  # each job finds its trial by its job number
            write_pruning_file(sweep_dir, name, storage=self.storage or None,
                               journal=None if self.storage else where,
                               trials={self.job_idx + i: trial._trial_id
                                       for i, trial in enumerate(batch)})
        returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
        first, self.job_idx = self.job_idx, self.job_idx + len(returns)
        try:  # a tag is a lead to a run, not the study: its trials are told whatever
            _tag_trial_runs(self.config, sweep_dir, batch, returns)
        except Exception as error:  # noqa: BLE001
            log.warning("the trials' runs could not be tagged (%s)", error)
        try:  # which reused runs were pruned: read from MLflow, a lead as the tags are
            pruned = _reused_pruned_runs(self.config, sweep_dir, range(first, self.job_idx))
        except Exception as error:  # noqa: BLE001 - the jobs ran: their trials are told anyway
            log.warning("the reused runs could not be read (%s)", error)
            pruned = {}
        for number, (trial, ret) in enumerate(zip(batch, returns), start=first):
            value = _objective(ret)
            try:
                # A job that a pruner stopped has told its trial PRUNED itself; a pruned run
                # that sweep.skip_finished reused is told so here, at the epoch it stopped
                # (QA: it was told COMPLETE, its early epoch's value a finished trial's).
                if value is None:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL,
                               skip_if_finished=True)
                elif number in pruned:
                    trial.report(value, pruned[number])
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED,
                               skip_if_finished=True)
                else:
                    study.tell(trial, value, skip_if_finished=True)
            except RuntimeError as error:
                # A GridSampler that has run its grid calls study.stop(), which only works
                # inside study.optimize; the trial is told by then.
                if "Study.stop" not in str(error):
                    raise

    def _sampler(self, distributions: dict[str, Any], before: int) -> tuple[Any, int]:
        """The sampler, its seed moved on by the trials a continued study already has."""
        import optuna

        build = self.sampler  # a functools.partial (`_partial_: True`)
        keywords = dict(build.keywords)
        if keywords.get("seed") is not None:
            keywords["seed"] += before
        if build.func is optuna.samplers.GridSampler:
            return build.func(grid(distributions), **keywords), self.n_trials
        return build.func(*build.args, **keywords), self.n_trials

    def _save_results(self, study: Any, where: str, sweep_dir: Path) -> None:
        results: dict[str, Any] = {"name": "optuna", "study_name": study.study_name,
                                   "storage": where, "n_trials": len(study.trials)}
        try:
            best = study.best_trial
        except ValueError:  # no trial finished
            log.warning(f"Optuna study {study.study_name}: no trial finished, so no best one")
        else:
            results |= {"best_params": best.params, "best_value": best.value,
                        "best_trial": best.number}
            log.info(f"Best parameters: {best.params}")
            log.info(f"Best value: {best.value} (trial {best.number} of the study)")
        OmegaConf.save(OmegaConf.create(results), sweep_dir / RESULTS_FILE)


def _ask(study: Any, distributions: dict[str, Any]) -> Any:
    """study.ask(distributions), and a trial Optuna made before it raised (a search space the
    study refuses, a sampler that cannot sample) told FAIL, not left RUNNING (QA). Optuna makes
    the trial before it samples and gives no handle to it then: it is the RUNNING trial that
    was not there before the ask."""
    import optuna

    running = optuna.trial.TrialState.RUNNING
    before = {trial.number for trial in study.get_trials(deepcopy=False, states=(running,))}
    try:
        return study.ask(distributions)
    except BaseException:
        for trial in study.get_trials(deepcopy=False, states=(running,)):
            if trial.number not in before:
                study.tell(trial.number, state=optuna.trial.TrialState.FAIL,
                           skip_if_finished=True)
        raise


def _reused_pruned_runs(config: DictConfig, sweep_dir: Path, numbers: Any) -> dict[int, int]:
    """Job number -> the epoch its run was pruned at, for each of the jobs `numbers` whose run
    sweep.skip_finished reused (the parent's tag gradexp.reused.<job number>) and a pruner had
    stopped (its tag gradexp.pruned_at_epoch)."""
    from gradexp.sweeps import parent_run_file

    parent_file = parent_run_file(sweep_dir)
    if not OmegaConf.select(config, "sweep.skip_finished", default=False) \
            or not parent_file.is_file():
        return {}
    from gradexp.mlflow_store import open_client, read_run
    from gradexp.tag_keys import PRUNED_TAG, REUSED_TAG
    from gradexp.tracking_uri import resolve_uri

    client = open_client(resolve_uri(config.tracking.uri, Path.cwd()))
    tags = read_run(client, parent_file.read_text().strip()).data.tags
    pruned = {}
    for number in numbers:
        reused = tags.get(f"{REUSED_TAG}{number}")
        if reused is not None:
            epoch = read_run(client, reused).data.tags.get(PRUNED_TAG)
            if epoch is not None:
                pruned[number] = int(epoch)
    return pruned


def _trials_so_far(storage: Any, name: str) -> int:
    import optuna

    try:
        return len(optuna.load_study(study_name=name, storage=storage).trials)
    except KeyError:  # no such study yet
        return 0


def _tag_trial_runs(config: DictConfig, sweep_dir: Path, batch: list, returns: Any) -> None:
    """Each job's child run gets its trial's number in the study (OPTUNA_TRIAL_TAG): a continued
    study's best trial (the parent's gradexp.optuna.best_trial) may be an earlier sweep's, and
    only this tag leads from a trial to its run. The sweeper cannot ask a job for its run id
    (a job returns its objective, in this process or another), so a job's run is found among
    the parent's untagged children by the name the job gave it (gradexp.app: tracking.run_name,
    else its swept overrides); runs of one name (a value chosen twice) in the order they
    started, the jobs' order on a sequential launcher. A reused run (sweep.skip_finished) is an
    earlier sweep's and keeps its tags; a job that failed before its run opened has none."""
    from gradexp.mlflow_store import find_runs, open_client, read_run, tag_run
    from gradexp.run_params import masked_dirname
    from gradexp.sweeps import child_run_name, parent_run_file
    from gradexp.tag_keys import OPTUNA_TRIAL_TAG, PARENT_TAG
    from gradexp.tracking_uri import resolve_uri

    parent_file = parent_run_file(sweep_dir)
    if not parent_file.is_file():
        return  # tracking=none: no runs to tag
    parent_id = parent_file.read_text().strip()
    client = open_client(resolve_uri(config.tracking.uri, Path.cwd()))
    experiment = read_run(client, parent_id).info.experiment_id
    children = find_runs(client, [experiment], f"tags.`{PARENT_TAG}` = '{parent_id}'",
                         order_by=["attributes.start_time ASC"], max_results=10_000)
    untagged: dict[str, list[str]] = {}
    for run in children:
        if OPTUNA_TRIAL_TAG not in run.data.tags:
            untagged.setdefault(run.info.run_name or "", []).append(run.info.run_id)
    for trial, ret in zip(batch, returns):
        if ret.hydra_cfg is None or ret.cfg is None:
            continue
        hydra_cfg = ret.hydra_cfg.hydra
        name = (OmegaConf.select(ret.cfg, "tracking.run_name") or
                child_run_name(hydra_cfg, sweep_dir) or masked_dirname(hydra_cfg)
                or "defaults")
        if untagged.get(name):
            tag_run(client, untagged[name].pop(0), {OPTUNA_TRIAL_TAG: trial.number})


def _objective(ret: Any) -> float | None:
    """A finished job's finite objective, else None (Optuna is told the trial failed)."""
    if ret.status != JobStatus.COMPLETED:
        return None
    try:
        value = float(ret.return_value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def default_study_name(config: DictConfig, distributions: dict[str, Any], fixed: dict[str, str],
                       direction: str) -> str:
    """The experiment, then a digest of what is searched: the same search continues its study,
    another search (other keys, ranges, fixed values or direction) starts its own."""
    from optuna.distributions import distribution_to_json

    space = {"search": {key: distribution_to_json(d) for key, d in sorted(distributions.items())},
             "fixed": dict(sorted(fixed.items())), "direction": direction,
             "overrides": sorted(OmegaConf.select(config, "hydra.overrides.task", default=[]))}
    digest = hashlib.sha1(json.dumps(space, sort_keys=True).encode()).hexdigest()[:10]
    experiment = OmegaConf.select(config, "tracking.experiment", default="gradexp")
    return f"{experiment}-{digest}"


@contextmanager
def _optuna_logs_to(path: Path) -> Iterator[None]:
    """Optuna's INFO lines (one per trial) go to the sweep's folder, not the console, while the
    sweep runs; then Optuna's logger is as it was (in a Python session, gradexp.sweep left it
    writing the person's own studies' lines into the first sweep's file, a handler a sweep)."""
    import optuna

    logger = logging.getLogger("optuna")
    handlers, propagate, level = logger.handlers[:], logger.propagate, logger.level
    optuna.logging.disable_default_handler()
    logger.propagate = False
    to_file = logging.FileHandler(path)
    logger.addHandler(to_file)
    # Its warnings (GridSampler re-evaluating a point, a value it ignores) reach the console too
    # (QA: they went only into optuna.log).
    to_console = logging.StreamHandler(sys.stderr)
    to_console.setLevel(logging.WARNING)
    to_console.setFormatter(logging.Formatter("warning: Optuna: %(message)s"))
    logger.addHandler(to_console)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(to_file)
        logger.removeHandler(to_console)
        to_file.close()
        logger.handlers[:] = handlers  # Optuna's default handler among them, if it was
        logger.propagate, logger.level = propagate, level
