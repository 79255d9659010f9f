"""sweep.pruner (issue 20 item 4): Optuna's pruners stop a sweep's unpromising jobs early.

Seed 004's line, SGD, evaluated every 10 epochs: learning rates 0.1 and 0.3 reach the line,
0.0001 barely moves (val/mse ~30 against ~0.01). Each pruner judges the bad rate (the last job)
at its first evaluation against the jobs before it and stops it there; the good ones, the best
(0.3) judged after 0.1, train to the end. median (one startup trial) over 100 epochs; asha and
hyperband over 20, where both judge at epoch 10 only: asha's next rung is 40 (Optuna's
reduction factor 4), and hyperband has one bracket (trainer.epochs < 3x the first evaluation),
so every job meets the others there. (With more brackets Optuna spreads the jobs over them by a
hash of the study's name and compares a job only with those of its own: docs/sweeps.md.)
Real Hydra sweeps, a real sqlite store, a real Optuna journal beside it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest

import gradexp
from conftest import empty_store, run_cli
from gradexp.pruning import JOURNAL_FILE, PRUNING_FILE
from gradexp.tag_keys import PRUNED_TAG

RATES = "optimizer.learning_rate=0.1,0.3,0.0001"
PRUNED = ("sweep.pruner=median", "sweep.pruner_startup_trials=1", "eval.every=10")
TINY = ("gradcheck=off", "tracking.log_model=false")


def children_and_parent(folder: Path, experiment: str = "gradexp"):
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = {float(r.data.params["optimizer.learning_rate"]): r for r in runs
                if "mlflow.parentRunId" in r.data.tags}
    (parent,) = parents
    return client, parent, children


def trial_states(folder: Path, experiment: str = "gradexp"):
    """The study of the one sweep of `experiment` in the journal, and its trials' states."""
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / JOURNAL_FILE)))
    (summary,) = [s for s in optuna.get_all_study_summaries(storage)
                  if s.study_name.startswith(f"{experiment}-")]
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    return study, [t.state.name for t in study.trials]


def assert_bad_rate_pruned(folder: Path, epochs: int = 100, experiment: str = "gradexp") -> None:
    """What a person sees in MLflow and the study after the sweep of `epochs` epochs."""
    client, parent, children = children_and_parent(folder, experiment)
    assert set(children) == {0.1, 0.3, 0.0001}
    assert all(run.info.status == "FINISHED" for run in children.values())
    bad = children[0.0001]
    assert bad.data.tags[PRUNED_TAG] == "10"  # stopped at its first evaluation
    assert [m.step for m in client.get_metric_history(bad.info.run_id, "loss")][-1] == 10
    val = client.get_metric_history(bad.info.run_id, "val/mse")
    assert [m.step for m in val] == [10] and val[0].value > 1  # its objective there, as usual
    assert bad.data.metrics["val/mse"] == val[0].value
    for rate in (0.1, 0.3):  # the good ones trained to the end, unmarked
        assert PRUNED_TAG not in children[rate].data.tags
        assert max(m.step for m in client.get_metric_history(children[rate].info.run_id,
                                                             "loss")) == epochs
        assert children[rate].data.metrics["val/mse"] < 0.02
    # The sweep: the best is a job that trained to the end; the pruned one is marked.
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["gradexp.best_run_id"] == children[0.3].info.run_id
    assert parent.data.metrics["children_pruned"] == 1
    summary = json.loads(Path(client.download_artifacts(parent.info.run_id,
                                                        "sweep_summary.json")).read_text())
    marks = {row["run_id"]: row["pruned_at_epoch"] for row in summary["children"]}
    assert marks == {children[0.1].info.run_id: None, children[0.3].info.run_id: None,
                     bad.info.run_id: 10}
    # Optuna's study beside mlflow.db: two trials complete, the bad one PRUNED.
    study, states = trial_states(folder, experiment)
    assert sorted(states) == ["COMPLETE", "COMPLETE", "PRUNED"]
    pruned = next(t for t in study.trials if t.state.name == "PRUNED")
    assert pruned.intermediate_values == {10: pytest.approx(val[0].value)}


PRUNERS = {"median": (PRUNED, 100),
           "asha": (("sweep.pruner=asha", "eval.every=10", "trainer.epochs=20"), 20),
           "hyperband": (("sweep.pruner=hyperband", "eval.every=10", "trainer.epochs=20"), 20)}


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory) -> Path:
    """One launch folder (one mlflow.db, one optuna.journal) for the pruners' sweeps, each in an
    experiment of its own: a new sqlite store takes MLflow seconds to create (this one is a copy
    of an empty one, conftest.empty_store)."""
    folder = tmp_path_factory.mktemp("pruners")
    empty_store(folder)  # mlflow.db, the launch folder's default store
    return folder


