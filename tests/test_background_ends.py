"""A sequential sweep's children end in the background (gradexp.callbacks.recorder: their last
writes overlap the next job): every child still ends FINISHED with all it records, and a write
that fails there is not lost: its run ends FAILED, the sweep says so in one line and fails.
Real TensorFlow, Hydra's basic launcher and a sqlite MLflow store, in-process."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

import gradexp
from conftest import empty_store

TINY = ("trainer.epochs=5",)


def artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def children(client: MlflowClient) -> list:
    return [run for run in client.search_runs(["1"]) if "mlflow.parentRunId" in run.data.tags]


@pytest.mark.heavy  # ~4 s
def test_every_child_ends_finished_with_its_plots_history_and_model(tmp_path):
    import mlflow.pyfunc
    import numpy as np

    empty_store(tmp_path)  # the launch folder's default store, as MLflow makes it
    # One shape: the second job trains the first job's network (gradexp.shared_programs) while
    # the first job's model is written in the background.
    results = gradexp.sweep("optimizer.learning_rate=0.05,0.2", *TINY,
                            launch_dir=tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = children(client)
    assert len(results) == len(runs) == 2
    for run in runs:
        assert run.info.status == "FINISHED"
        found = artifacts(client, run.info.run_id)
        assert {"history.parquet", "plots/loss_curve.png", "config.yaml"} <= found
        assert run.data.metrics["val/mse"] == pytest.approx(
            next(r for r in results if r.run_id == run.info.run_id).objective_value)
        (model,) = client.search_logged_models(["1"], filter_string=(
            f"source_run_id = '{run.info.run_id}'"))
        assert model.status == "READY"
        # its own weights, as trained: W·x + b of this job, not the next job's
        scalars = next(r for r in results if r.run_id == run.info.run_id).scalars
        served = mlflow.pyfunc.load_model(model.artifact_location)
        predicted = served.predict(np.array([[1.0]], dtype=np.float32))
        assert float(np.ravel(predicted)[0]) == pytest.approx(scalars["W"] + scalars["b"],
                                                              rel=1e-5)
    assert len({r.scalars["W"] for r in results}) == 2  # two rates, two lines


@pytest.mark.heavy  # ~2 s
def test_a_write_that_fails_after_the_job_ends_its_run_failed_and_fails_the_sweep(
        tmp_path, capfd):
    (tmp_path / "late_file.py").write_text(
        "class LateFile:\n"
        "    def on_train_end(self, run, status):\n"
        "        run.log_artifact('file', 'no/such/file.txt')\n")
    empty_store(tmp_path)  # the launch folder's default store, as MLflow makes it
    with pytest.raises(gradexp.GradexpError):
        gradexp.sweep("optimizer.learning_rate=0.01,0.1", *TINY,
                      "+callbacks.late._target_=late_file.LateFile", launch_dir=tmp_path)
    runs = children(MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}"))
    assert sorted(run.info.status for run in runs) == ["FAILED", "FAILED"]
    said = capfd.readouterr().err
    assert said.count("its last writes failed") == 2 and "no/such/file.txt" in said


def test_a_tracker_whose_writer_has_stopped_still_writes_its_last_points(tmp_path):
    # At interpreter exit concurrent.futures stops the writer's thread before atexit hooks run:
    # the last points of a run ended then were lost ("cannot schedule new futures").
    from gradexp.mlflow_store import MlflowTracker

    store = empty_store(tmp_path)
    tracker = MlflowTracker(store, "gradexp", "late")
    tracker._writer.shutdown(wait=True)  # as the interpreter's exit leaves it
    tracker.log_metric("final_loss", 0.5, 3)
    tracker.end("FINISHED")
    run = MlflowClient(store).get_run(tracker.run_id)
    assert (run.info.status, run.data.metrics) == ("FINISHED", {"final_loss": 0.5})


def test_a_finished_run_whose_last_writes_fail_ends_failed(tmp_path, monkeypatch):
    from gradexp.mlflow_store import MlflowTracker

    store = empty_store(tmp_path)
    tracker = MlflowTracker(store, "gradexp", "broken")
    tracker.log_metric("final_loss", 0.5, 3)

    def refuse(*args, **kwargs):
        raise OSError("the store went away")

    monkeypatch.setattr(tracker.client, "log_batch", refuse)
    with pytest.raises(OSError, match="the store went away"):
        tracker.end("FINISHED")
    assert MlflowClient(store).get_run(tracker.run_id).info.status == "FAILED"
