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

The pruners are Optuna's (MedianPruner, PercentilePruner, SuccessiveHalvingPruner,
HyperbandPruner), not rules of ours. Optuna is imported only when a pruner is on.
"""

from __future__ import annotations

import json
import math
import os
import uuid
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
    uri = OmegaConf.select(config, "tracking.uri", default=None)
    launch = Path(config.hydra.runtime.cwd)
    if uri and str(uri).startswith("sqlite:///"):
        return (launch / str(uri)[len("sqlite:///"):]).parent
    return launch


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
    study per sweep: one sweep's jobs are judged against each other, not an earlier sweep's)."""
    import optuna

    from gradexp.metrics import objective

    if pruner_name(config) == "none" or _sweeper(config) == "OptunaSweeper":
        return  # the Optuna sweeper keeps its own study and writes the file itself
    _quiet_optuna()
    journal = str(store_folder(config) / JOURNAL_FILE)
    experiment = OmegaConf.select(config, "tracking.experiment", default="gradexp")
    name = f"{experiment}-pruning-{uuid.uuid4().hex[:12]}"
    optuna.create_study(study_name=name, storage=open_storage(None, journal),
                        direction=objective(config)[1])
    write_pruning_file(Path(config.hydra.sweep.dir), name, journal=journal)


def _sweeper(config: DictConfig) -> str:
    return str(config.hydra.sweeper._target_).rsplit(".", 1)[-1]


def _quiet_optuna() -> None:
    """Optuna's INFO lines (a study made, a trial pruned) stay off the console; where our
    Optuna sweeper sends them to the sweep's optuna.log (a file handler), they go on there."""
    import logging

    import optuna

    if not any(isinstance(h, logging.FileHandler) for h in logging.getLogger("optuna").handlers):
        optuna.logging.set_verbosity(optuna.logging.WARNING)


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


def open_trial(cfg: DictConfig) -> JobTrial | None:
    """This job's trial when it runs in a sweep with a pruner (None otherwise: a single run, or
    a sweep whose folder has no study)."""
    if pruner_name(cfg) == "none":
        return None
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    found = Path(hydra_cfg.runtime.cwd) / hydra_cfg.sweep.dir / PRUNING_FILE
    if not found.is_file():
        return None
    import optuna

    _quiet_optuna()
    where = json.loads(found.read_text())
    study = optuna.load_study(study_name=where["study"], pruner=build_pruner(cfg),
                              storage=open_storage(where["storage"], where["journal"]))
    if where["trials"] is None:  # a grid sweep: the job asks for its trial
        return JobTrial(study.ask(), owned=True)
    asked = where["trials"].get(str(hydra_cfg.job.num))
    return None if asked is None else JobTrial(optuna.Trial(study, int(asked)), owned=False)
