"""The recorder: the only writer of a run's MLflow records (Lightning's MLFlowLogger, Keras'
mlflow callback). It opens the run (or reopens it: trainer.resume), writes its params, the
resolved config.yaml and the data sets it saw, then, at the end of every event, whatever the
callbacks handed it (gradexp.run_view.Records: metrics, per-epoch series, tags, artifacts, the
model) and the `logs` of each stretch, and at the end the run's status and why. It comes after
every other callback that records, so what they hand it in an event is written in that event.
With tracking=none it records nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gradexp.callbacks.base import Callback
from gradexp.endings import status_of
from gradexp.mlflow_store import NullTracker
from gradexp.run_view import Records, RunView
from gradexp.tag_keys import REASON_TAG, RESTART_OF_TAG


class MlflowRecorder(Callback):
    def __init__(self) -> None:
        self.tracker = NullTracker()
        self.ended = False

    def on_run_begin(self, run: RunView) -> None:
        from omegaconf import OmegaConf

        from gradexp.console import note_line
        from gradexp.liveness import mark_dead_in_experiment
        from gradexp.mlflow_store import MlflowTracker, config_params, resolve_uri, source_tags

        cfg = run.cfg
        if getattr(cfg.tracking.name, "value", cfg.tracking.name) == "none":
            return
        uri = resolve_uri(cfg.tracking.uri, run.launch_dir)
        # RUNNING runs whose process died, or whose heartbeat is older than
        # tracking.stale_after, are marked KILLED (gradexp.liveness): one search of the store.
        mark_dead_in_experiment(uri, cfg.tracking.experiment, cfg.tracking.stale_after,
                                say=note_line)
        if run.resume is not None:
            self.tracker = MlflowTracker.reopen(uri, run.resume.run_id)
        else:
            self.tracker = MlflowTracker(
                uri, cfg.tracking.experiment, run.run_name, parent_run_id=run.parent_run_id,
                tags={**source_tags(run.launch_dir), RESTART_OF_TAG: run.restart_of})
        run.run_id = self.tracker.run_id
        run.experiment_id = self.tracker.experiment_id
        run.tracking_uri = self.tracker.uri
        run.store_now = lambda: self.store_now(run)
        if run.restart_of is not None:
            note_line(f"run {run.restart_of} was killed before its first checkpoint: restarting "
                      f"it from epoch 0 as run {run.run_id} (the killed run keeps its points)")
        if run.resume is None:
            self.tracker.log_params(config_params(cfg))
            # First among the artifacts: a resume reads it.
            self.tracker.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
            self.tracker.log_datasets(run.data.name, run.data.splits(),
                                      str(cfg.data.get("path") or cfg.data["_target_"]))
            if run.data_record is not None:  # what happened to the data (gradexp.data)
                self.tracker.set_tags(run.data_record.tags)
                if run.data_record.labels is not None:
                    self.tracker.log_text(run.data_record.labels_json(), "data/labels.json")

    def on_train_begin(self, run: RunView) -> None:
        self.write(run)

    def on_stretch_end(self, run: RunView, stretch, logs) -> None:
        for key, value in logs.items():  # what callbacks measured at this stretch's end
            run.log_metric(key, value)
        self.write(run)
        self.tracker.heartbeat()  # "still alive", at most every 30 s (gradexp.liveness)

    def on_check(self, run: RunView, check) -> None:
        self.write(run)

    def on_train_end(self, run: RunView, status: str) -> None:
        if self.ended:
            return
        self.ended = True
        try:
            self.write(run)
            if run.status_reason:
                self.tracker.set_tags({REASON_TAG: run.status_reason[:5000]})
            if run.traceback:
                self.tracker.log_text(run.traceback, "error/traceback.txt")
        except BaseException as error:  # the run still ends, as what stopped the writes says
            self.tracker.end(status if status != "FINISHED" else status_of(error)[0])
            raise
        self.tracker.end(status)

    def store_now(self, run: RunView) -> None:
        """Everything handed so far, written and stored (a checkpoint is about to be saved)."""
        self.write(run)
        self.tracker.flush()
        self.tracker.wait()
        self.tracker.heartbeat()

    def write(self, run: RunView) -> None:
        """Write what the callbacks handed in, in the order they handed it, and empty it."""
        while not _empty(run.records):
            records, run.records = run.records, Records()
            for epochs, values in records.series:
                self.tracker.log_history(epochs, values)
            for key, value, step in records.metrics:
                self.tracker.log_metric(key, value, step)
            if records.tags:
                self.tracker.set_tags(records.tags)
            for kind, what, path in records.artifacts:
                self.write_artifact(kind, what, path)
            for served, step, on_error in records.models:  # on_error may hand a tag: written
                try:
                    self.tracker.log_keras_model(served, step=step)
                except Exception as error:  # noqa: BLE001 - the run's results stand without it
                    on_error(error)

    def write_artifact(self, kind: str, what, path: str | None) -> None:
        tracker = self.tracker
        if kind == "dict":
            tracker.log_dict(what, path)
        elif kind == "text":
            tracker.log_text(what, path)
        elif kind == "figure":
            tracker.log_figure(what, path)
        elif kind == "folder":
            tracker.log_folder(Path(what), path)
        elif kind in ("file", "tempfile"):
            try:
                tracker.log_file(Path(what), path)
            finally:
                if kind == "tempfile":
                    shutil.rmtree(Path(what).parent, ignore_errors=True)
        else:
            raise ValueError(f"unknown artifact kind {kind!r}")


def _empty(records: Records) -> bool:
    return not (records.metrics or records.series or records.tags or records.artifacts
                or records.models)
