"""A sweep whose jobs fail: what the person sees (the summary, the parent's status, the exit code).

A mistake every job would make (a sweep.objective no job logs, a typo in sweep.best_per or
sweep.aggregate_over) is refused before the parent run opens: one line, exit 2, nothing recorded.
A job that fails on its own (its data file is missing) is listed FAILED with its reason even when
it failed before its MLflow run opened, and the sweep ends FAILED, exit 1.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from mlflow import MlflowClient

import gradexp
from conftest import compose_config, run_cli
from gradexp.schema import ConfigError

QUICK = ("trainer.epochs=2", "gradcheck=off", "tracking.log_model=false")
HOUSES = "a,b,price\n" + "".join(f"{i % 7},{i % 5},{2 * (i % 7) + (i % 5)}\n" for i in range(40))


def all_runs(store: str) -> list:
    return MlflowClient(store).search_runs(["0", "1"])


# ---------------------------------------------------------------- refused before the parent
REFUSED = [
    ("sweep.objective=val/msee",
     "sweep.objective=val/msee: the runs log val/ mse, mae, r2 (eval.metrics); pick one of those"),
    ("sweep.objective=val/accuracy",  # a classification's metric, on regression data
     "sweep.objective=val/accuracy: the runs log val/ mse, mae, r2"),
    ("sweep.best_per=[optimizer.nam]",
     "sweep.best_per=[optimizer.nam]: optimizer.nam is not a key of the config;"),
    ("sweep.best_per=[optimizer]",
     "sweep.best_per=[optimizer]: optimizer is a group of keys; name one of its values, "
     "e.g. optimizer.name"),
    ("sweep.aggregate_over=[sed]",
     "sweep.aggregate_over=[sed]: sed is not a key of the config;"),
]


@pytest.mark.parametrize(("override", "says"), REFUSED, ids=[o for o, _ in REFUSED])
def test_a_mistake_every_job_would_make_is_refused_before_the_parent_opens(
        tmp_path, store, override, says):
    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp.sweep(f"tracking.uri={store}", "optimizer=sgd,adam", override, *QUICK,
                      launch_dir=tmp_path)
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value)
    assert all_runs(store) == []  # no parent, no child


def test_an_optuna_sweep_whose_objective_no_job_logs_opens_no_parent(tmp_path, store):
    """Optuna's jobs are chosen as they run; the objective is still known from the launch."""
    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp.sweep(f"tracking.uri={store}", "experiment=lr_search", "hydra.sweeper.n_trials=2",
                      "sweep.objective=val/msee", *QUICK, launch_dir=tmp_path)
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith("sweep.objective=val/msee: the runs log val/ mse,")
    assert all_runs(store) == []


def test_a_sweep_of_two_tasks_says_the_auto_objective_ranks_the_other_task_last(
        tmp_path, store, capsys):
    gradexp.sweep(f"tracking.uri={store}", "data=linear,blobs", *QUICK, launch_dir=tmp_path)
    said = " ".join(capsys.readouterr().out.split())
    assert ("warning: this sweep's jobs are of 2 tasks: sweep.objective=auto ranks them by "
            "val/mse, which its classification jobs (e.g. data=blobs) do not log: they rank "
            "last.") in said
    assert len(all_runs(store)) == 3  # the parent and both jobs, recorded in full


def test_a_typo_in_best_per_is_told_the_key_it_meant():
    from gradexp.sweep_checks import check_summary_keys, config_keys

    cfg = compose_config("sweep.best_per=[optimizer.nam]")
    with pytest.raises(ConfigError, match=r"; did you mean optimizer\.name\?$"):
        check_summary_keys(cfg, config_keys(cfg))


def test_summary_keys_accept_any_jobs_keys_and_the_unswept_default_seed():
    """aggregate_over's default [seed] stands when seed is not swept; a best_per key that only
    some jobs have (model.hidden: model=mlp's, not linear's) is one of the sweep's keys."""
    from gradexp.sweep_checks import check_summary_keys, config_keys

    keys = {**config_keys(compose_config("model=linear")), **config_keys(compose_config(
        "model=mlp"))}
    cfg = compose_config("sweep.best_per=[model.hidden,optimizer.name]",
                         "sweep.aggregate_over=[seed,optimizer]")
    check_summary_keys(cfg, keys)  # no error


