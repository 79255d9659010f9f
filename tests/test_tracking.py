"""The tracker's guarantees: secrets never in clear, a dead server fails fast, a locked sqlite
store is waited out, not lost."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import compose_config, run_cli
from gradexp.experiment import run_experiment
from gradexp.schema import ConfigError
from gradexp.tracking import MlflowTracker, mask_secrets, open_client, redact_uri, resolve_uri


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
