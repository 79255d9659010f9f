"""The tracker's guarantees: secrets never in clear, a dead server fails fast, a locked sqlite
store is waited out, not lost; MLflow gets at most tracking.max_points points a metric, and the
run's history.parquet every epoch."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import compose_config, run_cli
from gradexp.loop import run_experiment
from gradexp.mlflow_store import MlflowTracker, open_client
from gradexp.run_params import mask_secrets
from gradexp.schema import ConfigError
from gradexp.tracking_uri import redact_uri, resolve_uri


def test_secret_looking_keys_and_uri_credentials_are_masked():
    params = mask_secrets({"tracking.token": "abc123", "db.password": "hunter2",
                           "aws.secret_access": "s3cr3t", "service.api_key": "k",
                           "optimizer.name": "adam", "data.key_column": "id",
                           "tracking.uri": "http://alice:pw@mlflow.example:5000"})
    assert params["tracking.token"] == params["db.password"] == "***"
    assert params["aws.secret_access"] == params["service.api_key"] == "***"
    assert params["optimizer.name"] == "adam" and params["data.key_column"] == "id"
    assert params["tracking.uri"] == "http://***@mlflow.example:5000"
    assert redact_uri("sqlite:///mlflow.db") == "sqlite:///mlflow.db"


TOKEN_LOADER = """
import numpy as np


def load(token):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 1))
    return x, 2 * x
"""


@pytest.mark.heavy  # ~8 s
def test_a_secret_override_is_masked_in_run_names_and_the_sweeps_overrides(tmp_path):
    # QA: the params said data.kwargs.token=***, the Run Name column and the sweep parent's
    # name and sweep.overrides param said hunter2SECRET; tracking.* named no run either
    from mlflow import MlflowClient

    import gradexp

    (tmp_path / "token_data.py").write_text(TOKEN_LOADER)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = (f"tracking.uri={store}", "data=custom", "data._target_=token_data.load",
              "+data.kwargs.token=hunter2SECRET", "trainer.epochs=2", "gradcheck=off",
              "tracking.log_model=false")
    single = gradexp.run(*common, launch_dir=tmp_path)
    # review: masked as text within the name, a token 1 made every 1 of it *** (0.***)
    short = gradexp.run(*common[:3], "+data.kwargs.token=1", "optimizer.learning_rate=0.1",
                        "trainer.epochs=1", "tracking.log_model=false", launch_dir=tmp_path)
    gradexp.sweep(*common, "optimizer=sgd,adam", launch_dir=tmp_path)
    client = MlflowClient(store)
    runs = client.search_runs([single.experiment_id])
    said = [run.info.run_name for run in runs] + [value for run in runs
                                                  for value in run.data.params.values()]
    assert not [text for text in said if "hunter2SECRET" in text]
    assert client.get_run(single.run_id).info.run_name == (
        "+data.kwargs.token=***,data._target_=token_data.load,data=custom,gradcheck=off,"
        "tracking.log_model=false,trainer.epochs=2")
    assert client.get_run(short.run_id).info.run_name == (
        "+data.kwargs.token=***,data._target_=token_data.load,data=custom,"
        "optimizer.learning_rate=0.1,tracking.log_model=false,trainer.epochs=1")
    parent = next(run for run in runs if run.info.run_name.startswith("sweep: "))
    assert "+data.kwargs.token=*** " in parent.data.params["sweep.overrides"]


@pytest.mark.slow
def test_credentials_in_the_tracking_uri_are_never_printed(tmp_path):
    done = run_cli("tracking.uri=http://alice:hunter2@127.0.0.1:9", "gradcheck=off",
                   cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert "hunter2" not in done.stdout + done.stderr
    assert "http://***@127.0.0.1:9" in done.stderr


def test_default_store_is_mlflows_sqlite_in_the_launch_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_uri(None, tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert resolve_uri("sqlite:///runs/x.db", tmp_path) == f"sqlite:///{tmp_path}/runs/x.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert resolve_uri(None, tmp_path) == "http://127.0.0.1:5000"


@pytest.mark.heavy  # ~5 s
def test_server_that_never_answers_fails_within_seconds():
    """A port that accepts connections and then says nothing (a hung server)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    started = time.monotonic()
    with pytest.raises(ConfigError, match=rf"tracking.uri=http://127.0.0.1:{port}: no MLflow"):
        open_client(f"http://127.0.0.1:{port}")
    assert time.monotonic() - started < 10
    listener.close()


