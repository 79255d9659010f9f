"""One MLflow writer per run: only the store module (mlflow_store.py) calls MLflow's client to
write, only the recorder (callbacks/recorder.py) and the sweep's parent callback (sweeps.py) hold
a tracker; everything else hands what it measured to the recorder (gradexp.run_view.Records)
and reads the store through mlflow_store's functions."""

from __future__ import annotations

import re
from pathlib import Path

import gradexp

PACKAGE = Path(gradexp.__file__).resolve().parent
CLIENT_WRITE = re.compile(r"client\.(log_\w+|set_tag|set_terminated|create_run|update_run|"
                          r"delete_\w+|create_logged_model|finalize_logged_model)\(")
TRACKER = re.compile(r"\btracker\.\w+\(")
CLIENT_CALL = re.compile(r"\bclient\.\w+\(")  # any call on MLflow's client, a read included


def files_matching(pattern: re.Pattern) -> set[str]:
    return {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
            if pattern.search(path.read_text(encoding="utf-8"))}


def test_only_the_store_module_writes_through_the_mlflow_client():
    assert files_matching(CLIENT_WRITE) == {"mlflow_store.py"}


def test_only_the_recorder_and_the_sweep_hold_a_tracker():
    assert files_matching(TRACKER) <= {"callbacks/recorder.py", "sweeps.py", "mlflow_store.py"}


def test_only_the_store_module_the_recorder_and_the_sweep_call_the_mlflow_client():
    # compare, resume, history and liveness read through mlflow_store's small functions
    # (find_runs, read_run, metric_history, download_artifact, experiments, experiment_named).
    assert files_matching(CLIENT_CALL) <= {"mlflow_store.py", "callbacks/recorder.py",
                                           "sweeps.py"}