@pytest.mark.parametrize("pruner", list(PRUNERS))
@pytest.mark.heavy  # ~3 s
def test_a_bad_learning_rate_is_pruned_while_good_ones_finish(pruner, shared_store, capsys):
    overrides, epochs = PRUNERS[pruner]
    results = gradexp.sweep(RATES, *overrides, *TINY, f"tracking.experiment={pruner}",
                            launch_dir=shared_store)
    assert [result.epochs for result in results] == [epochs, epochs, 10]
    assert math.isfinite(results[2].objective_value)  # returned to the sweeper as usual
    assert_bad_rate_pruned(shared_store, epochs, pruner)
    out = capsys.readouterr().out
    assert f"pruned at epoch 10 by sweep.pruner={pruner}" in out
    assert "pruned@10" in out  # the sweep table marks it


@pytest.mark.heavy  # ~2.1 s
def test_pruner_none_changes_nothing(tmp_path):
    empty_store(tmp_path)  # the launch folder's default store, as MLflow makes it
    results = gradexp.sweep(RATES, "eval.every=10", *TINY, launch_dir=tmp_path)
    assert [result.epochs for result in results] == [100, 100, 100]
    client, parent, children = children_and_parent(tmp_path)
    assert all(PRUNED_TAG not in run.data.tags for run in children.values())
    assert "children_pruned" not in parent.data.metrics
    assert not (tmp_path / JOURNAL_FILE).exists()  # no study is made
    assert not list(tmp_path.glob(f"multirun/*/*/{PRUNING_FILE}"))


def test_a_bad_pruner_value_is_one_line(tmp_path):
    with pytest.raises(gradexp.GradexpError) as error:
        gradexp.sweep(RATES, "sweep.pruner=sometimes", *TINY, launch_dir=tmp_path)
    line = error.value.line
    assert "\n" not in line and "sweep.pruner" in line and "sometimes" in line
    assert "median" in line and "hyperband" in line


@pytest.mark.slow
def test_joblib_jobs_in_other_processes_prune_the_bad_rate(tmp_path):
    # Two workers, four jobs: two good ones first, side by side, that train the same numbers
    # (they differ only in their progress lines), so neither is judged worse than the other;
    # each bad one starts once a good one has finished, and is judged against it at epoch 10.
    done = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                   "optimizer.learning_rate=0.3,0.0001", "trainer.log_every=10,5",
                   "trainer.deterministic=true", *PRUNED, *TINY, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pruned@10" in done.stdout
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 4 and all(r.info.status == "FINISHED" for r in children)
    marks = sorted((float(r.data.params["optimizer.learning_rate"]),
                    r.data.tags.get(PRUNED_TAG)) for r in children)
    assert marks == [(0.0001, "10"), (0.0001, "10"), (0.3, None), (0.3, None)]
    for run in children:
        last = max(m.step for m in client.get_metric_history(run.info.run_id, "loss"))
        assert last == (10 if PRUNED_TAG in run.data.tags else 100)
    _, states = trial_states(tmp_path)
    assert sorted(states) == ["COMPLETE", "COMPLETE", "PRUNED", "PRUNED"]


