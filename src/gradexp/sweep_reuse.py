"""sweep.skip_finished and sweep.resume_killed: a sweep's job finds its run of an earlier sweep,
the same resolved config FINISHED (its objective stands for the job) or KILLED with a
checkpoint (the job resumes it), and notes it on the new sweep's parent. The same config: the
same params, and where MLflow cut a value to its limit, the same whole value in the run's
config.yaml."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from gradexp.metrics import objective
from gradexp.sweeps import child_run_name, parent_run_file, tracking_off
from gradexp.tag_keys import PARENT_TAG, PRUNED_TAG, REUSED_TAG


def _what_a_job_computes(params: Mapping[str, str]) -> dict[str, str]:
    """Params without sweep.* (those steer the sweep, e.g. skip_finished itself, not the job)."""
    return {key: value for key, value in params.items() if not key.startswith("sweep.")}


def _pruner_settings(params: Mapping[str, str]) -> dict[str, str]:
    """sweep.pruner and its settings (sweep.pruner_*), as a run recorded them."""
    return {key: value for key, value in params.items() if key.startswith("sweep.pruner")}


def _reusable(run, params: Mapping[str, str]) -> bool:
    """A pruned run (tag gradexp.pruned_at_epoch) stopped before its last epoch: it stands for
    its job only in a sweep that would prune it the same way (the same sweep.pruner settings).
    A sweep without that pruner, or another, trains the job to the end instead."""
    return (PRUNED_TAG not in run.data.tags
            or _pruner_settings(run.data.params) == _pruner_settings(params))


def will_reuse(cfg: DictConfig, launch_dir: Path) -> bool:
    """Whether this job's task config will reuse a FINISHED run (sweep.skip_finished): a packed
    sweep trains no program for it (it trained, and was labelled "(packed)", before)."""
    return _finished_run(cfg, launch_dir)[1] is not None


def _finished_run(cfg: DictConfig, launch_dir: Path) -> tuple[Any, Any]:
    """(the store's client, the FINISHED child run with this job's resolved config, the newest)
    under sweep.skip_finished; (None, None) when skipping or tracking is off, or no run is."""
    if not cfg.sweep.skip_finished or tracking_off(cfg):
        return None, None
    from gradexp.mlflow_store import open_client
    from gradexp.run_params import as_recorded, config_values
    from gradexp.tracking_uri import resolve_uri

    client = open_client(resolve_uri(cfg.tracking.uri, launch_dir))
    # The params as run_experiment logs them (derived seeds, a user's _target_ as loss.name),
    # whole: find_finished_run cuts them as MLflow did.
    return client, find_finished_run(client, cfg.tracking.experiment,
                                     config_values(as_recorded(cfg)))


def reuse_finished_run(cfg: DictConfig, hydra_cfg: DictConfig) -> float | None:
    """With sweep.skip_finished=true: the objective (else the final loss) of a FINISHED child run
    with this job's resolved config in the experiment (the newest), after noting it on the
    sweep's parent run.
    None means "run the job": skipping is off, tracking is off, or no such run exists."""
    from gradexp.console import console
    from gradexp.run_params import masked_dirname

    launch_dir = Path(hydra_cfg.runtime.cwd)
    client, run = _finished_run(cfg, launch_dir)
    if run is None:
        return None
    _note_reused(client, launch_dir, hydra_cfg, run.info.run_id)
    metric = objective(cfg)[0]
    value = run.data.metrics.get(metric, run.data.metrics["final_loss"])
    # named as its child run would be: by the swept keys only (QA: every override)
    sweep_dir = Path(hydra_cfg.runtime.cwd) / hydra_cfg.sweep.dir
    name = child_run_name(hydra_cfg, sweep_dir) or masked_dirname(hydra_cfg) or "defaults"
    console().print(f"skipped {name}: the same config "
                    f"FINISHED as run {run.info.run_id} ({metric} {value:.6g}); "
                    "sweep.skip_finished=true", highlight=False)
    return value


def resume_killed_run(cfg: DictConfig, hydra_cfg: DictConfig) -> DictConfig:
    """With sweep.resume_killed=true: this job's config set to resume (trainer.resume) the newest
    KILLED child run with its resolved config, when that run left a checkpoint; the config
    unchanged otherwise. The run it continues is noted on the new parent, as a reused one."""
    from omegaconf import open_dict

    from gradexp.mlflow_store import open_client
    from gradexp.resume import checkpoint_folder
    from gradexp.run_params import as_recorded, config_values
    from gradexp.tracking_uri import resolve_uri

    if not cfg.sweep.resume_killed or tracking_off(cfg) or cfg.trainer.resume:
        return cfg
    launch_dir = Path(hydra_cfg.runtime.cwd)
    client = open_client(resolve_uri(cfg.tracking.uri, launch_dir))
    params = config_values(as_recorded(cfg))  # the params as the run recorded them, whole
    run = find_finished_run(client, cfg.tracking.experiment, params, status="KILLED")
    if run is None or not any(checkpoint_folder(launch_dir, run.info.run_id).glob("ckpt-*")):
        return cfg
    _note_reused(client, launch_dir, hydra_cfg, run.info.run_id)
    resumed = cfg.copy()
    with open_dict(resumed):
        resumed.trainer.resume = run.info.run_id
    return resumed


def _note_reused(client, launch_dir: Path, hydra_cfg: DictConfig, run_id: str) -> None:
    """Tag the sweep's parent with a run of an earlier sweep that this job reuses."""
    from gradexp.mlflow_store import tag_run

    parent = parent_run_file(launch_dir / hydra_cfg.sweep.dir)
    if parent.exists():
        tag_run(client, parent.read_text().strip(), {f"{REUSED_TAG}{hydra_cfg.job.num}": run_id})


