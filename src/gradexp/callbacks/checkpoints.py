"""Checkpoints: the model, the optimizer's state, the epoch and the shuffling generator, saved
with tf.train.CheckpointManager (the last 3 kept) in checkpoints/RUN_ID/ of the launch folder, so
`trainer.resume=RUN_ID` continues a run that died. Saved every trainer.checkpoint_every epochs
(null: whenever a minute has passed, checked at the ends of compiled stretches; 0: never), when
it is interrupted (Ctrl-C, SIGTERM), and at the end of a run that saved before. Off without an
MLflow run to resume (tracking=none)."""

from __future__ import annotations

import time
from pathlib import Path

from gradexp.callbacks.base import Callback
from gradexp.callbacks.epoch_history import save_history
from gradexp.history import ARTIFACT as HISTORY
from gradexp.resume import prune_states, save_states
from gradexp.run_view import RunView
from gradexp.tag_keys import CHECKPOINTS_TAG

SAVE_SECONDS = 60.0  # checkpoint_every=null: about once a minute
KEEP = 3


class Checkpoints(Callback):
    def __init__(self) -> None:
        self.every: int | None = None
        self.folder: Path | None = None  # None: off
        self.manager = None
        self.last_save = time.monotonic()

    def on_train_begin(self, run: RunView) -> None:
        import tensorflow as tf

        from gradexp.resume import checkpoint_folder

        self.every = run.cfg.trainer.checkpoint_every
        if self.every == 0 or run.run_id is None:
            return
        self.folder = checkpoint_folder(run.launch_dir, run.run_id)
        run.set_tags({CHECKPOINTS_TAG: self.folder})
        self.manager = tf.train.CheckpointManager(run.trainer.checkpoint(), str(self.folder),
                                                  KEEP)
        self.last_save = time.monotonic()

    def stops(self, epochs: int) -> set[int]:
        if self.manager is None or not self.every:
            return set()
        return set(range(self.every, epochs, self.every))

    def on_stretch_end(self, run: RunView, stretch, logs) -> None:
        if self.manager is None:
            return
        due = (run.epoch % self.every == 0) if self.every else (
            time.monotonic() - self.last_save >= SAVE_SECONDS)
        if due:
            self.save(run)

    def on_train_end(self, run: RunView, status: str) -> None:
        # KILLED: keep the epochs since the last save. FINISHED: bring an existing checkpoint up
        # to the end (a run too short to have saved leaves no folder behind). FAILED: the
        # weights may be NaN; the last good checkpoint stays.
        if self.manager is None or run.epoch == 0:
            return
        if status == "KILLED" or (status == "FINISHED" and self.manager.latest_checkpoint):
            if run.last_weights is None:
                self.save(run)
                return
            # Early stopping put its best epoch's weights back (it ends first): the checkpoint
            # is the last epoch's, as its number and optimizer state say (QA: it held the best
            # ones, and a resumed run went on from them as if from its last epoch)
            best = run.model.network.get_weights()
            run.model.network.set_weights(run.last_weights)
            try:
                self.save(run)
            finally:
                run.model.network.set_weights(best)

    def save(self, run: RunView) -> None:
        # Every metric up to here goes into the store first: a run killed after this save
        # resumes from it with no gap in its history.
        run.store_now()
        # The full-resolution history goes beside the checkpoint, before it: a resumed run's
        # history.parquet takes the epochs up to its checkpoint from here (even after kill -9).
        save_history(run, self.folder / HISTORY)
        run.trainer.epoch_variable.assign(run.epoch)
        if run.resumable:  # the callbacks' state at this epoch (early stopping's best), first:
            save_states(self.folder, run.epoch, run.resumable)  # a kill then loses neither
        self.manager.save(checkpoint_number=run.epoch)
        if run.resumable:
            prune_states(self.folder, [int(path.rsplit("-", 1)[-1])
                                       for path in self.manager.checkpoints])
        self.last_save = time.monotonic()