@pytest.mark.slow
def test_the_optuna_sweeper_prunes_its_own_trials(tmp_path):
    # The grid in the seeded sampler's order: 0.0001 (the startup trial), then 0.00001, judged
    # worse at epoch 10 and pruned, then 0.1 and 0.3 to the end.
    done = run_cli("-m", "hydra/sweeper=optuna", "hydra/sweeper/sampler=grid",
                   "hydra.sweeper.sampler.seed=0",
                   "optimizer.learning_rate=choice(0.3,0.1,0.0001,0.00001)", *PRUNED, *TINY,
                   "trainer.epochs=50", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    study, _ = trial_states(tmp_path)  # the sweeper's study: the jobs reported to its trials
    states = {t.params["optimizer.learning_rate"]: t.state.name for t in study.trials}
    assert states == {0.0001: "COMPLETE", 0.00001: "PRUNED", 0.1: "COMPLETE", 0.3: "COMPLETE"}
    pruned = next(t for t in study.trials if t.state.name == "PRUNED")
    assert list(pruned.intermediate_values) == [10]
    assert study.best_trial.params == {"optimizer.learning_rate": 0.3}
    _, _, children = children_and_parent(tmp_path)
    assert children[0.00001].data.tags[PRUNED_TAG] == "10"
    assert all(run.info.status == "FINISHED" for run in children.values())


@pytest.mark.heavy  # ~6 s
def test_the_same_hyperband_sweep_run_twice_prunes_the_same_jobs(tmp_path):
    # 30 epochs evaluated every 10: two brackets (one judges at 10, one first at 30, the end),
    # chosen by Optuna from a hash of the study's name and the trial's number. The study is
    # named from the sweep, so a second run of it draws the same brackets; its own study is new
    # (the first run's is kept beside it), so it is not judged against the first run's jobs.
    sweep = ("optimizer.learning_rate=0.3,0.0001,0.1,0.00001", "sweep.pruner=hyperband",
             "eval.every=10", "trainer.epochs=30", "seed=3", *TINY)
    marks = []
    empty_store(tmp_path)  # the launch folder's default store, as MLflow makes it
    for _ in range(2):
        gradexp.sweep(*sweep, launch_dir=tmp_path)
        from mlflow import MlflowClient

        client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        parents = client.search_runs(["1"], "tags.`gradexp.sweep` = 'true'",
                                     order_by=["attributes.start_time DESC"])
        children = client.search_runs(
            ["1"], f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'")
        marks.append({float(r.data.params["optimizer.learning_rate"]):
                      r.data.tags.get(PRUNED_TAG) for r in children})
    assert len(marks[0]) == 4 and marks[0] == marks[1]
    # With seed=3 the study's name puts the first two jobs in the bracket judged at 10 and the
    # last two in the other: 0.0001 is stopped there, 0.00001 trains to the end (the name is
    # the digest of these overrides: change them and the brackets move; pick another seed).
    assert marks[0] == {0.3: None, 0.0001: "10", 0.1: None, 0.00001: None}
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / JOURNAL_FILE)))
    (name,) = [s.study_name for s in optuna.get_all_study_summaries(storage)
               if not s.study_name.endswith("-earlier-1")]
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    assert names == {name, f"{name}-earlier-1"} and name.startswith("gradexp-pruning-")
    for study in names:
        assert len(optuna.load_study(study_name=study, storage=storage).trials) == 4


@pytest.mark.parametrize("pruner", ["asha", "median"])
@pytest.mark.heavy  # ~4 s
def test_a_packed_group_prunes_the_bad_rate_as_a_sequential_sweep_does(pruner, tmp_path, capsys):
    # asha: the group judges its jobs at epoch 10, side by side, and the bad one stops updating
    # while the others train on; median: the group trains to the end and each job is judged in
    # its replayed run, one after another. Either way the records a sequential sweep leaves.
    overrides, epochs = PRUNERS[pruner]
    empty_store(tmp_path)  # the launch folder's default store, as MLflow makes it
    results = gradexp.sweep("hydra/launcher=packed", RATES, *overrides, *TINY,
                            f"tracking.experiment={pruner}", launch_dir=tmp_path)
    assert [result.epochs for result in results] == [epochs, epochs, 10]
    assert_bad_rate_pruned(tmp_path, epochs, pruner)
    captured = capsys.readouterr()
    assert "packed 3 of 3 jobs in 1 program" in captured.err
    assert f"pruned at epoch 10 by sweep.pruner={pruner}" in captured.out
    assert "pruned@10" in captured.out
    # the launcher's line for the job: whether its group stopped it
    (line,) = [line for line in (captured.out + captured.err).splitlines()
               if "#2 : optimizer.learning_rate=0.0001 " in line]
    assert line.endswith("(packed; sweep.pruner stopped it at epoch 10 while its group "
                         "trained on)" if pruner == "asha" else "(packed)")


@pytest.mark.heavy  # 4 short jobs
def test_pruned_replicates_are_left_out_of_their_configurations_mean(tmp_path, capsys):
    """Replicates under asha: a pruned job's objective is an early epoch's, so its group counts
    it as pruned instead of averaging it; the bad rate, every replicate pruned, is n=0."""
    empty_store(tmp_path)
    gradexp.sweep("optimizer.learning_rate=0.3,0.0001", "seed=0,1", "sweep.pruner=asha",
                  "eval.every=10", "trainer.epochs=20", *TINY, launch_dir=tmp_path)
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    summary = json.loads(Path(client.download_artifacts(parent.info.run_id,
                                                        "sweep_summary.json")).read_text())
    groups = {g["params"]["optimizer.learning_rate"]: g for g in summary["groups"]}
    for rate, group in groups.items():
        mine = [c for c in children if c.data.params["optimizer.learning_rate"] == rate]
        whole = [c for c in mine if PRUNED_TAG not in c.data.tags]
        assert group["n"] == len(whole)
        assert sorted(group["runs"]) == sorted(c.info.run_id for c in whole)  # only those
        assert group["pruned"] == len(mine) - len(whole)
    assert groups["0.0001"]["n"] == 0 and groups["0.0001"]["pruned"] == 2
    assert groups["0.0001"]["mean"] is None
    assert groups["0.3"]["n"] >= 1 and [g["params"] for g in summary["groups"]][0] == {
        "optimizer.learning_rate": "0.3"}
    assert "2 pruned" in capsys.readouterr().out


