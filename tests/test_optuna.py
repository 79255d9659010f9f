"""gradexp's Optuna sweeper (`hydra/sweeper=optuna`, src/hydra_plugins/gradexp_optuna): Hydra's
search-space syntax, the objective's own direction, failed trials told as failed, and a study
that a second run of the same search continues."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import optuna
import pytest
from omegaconf import OmegaConf

from conftest import empty_store, run_cli
from hydra_plugins.gradexp_optuna.search_space import grid, job_overrides, search_space

TINY = ("trainer.epochs=5", "gradcheck=off", "tracking.log_model=false")


def test_hydras_sweep_syntax_becomes_optunas_distributions():
    found, fixed = search_space([
        "optimizer=choice(sgd,adam)", "loss=mse,mae", "model.seed=range(0,3)",
        "optimizer.learning_rate=tag(log, interval(0.0001, 0.5))", "data.noise=interval(0.1,1)",
        "trainer.batch_size=range(8,64,8)", "data.outliers=range(0.1,0.4,0.1)",
        "trainer.epochs=7"])
    assert found["optimizer"] == optuna.distributions.CategoricalDistribution(["sgd", "adam"])
    assert found["loss"].choices == ("mse", "mae")
    assert found["model.seed"] == optuna.distributions.IntDistribution(0, 2)
    assert found["optimizer.learning_rate"] == optuna.distributions.FloatDistribution(
        0.0001, 0.5, log=True)
    assert found["data.noise"] == optuna.distributions.FloatDistribution(0.1, 1.0)
    assert found["trainer.batch_size"] == optuna.distributions.IntDistribution(8, 56, step=8)
    assert fixed == {"trainer.epochs": "7"}
    discrete = {key: found[key] for key in ("model.seed", "trainer.batch_size", "data.outliers")}
    values = grid(discrete)
    assert values["model.seed"] == [0, 1, 2] and values["trainer.batch_size"][-1] == 56
    from hydra.core.override_parser.overrides_parser import OverridesParser

    (outliers,) = OverridesParser.create().parse_overrides(["data.outliers=range(0.1,0.4,0.1)"])
    hydras = list(outliers.sweep_iterator())  # what Hydra's basic sweeper would run
    assert values["data.outliers"] == pytest.approx(hydras) and len(hydras) >= 3
    with pytest.raises(ValueError, match="optimizer.learning_rate is continuous"):
        grid({"optimizer.learning_rate": found["optimizer.learning_rate"]})


def test_a_trials_job_writes_its_choices_as_the_command_line_did():
    # a `true,false` choice came back from Optuna as Python's True: child runs were named
    # `data.shuffle=True` where the command line said `true` (QA)
    found, fixed = search_space(["model.use_bias=true,false", "model.hidden=null,[8]",
                                 "trainer.epochs=7"])
    assert job_overrides({"model.use_bias": True, "model.hidden": None}, fixed) == (
        "model.use_bias=true", "model.hidden=null", "trainer.epochs=7")
    assert job_overrides({"model.use_bias": False, "optimizer": "adam"}, {}) == (
        "model.use_bias=false", "optimizer=adam")


def study_in(folder: Path) -> optuna.Study:
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / "optuna.journal")))
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage)


@pytest.mark.slow
def test_a_search_maximizes_r2_unasked_and_a_diverging_trial_is_told_failed(tmp_path):
    # No direction given: val/r2 is maximized. The grid runs both rates; 1000 diverges.
    done = run_cli("-m", "hydra/sweeper=optuna", "hydra/sweeper/sampler=grid",
                   "sweep.objective=val/r2", "optimizer.learning_rate=choice(0.1,1000)", *TINY,
                   "trainer.epochs=10", cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]  # a failed job fails the sweep, after every job ran
    assert "2 to run (maximize the objective)" in out
    study = study_in(tmp_path)
    states = {t.params["optimizer.learning_rate"]: t.state.name for t in study.trials}
    assert states == {0.1: "COMPLETE", 1000: "FAIL"}
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    results = OmegaConf.load(next(tmp_path.glob("multirun/*/*/optimization_results.yaml")))
    assert results.best_params == {"optimizer.learning_rate": 0.1}
    assert 0.5 < results.best_value <= 1  # an r2
    # Optuna's INFO lines go to the sweep's optuna.log, not the console.
    assert "A new study created" not in out
    assert "A new study created" in next(tmp_path.glob("multirun/*/*/optuna.log")).read_text()


@pytest.mark.slow
def test_the_same_search_run_again_continues_its_study(tmp_path):
    search = ("-m", "hydra/sweeper=optuna", "hydra.sweeper.sampler.seed=0",
              "hydra.sweeper.n_trials=2", "optimizer.learning_rate=interval(0.01,0.5)", *TINY)
    first = run_cli(*search, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "0 trials so far, 2 to run (minimize the objective)" in first.stdout
    second = run_cli(*search, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "2 trials so far, 2 to run" in second.stdout
    study = study_in(tmp_path)
    rates = [t.params["optimizer.learning_rate"] for t in study.trials]
    assert len(rates) == 4 and len(set(rates)) == 4  # the seeded sampler moved on
    assert all(t.state.name == "COMPLETE" and math.isfinite(t.value) for t in study.trials)
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 2
    newest = max(parents, key=lambda r: r.info.start_time)
    assert newest.data.tags["gradexp.optuna.study"] == study.study_name
    assert int(newest.data.tags["gradexp.optuna.best_trial"]) == study.best_trial.number


@pytest.mark.heavy  # ~8 s
def test_a_batch_of_trials_packs_and_tells_the_values_the_basic_launcher_tells(
        tmp_path_factory, capsys):
    # One batch of n_jobs=4 trials (the grid in the seeded sampler's order), asha judging them at
    # epoch 10: packed into one program, then each trial's run recorded as the basic launcher
    # records it. The study's trials (params, state, value, reports) and the child runs match.
    from mlflow import MlflowClient

    import gradexp
    from gradexp.tag_keys import PRUNED_TAG

    search = ("hydra/sweeper=optuna", "hydra/sweeper/sampler=grid",
              "hydra.sweeper.sampler.seed=0", "hydra.sweeper.n_jobs=4",
              "optimizer.learning_rate=choice(0.3,0.1,0.0001,0.00001)", "sweep.pruner=asha",
              "eval.every=10", "trainer.epochs=20", "gradcheck=off", "tracking.log_model=false")
    found = {}
    for launcher in ("packed", "basic"):
        folder = tmp_path_factory.mktemp(launcher)
        empty_store(folder)  # the launch folder's default store, as MLflow makes it
        results = gradexp.sweep(f"hydra/launcher={launcher}", *search, launch_dir=folder)
        assert len(results) == 4
        trials = {t.params["optimizer.learning_rate"]: (t.state.name, t.value,
                                                         t.intermediate_values)
                  for t in study_in(folder).trials}
        client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
        runs = {float(r.data.params["optimizer.learning_rate"]):
                (r.info.status, r.data.metrics["val/mse"], r.data.tags.get(PRUNED_TAG))
                for r in client.search_runs(["1"]) if "mlflow.parentRunId" in r.data.tags}
        found[launcher] = trials, runs
        if launcher == "packed":  # one program; the pruned trial stopped in it (the launcher)
            out = capsys.readouterr()
            assert "packed 4 of 4 jobs in 1 program" in out.err
            assert "optimizer.learning_rate=1e-05 " in "\n".join(
                line for line in (out.out + out.err).splitlines()
                if "sweep.pruner stopped it at epoch 10 while its group trained on" in line)
    (packed, packed_runs), (basic, basic_runs) = found["packed"], found["basic"]
    assert set(packed) == set(basic) == set(packed_runs) == {0.3, 0.1, 0.0001, 0.00001}
    assert "PRUNED" in {state for state, _, _ in basic.values()}  # the test judges something
    for rate, (state, value, reports) in basic.items():
        assert packed[rate][0] == state
        assert packed[rate][1] == pytest.approx(value, rel=1e-5)
        assert packed[rate][2] == pytest.approx(reports, rel=1e-5)
        assert packed_runs[rate][0] == basic_runs[rate][0] == "FINISHED"
        assert packed_runs[rate][1] == pytest.approx(basic_runs[rate][1], rel=1e-5)
        assert packed_runs[rate][2] == basic_runs[rate][2]
        if state == "COMPLETE":  # the value told is the child's objective
            assert value == pytest.approx(basic_runs[rate][1], rel=1e-6)


@pytest.mark.heavy  # ~3 s
def test_one_trial_a_batch_says_once_that_nothing_packs(tmp_path, capsys):
    import gradexp

    empty_store(tmp_path)  # the launch folder's default store, as MLflow makes it
    before = logging.getLogger("optuna").propagate
    results = gradexp.sweep("hydra/sweeper=optuna", "hydra/launcher=packed",
                            "hydra.sweeper.n_trials=2", "hydra.sweeper.sampler.seed=0",
                            "optimizer.learning_rate=interval(0.05,0.3)", *TINY,
                            launch_dir=tmp_path)
    assert len(results) == 2 and all(math.isfinite(r.objective_value) for r in results)
    # Optuna's logger as before the sweep: it wrote a person's own studies' lines into this
    # sweep's optuna.log, a FileHandler more a sweep, nothing on their console (QA)
    logger = logging.getLogger("optuna")
    assert not any(isinstance(h, logging.FileHandler) for h in logger.handlers), logger.handlers
    assert logger.propagate is before
    lines = [line for line in capsys.readouterr().err.splitlines() if "pack" in line]
    assert len(lines) == 1 and lines[0].endswith(
        "packed nothing: hydra.sweeper.n_jobs=1 launches one trial at a time, and a job alone "
        "runs sequentially (raise n_jobs to pack a batch)")


INTERRUPTED_AT_START = '''
class InterruptAtStart:
    """Ctrl-C as a job's run is about to open."""

    def on_run_begin(self, run):
        raise KeyboardInterrupt
