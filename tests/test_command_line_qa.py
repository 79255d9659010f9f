"""What a QA pass of the command line found still said in Hydra's or argparse's words, or not
at all: a command or an option given as a bare word (`gradexp compre`, `python -m gradexp
adam`), an argparse-style flag (`--epochs 3`: argparse's usage and "unrecognized arguments"), a
key given without its group (`epochs=3`), a run folder that cannot be made (a traceback),
`--version` (Hydra's alone), an Optuna `n_jobs=0` (run as 1) and `hydra.launcher.processes`
far above the machine's cores (998 helpers started)."""

from __future__ import annotations

import os
import sqlite3

import pytest
from test_config_errors_qa import cases, said
from test_sweep_checks_qa import SEARCH, refusal

import gradexp
from conftest import run_cli

TOP = ("top-level keys are: data, model, loss, optimizer, device, trainer, gradcheck, tracking, "
       "seed, eval, sweep, callbacks")


@cases(
    (("compre",), "cannot read the override compre: not KEY=VALUE; did you mean gradexp compare?"),
    (("adam",), "cannot read the override adam: an override is KEY=VALUE; did you mean "
                "optimizer=adam?"),
    (("foo",), "cannot read the override foo: an override is KEY=VALUE (e.g. optimizer=adam, "
               "trainer.epochs=3; python -m gradexp --help lists them)"),
    (("epochs=3",), f"epochs=3: unknown key ({TOP}); did you mean trainer.epochs?"),
    (("hidden=[8]",), f"hidden=[8]: unknown key ({TOP}); did you mean model.hidden?"),
    (("kwargs={}",), f"kwargs={{}}: unknown key ({TOP}); did you mean data.kwargs or "
                     "model.kwargs?"),
)
def test_a_bare_word_or_a_key_without_its_group_says_what_was_meant(arguments, line):
    assert said(*arguments) == (line, 2)


FLAG = "not an option of gradexp, whose settings are KEY=VALUE overrides (e.g. trainer.epochs=3)"


@pytest.mark.parametrize(("arguments", "line"), [
    (("--epochs", "3"), f"--epochs: {FLAG}; did you mean trainer.epochs=3?"),
    (("optimizer=adam", "--lr=0.1"), f"--lr: {FLAG}; did you mean optimizer.learning_rate=0.1?"),
    (("--batch-size", "32"), f"--batch-size: {FLAG}; did you mean trainer.batch_size=32?"),
    (("--optimizer", "adam"), f"--optimizer: {FLAG}; did you mean the group optimizer=adam?"),
    (("--seed", "3"), f"--seed: {FLAG}; did you mean seed=3?"),
    (("--verbose",), f"--verbose: {FLAG}"),
])
def test_a_flag_gradexp_does_not_have_names_the_override_meant(arguments, line):
    from gradexp.config_errors import flag_line

    assert flag_line(list(arguments)) == line


def test_hydras_own_options_are_no_mistake():
    from gradexp.config_errors import flag_line

    assert flag_line(["-m", "--cfg", "job", "-p", "trainer", "--info", "plugins", "--resolve",
                      "-cn", "config", "trainer.epochs=-1", "model.hidden=[-1]"]) is None


@pytest.mark.heavy  # ~2 s
def test_a_run_folder_that_cannot_be_made_is_one_line_and_no_run(tmp_path):
    with pytest.raises(gradexp.GradexpError) as raised:
        gradexp.run("hydra.run.dir=/proc/forbidden/run", "trainer.epochs=1", launch_dir=tmp_path)
    assert str(raised.value) == (
        "hydra.run.dir=/proc/forbidden/run: the run's folder cannot be made there (No such file "
        "or directory: /proc/forbidden); give a folder this user can create and write, e.g. "
        "hydra.run.dir=outputs/my_run (relative to the launch folder)")
    assert raised.value.exit_code == 2
    database = tmp_path / "mlflow.db"
    if database.exists():
        with sqlite3.connect(database) as store:
            assert store.execute("select count(*) from runs").fetchone()[0] == 0


def test_optuna_trials_at_once_must_be_one_or_more():
    from hydra_plugins.gradexp_optuna.checks import check_n_trials

    assert refusal(check_n_trials, *SEARCH, "hydra.sweeper.n_jobs=0") == (
        "hydra.sweeper.n_jobs=0: the trials asked and launched at once must be an integer >= 1 "
        "(default 1)")
    assert refusal(check_n_trials, *SEARCH, "hydra.sweeper.n_jobs=2") is None


def test_processes_above_the_machines_cores_are_refused():
    from gradexp.sweep_checks import check_launcher

    cores = os.cpu_count() or 1
    most = max(cores, 2)
    assert refusal(check_launcher, "hydra/launcher=packed", "hydra.launcher.processes=999") == (
        f"hydra.launcher.processes=999: at most {most} here, this machine's cores ({cores}): a "
        "job's replay keeps a core busy, so more processes than cores only take turns, each "
        "holding ~0.6 GB")
    assert refusal(check_launcher, "hydra/launcher=packed",
                   f"hydra.launcher.processes={most}") is None


@pytest.mark.slow
def test_the_command_line_says_its_version_and_refuses_a_flag_in_one_line(tmp_path):
    from gradexp.help import version_line

    done = run_cli("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == version_line()
    assert version_line().startswith(f"gradexp {gradexp.__version__} (Hydra 1.3.")
    assert "TensorFlow 2." in version_line() and "MLflow " in version_line()
    done = run_cli("--epochs", "3", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: --epochs: {FLAG}; did you mean trainer.epochs=3?"
    assert not (tmp_path / "mlflow.db").exists()