def test_unreachable_server_fails_before_training_with_nothing_recorded(tmp_path):
    cfg = compose_config("tracking.uri=http://127.0.0.1:9", "gradcheck=off")
    started = time.monotonic()
    with pytest.raises(ConfigError, match="no MLflow server answers"):
        run_experiment(cfg, quiet=True, launch_dir=tmp_path)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("uri, says", [
    ("sqllite:///x.db", "tracking.uri=sqllite:///x.db: MLflow has no store for sqllite:// "
                        "URIs; accepted: "),
    ("postgres://db/runs", "MLflow has no store for postgres:// URIs"),
    ("mlruns", "tracking.uri=mlruns: MLflow refuses a folder as a store"),
    # Before: a traceback from SQLAlchemy ("Invalid SQLite URL"), exit 1
    ("sqlite://mlflow.db", "tracking.uri=sqlite://mlflow.db: a sqlite URI has three slashes "
                           "before a relative path (sqlite:///mlflow.db)"),
    # Before: "MLflow refuses a folder as a store": it is a file, the store a person meant
    ("mlflow.db", "tracking.uri=mlflow.db: a path to a database file, not a store URI: write "
                  "sqlite:///mlflow.db"),
])
def test_a_store_mlflow_cannot_open_is_one_line_before_anything_is_made(tmp_path, monkeypatch,
                                                                        uri, says):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    import mlflow.environment_variables

    if "folder" in says and not hasattr(mlflow.environment_variables, "MLFLOW_ALLOW_FILE_STORE"):
        pytest.skip("this MLflow takes folder stores: nothing to refuse")
    cfg = compose_config(f"tracking.uri={uri}", "gradcheck=off")
    with pytest.raises(ConfigError) as refused:
        run_experiment(cfg, quiet=True, launch_dir=tmp_path)
    assert says in str(refused.value) and "\n" not in str(refused.value)
    assert "file://" not in str(refused.value)  # it lists what it would take, not refuses
    assert list(tmp_path.iterdir()) == []  # no store, no folder of runs


@pytest.mark.parametrize("uri", ["databricks", "databricks-uc", "postgresql+psycopg2://u@db/runs",
                                 "mysql+pymysql://u@db/runs", "http://127.0.0.1:5000"])
def test_stores_mlflow_can_open_are_not_refused(tmp_path, uri):
    from gradexp.tracking_uri import check_store_kind

    resolved = resolve_uri(uri, tmp_path)
    assert resolved == uri  # a bare databricks is MLflow's word for a store, not a folder
    check_store_kind(resolved, uri)


@pytest.mark.slow
def test_a_store_locked_by_another_process_is_waited_out(store, client, tmp_path):
    tracker = MlflowTracker(store, "locked", "run")
    db = store.removeprefix("sqlite:///")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        f"c = sqlite3.connect({db!r}, isolation_level=None)\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(8)\n"  # longer than sqlite's own 5 s busy timeout
        "c.execute('COMMIT')\n")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    tracker.log_params({"optimizer.name": "adam"})
    tracker.end("FINISHED")
    holder.wait(timeout=30)
    stored = client.get_run(tracker.run_id)
    assert stored.data.params == {"optimizer.name": "adam"}
    assert stored.info.status == "FINISHED"


OPEN_ON_GO = """
import sys
from gradexp.mlflow_store import experiment_id, open_client
print("ready", flush=True)
sys.stdin.readline()  # every process opens the new store at once
print(experiment_id(open_client(sys.argv[1]), "gradexp"), flush=True)
"""