'''


@pytest.mark.parametrize("launcher", ["basic", "packed"])
def test_an_interrupted_search_leaves_no_trial_running(tmp_path, launcher):
    # A trial left RUNNING stays so in the study forever, and a rerun of the search continues it.
    import gradexp

    (tmp_path / "interrupt_at_start.py").write_text(INTERRUPTED_AT_START)
    with pytest.raises(KeyboardInterrupt):
        gradexp.sweep("hydra/sweeper=optuna", f"hydra/launcher={launcher}",
                      "hydra.sweeper.n_jobs=2", "hydra.sweeper.n_trials=2",
                      "optimizer.learning_rate=interval(0.01,0.5)", *TINY,
                      f"tracking.uri={empty_store(tmp_path)}",
                      "+callbacks.stop._target_=interrupt_at_start.InterruptAtStart",
                      launch_dir=tmp_path)
    assert [trial.state.name for trial in study_in(tmp_path).trials] == ["FAIL", "FAIL"]


@pytest.mark.heavy  # ~3 s at a load of 4
def test_a_packed_grid_sweep_stopped_by_a_failure_leaves_no_trial_running(tmp_path):
    # The diverging first job fails and stops the sweep (sweep.continue_on_failure=false)
    # before the second job's run: the trial its group asked for is told FAIL, not left RUNNING.
    import gradexp
    from gradexp.api import GradexpError

    with pytest.raises(GradexpError):
        gradexp.sweep("hydra/launcher=packed", "sweep.pruner=asha",
                      "sweep.continue_on_failure=false", "optimizer.learning_rate=1e6,0.01",
                      *TINY, f"tracking.uri={empty_store(tmp_path)}", launch_dir=tmp_path)
    assert [trial.state.name for trial in study_in(tmp_path).trials] == ["FAIL", "FAIL"]


def test_seeds_swept_under_optuna_are_refused_not_tuned(tmp_path):
    """`seed=0,1,2` under Optuna was one more hyperparameter: each trial one seed, 'Best
    parameters: {optimizer.learning_rate: 0.185, seed: 1}' (the luckiest seed), every
    replicate group n=1. Refused before the parent opens, naming the key and what to do."""
    import gradexp
    from gradexp.api import GradexpError

    store = empty_store(tmp_path)
    with pytest.raises(GradexpError) as refused:
        gradexp.sweep("hydra/sweeper=optuna", "optimizer.learning_rate=tag(log,interval(0.01,0.5))",
                      "seed=0,1,2", *TINY, f"tracking.uri={store}", launch_dir=tmp_path)
    assert str(refused.value).startswith(
        "seed is swept under OptunaSweeper, which would tune it as a hyperparameter")
    from mlflow import MlflowClient

    assert MlflowClient(store).search_runs(["0"]) == []
    assert not (tmp_path / "optuna.journal").exists()


def test_a_search_with_nothing_to_search_is_refused(tmp_path):
    """`-m hydra/sweeper=optuna` with no search space ran its 20 trials, every one the same
    run, and reported one of them as the best parameters ({})."""
    import gradexp
    from gradexp.api import GradexpError

    store = empty_store(tmp_path)
    with pytest.raises(GradexpError) as refused:
        gradexp.sweep("hydra/sweeper=optuna", *TINY, f"tracking.uri={store}",
                      launch_dir=tmp_path)
    assert str(refused.value).startswith("OptunaSweeper has nothing to search: no key is swept")
    assert not (tmp_path / "optuna.journal").exists()


# A search space Optuna cannot take: (the override, the one line it gets). Each crashed in a
# traceback from Optuna (or an IndexError), after the sweep's parent run had opened; tag(lg, ...)
# was sampled linearly, in silence.
BAD_SPACES = [
    ("optimizer.learning_rate=interval(1.0,0.1)",
     "optimizer.learning_rate=interval(1.0,0.1): its low end 1.0 is above its high end 0.1; "
     "interval(low, high) takes low <= high, e.g. interval(0.1, 1.0)"),
    ("optimizer.learning_rate=tag(log,interval(0,1))",
     "optimizer.learning_rate=tag(log,interval(0,1)): a log-scale interval's low end must be > 0 "
     "(it is sampled by its log), but it is 0.0; tag(log, interval(low, high)) takes "
     "0 < low <= high, e.g. tag(log, interval(0.001, 1.0))"),
    ("trainer.batch_size=range(1,0)",
     "trainer.batch_size=range(1,0): it has no values (it counts up from 1 by 1 and stops before "
     "0); range(start, stop[, step]) takes start < stop (start > stop with a negative step)"),
    ("trainer.batch_size=range(1,9,0)",
     "trainer.batch_size=range(1,9,0): its step is 0, so it never reaches its stop; "
     "range(start, stop[, step]) takes a step other than 0 (1 when left out)"),
    ("optimizer.learning_rate=tag(lg,interval(0.001,0.1))",
     "optimizer.learning_rate=tag(lg,interval(0.001,0.1)): unknown tag lg; the Optuna sweeper "
     "reads the tags log (a log scale) and int (integers) on an interval: "
     "tag(log, interval(0.001, 0.1)), tag(int, interval(...)); did you mean log?"),
    ("trainer.batch_size=tag(log,range(8,64,8))",
     "trainer.batch_size=tag(log,range(8,64,8)): tag(log, ...) is not read on a choice or range"),
]


@pytest.mark.parametrize(("override", "line"), BAD_SPACES,
                         ids=["low>high", "log-low<=0", "empty-range", "step-0", "tag-lg",
                              "tag-on-range"])
def test_a_search_space_optuna_cannot_take_is_one_line(override, line):
    from gradexp.schema import ConfigError
    from hydra_plugins.gradexp_optuna.search_space import searched

    with pytest.raises(ConfigError) as refused:
        searched({}, [override, "trainer.epochs=5"])
    assert str(refused.value).startswith(line)
    # a descending range is the same values as its ascending one
    found = searched({}, ["model.seed=range(5,0,-1)", "data.noise=range(1.0,0.0,-0.25)"])
    assert found.distributions["model.seed"] == optuna.distributions.IntDistribution(1, 5)
    assert found.distributions["data.noise"] == optuna.distributions.FloatDistribution(
        0.25, 1.0, step=0.25)


def test_hydras_int_tag_searches_integers():
    # tag(int, interval(...)) is hydra-optuna-sweeper's syntax for an integer interval (Hydra
    # reads interval bounds as floats); it was refused as an unknown tag
    from hydra_plugins.gradexp_optuna.search_space import searched

    found = searched({}, ["trainer.batch_size=tag(int,interval(8,64))",
                          "model.seed=tag(log,int,interval(1,100))"])
    assert found.distributions["trainer.batch_size"] == optuna.distributions.IntDistribution(8, 64)
    assert found.distributions["model.seed"] == optuna.distributions.IntDistribution(
        1, 100, log=True)


def test_an_intervals_open_end_is_checked_just_below_it():
    # Optuna samples [low, high): interval(0.0, 1.0) fits model.dropout, in [0, 1), though 1.0
    # itself does not; the check refused it by its high end
    from hydra_plugins.gradexp_optuna.checks import candidate_jobs
    from hydra_plugins.gradexp_optuna.search_space import searched

    jobs = candidate_jobs(searched({}, ["model.dropout=interval(0.0,1.0)"]).distributions)
    assert [job["model.dropout"] for job in jobs] == [0.0, 0.9999999999999999]


def _nothing_recorded(store: str, folder: Path) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(store)
    ids = [e.experiment_id for e in client.search_experiments()]
    assert client.search_runs(ids) == []  # no parent run, no child
    assert not (folder / "optuna.journal").exists()  # no study, no trial


def _refused(tmp_path: Path, capsys, *overrides: str) -> str:
    """The one line a sweep is refused with before anything is recorded, as the command line
    prints it (exit 2)."""
    import gradexp
    from gradexp.api import GradexpError

    store = empty_store(tmp_path)
    with pytest.raises(GradexpError) as refused:
        gradexp.sweep("hydra/sweeper=optuna", "hydra.sweeper.n_trials=1", *overrides, *TINY,
                      f"tracking.uri={store}", launch_dir=tmp_path)
    _nothing_recorded(store, tmp_path)
    assert refused.value.exit_code == 2
    said = capsys.readouterr().err
    assert "Traceback" not in said
    (line,) = [line for line in said.splitlines() if line.startswith("error:")]
    assert line == f"error: {refused.value}"
    return str(refused.value)


@pytest.mark.parametrize(("override", "line"), [BAD_SPACES[0], BAD_SPACES[4]],
                         ids=["low>high", "tag-lg"])
def test_a_bad_search_space_is_refused_before_the_parent_run_opens(tmp_path, capsys, override,
                                                                    line):
    """interval(1.0,0.1) was a 38-line traceback, exit 1, and an empty KILLED parent run."""
    assert _refused(tmp_path, capsys, override) == line


@pytest.mark.parametrize(("overrides", "line"), [
    (["optimizer=sgd,adamm"],
     "optimizer=adamm: no such option; available: adagrad, adam, adamw, momentum, nadam, "
     "rmsprop, sgd"),
    (["optimizer=choice(sgd,adam)", "optimizer.learning_rate=interval(0,0.1)"],
     "optimizer.learning_rate=0.0: must be a number > 0 (the low end of "
     "optimizer.learning_rate=interval(0,0.1), which Optuna may choose)"),
], ids=["no-such-option", "interval-end"])
def test_a_value_the_search_may_choose_is_checked_before_the_parent_run_opens(
        tmp_path, capsys, overrides, line):
    """`optimizer=sgd,adamm` under Optuna said its line and exited 2, but only in the trial that
    chose adamm: the parent run was left KILLED, and the study held a FAIL trial. Each choice's
    values and each interval's ends are now checked as a basic sweep's jobs are."""
    assert _refused(tmp_path, capsys, *overrides) == line


def test_the_jobs_checked_hold_every_choice_and_each_end_of_every_interval():
    from hydra_plugins.gradexp_optuna.checks import MAX_JOBS, candidate_jobs
    from hydra_plugins.gradexp_optuna.search_space import searched

    space = searched({}, ["optimizer=sgd,adam", "loss=mse,mae",
                          "optimizer.learning_rate=interval(0.01,0.1)", "model.seed=range(0,3)"])
    jobs = candidate_jobs(space.distributions)
    assert len(jobs) == 8 and list(jobs[0]) == list(space.distributions)
    assert {(j["optimizer"], j["loss"], j["optimizer.learning_rate"], j["model.seed"])
            for j in jobs} == {(o, loss, rate, seed) for o in ("sgd", "adam")
                               for loss in ("mse", "mae")
                               for rate, seed in ((0.01, 0), (math.nextafter(0.1, 0), 2))}
    few = searched({}, [f"optimizer.learning_rate=choice({','.join(map(str, range(1, 21)))})",
                        "loss=mse,mae", "data.noise=interval(0.1,0.5)"])
    jobs = candidate_jobs(few.distributions)  # over MAX_JOBS combined: each value in one job
    assert len(jobs) == 20
    assert {j["optimizer.learning_rate"] for j in jobs} == set(range(1, 21))
    assert {j["loss"] for j in jobs} == {"mse", "mae"}
    assert {j["data.noise"] for j in jobs} == {0.1, math.nextafter(0.5, 0)}
    many = searched({}, [f"optimizer.learning_rate=choice({','.join(map(str, range(1, 200)))})"])
    jobs = candidate_jobs(many.distributions)  # at most MAX_JOBS, spread over the values
    rates = [j["optimizer.learning_rate"] for j in jobs]
    assert len(rates) == MAX_JOBS and rates[0] == 1 and rates[-1] == 199


# ------------------------------------------------------------ QA round: the study, its checks
def _study_of(folder: Path, name: str, choices: tuple, tried: tuple) -> optuna.Study:
    """A study `name` in the launch folder's journal that searched optimizer=choice(`choices`),
    with a finished trial of each of `tried`."""
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / "optuna.journal")))
    study = optuna.create_study(study_name=name, storage=storage)
    dist = optuna.distributions.CategoricalDistribution(list(choices))
    for value in tried:
        study.add_trial(optuna.trial.create_trial(params={"optimizer": value}, value=1.0,
                                                  distributions={"optimizer": dist}))
    return study


def test_a_named_study_whose_choices_changed_is_refused_before_the_parent_run(tmp_path, capsys):
    # Optuna raised `CategoricalDistribution does not support dynamic value space` at the first
    # trial: a traceback, exit 1, an empty KILLED parent and the trial left RUNNING (QA)
    import gradexp
    from gradexp.api import GradexpError

    study = _study_of(tmp_path, "mine", ("sgd", "adam"), ("sgd",))
    store = empty_store(tmp_path)
    with pytest.raises(GradexpError) as refused:
        gradexp.sweep("hydra/sweeper=optuna", "hydra.sweeper.study_name=mine",
                      "optimizer=choice(sgd,adam,rmsprop)", *TINY, f"tracking.uri={store}",
                      launch_dir=tmp_path)
    assert refused.value.exit_code == 2 and "Traceback" not in capsys.readouterr().err
    assert str(refused.value) == (
        "hydra.sweeper.study_name=mine: its trials searched optimizer=choice(sgd,adam), and this "
        "search has optimizer=choice(sgd,adam,rmsprop); Optuna cannot change a key's choices or "
        "kind within a study: name a new study (hydra.sweeper.study_name=NEW) or search "
        "optimizer as before")
    from mlflow import MlflowClient

    assert MlflowClient(store).search_runs(["0"]) == []
    assert [t.state.name for t in study.trials] == ["COMPLETE"]


def test_a_trial_optuna_refuses_as_it_is_asked_is_told_failed_not_left_running(tmp_path):
    from hydra_plugins.gradexp_optuna.optuna_sweeper import _ask

    study = _study_of(tmp_path, "mine", ("sgd", "adam"), ("sgd",))
    wider = {"optimizer": optuna.distributions.CategoricalDistribution(["sgd", "adam", "sgd2"])}
    with pytest.raises(ValueError, match="dynamic value space"):
        _ask(study, wider)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL"]


@pytest.mark.heavy  # ~4 s: two tiny jobs
def test_a_grid_study_run_again_runs_only_the_points_it_has_not_tried(tmp_path):
    # A continued grid study ran one point again n_trials times, in silence (QA)
    import gradexp

    grid_search = ("hydra/sweeper=optuna", "hydra/sweeper/sampler=grid",
                   "optimizer=choice(sgd,adam)", *TINY, "trainer.epochs=1")
    empty_store(tmp_path)
    gradexp.sweep(*grid_search, "hydra.sweeper.n_trials=1", launch_dir=tmp_path)
    gradexp.sweep(*grid_search, "hydra.sweeper.n_trials=10", launch_dir=tmp_path)
    trials = study_in(tmp_path).trials
    assert sorted(t.params["optimizer"] for t in trials) == ["adam", "sgd"]


@pytest.mark.slow
def test_a_grid_study_that_tried_every_point_runs_nothing_and_says_so(tmp_path):
    # Its name as the sweep gives it: the study the command line's search continues.
    search = ("-m", "hydra/sweeper=optuna", "hydra/sweeper/sampler=grid",
              "hydra.sweeper.study_name=mine", "optimizer=choice(sgd,adam)", *TINY)
    _study_of(tmp_path, "mine", ("sgd", "adam"), ("sgd", "adam"))
    store = empty_store(tmp_path)
    done = run_cli(*search, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    notes = [line for line in done.stderr.splitlines() if line.startswith("note:")]
    assert notes == ["note: hydra.sweeper.study_name=mine has tried every point of its grid "
                     "(2): nothing to run; hydra.sweeper.study_name=NEW for a new study"]
    from mlflow import MlflowClient

    assert MlflowClient(store).search_runs(["0"]) == []  # no empty parent run
    assert len(study_in(tmp_path).trials) == 2


@pytest.mark.parametrize(("overrides", "line"), [
    (["hydra.sweeper.n_trials=0"], "hydra.sweeper.n_trials=0: the trials this sweep runs must be "
     "an integer >= 1 (default 20)"),
    (["hydra.sweeper.n_trials=-1"], "hydra.sweeper.n_trials=-1: the trials this sweep runs must "
     "be an integer >= 1 (default 20)"),
    (["hydra.sweeper.storage=notaurl"], "hydra.sweeper.storage=notaurl: not a database URL; "
     "accepted: a database URL such as sqlite:///optuna.db (in an existing folder) or "
     "postgresql://user@host/db, or null (optuna.journal beside mlflow.db)"),
    (["hydra.sweeper.storage=sqlite:///no/such/dir/o.db"],
     "hydra.sweeper.storage=sqlite:///no/such/dir/o.db: the folder no/such/dir of its database "
     "file does not exist; accepted: "),
    (["hydra.sweeper.direction=minimise"], "hydra.sweeper.direction=minimise: minimise is not a "
     "direction; accepted: minimize, maximize (the default, '${gradexp.direction:}', is "
     "sweep.objective's own)"),
    (["hydra.sweeper.direction=[minimize,maximize]"], "hydra.sweeper.direction=[minimize,maximize]"
     ": a multi-objective search is not supported; the sweeper optimizes one objective"),
], ids=["n_trials-0", "n_trials--1", "storage-notaurl", "storage-no-folder", "direction-typo",
        "direction-two"])
def test_a_sweeper_setting_optuna_cannot_take_is_one_line_before_anything_is_recorded(
        tmp_path, capsys, overrides, line):
    """Each of these ran in silence (n_trials=0: an empty parent run) or was a traceback after
    the parent opened (a storage), or said the direction contradicted the objective (QA)."""
    said = _refused(tmp_path, capsys, "optimizer.learning_rate=interval(0.01,0.1)", *overrides)
    assert said.startswith(line)


def test_a_sampler_whose_package_is_missing_is_refused_before_the_parent_run(
        tmp_path, capsys, monkeypatch):
    # `pip install ".[optuna]"` had no cmaes: its sampler failed at the second trial (QA)
    import sys

    monkeypatch.setitem(sys.modules, "cmaes", None)  # `import cmaes` raises ImportError
    said = _refused(tmp_path, capsys, "hydra/sweeper/sampler=cmaes",
                    "optimizer.learning_rate=interval(0.01,0.1)")
    assert said.startswith("hydra/sweeper/sampler=cmaes needs the Python package cmaes, which is "
                           "not installed: pip install cmaes")


def test_a_presets_search_fixed_on_the_command_line_has_nothing_to_search(tmp_path):
    # experiment=lr_search with its one searched key fixed ran n_trials copies of one run (QA)
    import gradexp
    from gradexp.api import GradexpError

    store = empty_store(tmp_path)
    with pytest.raises(GradexpError) as refused:
        gradexp.sweep("experiment=lr_search", "optimizer.learning_rate=0.1",
                      "hydra.sweeper.n_trials=2", *TINY, f"tracking.uri={store}",
                      launch_dir=tmp_path)
    assert str(refused.value).startswith(
        "OptunaSweeper has nothing to search: no key is swept (the command line's "
        "optimizer.learning_rate=0.1 fixes what hydra.sweeper.params searches")
    _nothing_recorded(store, tmp_path)


def test_optunas_warnings_reach_the_console_and_its_info_lines_the_sweeps_log(tmp_path, capsys):
    from hydra_plugins.gradexp_optuna.optuna_sweeper import _optuna_logs_to

    logger = logging.getLogger("optuna.samplers._grid")
    with _optuna_logs_to(tmp_path / "optuna.log"):
        logger.warning("`GridSampler` is re-evaluating a configuration")
        logger.info("Trial 0 finished")
    assert capsys.readouterr().err.splitlines() == [
        "warning: Optuna: `GridSampler` is re-evaluating a configuration"]
    assert "Trial 0 finished" in (tmp_path / "optuna.log").read_text()
