"""Names a person gets wrong before a sweep runs: a sweep.objective that is no metric the runs
log (`accuracy`, Keras' `val_accuracy`), the direction a sweeper is told when every job hands
it final_loss in the objective's place (data.n_val=0), a typo'd key under sweep., eval. or
hydra., and `gradexp compare --aggregate` naming no param. Each is one line and exit 2 before
anything is recorded; all in-process (composed configs, a store written with MlflowClient)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import conftest
import gradexp
from conftest import CONF, compose_config
from gradexp.metrics import check_objective, task_of
from gradexp.schema import ConfigError

CLASSES = ("data=blobs", "model=mlp", "loss=categorical_crossentropy")
QUICK = ("trainer.epochs=2", "gradcheck=off", "tracking.log_model=false")


# ---------------------------------------------------------------- an objective no run logs
@pytest.mark.parametrize(("overrides", "meant"), [
    ((*CLASSES, "sweep.objective=accuracy"), "val/accuracy"),  # no split
    ((*CLASSES, "sweep.objective=val_accuracy"), "val/accuracy"),  # Keras' name
    ((*CLASSES, "sweep.objective=train_accuracy"), "train/accuracy"),
    (("sweep.objective=mse",), "val/mse"),
    (("sweep.objective=r2",), "val/r2"),
])
def test_an_objective_that_no_run_logs_is_refused_with_what_they_log(overrides, meant):
    cfg = compose_config(*overrides)
    with pytest.raises(ConfigError) as refused:
        check_objective(cfg, task_of(cfg.data))
    said = str(refused.value)
    objective = overrides[-1]
    logged = "accuracy, crossentropy" if "data=blobs" in overrides else "mse, mae, r2"
    assert said == (f"{objective}: no run logs a metric of that name; the runs log train/, val/ "
                    f"and (with a test split) test/ {logged} (eval.metrics), and final_loss; "
                    f"did you mean {meant}?")


@pytest.mark.parametrize("name", ["val/accuracy", "train/crossentropy", "test/accuracy",
                                  "final_loss", "auto"])
def test_the_names_the_runs_log_are_accepted_as_objectives(name):
    cfg = compose_config(*CLASSES, f"sweep.objective={name}")
    check_objective(cfg, task_of(cfg.data))


@pytest.mark.parametrize("sweeper", [
    ("optimizer=sgd,adam",),  # the basic sweeper: every job composed and checked up front
    ("hydra/sweeper=optuna", "hydra.sweeper.n_trials=3",  # Optuna: the launch config answers
     "optimizer.learning_rate=tag(log,interval(0.001,0.5))"),
], ids=["basic", "optuna"])
def test_a_sweep_ranked_by_a_name_no_run_logs_is_refused_before_its_parent(tmp_path, store,
                                                                           sweeper):
    """QA: `sweep.objective=accuracy` ran, each job handed the sweeper its final_loss, and
    Optuna maximized it (the worst trial reported as the best), exit 0."""
    from mlflow import MlflowClient

    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp.sweep(f"tracking.uri={store}", *sweeper, *CLASSES, "sweep.objective=accuracy",
                      *QUICK, launch_dir=tmp_path)
    assert refused.value.exit_code == 2
    said = str(refused.value)
    assert said.startswith("sweep.objective=accuracy: no run logs a metric of that name;")
    assert said.endswith("did you mean val/accuracy?") and "\n" not in said
    client = MlflowClient(store)
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []


# ---------------------------------------------------------------- the fallback to final_loss
def with_hydra(*overrides: str):
    """The launch config with its hydra node, as a sweep's callbacks and sweeper see it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides),
                       return_hydra_config=True)


@pytest.mark.parametrize(("overrides", "direction"), [
    ((*CLASSES,), "maximize"),  # val/accuracy, logged: maximized
    ((*CLASSES, "data.n_val=0"), "minimize"),  # no val/ rows: every job returns final_loss
    ((*CLASSES, "data.n_val=0", "sweep.direction=maximize"), "minimize"),
    (("data=sklearn", "data.name=iris", "data.val_fraction=0"), "minimize"),
    (("data=sklearn", "data.name=iris", "sweep.objective=test/accuracy"), "minimize"),
    (("data=sklearn", "data.name=iris", "data.test_fraction=0.2",
      "sweep.objective=test/accuracy"), "maximize"),
    (("data=linear", "sweep.objective=test/r2"), "minimize"),  # linear holds out no test rows
])
def test_optuna_minimizes_the_final_loss_the_jobs_fall_back_to(overrides, direction):
    """QA: with data=blobs data.n_val=0 each job returned its final_loss in place of
    val/accuracy, and Optuna, told val/accuracy's direction, maximized it."""
    from gradexp.sweep_checks import check_sweeper_direction

    cfg = with_hydra("hydra/sweeper=optuna", *overrides)
    sweeper = instantiate(cfg.hydra.sweeper)  # what creates the Optuna study
    assert sweeper.direction == direction
    check_sweeper_direction(cfg)  # the default direction agrees with itself


def test_a_sweeper_told_to_maximize_the_final_loss_is_refused():
    from gradexp.sweep_checks import check_sweeper_direction

    cfg = with_hydra("hydra/sweeper=optuna", "hydra.sweeper.direction=maximize", *CLASSES,
                     "data.n_val=0")
    with pytest.raises(ConfigError, match=r"^hydra\.sweeper\.direction=maximize, but no run can "
                       r"log sweep\.objective val/accuracy \(data\.n_val=0\), so each job "
                       r"returns its final_loss, which is to minimize"):
        check_sweeper_direction(cfg)


