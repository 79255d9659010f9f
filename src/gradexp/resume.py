"""`trainer.resume=RUN_ID`: continue a run from its last checkpoint, as the same MLflow run.

The run's recorded config (its config.yaml artifact, written when the run started) is what runs
again, to its recorded trainer.epochs; from the command line only a larger `trainer.epochs` is
taken, to train on (then written into config.yaml and tag gradexp.resumed_to_epoch: the param
keeps the first value), and the store to find the run in. Any other override that changes a
recorded value is refused in one line before the run is touched: it would otherwise be ignored
without a word. The checkpoint (model, its layers' seed generators such as dropout's, optimizer
state, epoch, shuffling generator: gradexp.trainer.Trainer.checkpoint) is in
checkpoints/RUN_ID/ in the launch folder; metrics already recorded are not written twice
(gradexp.mlflow_store). A run KILLED before its first checkpoint (kill -9: gradexp.liveness
marks it) starts again from epoch 0 as a new run, tagged gradexp.restart_of=RUN_ID; one KILLED
with its checkpoint at its last epoch trains nothing more and only records its end.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from gradexp.schema import ConfigError
from gradexp.tag_keys import STOPPED_EARLY_TAG

CHECKPOINTS = "checkpoints"


def checkpoint_folder(launch_dir: Path, run_id: str) -> Path:
    return launch_dir / CHECKPOINTS / run_id


@dataclass
class Resume:
    run_id: str
    cfg: DictConfig  # the recorded config, trainer.resume set, trainer.epochs perhaps raised
    folder: Path
    checkpoint: str | None = None  # the checkpoint it continues from (its path prefix)
    earlier_checks: int = 0  # gradient checks the run made up to its checkpoint
    restart: bool = False  # KILLED before its first checkpoint: a new run from epoch 0
    run_name: str | None = None  # the killed run's name, which its restart takes
    # The recorded config.yaml with trainer.epochs raised (None: not raised), which replaces
    # the run's: its param trainer.epochs cannot change, and a later resume reads this file.
    raised_config: str | None = None

    def restore(self, trainer) -> dict[str, dict]:
        """Put the trainer back where the checkpoint left it; returns the callbacks' states
        saved with it (save_states), {} for none."""
        import tensorflow as tf

        trainer.checkpoint().restore(tf.train.latest_checkpoint(str(self.folder))).expect_partial()
        trainer.epoch = int(trainer.epoch_variable.numpy())
        return load_states(self.folder, trainer.epoch)


def _states_file(folder: Path, epoch: int) -> Path:
    return folder / f"callbacks-{epoch}.npz"


def save_states(folder: Path, epoch: int, states: dict[str, dict]) -> None:
    """Callbacks' states (name -> {key: a number, an array or a list of arrays}) for the
    checkpoint of `epoch`, as arrays (no pickle), written before it."""
    import numpy as np

    arrays = {}
    for name, state in states.items():
        for key, value in state.items():
            if isinstance(value, list):
                arrays.update({f"{name}/{key}/{i}": np.asarray(v) for i, v in enumerate(value)})
                arrays[f"{name}/{key}/len"] = np.asarray(len(value))
            else:
                arrays[f"{name}/{key}"] = np.asarray(value)
    # whole or not at all: a kill -9 while writing leaves the last file as it was
    partial = folder / f".callbacks-{epoch}.npz"
    np.savez(partial, **arrays)
    os.replace(partial, _states_file(folder, epoch))


def prune_states(folder: Path, kept: list[int]) -> None:
    """The states of checkpoints no longer kept (their epochs not in `kept`) go."""
    for old in folder.glob("callbacks-*.npz"):
        if int(old.stem.split("-")[1]) not in kept:
            old.unlink(missing_ok=True)


def load_states(folder: Path, epoch: int) -> dict[str, dict]:
    """save_states' states of the checkpoint of `epoch` ({} if it has none: saved before)."""
    import numpy as np

    path = _states_file(folder, epoch)
    if not path.exists():
        return {}
    states: dict[str, dict] = {}
    with np.load(path, allow_pickle=False) as arrays:
        for key in arrays.files:
            name, field, *index = key.split("/")
            if index == ["len"]:
                states.setdefault(name, {})[field] = [
                    arrays[f"{name}/{field}/{i}"] for i in range(int(arrays[key]))]
            elif not index:
                value = arrays[key]
                states.setdefault(name, {})[field] = value.item() if value.ndim == 0 else value
    return states


