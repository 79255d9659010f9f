"""Re-running a stopped sweep finishes exactly what is missing (docs/training-controls.md,
docs/sweeps.md), QA's two cases:

- a job interrupted after its last epoch, before its end was recorded, is KILLED with every
  epoch, its reports and plots, no final evaluation, no model, and a checkpoint at its last
  epoch: `sweep.resume_killed=true` failed it on every re-run ("raise trainer.epochs above"),
  and the parent counted it twice (KILLED reused and FAILED);
- `sweep.skip_finished=true` matched runs on their params, which MLflow cuts to 6000
  characters: a run whose config differed only past that stood for the job.

The interrupt is placed without timing: Loop.end raises KeyboardInterrupt as it is told the
run FINISHED, as a Ctrl-C held over the last stretch (gradexp.interrupts) lands there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import conftest
import gradexp
from gradexp.loop import Loop
from gradexp.tag_keys import REASON_TAG

SMALL = ("data=sine", "model=mlp", "model.hidden=[8]", "optimizer.learning_rate=0.01",
         "trainer.epochs=20")


def interrupt_the_end(monkeypatch, optimizer: str | None = None) -> list:
    """A Ctrl-C as the first run (of `optimizer`, if given) is about to end FINISHED: every
    callback is then told KILLED (the checkpoints save its last epoch). Once only."""
    end = Loop.end
    cut: list = []

    def ending(self, status, reason=None, trace=None):
        if (status == "FINISHED" and not cut
                and optimizer in (None, str(self.run.cfg.optimizer.name))):
            cut.append(self.run.run_id)
            raise KeyboardInterrupt
        return end(self, status, reason, trace)

    monkeypatch.setattr(Loop, "end", ending)
    return cut


def models_of(client, run_id: str) -> list:
    return client.search_logged_models(
        [client.get_run(run_id).info.experiment_id],
        filter_string=f"source_run_id = '{run_id}'")


def killed_at_its_last_epoch(client, run_id: str, tmp_path: Path, epochs: int) -> None:
    """The state QA's repro leaves (d1_1.2/mlflow.db): KILLED, interrupted, every epoch's
    points, no final_loss, no model, a checkpoint at its last epoch."""
    from gradexp.resume import checkpoint_folder

    killed = client.get_run(run_id)
    assert killed.info.status == "KILLED"
    assert killed.data.tags[REASON_TAG] == "interrupted (Ctrl-C or SIGTERM)"
    assert max(m.step for m in client.get_metric_history(run_id, "loss")) == epochs
    assert "final_loss" not in killed.data.metrics
    assert not models_of(client, run_id)
    assert (checkpoint_folder(tmp_path, run_id) / f"ckpt-{epochs}.index").exists()


# ---------------------------------------------------------------- defect 1
@pytest.mark.heavy  # ~6 s: three runs
def test_a_resume_of_a_run_killed_at_its_last_epoch_records_its_end(store, client, tmp_path,
                                                                    monkeypatch):
    common = (*SMALL, "trainer.deterministic=true", "trainer.checkpoint_every=10",
              "gradcheck=off")
    whole = conftest.run(store, *common, launch_dir=tmp_path)  # never interrupted
    interrupt_the_end(monkeypatch)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        conftest.run(store, *common, launch_dir=tmp_path)
    run_id = interrupted.value.run_id
    killed_at_its_last_epoch(client, run_id, tmp_path, 20)

    # A plain resume, as on the command line: nothing is trained, its end is recorded as the
    # whole run's was.
    finished = gradexp.run(f"tracking.uri={store}", f"trainer.resume={run_id}",
                           launch_dir=tmp_path)
    assert finished.run_id == run_id
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert REASON_TAG not in run.data.tags
    assert run.data.metrics["final_loss"] == pytest.approx(whole.final_loss, rel=1e-6)
    assert run.data.metrics["val/mse"] == pytest.approx(
        client.get_run(whole.run_id).data.metrics["val/mse"], rel=1e-6)
    assert max(m.step for m in client.get_metric_history(run_id, "loss")) == 20
    (model,) = models_of(client, run_id)
    assert model.status == "READY"


def test_a_finished_run_at_its_last_epoch_still_has_nothing_to_resume(store, tmp_path):
    """Guard: only a KILLED run's end is left to record; a FINISHED one is refused as before."""
    done = conftest.run(store, *SMALL, "trainer.checkpoint_every=10", "gradcheck=off",
                        "tracking.log_model=false", launch_dir=tmp_path)
    with pytest.raises(gradexp.GradexpError, match="its checkpoint is at epoch 20 of 20; raise "
                       "trainer.epochs above 20 to train on"):
        gradexp.run(f"tracking.uri={store}", f"trainer.resume={done.run_id}",
                    launch_dir=tmp_path)


