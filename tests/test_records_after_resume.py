"""What MLflow holds for a run that was interrupted and resumed, restarted, or stopped early:
tracking.max_points kept across the sessions of a resumed run, the heat maps of an early-stopped
run's last check, and a restarted run's name agreeing with its params (QA findings)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run
from gradexp.callbacks.progress import Progress

COMMON = ("gradcheck=off", "trainer.epochs=100", "tracking.max_points=10", "eval.every=5",
          "trainer.checkpoint_every=20", "tracking.log_model=false")


def steps_of(client, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def interrupt_once_at(monkeypatch, epoch: int) -> None:
    """Ctrl-C (KeyboardInterrupt) at the first stretch end at or past `epoch`, once."""
    shown, armed = Progress.on_stretch_end, [True]

    def on_stretch_end(self, run, stretch, logs):
        shown(self, run, stretch, logs)
        if armed[0] and run.epoch >= epoch:
            armed[0] = False
            raise KeyboardInterrupt

    monkeypatch.setattr(Progress, "on_stretch_end", on_stretch_end)


@pytest.mark.heavy  # ~9 s
def test_an_interrupted_and_resumed_run_keeps_within_max_points(store, client, tmp_path,
                                                                 monkeypatch):
    """QA: tracking.max_points=20, Ctrl-C at epoch 400 of 1000, resumed: 30 loss points in
    MLflow (the interrupt spread 18 over its 400 epochs, the resume added the grid's 12)."""
    interrupt_once_at(monkeypatch, 40)
    with pytest.raises(KeyboardInterrupt):
        run(store, *COMMON, launch_dir=tmp_path)
    (killed,) = client.search_runs(["1"])
    run_id = killed.info.run_id
    assert killed.info.status == "KILLED"
    interrupted = {key: steps_of(client, run_id, key) for key in ("loss", "val/mse")}

    resumed = run(store, *COMMON, f"trainer.resume={run_id}", launch_dir=tmp_path)
    assert resumed.run_id == run_id and client.get_run(run_id).info.status == "FINISHED"
    for key in ("loss", "grad_norm", "W", "b", "val/mse", "train/mse"):
        steps = steps_of(client, run_id, key)
        assert len(steps) <= 10 and steps[-1] == 100, (key, steps)
        assert len(steps) == len(set(steps)), key
        assert np.diff(steps).max() <= 2 * 100 / 10, (key, steps)  # spread, not bunched
    assert steps_of(client, run_id, "loss") == [1, 12, 23, 34, 40, 52, 64, 76, 88, 100]
    # The interrupted run had its share of the 10 points (40 of 100 epochs) and the epoch it
    # ended at: the rest were left to its resume.
    assert interrupted == {"loss": [1, 12, 23, 34, 40], "val/mse": [5, 15, 25, 35, 40]}


@pytest.mark.heavy  # ~3 s
def test_a_run_interrupted_on_a_kept_epoch_resumes_onto_the_uninterrupted_runs_epochs(
        store, client, tmp_path, monkeypatch):
    from gradexp.callbacks.epoch_history import kept_epochs

    interrupt_once_at(monkeypatch, 34)  # a kept epoch of 100 at 10 points (and a stretch end)
    with pytest.raises(KeyboardInterrupt):
        run(store, *COMMON, "trainer.checkpoint_every=17", launch_dir=tmp_path)
    (killed,) = client.search_runs(["1"])
    run(store, *COMMON, "trainer.checkpoint_every=17", f"trainer.resume={killed.info.run_id}",
        launch_dir=tmp_path)
    assert steps_of(client, killed.info.run_id, "loss") == list(kept_epochs(0, 100, 10))


@pytest.mark.heavy  # ~3 s
def test_an_early_stopped_runs_last_check_draws_its_heat_maps(store, client, tmp_path):
    """QA: heat maps "are drawn after training": an early stop's end check drew none."""
    result = run(store, "data=sine", "model=mlp", "model.hidden=[4]", "gradcheck=jacobian",
                 "trainer.epochs=3000", "optimizer=adam", "eval.every=1",
                 "trainer.early_stopping.enabled=true", "trainer.early_stopping.patience=3",
                 "tracking.log_model=false", launch_dir=tmp_path)
    stopped = int(client.get_run(result.run_id).data.metrics["stopped_epoch"])
    assert stopped == result.epochs < 3000
    files = {a.path for a in client.list_artifacts(result.run_id, "gradcheck")}
    assert {f"gradcheck/heatmap_dense0_kernel_epoch_{stopped:05d}.png",
            f"gradcheck/heatmap_dense1_kernel_epoch_{stopped:05d}.png",
            f"gradcheck/heatmap_dense0_bias_epoch_{stopped:05d}.png"} <= files
    assert not any(f.endswith("epoch_00000.png") for f in files)  # the start check: passed


def killed_without_checkpoint(store, client, tmp_path, *overrides: str, name: str) -> str:
    """A run as `kill -9` before its first checkpoint leaves it (KILLED, no checkpoint)."""
    first = run(store, "gradcheck=off", "trainer.checkpoint_every=0", "tracking.log_model=false",
                *overrides, launch_dir=tmp_path, run_name=name)
    client.set_terminated(first.run_id, "KILLED")
    return first.run_id


@pytest.mark.parametrize(("name", "overrides", "restarted"), [
    ("gradcheck=off,model.hidden=[4,4],trainer.epochs=5", ("data=sine", "model=mlp",
                                                           "model.hidden=[4,4]"),
     "gradcheck=off,model.hidden=[4,4],trainer.epochs=8"),
    ("defaults", (), "trainer.epochs=8"),  # no override of it in the name: it is added
])
@pytest.mark.heavy  # ~3 s
def test_a_restart_with_more_epochs_is_named_with_them(store, client, tmp_path, name,
                                                       overrides, restarted):
    """QA: a run killed before any checkpoint, resumed with trainer.epochs=2000, restarted as
    a new run named ...trainer.epochs=1000 while its param said 2000."""
    killed = killed_without_checkpoint(store, client, tmp_path, "trainer.epochs=5", *overrides,
                                       name=name)
    result = run(store, f"trainer.resume={killed}", "trainer.epochs=8", launch_dir=tmp_path)
    new = client.get_run(result.run_id)
    assert result.run_id != killed and new.data.tags["gradexp.restart_of"] == killed
    assert new.data.params["trainer.epochs"] == "8"
    assert new.info.run_name == restarted


@pytest.mark.heavy  # ~3 s
def test_a_restart_keeps_a_name_given_by_tracking_run_name(store, client, tmp_path):
    killed = killed_without_checkpoint(store, client, tmp_path, "trainer.epochs=5",
                                       "tracking.run_name=mine", name="mine")
    result = run(store, f"trainer.resume={killed}", "trainer.epochs=8", launch_dir=tmp_path)
    assert client.get_run(result.run_id).info.run_name == "mine"


def test_a_restart_with_its_recorded_epochs_keeps_its_name(store, client, tmp_path):
    killed = killed_without_checkpoint(store, client, tmp_path, "trainer.epochs=5",
                                       name="gradcheck=off,trainer.epochs=5")
    result = run(store, f"trainer.resume={killed}", "trainer.epochs=5", launch_dir=tmp_path)
    assert client.get_run(result.run_id).info.run_name == "gradcheck=off,trainer.epochs=5"
