"""What a QA pass of config mistakes found a sweep did after its parent run opened: early
stopping with no validation rows failed every job (where one run is refused), and Hydra's
plugin settings (joblib's n_jobs=0, a sampler given as a word, a misspelt sampler _target_, a
sampler seed that is no number, a hydra.sweep.dir that cannot be made) gave a traceback or a
garbled line and a FAILED parent. Each is now one line before the parent opens, exit 2,
nothing recorded."""

from __future__ import annotations

import sqlite3

import pytest
from hydra import initialize_config_dir

import conftest
import gradexp
from conftest import CONF
from gradexp.api import GradexpError
from gradexp.schema import ConfigError

TINY = ("gradcheck=off", "tracking.log_model=false", "trainer.epochs=1")
SEARCH = ("hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
          "optimizer.learning_rate=interval(0.01,0.1)")
PRESETS = "hydra/sweeper/sampler=tpe|random|cmaes|nsgaii|grid"


def refusal(check, *overrides: str) -> str | None:
    """The one line `check` refuses the sweep `-m OVERRIDES` with (its config composed as
    Hydra composes a sweep's, and checked within that Hydra), None when it passes."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        config = GlobalHydra.instance().config_loader().load_configuration(
            "config", list(overrides), run_mode=RunMode.MULTIRUN)
        try:
            check(config)
        except ConfigError as error:
            return str(error)
    return None


def refused_sweep(tmp_path, *overrides: str) -> str:
    """gradexp.sweep(OVERRIDES) as `python -m gradexp -m` runs it: exit 2, its one line, and
    no run in the store (no parent run opened)."""
    store = conftest.empty_store(tmp_path)
    with pytest.raises(GradexpError) as refused:
        gradexp.sweep(*overrides, *TINY, f"tracking.uri={store}", launch_dir=tmp_path)
    assert refused.value.exit_code == 2
    assert run_count(tmp_path / "mlflow.db") == 0
    return str(refused.value)


def run_count(db) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as store:
        return store.execute("select count(*) from runs").fetchone()[0]


# ------------------------------------------------ 1: early stopping with no validation rows
@pytest.mark.heavy  # ~8 s: the single run loads its data; the sweep composes its two jobs
def test_early_stopping_with_no_validation_rows_is_refused_before_the_parent_opens(tmp_path):
    """Each job printed the monitor line and failed, the parent FAILED, exit 1; the same config
    as one run is refused with exit 2. The sweep now says the single run's line."""
    single = conftest.empty_store(tmp_path / "single")
    with pytest.raises(ConfigError) as one_run:
        conftest.run(single, "data.n_val=0", "trainer.early_stopping.enabled=true", *TINY)
    said = refused_sweep(tmp_path, "optimizer=sgd,adam", "data.n_val=0",
                         "trainer.early_stopping.enabled=true")
    assert said == str(one_run.value) == (
        "trainer.early_stopping.monitor=auto (sweep.objective=val/mse): not a metric this run "
        "evaluates (the data has no validation rows); early stopping can monitor train/mse, "
        "train/mae, train/r2 (eval.metrics on the train and val splits)")


def test_early_stopping_on_a_train_metric_without_validation_rows_is_still_a_sweep():
    """A train/ monitor needs no held-out rows: every job checks, and the sweep may run."""
    from gradexp.sweep_checks import check_every_job

    keys: dict[str, bool] = {}
    assert refusal(lambda config: keys.update(check_every_job(config)), "optimizer=sgd,adam",
                   "data.n_val=0", "trainer.early_stopping.enabled=true",
                   "trainer.early_stopping.monitor=train/mse", "sweep.objective=final_loss") is None
    assert "optimizer.name" in keys  # both jobs composed and checked


# ------------------------------------------------ 2: Hydra plugin settings
def test_joblib_n_jobs_zero_is_refused_naming_what_joblib_accepts():
    from gradexp.sweep_checks import check_launcher

    assert refusal(check_launcher, "hydra/launcher=joblib", "hydra.launcher.n_jobs=0") == (
        "hydra.launcher.n_jobs=0: the jobs joblib runs at once; accepted: a positive count, or "
        "-1 for every core (the default; -2 every core but one)")
    for n_jobs in ("-1", "2", "-2"):
        assert refusal(check_launcher, "hydra/launcher=joblib",
                       f"hydra.launcher.n_jobs={n_jobs}") is None