@pytest.mark.slow
def test_runs_started_together_in_a_fresh_folder_all_open_its_new_store(tmp_path):
    # A new sqlite store is made by MLflow's schema migrations; two processes migrating one file
    # at once make one fail ("duplicate column name: step"): `python -m gradexp ... &` twice in a
    # fresh folder. Three rounds of two, each on its own new store, released together.
    rounds = []
    for round_ in range(3):
        uri = f"sqlite:///{tmp_path / f'round{round_}.db'}"
        processes = [subprocess.Popen([sys.executable, "-c", OPEN_ON_GO, uri], text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE) for _ in range(2)]
        for process in processes:
            assert process.stdout.readline().strip() == "ready", process.communicate()[1]
        for process in processes:
            process.stdin.write("go\n")
            process.stdin.flush()
        rounds.append([process.communicate(timeout=120) + (process.returncode,)
                       for process in processes])
    for outcomes in rounds:
        for _, err, code in outcomes:
            assert code == 0, err[-2000:]
        assert len({out for out, _, _ in outcomes}) == 1  # one experiment, found by both


def test_a_store_whose_folder_cannot_be_locked_still_opens(tmp_path, monkeypatch):
    # NFS turns flock into a POSIX lock, which a read-only descriptor (a folder's) cannot take
    import errno
    import fcntl

    def refused(fd, operation):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(fcntl, "flock", refused)
    client = open_client(f"sqlite:///{tmp_path / 'nfs.db'}")
    assert [e.name for e in client.search_experiments()] == ["Default"]