# ---------------------------------------------------------------- a job that fails on its own
@pytest.mark.heavy  # 10.8 s alone (TensorFlow's first import in the process): one job trains
def test_a_job_failing_before_its_run_opens_is_listed_failed_and_fails_the_sweep(tmp_path, store):
    (tmp_path / "houses_num.csv").write_text(HOUSES)
    printed = io.StringIO()
    sweep = ("data=csv", "data.path=missing.csv,houses_num.csv", "data.target=price",
             f"hydra.sweep.dir={tmp_path / 'sweep'}", *QUICK)
    with pytest.raises(gradexp.GradexpError, match=r"^1 of 2 jobs failed") as failed, \
            contextlib.redirect_stdout(printed):
        gradexp.sweep(f"tracking.uri={store}", *sweep, launch_dir=tmp_path)
    assert failed.value.exit_code == 1
    client = MlflowClient(store)
    (parent,) = [run for run in all_runs(store) if "mlflow.parentRunId" not in run.data.tags]
    assert parent.info.status == "FAILED"
    # Read in MLflow, where no line is "above" it: where each job's reason is kept.
    assert parent.data.tags["gradexp.status_reason"] == (
        "1 of 2 jobs failed (each child run's gradexp.status_reason tag says why; a job that "
        "failed before its run opened, sweep_summary.json)")
    text = open(client.download_artifacts(parent.info.run_id, "sweep_summary.json")).read()
    # JSON, strictly (QA: a bare NaN for the failed job's objective, which JSON.parse refuses)
    summary = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    rows = {row["run_name"]: row for row in summary["children"]}
    assert set(rows) == {"data.path=missing.csv", "data.path=houses_num.csv"}
    assert rows["data.path=houses_num.csv"]["status"] == "FINISHED"
    missing = rows["data.path=missing.csv"]
    assert missing["status"] == "FAILED" and missing["run_id"] is None
    assert missing["objective"] is None and missing["final_loss"] is None
    assert missing["reason"].startswith("data.path=missing.csv:")
    table = printed.getvalue()
    assert "data.path=missing.csv" in table and "FAILED" in table
    assert "no run has the sweep objective" not in table
    # The file made, the sweep again into the same folder: the old failure is not this sweep's
    (tmp_path / "missing.csv").write_text(HOUSES)
    with contextlib.redirect_stdout(io.StringIO()) as again:  # no GradexpError: none failed
        results = gradexp.sweep(f"tracking.uri={store}", *sweep, "sweep.skip_finished=true",
                                launch_dir=tmp_path)
    assert [result.final_loss > 0 for result in results] == [True]  # the FINISHED one reused
    # named by the swept key, as its child run is (QA: by every override of the command line)
    assert "skipped data.path=houses_num.csv: the same config FINISHED as run " in again.getvalue()


@pytest.mark.slow
def test_the_command_line_exits_1_when_a_job_failed_before_its_run_opened(tmp_path):
    (tmp_path / "houses_num.csv").write_text(HOUSES)
    done = run_cli("-m", "data=csv", "data.path=missing.csv,houses_num.csv", "data.target=price",
                   *QUICK, cwd=tmp_path, timeout=180)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1, done.stderr[-3000:]
    assert errors[0].startswith("error: data.path=missing.csv:"), errors
    assert errors[-1].startswith("error: 1 of 2 jobs failed"), errors
    assert "data.path=missing.csv" in done.stdout and "FAILED" in done.stdout


CLASSES_LOADER = '''
import numpy as np
from gradexp.data import Dataset, Split

def load():
    x = np.linspace(0, 1, 60, dtype="float32")[:, None]
    y = np.eye(2, dtype="float32")[(x[:, 0] > 0.5).astype(int)]
    return Dataset("halves", "classification", x[:40], y[:40], Split(x[40:], y[40:]),
                   labels=[0, 1])
'''