@pytest.mark.parametrize("override, line", [
    ("hydra.sweeper.sampler=tpe",
     "hydra.sweeper.sampler=tpe: the sampler is a node with the _target_ of an Optuna sampler "
     f"class and its arguments; choose one with {PRESETS} (a config group: '/', not '.'): did "
     "you mean hydra/sweeper/sampler=tpe?"),
    ("hydra.sweeper.sampler.seed=abc",
     "hydra.sweeper.sampler.seed=abc: the sampler's seed is an integer, or null for a new seed "
     "each sweep"),
    ("hydra.sweeper.sampler._target_=optuna.samplers.TPESamplr",
     "hydra.sweeper.sampler._target_=optuna.samplers.TPESamplr: no such class can be imported; "
     f"accepted: an Optuna sampler class, e.g. optuna.samplers.TPESampler, or {PRESETS}; did "
     "you mean optuna.samplers.TPESampler?"),
    ("hydra.sweeper.sampler._target_=optuna.pruners.MedianPruner",
     "hydra.sweeper.sampler._target_=optuna.pruners.MedianPruner: is not an Optuna sampler "
     f"class; accepted: an Optuna sampler class, e.g. optuna.samplers.TPESampler, or {PRESETS}"),
])
def test_a_sampler_mistake_is_one_line_naming_the_key_and_what_is_accepted(override, line):
    """They were a traceback (AttributeError 'str' object has no attribute 'keywords', a
    TypeError adding the study's trials to 'abc') or Hydra's 'Error locating target ..., set
    env var HYDRA_FULL_ERROR=1 ...: Error loading ...', each after the parent run opened."""
    from hydra_plugins.gradexp_optuna.checks import check_search_space

    assert refusal(check_search_space, *SEARCH, override) == line


@pytest.mark.parametrize("sampler", ["tpe", "random", "nsgaii", "grid"])
def test_each_preset_sampler_with_a_seed_passes(sampler):
    from hydra_plugins.gradexp_optuna.checks import check_sampler

    assert refusal(check_sampler, "hydra/sweeper=optuna", f"hydra/sweeper/sampler={sampler}",
                   "hydra.sweeper.sampler.seed=3") is None


def test_a_sweep_dir_that_cannot_be_made_is_refused_with_the_os_reason(tmp_path):
    """It was FileNotFoundError's traceback, after the parent run opened."""
    from gradexp.sweep_checks import check_launcher

    hint = ("give a folder this user can create and write, e.g. hydra.sweep.dir=multirun/"
            "my_sweep (relative to the launch folder)")
    assert refusal(check_launcher, "hydra.sweep.dir=/proc/forbidden") == (
        "hydra.sweep.dir=/proc/forbidden: the sweep's folder cannot be made there (No such file "
        f"or directory); {hint}")
    (tmp_path / "a_file").write_text("")
    assert refusal(check_launcher, f"hydra.sweep.dir={tmp_path}/a_file/sweep") == (
        f"hydra.sweep.dir={tmp_path}/a_file/sweep: the sweep's folder cannot be made there (Not a "
        f"directory); {hint}")
    # a folder that can be made passes, and the check leaves nothing behind
    assert refusal(check_launcher, f"hydra.sweep.dir={tmp_path}/new/deeper/sweep") is None
    assert not (tmp_path / "new").exists()


def test_a_sweep_with_a_bad_joblib_n_jobs_exits_2_with_nothing_recorded(tmp_path):
    said = refused_sweep(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=0",
                         "optimizer=sgd,adam")
    assert said.startswith("hydra.launcher.n_jobs=0: ")


@pytest.mark.slow  # the command line, as the QA report typed it
def test_the_command_line_refuses_a_misspelt_sampler_in_one_line_and_exits_2(tmp_path):
    """It exited 2, but with Hydra's garbled 'Error locating target' line and a FAILED parent
    run in the store."""
    store = conftest.empty_store(tmp_path)
    done = conftest.run_cli("-m", *SEARCH, "hydra.sweeper.sampler._target_=optuna.samplers."
                            "TPESamplr", *TINY, f"tracking.uri={store}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        "error: hydra.sweeper.sampler._target_=optuna.samplers.TPESamplr: no such class can be "
        "imported; accepted: an Optuna sampler class, e.g. optuna.samplers.TPESampler, or "
        f"{PRESETS}; did you mean optuna.samplers.TPESampler?"]
    assert run_count(tmp_path / "mlflow.db") == 0  # no parent run, none FAILED
