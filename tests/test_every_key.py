"""Every key of `--cfg job`, for every option of every group, with a value of the wrong type and
one out of range: each is refused with one line naming the key, or runs; none may end in a
traceback or hang.

Driven in-process through what the command line does (Hydra composition, then run_experiment),
so a hundred cases take about half a minute, not a process (~5 s) each; tests/test_errors.py
keeps real process cases of each kind.
"""

from __future__ import annotations

import typing
from dataclasses import fields, is_dataclass
from enum import Enum
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import CONF, compose_config, empty_store, option_schema
from gradexp.app import error_message
from gradexp.config_errors import USER_ERRORS
from gradexp.loop import RunFailed, run_experiment
from gradexp.schema import ConfigError

GROUPS = ["data", "model", "loss", "optimizer", "device", "trainer", "gradcheck", "tracking"]
CSV = ("data.path=table.csv", "data.target=y")
NEEDS = {("data", "csv"): CSV, ("data", "custom"): ("data._target_=my_data.load",)}
BASE = ("trainer.epochs=2", "gradcheck.plots=false")  # what runs at all runs briefly


def _schema_types(node) -> dict[str, object]:
    schema = OmegaConf.get_type(node)
    if not is_dataclass(schema):
        return {}
    hints = typing.get_type_hints(schema)
    return {f.name: hints[f.name] for f in fields(schema)}


def _wrong_type(kind) -> str | None:
    """A value of the wrong type for a field of type `kind` (None: every value is its type)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    base = args[0] if typing.get_origin(kind) in (typing.Union, getattr(__import__("types"),
                                                                      "UnionType", None)) \
        and len(args) == 1 else kind
    if base is bool:
        return "maybe"
    if base in (int, float):
        return "abc"
    if base is str:
        return "[1,2]"
    if isinstance(base, type) and issubclass(base, Enum):
        return "banana"
    if typing.get_origin(base) is list:
        return "abc"
    return None  # Any


def _out_of_range(key: str, kind) -> str | None:
    """A value of the right type outside what the key can mean."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    base = args[0] if args and typing.get_origin(kind) is not list else kind
    name = key.rsplit(".", 1)[-1]
    if base is int:
        return "-99999999999"
    if base is float:
        return "nan"
    if typing.get_origin(base) is list:
        return "[0]"
    if base is str:  # `name` is a label (the option's name): any text is in range
        return {"_target_": "no.such.Thing", "path": "missing.csv", "target": "nope",
                "uri": "sqlite:///no/such/dir/x.db", "dtype": "float128",
                "experiment": "", "run_name": ""}.get(name)
    return None


def _cases() -> list[tuple[tuple[str, ...], str, str]]:
    """(overrides, key, value) for every key of every option; a key that several options share
    (optimizer.learning_rate) is tried with the first option that has it, and again with an
    option that gives it another type (data.task: an enum in data=blobs, once `Any` in
    data=sklearn, where a misspelt task ended in a KeyError)."""
    cases: list[tuple[tuple[str, ...], str, str]] = []
    tried: set[tuple[str, str, str]] = set()
    for group in GROUPS:
        for option in sorted(p.stem for p in (CONF / group).glob("*.yaml")):
            chosen = (f"{group}={option}", *NEEDS.get((group, option), ()))
            node = option_schema(group, option)  # what compose gives it (test_config checks)
            for name, kind in _schema_types(node).items():
                key = f"{group}.{name}"
                for value in sorted({_wrong_type(kind), _out_of_range(key, kind)} - {None}):
                    if (key, str(kind), value) not in tried:
                        tried.add((key, str(kind), value))
                        cases.append((chosen, key, value))
    for name, kind in _schema_types(option_schema().sweep).items():
        for value in sorted({_wrong_type(kind), _out_of_range(f"sweep.{name}", kind)} - {None}):
            cases.append(((), f"sweep.{name}", value))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("every_key")
    empty_store(folder)  # launch/mlflow.db, which answer() records into
    (folder / "table.csv").write_text("x,y\n" + "".join(f"{i},{2 * i + 1}\n" for i in range(20)))
    return folder


def answer(launch: Path, *overrides: str) -> str | None:
    """What `python -m gradexp OVERRIDES` says in its one `error:` line; None if it ran.
    The mapping is app.py's own (error_message); anything it does not map (a traceback)
    propagates and fails the test."""
    store = f"tracking.uri=sqlite:///{launch / 'mlflow.db'}"
    arguments = (store, *BASE, *overrides)
    try:
        cfg = compose_config(*arguments)
    except USER_ERRORS as error:  # as app.main
        return error_message(error, overrides=arguments)
    try:
        run_experiment(cfg, quiet=True, launch_dir=launch)
    except (ConfigError, RunFailed, *USER_ERRORS) as error:  # as app.task
        said = error_message(error, cfg)
        if said is None:
            raise
        return said
    return None


def test_the_table_covers_every_key_of_every_option():
    keys = {key for _, key, _ in CASES}
    assert {"trainer.epochs", "optimizer.learning_rate", "model.hidden", "data.seed",
            "gradcheck.method", "tracking.uri", "loss.delta", "sweep.skip_finished"} <= keys
    assert len(CASES) > 80


@pytest.mark.parametrize(("chosen", "key", "value"), CASES,
                         ids=[f"{' '.join(c)} {k}={v}" for c, k, v in CASES])
def test_a_wrong_value_is_one_line_naming_the_key_or_runs(launch, chosen, key, value):
    said = answer(launch, *chosen, f"{key}={value}")
    if said is not None:
        assert "\n" not in said.strip(), said
        assert key in said or key.rsplit(".", 1)[-1] in said, said


def test_a_misspelt_task_of_a_bundled_set_is_one_line(launch):
    said = answer(launch, "data=sklearn", "data.name=iris", "data.task=classificaton")
    assert said == "data.task=classificaton: must be one of regression, classification", said


def test_values_for_a_sweep_without_m_say_to_add_it(launch):
    # Hydra's own hint was on a line the one-line message dropped.
    said = answer(launch, "optimizer=sgd,adam")
    assert said == ("Ambiguous value for argument 'optimizer=sgd,adam': to sweep over it, add -m "
                    f"(python -m gradexp -m tracking.uri=sqlite:///{launch / 'mlflow.db'} "
                    f"{' '.join(BASE)} optimizer=sgd,adam)"), said


def test_a_key_of_another_option_names_the_chosen_one_and_those_that_have_it(launch):
    # It said "the chosen data option has no key data.val_fraction", naming neither (QA)
    assert answer(launch, "data.val_fraction=1") == (
        "data.val_fraction=1: data=linear has no key val_fraction (data=csv, data=custom, "
        "data=sklearn have it; its keys: python -m gradexp --cfg job data=linear)")
    assert answer(launch, "optimizer=adam", "optimizer.momentum=0.5") == (
        "optimizer.momentum=0.5: optimizer=adam has no key momentum (optimizer=momentum, "
        "optimizer=rmsprop, optimizer=sgd have it; its keys: python -m gradexp --cfg job "
        "optimizer=adam)")