# ---------------------------------------------------------------- thinning and history.parquet
def steps_of(client, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def history_artifact(client, run_id: str, tmp_path) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(client.download_artifacts(run_id, "history.parquet", str(tmp_path)))
    return {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}


@pytest.mark.parametrize(("start", "end", "budget"), [
    (0, 20_000, 320), (0, 1000, 7), (0, 50, 320), (4_950, 20_000, 200), (0, 10, 1)])
def test_kept_epochs_are_evenly_spaced_with_the_first_and_last(start, end, budget):
    from gradexp.callbacks.epoch_history import kept_epochs

    kept = kept_epochs(start, end, budget)
    assert len(kept) <= budget and kept[-1] == end
    if budget > 1:
        assert kept[0] == start + 1
        gaps = np.diff(kept)
        assert gaps.max() - gaps.min() <= 1  # even, to the epoch


def test_a_run_longer_than_max_points_is_thinned_in_mlflow_and_whole_in_its_artifact(
        store, client, tmp_path):
    from gradexp.callbacks.epoch_history import kept_epochs

    # 200 epochs in compiled calls cut at every 7th (checkpoints are host events): the kept
    # epochs do not follow them.
    cfg = compose_config(f"tracking.uri={store}", "gradcheck=off", "trainer.epochs=200",
                         "trainer.checkpoint_every=7", "tracking.max_points=17", "eval.every=25",
                         "tracking.log_model=false", "optimizer.schedule.name=cosine")
    result = run_experiment(cfg, quiet=True, launch_dir=tmp_path)
    for key in ("loss", "grad_norm", "lr", "W", "b"):
        assert steps_of(client, result.run_id, key) == list(kept_epochs(0, 200, 17)), key

    stored = history_artifact(client, result.run_id, tmp_path)
    assert list(stored["step"]) == list(range(1, 201))  # every epoch, one row each
    assert set(result.history) == {"loss", "grad_norm", "lr", "W", "b"}
    for key, values in result.history.items():
        assert np.array_equal(stored[key], values), key  # bit for bit, float32 kept
    mlflow_val = sorted((m.step, m.value) for m in client.get_metric_history(result.run_id,
                                                                             "val/mse"))
    present = ~np.isnan(stored["val/mse"])
    assert list(zip(stored["step"][present], stored["val/mse"][present])) == mlflow_val
    assert [s for s, _ in mlflow_val] == [25, 50, 75, 100, 125, 150, 175, 200]


def test_evaluations_every_epoch_are_thinned_in_mlflow_and_whole_in_the_artifact(
        store, client, tmp_path):
    cfg = compose_config(f"tracking.uri={store}", "gradcheck=off", "trainer.epochs=60",
                         "eval.every=1", "tracking.max_points=7", "tracking.log_model=false")
    result = run_experiment(cfg, quiet=True, launch_dir=tmp_path)
    # 60 evaluations: the 1st, every ~10th and the last go to MLflow.
    assert steps_of(client, result.run_id, "val/mse") == [1, 11, 21, 30, 40, 50, 60]
    stored = history_artifact(client, result.run_id, tmp_path)
    assert np.isfinite(stored["val/mse"]).all() and len(stored["val/mse"]) == 60
    assert stored["val/mse"][-1] == pytest.approx(result.metrics["val/mse"])


def test_an_early_stop_between_logged_evaluations_still_logs_its_last(store, client, tmp_path):
    cfg = compose_config(f"tracking.uri={store}", "gradcheck=off", "optimizer=adam",
                         "optimizer.learning_rate=0.5", "eval.every=1", "trainer.epochs=400",
                         "trainer.early_stopping.enabled=true",
                         "trainer.early_stopping.patience=20",
                         "trainer.early_stopping.restore_best=false", "tracking.max_points=5",
                         "tracking.log_model=false")
    result = run_experiment(cfg, quiet=True, launch_dir=tmp_path)
    assert result.epochs < 400 and result.epochs not in (1, 101, 200, 300, 400)
    logged = [e for e in (1, 101, 200, 300, 400) if e < result.epochs]  # kept_epochs(0, 400, 5)
    assert steps_of(client, result.run_id, "val/mse") == [*logged, result.epochs]


def test_an_early_stop_still_logs_the_last_epoch_it_ran(store, client, tmp_path):
    from gradexp.callbacks.epoch_history import kept_epochs

    cfg = compose_config(f"tracking.uri={store}", "gradcheck=off", "optimizer=adam",
                         "optimizer.learning_rate=0.5", "eval.every=5", "trainer.log_every=5",
                         "trainer.epochs=400", "trainer.early_stopping.enabled=true",
                         "trainer.early_stopping.patience=20", "tracking.max_points=9",
                         "tracking.log_model=false")
    result = run_experiment(cfg, quiet=True, launch_dir=tmp_path)
    assert result.epochs < 400 and result.epochs not in kept_epochs(0, 400, 9)
    steps = steps_of(client, result.run_id, "loss")
    assert steps[-1] == result.epochs and len(steps) <= 9
    # the planned grid's epochs up to the stop, and (an early end) the grid over those it ran
    assert set(steps) >= {e for e in kept_epochs(0, 400, 9) if e < result.epochs}
    assert len(steps) > len([e for e in kept_epochs(0, 400, 9) if e < result.epochs]) + 1
    assert len(history_artifact(client, result.run_id, tmp_path)["loss"]) == result.epochs


def test_after_restore_best_the_history_keeps_the_last_epochs_values_as_measured(
        store, client, tmp_path):
    """QA: after an early stop with restore_best the restored weights are evaluated again at
    the last epoch; history.parquet kept only that re-measure at the last epoch (the best
    epoch's values), so the loss plot and a sweep's curves dipped there falsely. And MLflow's
    val/mse of the run was the stopped epoch's (both points stamped in one millisecond, MLflow
    took the larger), not that of the weights the run ended on."""
    cfg = compose_config(f"tracking.uri={store}", "gradcheck=off", "optimizer=adam",
                         "optimizer.learning_rate=0.5", "eval.every=1", "trainer.epochs=400",
                         "trainer.early_stopping.enabled=true",
                         "trainer.early_stopping.patience=5", "tracking.log_model=false")
    result = run_experiment(cfg, quiet=True, launch_dir=tmp_path)
    metrics = client.get_run(result.run_id).data.metrics
    best, last = int(metrics["best_epoch"]), int(metrics["stopped_epoch"])
    assert best < last == result.epochs
    stored = history_artifact(client, result.run_id, tmp_path)
    assert list(stored["step"]) == list(range(1, last + 1))
    for key in ("val/mse", "train/mse"):
        at_last = sorted(m.value for m in client.get_metric_history(result.run_id, key)
                         if m.step == last)
        restored = result.metrics[key]  # the weights the run ended on: the best epoch's
        assert restored == pytest.approx(stored[key][best - 1], rel=1e-5), key
        (measured,) = [value for value in at_last if value != restored]  # and the re-measure
        assert stored[key][-1] == measured != pytest.approx(restored, rel=1e-3), key
        assert metrics[key] == restored, key  # the run's final value in MLflow


@pytest.mark.heavy  # ~3 s
def test_a_resumed_run_keeps_every_epoch_in_its_artifact(store, client, tmp_path):
    from gradexp.callbacks.epoch_history import kept_epochs

    common = (f"tracking.uri={store}", "gradcheck=off", "trainer.checkpoint_every=20",
              "tracking.max_points=11", "tracking.log_model=false", "trainer.deterministic=true")
    first = run_experiment(compose_config(*common, "trainer.epochs=60"), quiet=True,
                           launch_dir=tmp_path)
    resumed = run_experiment(compose_config(*common, "trainer.epochs=100",
                                            f"trainer.resume={first.run_id}"),
                             quiet=True, launch_dir=tmp_path)
    assert resumed.run_id == first.run_id and len(resumed.history["loss"]) == 40
    stored = history_artifact(client, first.run_id, tmp_path)
    assert list(stored["step"]) == list(range(1, 101))
    assert np.array_equal(stored["loss"][:60], first.history["loss"])
    assert np.array_equal(stored["loss"][60:], resumed.history["loss"])
    whole = run_experiment(compose_config(*common, "trainer.epochs=100",
                                          "tracking.experiment=whole"),
                           quiet=True, launch_dir=tmp_path)
    assert np.allclose(stored["loss"], whole.history["loss"], rtol=1e-6)  # no gap, no seam
    # MLflow: the first part's kept epochs, then those of a 100-epoch run after epoch 60.
    steps = steps_of(client, first.run_id, "loss")
    assert steps == [*kept_epochs(0, 60, 11), *[e for e in kept_epochs(0, 100, 11) if e > 60]]


def test_an_interrupted_run_keeps_its_history_and_last_epoch(store, client, tmp_path,
                                                             monkeypatch):
    from gradexp.callbacks.held_out import HeldOutEvaluation

    def interrupt(self, run, stretch, logs):  # Ctrl-C after epoch 35, between two kept epochs
        if run.trainer.epoch >= 35:
            raise KeyboardInterrupt

    monkeypatch.setattr(HeldOutEvaluation, "on_stretch_end", interrupt)
    cfg = compose_config(f"tracking.uri={store}", "gradcheck=off", "trainer.epochs=100",
                         "trainer.checkpoint_every=5", "tracking.max_points=4",
                         "tracking.log_model=false")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, quiet=True, launch_dir=tmp_path)
    (stored,) = client.search_runs(["1"])
    assert stored.info.status == "KILLED"
    assert steps_of(client, stored.info.run_id, "loss") == [1, 34, 35]  # kept 1, 34; then 35
    assert list(history_artifact(client, stored.info.run_id, tmp_path)["step"]) == list(
        range(1, 36))


