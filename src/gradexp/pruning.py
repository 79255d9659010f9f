"""The study side of `sweep.pruner`: Optuna's pruners judging a sweep's jobs as they train.

    sweep start   a grid sweep (Hydra's basic sweeper): `start_study` makes an Optuna study in
                  a journal file beside the MLflow store (optuna.journal, the Optuna sweeper's
                  default storage too) and leaves where it is in the sweep folder
                  (PRUNING_FILE), where every job finds it, in this process or another
                  (joblib, Ray); each job asks the study for a trial of its own.
                  Our Optuna sweeper (hydra_plugins.gradexp_optuna) writes the same file with
                  the trial it asked for each job number (`write_pruning_file`).
    each job      `open_trial` (gradexp.callbacks.pruning calls it): the job's trial in that
                  study, judged by the pruner that sweep.pruner names; the job reports its
                  objective at each evaluation and stops when the pruner says so.
    packed jobs   hydra/launcher=packed with asha or hyperband (LOCKSTEP_PRUNERS): the launcher
                  opens each packed job's trial before training its group, the group reports
                  and judges at each evaluation (gradexp.packed.plan.GroupJudge), and the job's
                  run gets a `DecidedTrial` that stops its replay where the group stopped it.

The pruners are Optuna's (MedianPruner, PercentilePruner, SuccessiveHalvingPruner,
HyperbandPruner), not rules of ours. Optuna is imported only when a pruner is on.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

PRUNING_FILE = ".gradexp_pruning.json"  # in the sweep folder: where the study is, for the jobs
JOURNAL_FILE = "optuna.journal"  # the default study storage, beside mlflow.db


def pruner_name(cfg: DictConfig) -> str:
    """sweep.pruner's text ("none" when the config has no sweep block)."""
    value = OmegaConf.select(cfg, "sweep.pruner", default="none")
    return str(getattr(value, "value", value))


def build_pruner(cfg: DictConfig) -> Any:
    """Optuna's pruner for sweep.pruner, its resources in epochs: asha's first rung and
    hyperband's smallest budget at the first evaluation (a job is judged only where it is
    evaluated: eval.every), hyperband's largest at trainer.epochs."""
    import optuna

    from gradexp.callbacks.held_out import eval_epochs

    name, sweep = pruner_name(cfg), cfg.sweep
    first = min(eval_epochs(cfg))
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=sweep.pruner_startup_trials,
                                           n_warmup_steps=sweep.pruner_warmup_epochs)
    if name == "percentile":
        return optuna.pruners.PercentilePruner(float(sweep.pruner_percentile),
                                               n_startup_trials=sweep.pruner_startup_trials,
                                               n_warmup_steps=sweep.pruner_warmup_epochs)
    if name == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=first)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=first,
                                              max_resource=max(cfg.trainer.epochs, first))
    raise ValueError(f"sweep.pruner={name}: no pruner to build")


# ---------------------------------------------------------------- where the study is
def store_folder(config: DictConfig) -> Path:
    """The folder of the run's sqlite MLflow store; the launch folder for a server."""
    from gradexp.tracking_uri import sqlite_file

    uri = OmegaConf.select(config, "tracking.uri", default=None)
    launch = Path(config.hydra.runtime.cwd)
    database = sqlite_file(str(uri)) if uri else None
    return (launch / database).parent if database is not None else launch


def open_storage(storage: str | None, journal: str | None) -> Any:
    """An Optuna storage: a URL as given, or a journal file (safe across processes: the file
    backend locks it)."""
    if storage:
        return storage
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(journal)))


def write_pruning_file(sweep_dir: Path, study: str, *, storage: str | None = None,
                       journal: str | None = None,
                       trials: dict[int, int] | None = None) -> None:
    """Tell the sweep's jobs where their study is; `trials`: job number -> Optuna trial id, when
    the sweeper asks the trials (else each job asks its own). Written whole, then renamed, so a
    job never reads half of it."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"study": study, "storage": storage, "journal": journal,
                       "trials": None if trials is None
                       else {str(k): v for k, v in trials.items()}})
    part = sweep_dir / f"{PRUNING_FILE}.{os.getpid()}"
    part.write_text(text)
    part.replace(sweep_dir / PRUNING_FILE)


def start_study(config: DictConfig) -> None:
    """At the start of a grid sweep with a pruner: a new study for this sweep's jobs (a
    study per sweep: one sweep's jobs are judged against each other, not an earlier sweep's),
    named from what determines the sweep (`study_name`), so that the same sweep run again is
    judged the same way: HyperbandPruner puts a trial in its bracket by a hash of the study's
    name and the trial's number, which Optuna documents as the way to make it reproducible."""
    import optuna

    from gradexp.metrics import objective

    if pruner_name(config) == "none":
        return
    from gradexp.console import note_line

    idle = judges_nothing(config, _grid_size(config))  # the Optuna sweeper's too (QA)
    if idle is not None:
        note_line(idle)
    if _sweeper(config) == "OptunaSweeper":
        return  # the Optuna sweeper keeps its own study and writes the file itself
    journal = str(store_folder(config) / JOURNAL_FILE)
    storage = open_storage(None, journal)
    name = study_name(config)
    with _quiet_optuna():
        _set_aside(storage, name)
        optuna.create_study(study_name=name, storage=storage, direction=objective(config)[1])
    write_pruning_file(Path(config.hydra.sweep.dir), name, journal=journal)