def prepare_resume(cfg: DictConfig, launch_dir: Path) -> Resume:
    """The run to continue, checked before anything is built (restart=True: a killed run with
    no checkpoint, to run again as a new run); ConfigError (one line) if it cannot be: no such
    run, no checkpoint of a run that was not killed, nothing left to train (a killed run at its
    last epoch has its end left: it resumes to record it)."""
    from gradexp.mlflow_store import download_artifact, metric_history, open_client, read_run
    from gradexp.tensorflow_import import import_tensorflow
    from gradexp.tracking_uri import resolve_uri

    run_id = str(cfg.trainer.resume)
    key = f"trainer.resume={run_id}"
    if cfg.tracking.name == "none":
        raise ConfigError(f"{key}: needs tracking=mlflow (the run to continue is an MLflow run)")
    uri = resolve_uri(cfg.tracking.uri, launch_dir)
    client = open_client(uri)
    try:
        run = read_run(client, run_id)
    except Exception:  # noqa: BLE001 - MLflow raises its own kinds for a missing run
        raise ConfigError(f"{key}: no such run in {uri}") from None
    stopped = run.data.tags.get(STOPPED_EARLY_TAG)
    # QA: it trained on from the best epoch's weights to 2050. (A run interrupted as it
    # stopped ends KILLED, tagged: it resumes, to stop again at once.)
    if stopped is not None and run.info.status == "FINISHED":
        raise ConfigError(f"{key}: the run stopped early ({stopped}, "
                          "trainer.early_stopping): it has nothing to continue")
    try:
        text = Path(download_artifact(client, run_id, "config.yaml")).read_text()
    except Exception:  # noqa: BLE001
        raise ConfigError(f"{key}: the run has no config.yaml artifact to resume from") from None
    recorded = OmegaConf.create(text)
    overrides = command_line_overrides()
    check_overrides(key, cfg, recorded, overrides)
    folder = checkpoint_folder(launch_dir, run_id)
    # Quietly (TensorFlow's start-up chatter would break the one-line answer), and only
    # once the run is known: `trainer.resume=<a typo>` answers without it.
    latest = import_tensorflow().train.latest_checkpoint(str(folder))
    # Where it stopped: the recorded epochs, unless more were asked for. On a command line
    # that means trainer.epochs among its overrides; a plain `trainer.resume=ID` trained a
    # 20-epoch run on to the default 100. (A config composed some other way says its epochs.)
    asked = not HydraConfig.initialized() or "trainer.epochs" in _keys(overrides)
    epochs = max(recorded.trainer.epochs, cfg.trainer.epochs) if asked \
        else recorded.trainer.epochs
    if latest is None:
        if _killed(client, run, cfg.tracking.stale_after):
            # Nothing to continue from: the same config again, as a new run (the killed one
            # keeps its points); its recorded config has trainer.resume=null, so its params are
            # the killed run's and sweep.skip_finished finds it once it finishes.
            name = run.info.run_name
            if epochs != recorded.trainer.epochs and not recorded.tracking.get("run_name"):
                # made of its overrides: the one of trainer.epochs says the new number (QA: it
                # said the old one, its param and its training the new)
                from gradexp.run_params import renamed

                name = renamed(name, "trainer.epochs", epochs,
                               HydraConfig.get() if HydraConfig.initialized() else None)
            recorded.trainer.epochs = epochs
            return Resume(run_id, recorded, folder, restart=True, run_name=name)
        every = recorded.trainer.get("checkpoint_every")
        why = "trainer.checkpoint_every=0: it saved none" if every == 0 else (
            "it ended before its first: trainer.checkpoint_every=null saves about once a minute "
            "and at Ctrl-C or SIGTERM; trainer.checkpoint_every=N every N epochs")
        raise ConfigError(f"{key}: no checkpoint in {folder} ({why})")
    done = int(latest.rsplit("-", 1)[-1])
    # A run killed at its last epoch (an interrupt while its end was recorded: QA, a packed
    # sweep's job) trained everything but never recorded its end. Resumed, it trains no epoch
    # and ends as it would have: the final evaluation, the model, FINISHED. Refused, a sweep
    # with sweep.resume_killed failed that job on every re-run. A run that ended otherwise
    # (FINISHED) has nothing left to do.
    if done > epochs or (done == epochs and not _killed(client, run, cfg.tracking.stale_after)):
        raise ConfigError(f"{key}: its checkpoint is at epoch {done} of {epochs}; raise "
                          f"trainer.epochs above {done} to train on")
    raised = epochs > recorded.trainer.epochs
    recorded.trainer.epochs = epochs
    # As recorded but for the epochs: trainer.resume stays null there (a restart of this run
    # would otherwise record it as a param).
    raised_config = OmegaConf.to_yaml(recorded) if raised else None
    recorded.trainer.resume = run_id
    # The checks made up to the checkpoint (gradcheck/passed, step = epoch) count in the run's
    # summary; those after it are made again.
    checks = metric_history(client, run_id, "gradcheck/passed")
    return Resume(run_id, recorded, folder, latest,
                  earlier_checks=sum(1 for check in checks if check.step <= done),
                  raised_config=raised_config)


