"""`trainer.resume=RUN_ID`: continue a run from its last checkpoint, as the same MLflow run.

The run's recorded config (its config.yaml artifact, written when the run started) is what runs
again; from the command line only a larger `trainer.epochs` is taken, to train on. The
checkpoint (model, optimizer state, epoch, shuffling generator) is in checkpoints/RUN_ID/ in the
launch folder; metrics already recorded are not written twice (gradexp.tracking).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from gradexp.schema import ConfigError

CHECKPOINTS = "checkpoints"


def checkpoint_folder(launch_dir: Path, run_id: str) -> Path:
    return launch_dir / CHECKPOINTS / run_id


@dataclass
class Resume:
    run_id: str
    cfg: DictConfig  # the recorded config, trainer.resume set, trainer.epochs perhaps raised
    folder: Path

    def restore(self, trainer) -> None:
        """Put the trainer back where the checkpoint left it."""
        import tensorflow as tf

        trainer.checkpoint().restore(tf.train.latest_checkpoint(str(self.folder))).expect_partial()
        trainer.epoch = int(trainer.epoch_variable.numpy())


def prepare_resume(cfg: DictConfig, launch_dir: Path) -> Resume:
    """The run to continue, checked before anything is built; ConfigError (one line) if it
    cannot be: no such run, no checkpoint, nothing left to train."""
    import tensorflow as tf

    from gradexp.tracking import open_client, resolve_uri, retry_locked

    run_id = str(cfg.trainer.resume)
    key = f"trainer.resume={run_id}"
    if getattr(cfg.tracking.name, "value", cfg.tracking.name) == "none":
        raise ConfigError(f"{key}: needs tracking=mlflow (the run to continue is an MLflow run)")
    uri = resolve_uri(cfg.tracking.uri, launch_dir)
    client = open_client(uri)
    try:
        retry_locked(lambda: client.get_run(run_id))
    except Exception:  # noqa: BLE001 - MLflow raises its own kinds for a missing run
        raise ConfigError(f"{key}: no such run in {uri}") from None
    try:
        text = Path(client.download_artifacts(run_id, "config.yaml")).read_text()
    except Exception:  # noqa: BLE001
        raise ConfigError(f"{key}: the run has no config.yaml artifact to resume from") from None
    recorded = OmegaConf.create(text)
    folder = checkpoint_folder(launch_dir, run_id)
    latest = tf.train.latest_checkpoint(str(folder))
    if latest is None:
        raise ConfigError(f"{key}: no checkpoint in {folder} (trainer.checkpoint_every=0, or "
                          "the run stopped before its first checkpoint)")
    done = int(latest.rsplit("-", 1)[-1])
    epochs = max(recorded.trainer.epochs, cfg.trainer.epochs)
    if done >= epochs:
        raise ConfigError(f"{key}: its checkpoint is at epoch {done} of {epochs}; raise "
                          f"trainer.epochs above {done} to train on")
    recorded.trainer.epochs = epochs
    recorded.trainer.resume = run_id
    return Resume(run_id, recorded, folder)