@pytest.mark.heavy  # ~4 s: two sweeps
def test_a_packed_sweep_rerun_finishes_a_job_killed_at_its_last_epoch(store, client, tmp_path,
                                                                      monkeypatch):
    from gradexp.callbacks.recorder import wait_for_ends
    from gradexp.sweeps import _OPENED

    sweep = (f"tracking.uri={store}", "hydra/launcher=packed", *SMALL,
             "optimizer=sgd,momentum", "seed=0")
    cut = interrupt_the_end(monkeypatch, optimizer="momentum")
    try:
        with pytest.raises(KeyboardInterrupt):
            gradexp.sweep(*sweep, launch_dir=tmp_path)
        wait_for_ends()
    finally:
        for opened in _OPENED:  # the parent, KILLED as the command line ends it
            opened._end_if_interrupted()
    (run_id,) = cut
    killed_at_its_last_epoch(client, run_id, tmp_path, 20)

    # The documented re-run: no job fails, the killed one is finished as the same run.
    results = gradexp.sweep(*sweep, "sweep.skip_finished=true", "sweep.resume_killed=true",
                            launch_dir=tmp_path)
    assert [result.run_id for result in results] == [run_id]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert REASON_TAG not in run.data.tags
    assert {"final_loss", "val/mse"} <= set(run.data.metrics)
    assert len(models_of(client, run_id)) == 1

    # Each job counts once in the new parent: 2 jobs, 2 rows, none failed.
    runs = client.search_runs([run.info.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("gradexp.sweep") == "true"
                 and r.info.status == "FINISHED"]
    summary = client.download_artifacts(parent.info.run_id, "sweep_summary.json", str(tmp_path))
    rows = json.loads(Path(summary).read_text())["children"]
    assert sorted((row["run_name"], row["status"]) for row in rows) == [
        ("optimizer=momentum", "FINISHED"), ("optimizer=sgd", "FINISHED")]
    assert parent.data.metrics["children"] == 2
    assert parent.data.metrics.get("children_failed", 0) == 0


# ---------------------------------------------------------------- defect 2
LOADER = '''
import numpy as np


def load(cols=""):
    """Its last column name picks the slope (a stand-in for a feature selection)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 1))
    slope = 2.0 if cols.endswith("A") else -5.0
    return x, slope * x + rng.normal(0, 0.1, size=(60, 1))
'''


@pytest.mark.heavy  # ~3 s: three sweeps
def test_skip_finished_runs_a_job_whose_config_differs_only_past_the_param_limit(
        store, client, tmp_path, monkeypatch):
    long = "f" * 6100  # past MLflow's 6000 characters a param holds
    job = (f"tracking.uri={store}", "data=custom", "data._target_=my_loader.load",
           "trainer.epochs=3", "gradcheck=off", "tracking.log_model=false")
    with conftest.user_modules(tmp_path, monkeypatch, my_loader=LOADER):
        (first,) = gradexp.sweep(*job, f"+data.kwargs.cols={long}A", launch_dir=tmp_path)
        (second,) = gradexp.sweep(*job, f"+data.kwargs.cols={long}B",
                                  "sweep.skip_finished=true", launch_dir=tmp_path)
        # The same whole config again: that run stands for the job.
        assert gradexp.sweep(*job, f"+data.kwargs.cols={long}B", "sweep.skip_finished=true",
                             launch_dir=tmp_path) == []
    assert second.run_id != first.run_id
    assert second.objective_value != pytest.approx(first.objective_value)
    cols = client.get_run(second.run_id).data.params["data.kwargs.cols"]
    assert len(cols) == 6000 and cols == client.get_run(first.run_id).data.params[
        "data.kwargs.cols"]  # what the match on params alone saw


def test_runs_recorded_before_the_fix_stay_reusable(tmp_path):
    """find_finished_run on runs as any version recorded them (params, config.yaml): uncut
    params match as before; a cut one matches on config.yaml's whole value, and a run without
    a readable config.yaml does not stand for a job whose value was cut."""
    from mlflow import MlflowClient

    from conftest import empty_store
    from gradexp.sweep_reuse import find_finished_run
    from gradexp.tag_keys import PARENT_TAG

    client = MlflowClient(empty_store(tmp_path))
    experiment = client.create_experiment("gradexp")
    parent = client.create_run(experiment).info.run_id

    def child(params: dict[str, str], config: str | None) -> str:
        run_id = client.create_run(experiment, tags={PARENT_TAG: parent}).info.run_id
        for key, value in params.items():
            client.log_param(run_id, key, value[:6000])
        if config is not None:
            client.log_text(run_id, config, "config.yaml")
        client.log_metric(run_id, "final_loss", 0.5)
        client.set_terminated(run_id, "FINISHED")
        return run_id

    short = {"optimizer.learning_rate": "0.1"}
    old = child(short, None)  # no config.yaml needed where nothing was cut
    assert find_finished_run(client, "gradexp", {**short, "sweep.skip_finished": "True"}) \
        .info.run_id == old

    long = "x" * 6100
    whole = child({"data.kwargs.cols": long + "A"}, f"data:\n  kwargs:\n    cols: {long}A\n")
    child({"data.kwargs.cols": long + "B"}, None)  # newer, cut, nothing to compare with
    found = find_finished_run(client, "gradexp", {"data.kwargs.cols": long + "A"})
    assert found.info.run_id == whole
    assert find_finished_run(client, "gradexp", {"data.kwargs.cols": long + "B"}) is None
    assert find_finished_run(client, "gradexp", {"data.kwargs.cols": long + "C"}) is None
