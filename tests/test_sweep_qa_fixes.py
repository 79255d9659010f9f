"""What a QA pass found a sweep did not say: compare hid that a run was pruned, no child run named
its Optuna trial, a dict-style search space stopped with OmegaConf's words, and
sweep.aggregate_over on a key not swept gave no replicates table and no word."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient
from test_compare import record, sweep_parent, table
from test_optuna import _nothing_recorded

import conftest
import gradexp
from gradexp.compare import main as compare_main

TINY = ("gradcheck=off", "tracking.log_model=false")


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: no row is folded


def compare(capsys, *args: str) -> tuple[int, str]:
    code = compare_main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return code, out


# ---------------------------------------------------------------- A: compare marks a pruned run
def test_compare_marks_a_pruned_run_as_the_sweeps_table_does(capsys, tmp_path):
    """The pruned run's val/mse (epoch 2's) is the lowest: ranked after the finished runs, it
    was shown plain FINISHED, as if a finished run had ranked below worse ones for nothing."""
    uri = conftest.empty_store(tmp_path)
    client = MlflowClient(uri)
    experiment = client.create_experiment("asha")
    parent = sweep_parent(client, experiment, "optimizer.learning_rate=0.0001,0.05,0.01",
                          "optimizer.learning_rate", start=0)
    for start, (rate, value, tags) in enumerate([
            ("0.0001", 0.5, {"gradexp.pruned_at_epoch": "2"}), ("0.05", 1.0, None),
            ("0.01", 2.0, None)], start=1):
        record(client, experiment, f"optimizer.learning_rate={rate}",
               {"optimizer.learning_rate": rate}, {"val/mse": value}, parent=parent,
               start=start, tags=tags)
    _, out = compare(capsys, "--tracking-uri", uri, "--sweep", parent)
    header, rows = table(out)
    status = header.index("status")
    rate = header.index("optimizer.learning_rate")
    assert [(row[rate], row[status]) for row in rows] == [
        ("0.05", "FINISHED"), ("0.01", "FINISHED"), ("0.0001", "FINISHED pruned@2")]


@pytest.mark.heavy  # a 3-job asha sweep, 6 epochs each
def test_a_real_pruned_job_reads_the_same_in_the_sweep_table_and_in_compare(tmp_path, capsys):
    uri = conftest.empty_store(tmp_path)
    gradexp.sweep("optimizer.learning_rate=0.0001,0.05,0.01", "trainer.epochs=6", "eval.every=2",
                  "sweep.pruner=asha", f"tracking.uri={uri}", *TINY, launch_dir=tmp_path)
    sweep_out = capsys.readouterr().out
    marks = {line.split("│")[2].strip() for line in sweep_out.splitlines()
             if "pruned@" in line}
    assert marks and all(mark.startswith("FINISHED pruned@") for mark in marks), sweep_out
    _, out = compare(capsys, "--tracking-uri", uri, "--sweep", "latest")
    header, rows = table(out)
    status = header.index("status")
    shown = {row[status] for row in rows if "pruned@" in row[status]}
    assert shown == marks


# ---------------------------------------------------------------- B: each child names its trial
@pytest.mark.heavy  # two 2-trial searches, 2 epochs a trial
def test_each_optuna_child_run_names_its_trial_and_the_studys_best_is_found(tmp_path):
    """The search run twice continues its study: the parent's best trial may be the first
    sweep's; the child run tagged with that number is the one that scored best_value."""
    uri = conftest.empty_store(tmp_path)
    search = ("hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.sampler.seed=0",
              "optimizer.learning_rate=interval(0.01,0.5)", "trainer.epochs=2",
              f"tracking.uri={uri}", *TINY)
    gradexp.sweep(*search, launch_dir=tmp_path)
    gradexp.sweep(*search, launch_dir=tmp_path)
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    children = [run for run in runs if "mlflow.parentRunId" in run.data.tags]
    trials = sorted(int(run.data.tags["gradexp.optuna.trial"]) for run in children)
    assert trials == [0, 1, 2, 3]
    newest = max((run for run in runs if "mlflow.parentRunId" not in run.data.tags),
                 key=lambda run: run.info.start_time)
    best = newest.data.tags["gradexp.optuna.best_trial"]
    (traced,) = [run for run in children if run.data.tags["gradexp.optuna.trial"] == best]
    assert traced.data.metrics["val/mse"] == pytest.approx(newest.data.metrics["best_value"])


