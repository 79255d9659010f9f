"""Checkpoints: the model, the optimizer's state, the epoch and the shuffling generator, saved
with tf.train.CheckpointManager (the last 3 kept) so `trainer.resume=RUN_ID` continues a run that
died. Saved every trainer.checkpoint_every epochs (null: whenever a minute has passed, checked at
the ends of compiled stretches), when it is interrupted (Ctrl-C, SIGTERM), and at the end of a run
that saved before."""

from __future__ import annotations

import time
from pathlib import Path

from gradexp.callbacks.base import Callback
from gradexp.history import ARTIFACT as HISTORY

SAVE_SECONDS = 60.0  # checkpoint_every=null: about once a minute
KEEP = 3


class Checkpoints(Callback):
    def __init__(self, every: int | None, folder: Path):
        self.every = every
        self.folder = folder
        self.manager = None
        self.last_save = time.monotonic()

    def stops(self, epochs: int) -> set[int]:
        return set(range(self.every, epochs, self.every)) if self.every else set()

    def on_train_begin(self, run) -> None:
        self.manager = run.checkpoint_manager(self.folder, KEEP)
        self.last_save = time.monotonic()

    def on_stretch_end(self, run, stretch) -> None:
        epoch = run.trainer.epoch
        due = (epoch % self.every == 0) if self.every else (
            time.monotonic() - self.last_save >= SAVE_SECONDS)
        if due:
            self.save(run)

    def on_train_end(self, run, status: str) -> None:
        # KILLED: keep the epochs since the last save. FINISHED: bring an existing checkpoint up
        # to the end (a run too short to have saved leaves no folder behind). FAILED: the
        # weights may be NaN; the last good checkpoint stays.
        if self.manager is None or run.trainer.epoch == 0:
            return
        if status == "KILLED" or (status == "FINISHED" and self.manager.latest_checkpoint):
            self.save(run)

    def save(self, run) -> None:
        # Every metric up to here goes into the store first: a run killed after this save
        # resumes from it with no gap in its history.
        run.tracker.flush()
        run.tracker.wait()
        # The full-resolution history goes beside the checkpoint, before it: a resumed run's
        # history.parquet takes the epochs up to its checkpoint from here (even after kill -9).
        run.save_history(self.folder / HISTORY)
        run.trainer.epoch_variable.assign(run.trainer.epoch)
        self.manager.save(checkpoint_number=run.trainer.epoch)
        self.last_save = time.monotonic()
        run.tracker.heartbeat()
