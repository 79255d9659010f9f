"""The recorder: the only writer of a run's MLflow records (Lightning's MLFlowLogger, Keras'
mlflow callback). It opens the run (or reopens it: trainer.resume), writes its params, the
resolved config.yaml and the data sets it saw, then, at the end of every event, whatever the
callbacks handed it (gradexp.run_view.Records: metrics, per-epoch series, tags, artifacts, the
model) and the `logs` of each stretch, and at the end the run's status and why. It comes after
every other callback that records, so what they hand it in an event is written in that event.
With tracking=none it records nothing.

In a sweep whose jobs run in this process (Hydra's basic launcher, the packed one) a FINISHED
child's last writes (the plots, history.parquet, the reports, its thinned metrics, its end) go
to one background thread, `ENDS`, and overlap the next job, and so do its model's LoggedModel
records and MLmodel files; the model's Keras file is saved here first, since the served network
holds the weights the next job of its shape resets (gradexp.shared_programs). At most one run
ends in the background at a time; `wait_for_ends` (the sweep's end, a job's failure, every way
out of the command line: gradexp.app.main) blocks until it is stored, and says in one line a
write that failed there (that run then ends FAILED, with its reason, as it would have here).
"""

from __future__ import annotations

import atexit
import shutil
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from gradexp.callbacks.base import Callback
from gradexp.endings import status_of
from gradexp.interrupts import interrupts_deferred
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
        from gradexp.mlflow_store import MlflowTracker
        from gradexp.run_params import config_params
        from gradexp.source_tags import source_tags
        from gradexp.tracking_uri import resolve_uri

        cfg = run.cfg
        if getattr(cfg.tracking.name, "value", cfg.tracking.name) == "none":
            return
        uri = resolve_uri(cfg.tracking.uri, run.launch_dir)
        # RUNNING runs whose process died, or whose heartbeat is older than
        # tracking.stale_after, are marked KILLED (gradexp.liveness): one search of the store.
        mark_dead_in_experiment(uri, cfg.tracking.experiment, cfg.tracking.stale_after,
                                say=note_line, parent_run_id=run.parent_run_id)

        def hold(tracker: MlflowTracker) -> None:
            # Handed over with signals held from the run's creation (MlflowTracker's on_open):
            # an interrupt right after it then ends the run KILLED, never leaves it RUNNING.
            self.tracker = tracker
            run.run_id, run.experiment_id = tracker.run_id, tracker.experiment_id
            run.tracking_uri = tracker.uri
            run.store_now = lambda: self.store_now(run)

        if run.resume is not None:
            MlflowTracker.reopen(uri, run.resume.run_id, on_open=hold)
        else:
            # What happened to the data (gradexp.data) goes in with the run's start tags:
            # one write fewer a run (each costs a sqlite commit).
            data_tags = run.data_record.tags if run.data_record is not None else {}
            MlflowTracker(uri, cfg.tracking.experiment, run.run_name,
                          parent_run_id=run.parent_run_id,
                          tags={**source_tags(run.launch_dir, run.parent_run_id),
                                RESTART_OF_TAG: run.restart_of, **data_tags},
                          on_open=hold)
        if run.resume is not None and run.resume.raised_config is not None:
            self.tracker.log_text(run.resume.raised_config, "config.yaml")  # a later resume
        if run.restart_of is not None:
            note_line(f"run {run.restart_of} was killed before its first checkpoint: restarting "
                      f"it from epoch 0 as run {run.run_id} (the killed run keeps its points)")
        if run.resume is None:
            self.tracker.log_params(config_params(cfg))
            # First among the artifacts: a resume reads it.
            self.tracker.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
            self.tracker.log_datasets(run.data.name, run.data.splits(),
                                      str(cfg.data.get("path") or cfg.data["_target_"]))
            if run.data_record is not None:
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
        if status == "FINISHED" and _ends_in_background(run, self.tracker):
            # The hand-off is held whole (the model's save takes a moment): a Ctrl-C inside it
            # once left the run ended here but never handed over, RUNNING with no metrics. It
            # lands right after, the run's end already in the background's hands.
            with interrupts_deferred():
                saved = self.save_models(run)  # the weights as trained, before the next job
                # Why it ended, as of now: an interrupt landing as this block closes set an
                # "interrupted" reason the background then tagged on a FINISHED run (QA)
                why = (run.status_reason, run.traceback)
                _end_in_background(lambda: (self.write_saved_models(saved),
                                            self.finish(run, status, why)), run.run_id)
                self.ended, run.ended_as = True, status
            return
        self.ended = True
        try:
            self.finish(run, status)
        finally:
            run.ended_as = self.tracker.ended_as  # what an interrupt's line says of the run

    def finish(self, run: RunView, status: str,
               why: tuple[str | None, str | None] | None = None) -> None:
        """The last writes, then the run's end status (FAILED, with why, if a write fails);
        `why`: its status reason and traceback as of its end (default: the run's now)."""
        reason, trace = why if why is not None else (run.status_reason, run.traceback)
        try:
            self.write(run)
            if reason:
                self.tracker.set_tags({REASON_TAG: reason[:5000]})
            if trace:
                self.tracker.log_text(trace, "error/traceback.txt")
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

    def write_models(self, run: RunView) -> None:
        """The models handed so far, written now (the rest stays in run.records)."""
        self.write_saved_models(self.save_models(run))

    def save_models(self, run: RunView) -> list:
        """The networks' files of the models handed so far, saved now; their MLflow records
        wait for write_saved_models (in the background, for a sweep's job: ~18% of a later
        job's main thread was the LoggedModel's records and MLmodel files)."""
        models, run.records.models = run.records.models, []
        saved = []
        for served, step, on_error in models:  # on_error may hand a tag: written later
            try:
                saved.append((self.tracker.keras_model_writer(served), step, on_error))
            except Exception as error:  # noqa: BLE001 - the run's results stand without it
                on_error(error)
        return saved

    def write_saved_models(self, saved: list) -> None:
        for write, step, on_error in saved:
            try:
                write(step)
            except Exception as error:  # noqa: BLE001 - the run's results stand without it
                on_error(error)

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
            if records.models:
                run.records.models = records.models
                self.write_models(run)

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