def test_two_jobs_logging_one_dataset_at_once_both_link_it(store, client):
    # SLURM and joblib jobs start together and log the same data set: MLflow checks for it, then
    # inserts, so the slower job's insert fails UNIQUE (seen in a CI run); its retry links it.
    from mlflow.entities import Dataset, DatasetInput, InputTag

    from gradexp.mlflow_store import retry_locked

    experiment = client.create_experiment("race")
    first, second = (client.create_run(experiment).info.run_id for _ in range(2))
    dataset = Dataset("train", "d1g35t", "local", '{"uri": "train.csv"}')
    inputs = [DatasetInput(dataset, [InputTag("mlflow.data.context", "train")])]
    attempts = []

    def log_second():
        attempts.append(1)
        if len(attempts) == 1:  # the other job's insert lands between MLflow's check and ours
            client.log_inputs(first, datasets=inputs)
            raise sqlite_error()
        client.log_inputs(second, datasets=inputs)

    retry_locked(log_second)
    assert len(attempts) == 2
    for run_id in (first, second):
        assert [d.dataset.name for d in client.get_run(run_id).inputs.dataset_inputs] == ["train"]


def sqlite_error():
    """The error MLflow raised in that CI run, as MLflow raises it."""
    from mlflow.exceptions import MlflowException

    return MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: "
                           "datasets.experiment_id, datasets.name, datasets.digest")