def find_finished_run(client, experiment: str, params: Mapping[str, str],
                      status: str = "FINISHED"):
    """The newest child run of `experiment` in `status` whose params are `params` (sweep.*
    aside) and, when FINISHED, which has a finite final loss and, when pruned, `params`'
    sweep.pruner settings (_reusable); None if there is none. `params` may hold whole values
    (run_params.config_values): one longer than MLflow's limit matches a run whose param holds
    its start only if the run's config.yaml holds it whole (_same_whole_values)."""
    from gradexp.mlflow_store import MAX_PARAM_LENGTH, experiment_named, find_runs
    from gradexp.run_params import cut_params

    found = experiment_named(client, experiment)
    if found is None:
        return None
    whole = _what_a_job_computes(params)
    wanted = cut_params(whole)  # as the runs' params hold them
    # QA: matched on their first 6000 characters, a run of another +data.kwargs.cols stood
    # for this job, its val/mse reported as this config's.
    cut = {key: value for key, value in whole.items() if len(value) > MAX_PARAM_LENGTH}
    page_token = None
    while True:
        page = find_runs(client, [found.experiment_id], f"attributes.status = '{status}'",
                         page_token=page_token)  # newest first
        for run in page:
            loss = run.data.metrics.get("final_loss", math.nan if status == "FINISHED" else 0.0)
            if (PARENT_TAG in run.data.tags and math.isfinite(loss)
                    and _what_a_job_computes(run.data.params) == wanted
                    and _reusable(run, cut_params(params))
                    and _same_whole_values(client, run.info.run_id, cut)):
                return run
        page_token = page.token
        if not page_token:
            return None


def _same_whole_values(client, run_id: str, cut: Mapping[str, str]) -> bool:
    """Whether the run's config.yaml (the resolved config it ran, written when it opened) holds
    the whole values `cut` (key -> value longer than a param holds). Its params hold only their
    starts; a run without a readable config.yaml cannot be told apart, so it is not the job's."""
    if not cut:
        return True
    from omegaconf import OmegaConf

    from gradexp.mlflow_store import download_artifact
    from gradexp.run_params import config_values

    try:
        text = Path(download_artifact(client, run_id, "config.yaml")).read_text()
        recorded = config_values(OmegaConf.create(text))
    except Exception:  # noqa: BLE001 - MLflow raises its own kinds for a missing artifact
        return False
    return all(recorded.get(key) == value for key, value in cut.items())
