"""Integer counts have an upper bound, and Adagrad's accumulator a lower one (QA): each value
below was accepted by every check and then crashed inside the run (a traceback, a FAILED run),
hung before it (device.cpu_replicas), or trained into NaN blamed on the learning rate. Each is
now one line naming the key, the value and the accepted range, before anything runs."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import fields, is_dataclass

import pytest

from conftest import compose_config, run_cli
from gradexp.config_checks import check_ranges
from gradexp.schema import (
    SCHEMAS,
    Config,
    ConfigError,
    EvalConfig,
    SweepConfig,
    describe,
)

HUGE = 99999999999999999999999  # what QA typed: past int64 too

REFUSED = [
    # OverflowError in the trainer, a FAILED run (also a sweep's job: the parent FAILED)
    (["trainer.epochs=99999999999999999999999"],
     "trainer.epochs=99999999999999999999999: must be an integer >= 1 and <= 2147483647"),
    (["trainer.epochs=2147483648"],
     "trainer.epochs=2147483648: must be an integer >= 1 and <= 2147483647"),
    # "cannot fit 'int' into an index-sized integer" in the gradient check, a FAILED run
    (["gradcheck.probes=99999999999999999999"],
     "gradcheck.probes=99999999999999999999: must be an integer >= 1 and <= 2147483647"),
    # numpy's "Maximum allowed dimension exceeded", exit 1 with a traceback
    (["data.n_samples=99999999999999999999999"],
     "data.n_samples=99999999999999999999999: must be an integer >= 2 and <= 2147483647"),
    (["trainer.batch_size=99999999999999999999"],
     "trainer.batch_size=99999999999999999999: must be an integer >= 1 and <= 2147483647, "
     "or null for the full batch"),
    (["model=mlp", "model.hidden=[8,99999999999999999999]"],
     "model.hidden=[8, 99999999999999999999]: must be a list of integers >= 1 and "
     "<= 2147483647, e.g. [32,32]"),
    # one logical CPU device made per replica: >100 s of growing memory before any run opened
    (["device=mirrored", "device.cpu_replicas=99999999999999999999"],
     "device.cpu_replicas=99999999999999999999: must be an integer >= 0 and <= 64 "
     "(0: GPUs only)"),
    (["device=mirrored", "device.cpu_replicas=65"],
     "device.cpu_replicas=65: must be an integer >= 0 and <= 64 (0: GPUs only)"),
    # Keras takes it (its docs say non-negative): NaN at epoch 2, blamed on the learning rate
    (["optimizer=adagrad", "optimizer.initial_accumulator_value=-100"],
     "optimizer.initial_accumulator_value=-100.0: must be a number >= 0"),
]


@pytest.mark.parametrize(("overrides", "line"), REFUSED,
                         ids=[" ".join(overrides) for overrides, _ in REFUSED])
def test_a_value_out_of_range_is_refused_in_one_line_naming_the_range(overrides, line):
    with pytest.raises(ConfigError) as refused:
        check_ranges(compose_config(*overrides))
    assert str(refused.value) == line


def test_the_bounds_themselves_are_accepted():
    check_ranges(compose_config("trainer.epochs=2147483647", "gradcheck.probes=2147483647",
                                "data.n_samples=2147483647", "device=mirrored",
                                "device.cpu_replicas=64", "optimizer=adagrad",
                                "optimizer.initial_accumulator_value=0"))
    with pytest.raises(ConfigError, match=r"^data\.n_val=2147483648: must be an integer >= 0 "
                                          r"and <= 2147483647 \(0: no validation set\)$"):
        check_ranges(compose_config("data.n_val=2147483648"))


@pytest.mark.heavy  # ~6 s: imports TensorFlow
def test_the_device_code_itself_refuses_more_cpu_replicas_than_the_schema_accepts():
    """For code that skips the config checks: no device configuration is asked of TensorFlow."""
    from gradexp.devices import check_device

    with pytest.raises(ConfigError, match=r"^device\.cpu_replicas=65: must be an integer >= 0 "
                                          r"and <= 64 \(0: GPUs only\)$"):
        check_device("mirrored", 65)


def _int_fields(schema: type, prefix: str = ""):
    """(key, rule) of every integer field of `schema`, its nested blocks' too."""
    for item in fields(schema):
        default = item.default_factory() if callable(item.default_factory) else None
        if is_dataclass(default):
            yield from _int_fields(type(default), f"{prefix}{item.name}.")
        elif "int" in str(item.type):
            yield f"{prefix}{item.name}", item.metadata.get("rule")


SCHEMA_CLASSES = [s for options in SCHEMAS.values() for s in options.values()] + [
    EvalConfig, SweepConfig, Config]


def test_every_integer_key_refuses_a_number_no_tensor_holds_and_says_its_range():
    """A count added later gets a bound too, and says it (docs/config.md shows the words)."""
    for schema in SCHEMA_CLASSES:
        accepted = {row.key: row.accepted for row in describe(schema)}
        for key, rule in _int_fields(schema):
            where = f"{schema.__name__}.{key}"
            assert rule is not None, f"{where} has no rule"
            assert not rule.test([1, HUGE] if "list" in accepted[key] else HUGE), \
                f"{where} accepts {HUGE}"
            assert re.search(r"<= \d+|in \[\d+, \d+\]|^must be 1 ", accepted[key]), \
                f"{where}: '{accepted[key]}' names no upper bound"


@pytest.mark.slow
def test_a_huge_epoch_count_on_the_command_line_exits_2_with_one_line_and_no_run(tmp_path):
    done = run_cli("trainer.epochs=99999999999999999999999", cwd=tmp_path, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert errors == ["error: trainer.epochs=99999999999999999999999: must be an integer >= 1 "
                      "and <= 2147483647"], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    db = tmp_path / "mlflow.db"
    runs = sqlite3.connect(db).execute("select status from runs").fetchall() \
        if db.exists() else []
    assert runs == []