def judges_nothing(cfg: DictConfig, jobs: int | None) -> str | None:
    """Why sweep.pruner can stop no job of this sweep, if it cannot: one line. Otherwise a
    sweep with a pruner that never judges looks like a sweep whose jobs were all worth
    finishing (the docs' own example did: 4 jobs, and median waits for 5 to finish)."""
    from gradexp.callbacks.held_out import eval_epochs

    name, sweep, epochs = pruner_name(cfg), cfg.sweep, cfg.trainer.epochs
    judged = sorted(e for e in eval_epochs(cfg) if e < epochs)  # the last epoch is not judged
    if name in ("median", "percentile"):
        judged = [e for e in judged if e >= sweep.pruner_warmup_epochs]
    why = _measured_at_the_end(cfg)
    if why is not None:
        return f"sweep.pruner={name} will stop no job: {why}"
    if not judged:
        every = cfg.eval.every or "null (about ten a run, at trainer.log_every)"
        why = (f"no evaluation before the last epoch is judged (trainer.epochs={epochs}, "
               f"eval.every={every}"
               + (f", sweep.pruner_warmup_epochs={sweep.pruner_warmup_epochs}"
                  if name in ("median", "percentile") else "")
               + "): evaluate more often (eval.every) or train longer")
    elif name in ("median", "percentile") and jobs is not None \
            and jobs <= sweep.pruner_startup_trials:
        why = (f"it judges a job only once sweep.pruner_startup_trials="
               f"{sweep.pruner_startup_trials} jobs have finished unpruned, and this sweep has "
               f"{jobs}: set sweep.pruner_startup_trials lower, or use asha")
    return None if why is None else f"sweep.pruner={name} will stop no job: {why}"


def _measured_at_the_end(cfg: DictConfig) -> str | None:
    """Why the objective a job reports is never there at an evaluation, if it is not: a job
    reports its sweep.objective at each held-out evaluation, where only train/ and val/
    metrics are measured (QA: final_loss, a test/ metric or data.n_val=0 never judged a job,
    and nothing said so)."""
    from gradexp.metrics import FALLBACK, missing_split, objective

    try:
        metric = objective(cfg)[0]
        missing = missing_split(cfg, metric)
    except Exception:  # noqa: BLE001 - only a note depends on it; the run's checks name it
        return None
    fix = "rank by a train/ or val/ metric (sweep.objective=auto, val/mse, val/accuracy)"
    if metric == FALLBACK:
        return f"sweep.objective={metric} is known only at a run's end, not at its " \
               f"evaluations: {fix}"
    if missing is not None:
        return (f"no run can measure sweep.objective={metric} ({missing}), so each job reports "
                f"its {FALLBACK}, known only at its end: give the runs held-out rows")
    if metric.partition("/")[0] not in ("train", "val"):
        return f"sweep.objective={metric} is measured only at a run's end, not at its " \
               f"evaluations: {fix}"
    return None


def _grid_size(config: DictConfig) -> int | None:
    """The number of jobs of a grid sweep (Hydra's basic sweeper), None if it cannot tell."""
    from gradexp.sweep_checks import grid_jobs

    try:
        jobs = grid_jobs(config)
    except Exception:  # noqa: BLE001 - only a note depends on it
        return None
    return None if jobs is None else len(jobs)