# ---------------------------------------------------------------- C: a dict-style search space
@pytest.mark.parametrize(("written", "key", "search"), [
    ("{optimizer.learning_rate:interval(0.001,0.5)}", "optimizer.learning_rate",
     "interval(0.001,0.5)"),
    ("{optimizer.learning_rate:tag(log,interval(0.001,0.5))}", "optimizer.learning_rate",
     "tag(log,interval(0.001,0.5))"),
], ids=["interval", "tag-log"])
def test_a_dict_search_space_names_its_key_and_the_forms_that_work(tmp_path, written, key,
                                                                   search):
    """It said `error: tags=set(): Unexpected type annotation: Set[str]`; now one line, exit 2,
    nothing recorded (no parent or child run, so none left RUNNING; no study)."""
    from gradexp.api import GradexpError

    store = conftest.empty_store(tmp_path)
    with pytest.raises(GradexpError) as refused:
        gradexp.sweep("hydra/sweeper=optuna", f"hydra.sweeper.params={written}", *TINY,
                      f"tracking.uri={store}", launch_dir=tmp_path)
    assert refused.value.exit_code == 2
    assert str(refused.value) == dict_line(written, key, search)
    _nothing_recorded(store, tmp_path)


def dict_line(written: str, key: str, search: str) -> str:
    return (f"hydra.sweeper.params={written}: {key}'s {search} is not read as a search inside a "
            "dict (Hydra evaluates it first, to a value the config cannot hold); quote it: "
            f"hydra.sweeper.params={{{key}:'{search}'}}, or give it as an override of its own: "
            f"{key}={search}")


@pytest.mark.slow  # the command line, as the QA report typed it
def test_the_command_line_says_the_dict_search_space_line_and_exits_2(tmp_path):
    written = "{optimizer.learning_rate:interval(0.001,0.5)}"
    done = conftest.run_cli("-m", "hydra/sweeper=optuna", f"hydra.sweeper.params={written}",
                            cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        "error: " + dict_line(written, "optimizer.learning_rate", "interval(0.001,0.5)")]
    assert not (tmp_path / "mlflow.db").exists()  # no run opened, none left RUNNING


# ---------------------------------------------------------------- D: aggregate_over not swept
@pytest.mark.heavy  # a 2-job sweep, 1 epoch a job
def test_aggregate_over_a_key_not_swept_says_there_are_no_replicates(tmp_path, capsys):
    uri = conftest.empty_store(tmp_path)
    gradexp.sweep("optimizer.learning_rate=0.01,0.1", "sweep.aggregate_over=[trainer.seed]",
                  "trainer.epochs=1", f"tracking.uri={uri}", *TINY, launch_dir=tmp_path)
    out = capsys.readouterr().out
    assert "replicates:" not in out  # no table of replicates
    assert ("note: sweep.aggregate_over=[trainer.seed]: trainer.seed is not swept, so there are "
            "no replicates to group (sweep it too, e.g. -m trainer.seed=0,1,2)") in out.splitlines()


def test_only_an_aggregate_over_that_names_no_swept_key_is_said():
    from gradexp.replicates import unswept_note

    assert unswept_note(["optimizer.learning_rate"], ["trainer.seed"]).startswith(
        "note: sweep.aggregate_over=[trainer.seed]: trainer.seed is not swept")

    assert unswept_note(["optimizer.learning_rate"], ["seed"]) is None  # most sweeps
    assert unswept_note(["optimizer.learning_rate", "trainer.seed"], ["trainer.seed"]) is None