# ---------------------------------------------------------------- ends in the background
ENDS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlflow-run-end")
_pending: list[tuple[Future, str | None]] = []


def _ends_in_background(run: RunView, tracker) -> bool:
    """A sweep child of Hydra's basic launcher or gradexp's packed one, into a real store: its
    sweep ends (and waits for it) in this process. Launchers with worker processes end their
    runs in place."""
    if run.parent_run_id is None or tracker.run_id is None:
        return False
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    launcher = str(HydraConfig.get().launcher.get("_target_", ""))
    return launcher.endswith((".BasicLauncher", ".PackedLauncher"))


def _end_in_background(finish, run_id: str | None) -> None:
    wait_for_ends()  # the run before this one: at most one pending, so memory stays bounded
    if not _pending:
        # A last resort (gradexp.sweep in a session that then exits): the command line waits
        # before it returns (app.main), as atexit hooks run after concurrent.futures stopped
        # its threads; the tracker then writes in this thread (MlflowTracker._submit).
        atexit.register(wait_for_ends)
    _pending.append((ENDS.submit(finish), run_id))


def wait_for_ends() -> None:
    """Block until every run ending in the background is stored; a failure there is said in
    one line (the run itself ended FAILED with the reason)."""
    from rich.markup import escape

    from gradexp.console import error_line

    while _pending:
        ending, run_id = _pending[0]
        wait([ending])  # an interrupt here leaves it pending, for the next wait to see
        _pending.pop(0)
        error = ending.exception()
        if error is not None:  # said, and the run says it too
            error_line(escape(f"run {run_id}: its last writes failed ({type(error).__name__}:"
                              f" {error}); the run is recorded as FAILED"))


def _empty(records: Records) -> bool:
    return not (records.metrics or records.series or records.tags or records.artifacts
                or records.models)
