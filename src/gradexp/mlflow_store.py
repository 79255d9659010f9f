"""Tracking: record a run in MLflow through MlflowClient (no global "active run" state).

Writes are batched (per-epoch metrics go out with log_batch, at most 1,000 a call) because every
MLflow write to sqlite costs about 12 ms however little it carries, and written by a background
thread while training goes on. Per-epoch series arrive here already thinned to tracking.max_points
points (gradexp.callbacks.epoch_history); every epoch is in the run's history.parquet
(gradexp.history). Writes that meet a locked sqlite store (several sweep jobs writing at once) are
retried, not lost.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from gradexp.interrupts import interrupts_deferred
from gradexp.liveness import HEARTBEAT_SECONDS, HEARTBEAT_TAG, now_utc, process_tags
from gradexp.tag_keys import (
    DATASET_SOURCE_TAG,
    FAILURE_EPOCH_TAG,
    FAILURE_TAG,
    PARENT_TAG,
    REASON_TAG,
)
from gradexp.tracking_uri import (
    check_server,
    check_store_folder,
    check_store_kind,
    redact_uri,
    sqlite_file,
)

T = TypeVar("T")

# Tags that say why a run ended as it did: a resumed run drops them when it reopens.
ENDING_TAGS = frozenset({REASON_TAG, FAILURE_TAG, FAILURE_EPOCH_TAG})
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_LENGTH = 6000
# Pending per-epoch points go to the writer at least this often, so they are stored while training
# runs rather than all at the end; a few hundred points a metric make ~12 ms batches cheap enough.
FLUSH_SECONDS = 1.0


# ---------------------------------------------------------------- the store
@contextlib.contextmanager
def store_creation_lock(uri: str) -> Iterator[None]:
    """Held while MLflow opens a sqlite store. Opening a new store runs MLflow's schema
    migrations, and two processes migrating one new file at once make one of them fail ("duplicate
    column name", alembic's "expected to match one row"): two runs started together in a fresh
    folder. The lock is an flock on the store's folder (no lock file left beside the store), so it
    only orders gradexp processes; where it cannot be taken (off POSIX; NFS) it is skipped."""
    database = sqlite_file(uri)
    if database is None or os.name != "posix":
        yield
        return
    import fcntl

    folder = os.open(database.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)  # released when the descriptor closes
        except OSError:  # NFS turns flock into a POSIX lock, which a read-only descriptor
            pass  # cannot take (EBADF): open unlocked, as before
        yield
    finally:
        os.close(folder)


# Parallel jobs on one sqlite store: another's write holds the lock, or two insert one dataset at
# once (MLflow checks, then inserts: the loser's retry finds the winner's row and links to it).
RETRIED = ("database is locked", "unique constraint failed: datasets")


# One thread of this process at a time in a sqlite store (once one is opened here): a job's
# main thread and its background writers (the metrics, the last run's end) otherwise met on
# sqlite's file lock, whose busy handler sleeps 1, 2, 5 ... 25 ms before each retry: ~1.9 s of
# a 64-job packed sweep's main thread slept there, ~1.1 s in each of two processes. Waiting on
# this lock wakes as soon as it is free. Reentrant: an action never waits on another thread.
_ONE_THREAD_AT_A_TIME = threading.RLock()
_SQLITE_OPENED = False


def retry_locked(action: Callable[[], T], attempts: int = 30, *, store: bool = True) -> T:
    """Run `action`, retrying while another job's write is in the way (RETRIED). `store=False`
    for an action on artifact files alone, which needs no turn at the store."""
    turn = _ONE_THREAD_AT_A_TIME if store and _SQLITE_OPENED else contextlib.nullcontext()
    for attempt in range(attempts):
        try:
            with interrupts_deferred(), turn:
                return action()
        except Exception as error:  # MLflow wraps sqlite's errors in its own types
            message = str(error).lower()
            if not any(what in message for what in RETRIED) or attempt == attempts - 1:
                raise
            time.sleep(min(0.05 * 2**attempt, 2.0))
    raise AssertionError("unreachable")


def open_client(uri: str):
    """An MlflowClient for `uri`, after checking that MLflow has a store for it and that a server
    URI answers."""
    check_store_kind(uri)
    check_server(uri)
    check_store_folder(uri)
    # A dead server should fail in seconds, not after MLflow's default retries (minutes).
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    # No tqdm bars on stderr when artifacts are fetched (gradexp compare reads history.parquet).
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # Nor MLflow's "🏃 View run ... / 🧪 View experiment ..." lines at a server's every run end:
    # gradexp prints the run's link itself, once.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    from mlflow import MlflowClient

    from gradexp.tensorflow_import import freeze_imported_objects

    database = sqlite_file(uri)
    if database is not None and not database.exists():
        forget_opened_store(uri)
    if database is not None:
        global _SQLITE_OPENED
        _SQLITE_OPENED = True

    # A new sqlite store's tables are made here, by ~50 alembic migrations that each commit on
    # their own (sqlite DDL): a Ctrl-C or SIGTERM between two of them left a half-made store
    # that no later run could open ("table _alembic_tmp_metrics already exists"). So the signal
    # waits for the store to be whole and lands right after; waiting for the lock stays
    # interruptible.
    with store_creation_lock(uri), interrupts_deferred():
        client = MlflowClient(tracking_uri=uri)
    freeze_imported_objects("the MLflow store")  # SQLAlchemy's and alembic's modules
    return client


def forget_opened_store(uri: str) -> None:
    """MLflow keeps the store it opened for a URI, and its database engine, for the rest of the
    process. A sqlite file deleted since (a notebook starting afresh between two runs) then
    stayed unusable, every write "attempt to write a readonly database"; forgotten, the next
    client makes the store anew, as a new process does. (Private caches, hence getattr: a
    MLflow without them keeps nothing to forget.)"""
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
        from mlflow.tracking._tracking_service import utils
    except ImportError:  # moved in another MLflow: nothing of ours to forget
        return
    engine = getattr(SqlAlchemyStore, "_engine_map", {}).pop(uri, None)
    if engine is not None:
        engine.dispose()
    opened = getattr(getattr(utils, "_tracking_store_registry", None),
                     "_get_store_with_resolved_uri", None)
    if hasattr(opened, "cache_clear"):
        opened.cache_clear()


def experiment_id(client, name: str) -> str:
    """The id of experiment `name`, created if needed (two jobs may race to create it)."""
    def get_or_create() -> str:
        found = client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return client.create_experiment(name)
        except Exception:
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    return retry_locked(get_or_create)


def tag_run(client, run_id: str, tags: Mapping[str, Any]) -> None:
    """Tags on a run other than the one a tracker records (a sweep marks its best child and
    notes on its parent the runs its jobs reused): one write, retried on a locked store."""
    from mlflow.entities import RunTag

    items = [RunTag(key, str(value)) for key, value in tags.items() if value is not None]
    retry_locked(lambda: client.log_batch(run_id, tags=items))


def mark_killed(client, run_id: str, reason: str, end_time_ms: int) -> None:
    """End a dead run (its process is gone, gradexp.liveness) KILLED, saying why."""
    retry_locked(lambda: client.set_tag(run_id, REASON_TAG, reason))
    retry_locked(lambda: client.set_terminated(run_id, "KILLED", end_time=end_time_ms))


# Reads for compare, resume, history and liveness: only this module, the recorder and the sweep
# call MLflow's client (tests/test_one_writer.py); each read is retried on a locked store.
def experiments(client, max_results: int = 1000) -> list:
    """The store's active experiments."""
    return list(retry_locked(lambda: client.search_experiments(max_results=max_results)))


def experiment_named(client, name: str):
    """Experiment `name` (None when there is none)."""
    return retry_locked(lambda: client.get_experiment_by_name(name))


def find_runs(client, experiment_ids: list[str], filter_string: str = "", *,
              order_by: list[str] | None = None, max_results: int = 1000,
              page_token: str | None = None):
    """MLflow's search_runs: a page of runs (its `.token` names the next page, None at the end)."""
    return retry_locked(lambda: client.search_runs(
        experiment_ids, filter_string, order_by=order_by, max_results=max_results,
        page_token=page_token))


def read_run(client, run_id: str):
    """The run as the store has it now (MLflow raises its own error for an unknown id)."""
    return retry_locked(lambda: client.get_run(run_id))


def metric_history(client, run_id: str, key: str) -> list:
    """Every recorded point of metric `key`, as MLflow's Metric entities."""
    return retry_locked(lambda: client.get_metric_history(run_id, key))


def download_artifact(client, run: Any, path: str, folder: str | None = None) -> str:
    """A local path of the artifact `path` of `run` (its id, or the Run already fetched: a
    sweep's summary has every child from one search, and a lookup each was ~5 ms of its end),
    to read: the stored file itself when the run's artifacts are on this disk (a sweep's
    summary reads every child's history.parquet: MLflow's runs:/ download costs ~40 ms of CPU a
    file), else a copy downloaded into `folder` (else a temporary one)."""
    run_id = run if isinstance(run, str) else run.info.run_id
    info = read_run(client, run_id).info if isinstance(run, str) else run.info
    artifacts = info.artifact_uri or ""
    parts = urllib.parse.urlsplit(artifacts)
    if parts.scheme in ("", "file") and not parts.netloc and "/../" not in f"/{path}/":
        local = Path(urllib.parse.unquote(parts.path)) / path
        if local.is_file():
            return str(local)
    return retry_locked(lambda: client.download_artifacts(run_id, path, folder))


def runs_view_link(uri: str, exp_id: str) -> str:
    """Where the runs of an experiment show (MLflow 3's UI opens in its GenAI view otherwise)."""
    base = redact_uri(uri).rstrip("/") if uri.startswith("http") else "http://127.0.0.1:5000"
    return f"{base}/#/experiments/{exp_id}/runs?workflowType=machine_learning"


# ---------------------------------------------------------------- trackers
class NullTracker:
    """tracking=none: the same calls, nothing recorded."""

    run_id: str | None = None
    uri: str | None = None
    experiment_id: str | None = None
    ended_as: str | None = None

    def log_params(self, params: Mapping[str, Any]) -> None: ...
    def log_metric(self, key: str, value: float, step: int) -> None: ...
    def log_history(self, steps: Sequence[int], values: Mapping[str, Iterable[float]]) -> None:
        ...
    def set_tags(self, tags: Mapping[str, Any]) -> None: ...
    def log_dict(self, data: dict, artifact_file: str) -> None: ...
    def log_text(self, text: str, artifact_file: str) -> None: ...
    def log_figure(self, figure, artifact_file: str) -> None: ...
    def log_folder(self, folder: Path, artifact_path: str) -> None: ...
    def log_file(self, path: Path, artifact_path: str | None = None) -> None: ...
    def log_datasets(self, name: str, splits: Mapping[str, Any], source: str) -> None: ...
    def log_keras_model(self, served, step: int = 0, name: str = "model") -> str | None: ...
    def keras_model_writer(self, served, name: str = "model") -> Callable[[int], str | None]:
        return lambda step: None
    def flush(self) -> None: ...
    def heartbeat(self) -> None: ...
    def wait(self) -> None: ...
    def end(self, status: str) -> None: ...


# (uri, experiment name, parent run id) -> experiment id, for a sweep's children
_SWEEP_EXPERIMENTS: dict[tuple[str, str, str | None], str] = {}


class MlflowTracker(NullTracker):
    """One MLflow run: params, buffered metrics, tags, artifacts, and its end status."""

    def __init__(self, uri: str, experiment: str, run_name: str, *,
                 parent_run_id: str | None = None, tags: Mapping[str, Any] | None = None,
                 on_open: Callable[[MlflowTracker], None] | None = None):
        """`on_open(tracker)`, if given, hands the new run's tracker to its owner with Ctrl-C and
        SIGTERM held from the run's creation: a signal in between would leave it RUNNING with
        no owner to end it. Only the creation is held; opening the store stays interruptible."""
        self.uri = uri
        self.client = open_client(uri)
        # A sweep's children share their parent's experiment: looked up once a sweep and process.
        key = (uri, experiment, parent_run_id)
        if parent_run_id is None or key not in _SWEEP_EXPERIMENTS:
            _SWEEP_EXPERIMENTS[key] = experiment_id(self.client, experiment)
        self.experiment_id = _SWEEP_EXPERIMENTS[key]
        all_tags = {key: str(value) for key, value in (tags or {}).items() if value is not None}
        all_tags.update(process_tags())  # host, process, first heartbeat (gradexp.liveness)
        if parent_run_id:
            all_tags[PARENT_TAG] = parent_run_id
        with interrupts_deferred():
            run = retry_locked(lambda: self.client.create_run(
                self.experiment_id, run_name=run_name, tags=all_tags))
            self._start(run.info.run_id)
            if on_open is not None:
                on_open(self)

    @classmethod
    def reopen(cls, uri: str, run_id: str,
               on_open: Callable[[MlflowTracker], None] | None = None) -> MlflowTracker:
        """An existing run, RUNNING again (trainer.resume). Metric points it already holds are
        not written twice: each metric goes on after the last step it has. `on_open` as for a
        new run, held from the moment the run is RUNNING again."""
        tracker = cls.__new__(cls)
        tracker.uri = uri
        tracker.client = open_client(uri)
        run = retry_locked(lambda: tracker.client.get_run(run_id))
        tracker.experiment_id = run.info.experiment_id
        tracker._start(run_id)
        for key in run.data.metrics:
            history = retry_locked(lambda key=key: tracker.client.get_metric_history(run_id, key))
            tracker._logged_through[key] = max(m.step for m in history)
        with interrupts_deferred():
            retry_locked(lambda: tracker.client.update_run(run_id, "RUNNING"))
            if on_open is not None:
                on_open(tracker)
        tracker.set_tags(process_tags())  # its new process now beats for it
        # Why it ended before ("interrupted ...", "marked KILLED: its process ... is gone") is
        # no longer so: this end's reason, if it has one, is written when it ends.
        for key in ENDING_TAGS & set(run.data.tags):
            retry_locked(lambda key=key: tracker.client.delete_tag(run_id, key))
        return tracker

    def _start(self, run_id: str) -> None:
        self.run_id: str = run_id
        self._logged_through: dict[str, int] = {}  # a resumed run's last recorded step per key
        self._pending: list = []
        self._last_flush = time.monotonic()
        # Metric batches are written by one background thread, so sqlite's ~250 µs a point
        # overlaps training, gradient checks and plotting instead of adding to them.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlflow-metrics")
        self._writes: list[Future] = []
        self._last_heartbeat = time.monotonic()  # process_tags() gave the first one
        self.ended_as: str | None = None  # the status end() stored

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(key, str(value)[:MAX_PARAM_LENGTH]) for key, value in params.items()]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            batch = items[start:start + MAX_PARAMS_PER_BATCH]
            retry_locked(lambda batch=batch: self.client.log_batch(self.run_id, params=batch))

    def log_metric(self, key: str, value: float, step: int) -> None:
        from mlflow.entities import Metric

        if step > self._logged_through.get(key, -1):
            self._pending.append(Metric(key, float(value), int(time.time() * 1000), int(step)))

    def log_history(self, steps: Sequence[int], values: Mapping[str, Iterable[float]]) -> None:
        """Per-epoch values, one series per key, at `steps`; written in batches."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for key, series in values.items():
            after = self._logged_through.get(key, -1)
            self._pending.extend(Metric(key, float(value), now, int(step))
                                 for step, value in zip(steps, series) if step > after)
        if time.monotonic() - self._last_flush > FLUSH_SECONDS:
            self.flush()
        else:
            self._send(full_batches_only=True)

    def flush(self) -> None:
        """Hand every pending metric to the writer (full batches go as soon as they fill)."""
        self._send(full_batches_only=False)
        self._last_flush = time.monotonic()

    def _send(self, full_batches_only: bool) -> None:
        while len(self._pending) >= (MAX_METRICS_PER_BATCH if full_batches_only else 1):
            batch = self._pending[:MAX_METRICS_PER_BATCH]
            del self._pending[:MAX_METRICS_PER_BATCH]
            self._writes.append(self._submit(
                lambda batch=batch: self.client.log_batch(self.run_id, metrics=batch)))

    def _submit(self, write: Callable[[], Any]) -> Future:
        """`write` on the writer's thread; in this one when the writer can no longer take work.
        At interpreter exit concurrent.futures stops every executor's thread before atexit
        hooks run: a run's end written then (a sweep's child ending in the background, a parent
        ended by its exit hook) lost its last points ("cannot schedule new futures after
        interpreter shutdown")."""
        try:
            return self._writer.submit(retry_locked, write)
        except RuntimeError:  # shut down, or the interpreter's exit shut it down
            done: Future = Future()
            try:
                done.set_result(retry_locked(write))
            except Exception as error:  # noqa: BLE001 - raised by wait(), as the writer's
                done.set_exception(error)
            return done

    def wait(self) -> None:
        """Block until every metric handed to the writer is stored; raise its first error."""
        writes, self._writes = self._writes, []
        for write in writes:
            write.result()

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """One write for all of them (a write per tag cost ~25 ms each, 8 tags a run)."""
        from mlflow.entities import RunTag

        items = [RunTag(key, str(value)) for key, value in tags.items() if value is not None]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):  # MLflow's limit: 100 tags
            batch = items[start:start + MAX_PARAMS_PER_BATCH]
            retry_locked(lambda batch=batch: self.client.log_batch(self.run_id, tags=batch))

    def heartbeat(self) -> None:
        """Refresh the run's heartbeat (gradexp.liveness) when HEARTBEAT_SECONDS have passed;
        called at every stretch end, so the check is one clock read. The write goes through
        the metric writer's thread: training does not wait on it."""
        if time.monotonic() - self._last_heartbeat < HEARTBEAT_SECONDS:
            return
        self._last_heartbeat = time.monotonic()
        tag = now_utc()
        self._writes.append(self._submit(
            lambda: self.client.set_tag(self.run_id, HEARTBEAT_TAG, tag)))

    # Artifact calls look the run up in the store first, so they meet sqlite locks too; after
    # a run's first (config.yaml, at its start) MLflow keeps where its artifacts go, and a
    # figure's drawing or a folder's copy need no turn at the store (store=False).
    def log_dict(self, data: dict, artifact_file: str) -> None:
        # JSON has no NaN: a failed job's objective was a bare NaN, which JSON.parse refuses
        data = _json_safe(data)
        retry_locked(lambda: self.client.log_dict(self.run_id, data, artifact_file))

    def log_text(self, text: str, artifact_file: str) -> None:
        retry_locked(lambda: self.client.log_text(self.run_id, text, artifact_file))

    def log_figure(self, figure, artifact_file: str) -> None:
        retry_locked(lambda: self.client.log_figure(self.run_id, figure, artifact_file),
                     store=False)

    def log_folder(self, folder: Path, artifact_path: str) -> None:
        if folder.is_dir():
            retry_locked(lambda: self.client.log_artifacts(self.run_id, str(folder),
                                                           artifact_path), store=False)

    def log_file(self, path: Path, artifact_path: str | None = None) -> None:
        """One local file as an artifact (under `artifact_path`); replaces one of its name."""
        retry_locked(lambda: self.client.log_artifact(self.run_id, str(path), artifact_path),
                     store=False)

    def log_datasets(self, name: str, splits: Mapping[str, Any], source: str) -> None:
        """Each split's rows as an MLflow dataset input of the run (one write): `name`, the
        digest of its arrays, their shapes (rows) in its profile, the split as its context
        (train, val, test), so the runs view shows which data each run saw."""
        import mlflow.data
        from mlflow.data.code_dataset_source import CodeDatasetSource
        from mlflow.entities import DatasetInput, InputTag
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        # An explicit source: without one MLflow resolves the whole run context (git included).
        origin = CodeDatasetSource(tags={DATASET_SOURCE_TAG: source})
        inputs = [DatasetInput(mlflow.data.from_numpy(split.x, targets=split.y, name=name,
                                                      source=origin)._to_mlflow_entity(),
                               [InputTag(MLFLOW_DATASET_CONTEXT, split_name)])
                  for split_name, split in splits.items()]
        retry_locked(lambda: self.client.log_inputs(self.run_id, datasets=inputs))

    def log_keras_model(self, served, step: int = 0, name: str = "model") -> str:
        """The served model (gradexp.export.Export) as an MLflow 3 LoggedModel linked to the run
        (its "Logged models"), so `mlflow.pyfunc.load_model("runs:/RUN_ID/model")` loads it.

        Written through the client, not mlflow.<flavor>.log_model (which needs a global active
        run and tracking URI): the LoggedModel, its files, READY, the run's output. The files:
        the Keras model, a keras flavor entry (mlflow.keras.load_model), and a pyfunc flavor
        whose loader is gradexp/serving.py, bundled in code/ with your modules, so it loads
        where neither gradexp nor your module is importable. The pip requirements are given,
        not inferred: inferring them took ~5 s a run here. Returns the model's id. The recorder
        writes through keras_model_writer (the files first, the LoggedModel at the end); this
        is the whole write in one call, as the benchmarks time it."""
        return self.keras_model_writer(served, name)(step)

    def keras_model_writer(self, served, name: str = "model") -> Callable[[int], str]:
        """log_keras_model in two parts: the network's files are saved now (its weights as they
        are), and the returned function, given the step, writes the rest (the LoggedModel's
        records, MLmodel, the upload), reading only what was saved. A sweep's job calls that
        function in the background, while the next job of its shape resets the network."""
        import shutil
        import tempfile

        from gradexp.model_files import save_network

        folder = Path(tempfile.mkdtemp(prefix="gradexp-model-"))
        try:
            data = save_network(served, folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise

        def write(step: int) -> str:
            try:
                return self._log_saved_model(served, folder, data, step, name)
            finally:
                shutil.rmtree(folder, ignore_errors=True)

        return write

    def _log_saved_model(self, served, folder: Path, data: Path, step: int, name: str) -> str:
        from mlflow.entities import LoggedModelOutput, LoggedModelStatus

        from gradexp.model_files import check_loads, save_served_model

        check_loads(data)  # before a LoggedModel is made: none is left FAILED for it
        model = retry_locked(lambda: self.client.create_logged_model(
            self.experiment_id, name=name, source_run_id=self.run_id, model_type="keras"))
        try:
            saved = save_served_model(served, folder, model, self.run_id, data)
            retry_locked(lambda: self.client.log_model_artifacts(model.model_id, str(saved)))
        except BaseException:
            retry_locked(lambda: self.client.finalize_logged_model(model.model_id,
                                                                   LoggedModelStatus.FAILED))
            raise
        retry_locked(lambda: self.client.finalize_logged_model(model.model_id,
                                                               LoggedModelStatus.READY))
        retry_locked(lambda: self.client.log_outputs(
            self.run_id, [LoggedModelOutput(model.model_id, step)]))
        return model.model_id

    def end(self, status: str) -> None:
        """Store what is pending and mark the run FINISHED, FAILED or KILLED; once (a second
        call does nothing). A FINISHED run whose last writes fail ends as their error says
        (FAILED), never FINISHED without them. Signals are held over it: one landing between
        the writes and the status would leave the run RUNNING; it lands once the run ended."""
        if self.ended_as is not None:
            return
        from gradexp.endings import status_of

        with interrupts_deferred():
            try:
                self.flush()
                self.wait()
            except BaseException as error:
                if status == "FINISHED":
                    status = status_of(error)[0]
                raise
            finally:
                self._writer.shutdown(wait=True)
                retry_locked(lambda: self.client.set_terminated(self.run_id, status))
                self.ended_as = status


def _json_safe(value: Any) -> Any:
    """`value` with every float that is not finite (NaN, inf) as None: null in JSON (numpy's
    as Python floats: a float32 NaN was written as the text "nan")."""
    import numpy as np

    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value