def study_name(config: DictConfig) -> str:
    """`<experiment>-pruning-<digest>`: the digest of what the sweep's command line asks, its
    overrides in their order (the grid, the order of its jobs, a master `seed=N`) and the
    sweeper's params; not of the time or the sweep's folder. The name needs only to repeat: a
    study per sweep is kept by `_set_aside` (two sweeps of one command line, its config files
    edited in between, get the same brackets, and studies of their own all the same)."""
    import hashlib

    params = OmegaConf.select(config, "hydra.sweeper.params", default=None)
    what = {"overrides": list(OmegaConf.select(config, "hydra.overrides.task", default=[])),
            "params": OmegaConf.to_container(params, resolve=False)
            if isinstance(params, DictConfig) else params}
    digest = hashlib.sha1(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    experiment = OmegaConf.select(config, "tracking.experiment", default="gradexp")
    return f"{experiment}-pruning-{digest[:12]}"


def _set_aside(storage: Any, name: str) -> None:
    """An earlier run of the same sweep left a study of this name: it is kept, copied under
    `<name>-earlier-<n>` (the first n free), and the name is freed for this run's new study
    (Optuna's own copy_study and delete_study; a study cannot be renamed)."""
    import optuna

    names = {summary.study_name for summary in optuna.get_all_study_summaries(storage)}
    if name not in names:
        return
    n = 1
    while f"{name}-earlier-{n}" in names:
        n += 1
    optuna.copy_study(from_study_name=name, from_storage=storage, to_storage=storage,
                      to_study_name=f"{name}-earlier-{n}")
    optuna.delete_study(study_name=name, storage=storage)


def _sweeper(config: DictConfig) -> str:
    return str(config.hydra.sweeper._target_).rsplit(".", 1)[-1]


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna's INFO lines (a study made) stay off the console while gradexp makes and opens
    its studies; then Optuna's verbosity is as it was (QA: a sweep left it at WARNING in the
    caller's Python session, whose own studies said nothing). Where our Optuna sweeper sends
    them to the sweep's optuna.log (a file handler), they go on there."""
    import logging

    import optuna

    if any(isinstance(h, logging.FileHandler) for h in logging.getLogger("optuna").handlers):
        yield
        return
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


# ---------------------------------------------------------------- a job's trial
@dataclass
class JobTrial:
    """One job's Optuna trial: reported to at each evaluation, told how the job ended."""

    trial: Any  # optuna.Trial
    owned: bool  # the job asked for it (a grid sweep), so the job also tells how it ended

    @property
    def number(self) -> int:
        return self.trial.number

    def judge(self, value: float, epoch: int, *, last: bool) -> bool:
        """Report the objective at `epoch`; True when the pruner stops the job here (never at
        the last epoch: a job that trained to the end is complete)."""
        self.trial.report(value, epoch)
        return not last and self.trial.should_prune()

    def tell(self, state: str, value: float | None = None) -> None:
        """PRUNED (always told by the job), COMPLETE or FAIL (told by the job only when it owns
        the trial: our Optuna sweeper tells its own)."""
        import optuna

        if state != "PRUNED" and not self.owned:
            return
        if state == "COMPLETE" and (value is None or not math.isfinite(value)):
            state = "FAIL"  # Optuna would refuse it and warn; a job without a value learns nothing
        study = self.trial.study
        states = optuna.trial.TrialState
        if state == "COMPLETE":
            study.tell(self.trial, value, skip_if_finished=True)
        else:
            study.tell(self.trial, state=states[state], skip_if_finished=True)


def fail_unfinished(trials: Iterable[JobTrial]) -> None:
    """FAIL to each of `trials` not yet told how it ended (a sweep stopped before their jobs
    did); trials our Optuna sweeper asked for are its to tell."""
    for trial in trials:
        trial.tell("FAIL")


class DecidedTrial(JobTrial):
    """A packed job's trial, reported to and judged in its group as it trained
    (gradexp.packed.plan, sweep.pruner=asha or hyperband): its replayed run stops where the
    group stopped it, and tells how it ended as any job does."""

    def __init__(self, trial: JobTrial, pruned_at: int | None):
        super().__init__(trial.trial, trial.owned)
        self.pruned_at = pruned_at

    def judge(self, value: float, epoch: int, *, last: bool) -> bool:
        return not last and epoch == self.pruned_at  # reported already, in the group


# Pruners that judge a job at a rung against the jobs that reached it (not the jobs finished):
# a packed group judges its jobs at each evaluation side by side, as a sequential sweep would
LOCKSTEP_PRUNERS = ("asha", "hyperband")


def open_trial(cfg: DictConfig, hydra_cfg: DictConfig | None = None) -> JobTrial | None:
    """This job's trial when it runs in a sweep with a pruner (None otherwise: a single run, or
    a sweep whose folder has no study); `hydra_cfg`: the job's Hydra config when it is not the
    one running (the packed launcher asks its groups' trials before their runs)."""
    if pruner_name(cfg) == "none":
        return None
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from gradexp.packed.replay import take_trial

    if hydra_cfg is None:
        decided = take_trial()
        if decided is not None:
            return decided
        if not HydraConfig.initialized():
            return None
        hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    found = Path(hydra_cfg.runtime.cwd) / hydra_cfg.sweep.dir / PRUNING_FILE
    if not found.is_file():
        return None
    import optuna

    where = json.loads(found.read_text())
    with _quiet_optuna():
        study = optuna.load_study(study_name=where["study"], pruner=build_pruner(cfg),
                                  storage=open_storage(where["storage"], where["journal"]))
        if where["trials"] is None:  # a grid sweep: the job asks for its trial
            return JobTrial(study.ask(), owned=True)
    asked = where["trials"].get(str(hydra_cfg.job.num))
    return None if asked is None else JobTrial(optuna.Trial(study, int(asked)), owned=False)