# What a resume reads from the command line rather than from the run's record: the run, the
# store it is in (and how old a heartbeat makes a run there dead), the epochs to train to; and a
# sweep's own keys (sweep.resume_killed resumes a job whose config is the recorded one).
TAKEN = ("trainer.resume", "trainer.epochs", "tracking.uri", "tracking.stale_after")


def _keys(overrides: list[str]) -> list[str]:
    return [override.split("=", 1)[0].lstrip("+~") for override in overrides]


def command_line_overrides() -> list[str]:
    """The job's overrides as Hydra parsed them (the command line, gradexp.run); none when the
    config was composed some other way (a test's compose: nothing to check)."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def check_overrides(key: str, cfg: DictConfig, recorded: DictConfig,
                    overrides: list[str]) -> None:
    """ConfigError naming each override that would change the recorded run, with its recorded
    value (secrets masked, as the run's params show them): `optimizer.learning_rate=0.5` would
    otherwise train on at the recorded rate without a word. Restating a recorded value is no
    change; a smaller trainer.epochs is one when the resume was asked for (trainer.resume among
    the overrides). A sweep's job that sweep.resume_killed set to resume found the run by its
    params, whose trainer.epochs keeps its first value where a resume raised it: it trains to
    the recorded, larger number."""
    from gradexp.run_params import as_recorded, masked_value

    given = as_recorded(cfg)  # the config as the run recorded it
    names = _keys(overrides)
    asked = "trainer.resume" in names
    changes = []
    for override, name in zip(overrides, names):
        if name == "trainer.epochs":
            if given.trainer.epochs >= recorded.trainer.epochs or not asked:
                continue
        elif name in TAKEN or name.startswith("sweep."):
            continue
        now, then = _compared(given, name), _compared(recorded, name)
        if now != then:
            shown = now if now is _ABSENT else masked_value(name, now)
            if shown != now:  # the override as the params show it
                override = f"{override.split('=', 1)[0]}={shown}"
            was = "nothing" if then is _ABSENT else masked_value(name, then)
            changes.append(f"{override} (recorded: {was})")
    if changes:
        raise ConfigError(f"{key}: a resume continues the run as it was recorded, so it cannot "
                          f"change {', '.join(changes)}; beside trainer.resume it takes only a "
                          "larger trainer.epochs (to train on) and tracking.uri; for other "
                          "values start a new run")


_ABSENT = object()


def _compared(cfg: DictConfig, name: str):
    """The value of key `name` to compare; for a group (`optimizer=adam`) its option's name, so
    restating the option does not count the run's other overrides of that group as changes."""
    from enum import Enum

    value = OmegaConf.select(cfg, name, default=_ABSENT)
    if isinstance(value, DictConfig) and "name" in value:
        value = value.name
    if isinstance(value, Enum):
        return value.name
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    return value


def _killed(client, run, stale_after: float) -> bool:
    """KILLED, or RUNNING with its process dead (then marked KILLED here, said in one line)."""
    from gradexp.console import note_line
    from gradexp.liveness import mark_dead_runs, why_dead
    from gradexp.mlflow_store import read_run

    if run.info.status == "RUNNING" and why_dead(run, stale_after) is not None:
        mark_dead_runs(client, [run.info.experiment_id], stale_after, say=note_line)
        run = read_run(client, run.info.run_id)
    return run.info.status == "KILLED"