@pytest.mark.parametrize(("overrides", "jobs", "says"), [
    # the only evaluation is the last epoch, which is never judged
    (("sweep.pruner=asha", "trainer.epochs=5"), 3, "no evaluation before the last epoch"),
    (("sweep.pruner=median", "eval.every=10", "trainer.epochs=20",
      "sweep.pruner_warmup_epochs=50", "sweep.pruner_startup_trials=1"), 3,
     "sweep.pruner_warmup_epochs=50"),
    # the docs' own example: 4 jobs, and median waits for 5 to finish unpruned
    (("sweep.pruner=median", "eval.every=10", "trainer.epochs=20"), 4,
     "sweep.pruner_startup_trials=5 jobs have finished unpruned, and this sweep has 4"),
    (("sweep.pruner=median", "eval.every=10", "trainer.epochs=20",
      "sweep.pruner_startup_trials=1"), 4, None),
    (("sweep.pruner=asha", "eval.every=10", "trainer.epochs=20"), 3, None),
    # an objective a job does not have at its evaluations (QA: nothing said so)
    (("sweep.pruner=asha", "eval.every=2", "trainer.epochs=12", "sweep.objective=final_loss"),
     4, "sweep.objective=final_loss is known only at a run's end, not at its evaluations"),
    (("sweep.pruner=asha", "eval.every=2", "trainer.epochs=12", "data.n_val=0"), 4,
     "no run can measure sweep.objective=val/mse (data.n_val=0), so each job reports its "
     "final_loss"),
    (("sweep.pruner=median", "eval.every=2", "trainer.epochs=12", "data=sklearn",
      "data.name=diabetes", "data.test_fraction=0.2", "sweep.objective=test/mse"), 4,
     "sweep.objective=test/mse is measured only at a run's end"),
    (("sweep.pruner=asha", "eval.every=2", "trainer.epochs=12", "sweep.objective=train/mse"),
     4, None),
])
def test_a_pruner_that_can_stop_no_job_is_said_at_the_sweeps_start(overrides, jobs, says):
    # Such a sweep ended with every job FINISHED and nothing said: it read as a sweep whose
    # jobs were all worth finishing.
    from conftest import compose_config
    from gradexp.pruning import judges_nothing

    note = judges_nothing(compose_config(*overrides), jobs)
    if says is None:
        assert note is None
    else:
        assert note.startswith(f"sweep.pruner={overrides[0].split('=')[1]} will stop no job: ")
        assert says in note


@pytest.mark.heavy  # 3 short jobs
def test_the_note_comes_once_on_the_sweeps_console(tmp_path, capsys):
    empty_store(tmp_path)
    optuna.logging.set_verbosity(optuna.logging.INFO)
    gradexp.sweep(RATES, "sweep.pruner=asha", "trainer.epochs=3", "gradcheck=off",
                  "tracking.log_model=false", launch_dir=tmp_path)
    # the caller's own studies still say their lines (QA: left at WARNING by the sweep)
    assert optuna.logging.get_verbosity() == optuna.logging.INFO
    notes = [line for line in capsys.readouterr().err.splitlines() if "will stop no job" in line]
    assert notes == ["note: sweep.pruner=asha will stop no job: no evaluation before the last "
                     "epoch is judged (trainer.epochs=3, eval.every=null (about ten a run, at "
                     "trainer.log_every)): evaluate more often (eval.every) or train longer"]


@pytest.mark.heavy  # ~6 s: three short jobs
def test_a_reused_pruned_run_is_told_pruned_to_the_optuna_study(tmp_path):
    # sweep.skip_finished under the Optuna sweeper told a reused pruned run's trial COMPLETE,
    # its early epoch's value a finished trial's (QA)
    common = ("trainer.epochs=20", "eval.every=10", *TINY, "sweep.pruner=median",
              "sweep.pruner_startup_trials=1")
    empty_store(tmp_path)
    gradexp.sweep(RATES, *common, launch_dir=tmp_path)  # 0.0001 pruned at epoch 10
    gradexp.sweep("hydra/sweeper=optuna", "hydra/sweeper/sampler=grid",
                  "optimizer.learning_rate=choice(0.1,0.3,0.0001)", *common,
                  "sweep.skip_finished=true", launch_dir=tmp_path)
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / JOURNAL_FILE)))
    (name,) = [s.study_name for s in optuna.get_all_study_summaries(storage)
               if "-pruning-" not in s.study_name]
    trials = optuna.load_study(study_name=name, storage=storage).trials
    states = {t.params["optimizer.learning_rate"]: t.state.name for t in trials}
    assert states == {0.1: "COMPLETE", 0.3: "COMPLETE", 0.0001: "PRUNED"}
    (pruned,) = [t for t in trials if t.state.name == "PRUNED"]
    assert list(pruned.intermediate_values) == [10]
