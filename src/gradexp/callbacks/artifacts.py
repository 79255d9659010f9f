"""The run's files, however it ended: Hydra's .hydra/ files, history.parquet (every epoch and
every evaluation, gradexp.history) and the loss curve drawn from it; after a FINISHED
classification run of one class a row, the validation split's confusion matrix. (config.yaml
goes in when the run opens: a resume reads it.)"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from gradexp.callbacks.base import Callback
from gradexp.callbacks.epoch_history import history_table
from gradexp.run_view import RunView


class Artifacts(Callback):
    def on_train_end(self, run: RunView, status: str) -> None:
        from gradexp.history import ARTIFACT, curves, write_table
        from gradexp.losses import independent_outputs
        from gradexp.plots import loss_curves

        if run.hydra_dir is not None and (run.hydra_dir / ".hydra").is_dir():
            run.log_artifact("folder", run.hydra_dir / ".hydra", ".hydra")
        if run.run_id is None or (run.resume is not None and not run.first_epochs):
            return  # nothing recorded, or a resume that trained nothing: the old file stands
        table = history_table(run)
        # A folder of its own, which the recorder deletes once it has written the file
        folder = Path(tempfile.mkdtemp(prefix="gradexp-history-"))
        write_table(table, folder / ARTIFACT)
        run.log_artifact("tempfile", folder / ARTIFACT)
        loss = curves(table, ["loss"])
        if "loss" in loss and len(loss["loss"][0]):
            run.log_artifact("figure", loss_curves(loss), "plots/loss_curve.png")
        # Labels of their own a column (a binary crossentropy over several): no one class a row,
        # so no confusion matrix (an argmax across them would call a row with two yes the first)
        if status == "FINISHED" and run.data.task == "classification" \
                and run.data.val is not None \
                and (run.data.n_outputs == 1 or not independent_outputs(run.cfg.loss)):
            run.log_artifact("figure", confusion_matrix(run, "val"),
                             "plots/confusion_matrix_val.png")


def confusion_matrix(run: RunView, split: str):
    from gradexp.plots import confusion_matrix as draw

    targets, outputs = run.evaluator.predictions(split)
    if targets.shape[1] == 1:  # one output: a binary label, and a logit or a probability
        threshold = 0.0 if run.evaluator.logits else 0.5
        true, predicted, n_classes = targets[:, 0] > 0.5, outputs[:, 0] > threshold, 2
    else:
        true, predicted, n_classes = targets.argmax(1), outputs.argmax(1), targets.shape[1]
    counts = np.zeros((n_classes, n_classes), dtype=int)
    np.add.at(counts, (true.astype(int), predicted.astype(int)), 1)
    # The classes as the data named them ('cat', 'dog'), in column order; where they are not
    # known (synthetic blobs: None) the ticks are the column numbers.
    return draw(counts, f"{split} rows", labels=run.data.labels)
