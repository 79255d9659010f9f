"""How a sweep's parent run ends when the sweep stops early, whatever the launcher, and what a
person reads when the MLflow server goes away or a run's end could not be stored (QA pass of
scaling out)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from conftest import compose_config, empty_store, free_port, run_cli, wait_for_mlflow_server

REASON = "gradexp.status_reason"


def _server_gone() -> Exception:
    """MLflow's error for a request the server never answered (a stopped server)."""
    from mlflow.exceptions import MlflowException

    try:
        try:
            raise ConnectionError("HTTPConnectionPool(host='127.0.0.1', port=5077): Max retries "
                                  "exceeded (Caused by NewConnectionError('Connection refused'))")
        except ConnectionError as error:
            raise MlflowException("API request to http://127.0.0.1:5077/api/2.0/mlflow/runs/"
                                  f"update failed with exception {error}") from error
    except MlflowException as error:
        return error


@pytest.fixture
def sweep_parent(tmp_path, monkeypatch):
    """A sweep's open parent, as a joblib or Ray sweep's process holds it: it ran no job, so
    the recorder module was never imported there."""
    from gradexp import sweeps
    from gradexp.mlflow_store import MlflowTracker

    monkeypatch.delitem(sys.modules, "gradexp.callbacks.recorder", raising=False)
    monkeypatch.setattr(sweeps, "_OPENED", [])
    callback = sweeps.MlflowSweepCallback()
    callback.sweep_dir, callback.uri = tmp_path / "multirun", "http://alice:pw@127.0.0.1:5077"
    callback.sweep_dir.mkdir()
    callback.tracker = MlflowTracker(empty_store(tmp_path), "gradexp", "sweep: lr=1000,0.1")
    sweeps.parent_run_file(callback.sweep_dir).write_text(callback.tracker.run_id)
    sweeps._OPENED.append(callback)
    yield callback
    callback.ended = True  # nothing left for the exit hook


def _parent(callback):
    return callback.tracker.client.get_run(callback.tracker.run_id)


def test_a_job_in_another_process_that_stops_the_sweep_ends_its_parent_failed_with_its_line(
        sweep_parent, monkeypatch):
    from gradexp import app
    from gradexp.app import settle
    from gradexp.sweeps import note_sweep_stop

    # the line was said in the worker, not here: none said in this process (app reads its own
    # name for console.SAID, into which earlier tests of this worker said theirs)
    monkeypatch.setattr(app, "SAID", [])
    line = "the loss or its gradient became NaN or infinite at epoch 7"
    note_sweep_stop(sweep_parent.sweep_dir, line)
    note_sweep_stop(sweep_parent.sweep_dir, "a later job's line")  # the first one stopped it
    settle(SystemExit(1))  # joblib hands the worker's sys.exit(1) to the sweep's process
    parent = _parent(sweep_parent)
    assert parent.info.status == "FAILED"
    assert parent.data.tags[REASON] == f"the sweep stopped before its end: {line}"


def test_ctrl_c_in_a_sweep_of_worker_processes_ends_its_parent_killed_saying_so(sweep_parent):
    from gradexp.app import settle

    settle(SystemExit(130))  # Ctrl-C, said by the command line's main
    parent = _parent(sweep_parent)
    assert parent.info.status == "KILLED"
    assert parent.data.tags[REASON] == ("interrupted (Ctrl-C or SIGTERM): the jobs that ended "
                                        "keep their runs")


def test_a_server_gone_at_the_sweeps_end_is_one_line_and_the_parent_is_not_asked_again(
        sweep_parent, monkeypatch, capsys):
    from gradexp.app import settle
    from gradexp.sweeps import _stop_the_sweep_on_error

    def gone(*args, **kwargs):
        raise _server_gone()

    monkeypatch.setattr(sweep_parent.tracker.client, "log_batch", gone)
    monkeypatch.setattr(sweep_parent.tracker.client, "search_runs", gone)
    with pytest.raises(SystemExit) as stopped, _stop_the_sweep_on_error(sweep_parent):
        sweep_parent.tracker.client.search_runs(["0"])  # the summary's first read
    assert stopped.value.code == 1
    settle(stopped.value)  # the command line's way out: no second try, no traceback
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        "error: tracking.uri=http://***@127.0.0.1:5077: the MLflow server stopped answering "
        "before the sweep's end (NewConnectionError('Connection refused')); the sweep's parent "
        f"run {sweep_parent.tracker.run_id} stays RUNNING until the server answers again, when "
        "the next run or `gradexp compare` on the store marks it KILLED; the jobs that ended "
        "keep their runs"]
    assert _parent(sweep_parent).info.status == "RUNNING"


def test_an_interrupted_run_whose_end_could_not_be_stored_is_not_said_to_be_killed():
    from gradexp.app import job_failure

    error = KeyboardInterrupt()
    error.run_id, error.run_status = "0123abcd", None  # the store hung as it ended
    assert job_failure(error, compose_config()).line == (
        "interrupted (Ctrl-C): the run 0123abcd could not be ended in the store and stays "
        "RUNNING until the next run or `gradexp compare` on the store marks it KILLED")
    error.run_status = "KILLED"
    assert job_failure(error, compose_config()).line == (
        "interrupted (Ctrl-C): the run is recorded as KILLED")


@pytest.mark.slow
def test_joblib_sweep_stopped_by_a_diverged_job_ends_its_parent_failed_as_basic_does(tmp_path):
    from mlflow import MlflowClient

    store = empty_store(tmp_path)
    done = run_cli("-m", f"tracking.uri={store}", "hydra/launcher=joblib",
                   "hydra.launcher.n_jobs=2", "optimizer.learning_rate=1000,0.1",
                   "trainer.epochs=50", "gradcheck=off", "tracking.log_model=false",
                   "sweep.continue_on_failure=false", cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    client = MlflowClient(store)
    (parent,) = client.search_runs(["0", "1"], "tags.`gradexp.sweep` = 'true'")
    assert parent.info.status == "FAILED"
    assert parent.data.tags[REASON].startswith(
        "the sweep stopped before its end: the loss or its gradient became NaN or infinite")


@pytest.mark.slow
def test_a_server_that_stops_mid_sweep_is_one_line_per_job_and_one_for_the_parent(tmp_path):
    import os
    import signal

    from conftest import finish, spawn_cli

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    server = subprocess.Popen(
        ["mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path}/srv.db",
         "--artifacts-destination", str(tmp_path / "art")],
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_mlflow_server(url, server, log, 120)
        sweep = spawn_cli("-m", f"tracking.uri={url}", "optimizer=sgd,adam", "gradcheck=off",
                          "trainer.epochs=300000", "tracking.log_model=false", cwd=tmp_path)
        from mlflow import MlflowClient

        client, deadline = MlflowClient(url), time.monotonic() + 180
        while not [r for r in client.search_runs(["1"], "attributes.status = 'RUNNING'")
                   if "mlflow.parentRunId" in r.data.tags]:
            assert sweep.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    done = finish(sweep, 400)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: tracking.uri={url}: the MLflow server stopped answering "
                           "before the sweep's end")
    assert "stays RUNNING until the server answers again" in last