# ---------------------------------------------------------------- typo'd keys: what is accepted
SWEEP_KEYS = ("skip_finished, resume_killed, continue_on_failure, objective, direction, "
              "best_per, aggregate_over, pruner, pruner_startup_trials, pruner_warmup_epochs, "
              "pruner_percentile")


@pytest.mark.parametrize(("overrides", "says"), [
    (("sweep.objectve=val/mae",), "sweep.objectve=val/mae: unknown key (sweep options accept: "
     f"{SWEEP_KEYS}); did you mean sweep.objective?"),
    (("sweep.prunner=median",), "sweep.prunner=median: unknown key (sweep options accept: "
     f"{SWEEP_KEYS}); did you mean sweep.pruner?"),
    (("eval.evry=5",), "eval.evry=5: unknown key (eval options accept: metrics, every); "
     "did you mean eval.every?"),
    # the keys of the node where the key is missing, not hydra's top level (QA, 2026-12-06)
    (("hydra/sweeper=optuna", "hydra.sweeper.n_trial=3"), "hydra.sweeper.n_trial=3: unknown "
     "key (hydra.sweeper accepts: sampler, direction, storage, study_name, n_trials, n_jobs, "
     "params); did you mean hydra.sweeper.n_trials?"),
    (("hydra/launcher=packed", "hydra.launcher.processs=2"), "hydra.launcher.processs=2: "
     "unknown key (hydra.launcher accepts: processes); did you mean hydra.launcher.processes?"),
], ids=["sweep.objectve", "sweep.prunner", "eval.evry", "hydra.sweeper", "hydra.launcher"])
def test_a_typo_under_sweep_eval_or_hydra_is_told_what_is_accepted(overrides, says):
    """QA: these said `(sweep options accept: )`, an empty list, and no did-you-mean."""
    from gradexp.app import launch_failure

    with pytest.raises(Exception) as refused:
        compose_config(*overrides)
    failure = launch_failure(refused.value, overrides)  # what the command line prints
    assert failure.line == says
    assert failure.exit_code == 2


def test_a_key_added_under_sweep_names_its_block_by_its_key():
    # `+sweep.objectve=...` said "(sweep=... accepts: ...)", as if sweep were a group (QA)
    from gradexp.config_checks import check_known_keys

    with pytest.raises(ConfigError) as refused:
        check_known_keys(compose_config("+sweep.objectve=val/mae"))
    assert str(refused.value) == ("sweep.objectve=val/mae: no such key, gradexp would not read "
                                  f"it (sweep. accepts: {SWEEP_KEYS}); did you mean "
                                  "sweep.objective?")


@pytest.mark.parametrize(("override", "says"), [
    ("optimizer.learning_rate=intervl(0.1,1)", "Unknown function 'intervl' (sweep functions: "
     "bool, choice, float, glob, int, interval, range, shuffle, sort, str, tag); did you mean "
     "interval(...)?"),
    ("optimizer.learning_rate=tag(log,intervl(0.1,1))", "did you mean interval(...)?"),
    ("optimizer.learning_rate=range(a,b)", "mismatch type argument start: str is incompatible"),
    ("optimizer.learning_rate=interval(0.1", "no viable alternative at input 'interval(0.1'"),
])
def test_a_misspelt_sweep_function_is_told_the_functions_there_are(override, says):
    # `intervl(...)` got only Hydra's first line, "Error parsing override '...'" (QA)
    from gradexp.app import launch_failure

    with pytest.raises(Exception) as refused:
        compose_config(override)
    failure = launch_failure(refused.value, [override])
    assert failure.line.startswith(f"cannot read the override {override}: ")
    assert says in failure.line and "Error parsing" not in failure.line
    assert failure.exit_code == 2


# ---------------------------------------------------------------- compare --aggregate
@pytest.fixture
def replicates(tmp_path) -> str:
    """A store of 4 runs: optimizer sgd, adam x seed 0, 1."""
    from mlflow import MlflowClient

    uri = conftest.empty_store(tmp_path)
    client = MlflowClient(uri)
    experiment = client.create_experiment("replicates")
    for start, (optimizer, seed) in enumerate((o, s) for o in ("sgd", "adam") for s in (0, 1)):
        run = client.create_run(experiment, start_time=1_700_000_000_000 + start,
                                tags={"gradexp.objective": "val/mse"})
        for key, value in {"optimizer.name": optimizer, "seed": str(seed)}.items():
            client.log_param(run.info.run_id, key, value)
        client.log_metric(run.info.run_id, "val/mse", 1.0 + start)
        client.set_terminated(run.info.run_id, "FINISHED")
    return uri


def test_compare_aggregate_over_a_key_no_run_has_is_exit_2(replicates, capsys):
    """QA: `--aggregate sed` said `sed is no param of these runs: did you mean seed?` under the
    table and exited 0, as if no grouping had been asked for; `--by accuracy` exits 2."""
    from gradexp.compare import main

    code = main(["--tracking-uri", replicates, "--experiment", "replicates", "--aggregate",
                 "sed"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == ("error: --aggregate sed: no run shown has that param; the runs shown "
                           "differ in optimizer.name, seed (any param of theirs may be named); "
                           "did you mean seed?")
    assert "┃" not in out  # no table: the argument is refused first, as --by's


@pytest.mark.parametrize("keys", ["seed", "optimizer", "optimizer.name"])
def test_compare_aggregate_over_params_of_the_runs_still_groups(replicates, capsys, keys):
    from gradexp.compare import main

    code = main(["--tracking-uri", replicates, "--experiment", "replicates", "--aggregate",
                 keys])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "groups over" in out or "no replicates to group" in out