@pytest.mark.heavy  # ~10 s (-n 2, --durations)
def test_a_loader_returning_its_own_task_is_judged_by_its_runs_not_the_config(tmp_path, store,
                                                                            monkeypatch):
    # data.task says regression (data=custom's default), but the loader's Dataset is a
    # classification: val/accuracy is what its runs log, so the sweep must not refuse it.
    (tmp_path / "halves_loader.py").write_text(CLASSES_LOADER)
    monkeypatch.syspath_prepend(str(tmp_path))
    with contextlib.redirect_stdout(io.StringIO()):
        results = gradexp.sweep(f"tracking.uri={store}", "data=custom",
                                "data._target_=halves_loader.load",
                                "loss=categorical_crossentropy", "optimizer=sgd,adam",
                                "sweep.objective=val/accuracy", *QUICK, launch_dir=tmp_path)
    assert len(results) == 2
    assert all(0 <= result.metrics["val/accuracy"] <= 1 for result in results)


def test_keys_only_an_optuna_search_creates_are_not_refused():
    from gradexp.sweep_checks import check_summary_keys, config_keys

    # Optuna's jobs are not composed up front: a key its search adds (+model.kwargs.width)
    # is in none of the launch config's keys, yet every job will have it
    cfg = compose_config("sweep.best_per=[model.kwargs.width]")
    check_summary_keys(cfg, config_keys(cfg), ["+model.kwargs.width"])
    with pytest.raises(ConfigError, match="model.kwargs.width is not a key of the config"):
        check_summary_keys(cfg, config_keys(cfg))


@pytest.mark.slow
def test_a_job_that_stops_the_sweep_ends_the_parent_failed_not_killed(tmp_path):
    # sweep.continue_on_failure=false: the failing job stops the sweep, nothing is killed;
    # the parent was left to the exit hook for interrupts, which marked it KILLED.
    from conftest import empty_store

    store = empty_store(tmp_path)
    done = run_cli("-m", f"tracking.uri={store}", "optimizer.learning_rate=0.1,1000,0.01",
                   "sweep.continue_on_failure=false", "trainer.epochs=10", "gradcheck=off",
                   "tracking.log_model=false", cwd=tmp_path, timeout=180)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    runs = {run.info.run_name: run for run in all_runs(store)}
    parent = next(run for name, run in runs.items() if name.startswith("sweep:"))
    assert parent.info.status == "FAILED"
    assert parent.data.tags["gradexp.status_reason"].startswith(
        "the sweep stopped before its end: the loss or its gradient became NaN or infinite")
    assert runs["optimizer.learning_rate=0.1"].info.status == "FINISHED"
    assert "final_loss" in runs["optimizer.learning_rate=0.1"].data.metrics
    assert runs["optimizer.learning_rate=1000"].info.status == "FAILED"
    assert "optimizer.learning_rate=0.01" not in runs  # the sweep stopped at the failure


def test_a_sweep_in_python_stopped_by_a_job_ends_its_parent_failed_at_once(tmp_path):
    # gradexp.sweep in a notebook: the parent was left to the interpreter's exit, RUNNING for
    # as long as the session lived
    from conftest import empty_store
    from gradexp.tag_keys import REASON_TAG

    store = empty_store(tmp_path)
    with pytest.raises(gradexp.GradexpError) as stopped:
        gradexp.sweep(f"tracking.uri={store}", "optimizer.learning_rate=0.1,1000",
                      "sweep.continue_on_failure=false", "trainer.epochs=10", "gradcheck=off",
                      "tracking.log_model=false", launch_dir=tmp_path)
    assert stopped.value.exit_code == 1
    runs = {run.info.run_name: run for run in all_runs(store)}
    parent = next(run for name, run in runs.items() if name.startswith("sweep:"))
    assert parent.info.status == "FAILED"
    assert parent.data.tags[REASON_TAG] == f"the sweep stopped before its end: {stopped.value}"
