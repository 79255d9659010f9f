"""The one line a mistyped command line gets (QA of the config mistakes): the level of a nested
key, the option of a sweep that lacks a key, a group set to null, a block given one value, an
override the shell split at a space. Composed in-process; the line and exit code are app.py's
own (launch_failure), as `python -m gradexp` and gradexp.run say them."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

import gradexp
from conftest import compose_config
from gradexp.app import launch_failure
from gradexp.config_errors import is_config_error, one_line

CALLBACKS = ("epoch_history, divergence, held_out_evaluation, early_stopping, progress, "
             "gradient_checks, checkpoints, final_evaluation, pruning, artifacts, model_logger, "
             "recorder, summary")


def cases(*table: tuple[tuple[str, ...], str]):
    """A table of (arguments, line), each case named by its arguments."""
    return pytest.mark.parametrize(("arguments", "line"), table,
                                   ids=[" ".join(arguments) for arguments, _ in table])


def said(*arguments: str) -> tuple[str, int]:
    """What `python -m gradexp ARGUMENTS` says for a config it cannot compose: its line, its
    exit code (the arguments as the shell handed them over)."""
    with pytest.raises(Exception) as raised:  # noqa: PT011 (Hydra's, OmegaConf's: any)
        compose_config(*arguments)
    failure = launch_failure(raised.value, arguments)
    assert failure is not None, raised.value
    return failure.line, failure.exit_code


@cases(
    (("optimizer=null",), "optimizer=null: a config group takes one of its options (adagrad, "
     "adam, adamw, momentum, nadam, rmsprop, sgd), not null"),
    (("experiment=null",), "experiment=null: a config group takes one of its options "
     "(diabetes_regression, digits_mlp, gradcheck_audit, loss_comparison, lr_search, mlp_sine, "
     "optimizer_comparison), not null; for none, leave experiment= out"),
    (("callbacks=null",), "callbacks=null: a config group takes one of its options (default), "
     "not null; to turn one off: ~callbacks.NAME"),
    (("hydra/launcher=null",), "hydra/launcher=null: a config group takes one of its options "
     "(basic, joblib, packed, ray, ray_aws, ray_cluster, slurm, submitit_local, "
     "submitit_slurm), not null"),
)
def test_a_group_set_to_null_names_its_options(arguments, line):
    # QA: Hydra's ValueError "Config group override must be a string or a list. Got NoneType"
    # was a traceback, exit 1. (app.py says it once it asks is_config_error: see the report.)
    with pytest.raises(ValueError) as raised:  # noqa: PT011 (Hydra's plain ValueError)
        compose_config(*arguments)
    assert is_config_error(raised.value, arguments)
    assert one_line(raised.value, arguments) == line
    # a sweep's job (-m optimizer=null,adam): its own overrides name the null
    assert one_line(raised.value, ["optimizer=null,adam"]).startswith("optimizer=null: ")


def test_another_value_error_stays_a_traceback():
    assert not is_config_error(ValueError("a bug"), ["optimizer=null"])


@cases(
    # QA: trainer's keys, no did-you-mean
    (("trainer.early_stopping.patiance=2",), "trainer.early_stopping.patiance=2: unknown key "
     "(trainer.early_stopping accepts: enabled, monitor, patience, min_delta, restore_best); "
     "did you mean trainer.early_stopping.patience?"),
    (("optimizer.schedule.nme=cosine",), "optimizer.schedule.nme=cosine: unknown key "
     "(optimizer.schedule accepts: name, alpha, warmup_epochs, decay_epochs, decay_rate, "
     "boundaries, factors); did you mean optimizer.schedule.name?"),
    # QA: hydra's top-level keys
    (("hydra.sweeper.n_trial=3",), "hydra.sweeper.n_trial=3: unknown key (hydra.sweeper "
     "accepts: max_batch_size, params); did you mean hydra.sweeper.n_trials (with "
     "hydra/sweeper=optuna)?"),
    # QA: "callbacks options accept: " and an empty list, no word of the +
    (("callbacks.progres=null",), f"callbacks.progres=null: no callback progres (the "
     f"callbacks: {CALLBACKS}); did you mean callbacks.progress?; to add your own, with a +: "
     "+callbacks.progres._target_=module.Class"),
    (("callbacks.mine._target_=my.Cb",), f"callbacks.mine._target_=my.Cb: no callback mine "
     f"(the callbacks: {CALLBACKS}); to add your own, with a +: "
     "+callbacks.mine._target_=my.Cb"),
    (("callbacks.recorder.every=5",), "callbacks.recorder.every=5: callbacks.recorder has no "
     "key every yet; add it with a +: +callbacks.recorder.every=5"),
)
def test_an_unknown_nested_key_names_the_keys_of_its_own_level(arguments, line):
    assert said(*arguments) == (line, 2)


def test_a_key_a_swept_option_lacks_names_that_option(tmp_path):
    # QA: "data=linear has no key slope (data=linear has it" while data=sine lacks it
    store = f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(gradexp.GradexpError) as raised:
        gradexp.sweep(store, "data=linear,sine", "data.slope=2", "trainer.epochs=1",
                      "gradcheck=off", launch_dir=tmp_path)
    assert raised.value.exit_code == 2
    assert re.fullmatch(r"data\.slope(=2)?: data=sine has no key slope \(data=linear has it; "
                        r"its keys: python -m gradexp --cfg job data=sine\)", str(raised.value))
    # QA: "model=linear,mlp has no key hidden ... --cfg job model=linear,mlp", a failing command
    with pytest.raises(gradexp.GradexpError) as raised:
        gradexp.sweep(store, "model=linear,mlp", "model.hidden=[4]", "trainer.epochs=1",
                      "gradcheck=off", launch_dir=tmp_path)
    assert str(raised.value) == ("model.hidden=[4]: model=linear has no key hidden (model=mlp "
                                 "has it; its keys: python -m gradexp --cfg job model=linear)")
    assert recorded_runs(tmp_path) == 0  # refused before the sweep's parent opened


def recorded_runs(folder: Path) -> int:
    if not (folder / "mlflow.db").exists():
        return 0
    with sqlite3.connect(folder / "mlflow.db") as connection:
        return connection.execute("select count(*) from runs").fetchone()[0]


@cases(
    # QA: "Invalid type assigned: bool is not a subclass of EarlyStoppingConfig"
    (("trainer.early_stopping=true",), "trainer.early_stopping=true: trainer.early_stopping is "
     "a block of keys, not one value (its keys: enabled, monitor, patience, min_delta, "
     "restore_best); did you mean trainer.early_stopping.enabled=true?"),
    (("optimizer.schedule=cosine",), "optimizer.schedule=cosine: optimizer.schedule is a block "
     "of keys, not one value (its keys: name, alpha, warmup_epochs, decay_epochs, decay_rate, "
     "boundaries, factors); did you mean optimizer.schedule.name=cosine?"),
    # QA: "TrainerConfig (DictConfig) does not support deletion"
    (("~trainer.epochs",), "~trainer.epochs: trainer.epochs cannot be removed (gradexp reads "
     "it), only set: trainer.epochs=VALUE (now 100)"),
    # QA: Hydra's "Could not append to config", no word of dropping the +
    (("+trainer.epochs=2",), "+trainer.epochs=2: trainer.epochs is already in the config, and a "
     "+ adds a new key: set it without the +: trainer.epochs=2"),
)
def test_a_block_a_removal_or_a_plus_is_said_in_gradexps_words(arguments, line):
    assert said(*arguments) == (line, 2)


@cases(
    # QA: unquoted, the shell made two arguments, and the hint was "model.hidden='[8,'"
    (("model=mlp", "model.hidden=[8,", "8]"), "cannot read the override model.hidden=[8,: the "
     "shell split 'model.hidden=[8, 8]' at a space; quote the whole override: "
     "'model.hidden=[8, 8]'"),
    (("optimizer.learning_rate=0.1,", "0.01"), "cannot read the override "
     "optimizer.learning_rate=0.1,: the shell split 'optimizer.learning_rate=0.1, 0.01' at a "
     "space; write it without spaces, optimizer.learning_rate=0.1,0.01 (values a,b are a "
     "sweep: with -m)"),
    # QA: "cannot read the override run: missing EQUAL", no word of the space
    (("tracking.run_name=my", "run"), "cannot read the override run: the shell split "
     "'tracking.run_name=my run' at a space; quote the whole override: "
     "'tracking.run_name=my run'"),
    # QA: the hint was to quote it: "trainer.batch_size='32,'", a string
    (("trainer.batch_size=32,", "trainer.epochs=1"), "cannot read the override "
     "trainer.batch_size=32,: it ends in a comma; drop it (values a,b are a sweep, which takes "
     "-m: -m trainer.batch_size=32,VALUE)"),
)
def test_an_override_the_shell_split_or_a_trailing_comma_says_what_to_type(arguments, line):
    assert said(*arguments) == (line, 2)


def test_text_hydra_cannot_read_still_gets_the_quoting_hint():
    line, code = said("data=csv", "data.path=~/good.csv")
    assert code == 2 and line.endswith(
        "; to give it as text, quote it for Hydra inside the shell's quotes: "
        "\"data.path='~/good.csv'\"")
