"""`gradexp.run(...)` and `gradexp.sweep(...)`: the command line's run and sweep, from Python.

    result = gradexp.run("optimizer=adam", "loss=mae")   # python -m gradexp optimizer=adam loss=mae
    results = gradexp.sweep("optimizer=sgd,adam")       # python -m gradexp -m optimizer=sgd,adam

Both hand the overrides to the Hydra object that `@hydra.main` uses (its `run` and `multirun`),
built the way the command line builds it: the same conf/ and experiments/, the same job name, the
same output folders and .hydra/ files, logging, callbacks, sweeper and launcher. Hydra's compose
API would not do: it makes no output folder, fires no callbacks and refuses `optimizer=sgd,adam`
as ambiguous. Hydra offers no public function for this; `Hydra.run`/`Hydra.multirun` are what its
own `hydra.main` calls (hydra-core is pinned to 1.3, and tests/test_api.py compares the records).

Each job is app.run_job, the command line's job; a failure it would say in one line and exit on
is raised here as GradexpError carrying that line (app.job_failure / app.launch_failure, one
mapping). Hydra's global state (GlobalHydra, the Python logging it configures) and the global
random state a run seeds (Python's, numpy's, Keras' and TensorFlow's: gradexp.seeds) are put
back after each call, so calls can follow one another in a notebook or a test suite, and a
caller's own seed goes on as if no run had come between; within the call, what a run draws
unseeded starts from fresh entropy, as in a new process (_drawn_afresh).
"""

from __future__ import annotations

import logging
import os
import reprlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradexp.config_errors import AMBIGUOUS, SHELL_QUOTES, SWEEP_HINT
from gradexp.resources import resource_dir
from gradexp.schema import ConfigError
from gradexp.seeds import python_random_kept, restore_session_random_state, session_random_state
from gradexp.user_code import launch_folders_put_back, new_launch

# This module loads on gradexp.run's first use, often right after a caller seeded Python's
# random; rich (gradexp.console's tables), imported for the first time here, draws from it.
with python_random_kept():
    from gradexp.app import (
        VERSION_BASE,
        Failure,
        Stop,
        launch_failure,
        mode_is_known,
        register_configs,
        run_job,
        settle,
        sweeper_value,
        task,
    )
    from gradexp.console import error_line, quiet_libraries

if TYPE_CHECKING:
    from gradexp.loop import RunResult

__all__ = ["GradexpError", "run", "sweep"]

# As on the command line, where Hydra finds the config and names the job (hydra.job.name, the
# .log file) by the module of the task function it is given: gradexp.app -> "app".
TASK_MODULE = task.__module__
JOB_NAME = TASK_MODULE.rsplit(".", 1)[-1]


class GradexpError(Exception):
    """A run or a sweep stopped for a reason a person can act on (a config key, a value, a file,
    a server, a diverged run); str(error) is the one line the command line prints."""

    def __init__(self, line: str, exit_code: int = 1) -> None:
        super().__init__(line)
        self.line = line
        self.exit_code = exit_code  # what `python -m gradexp` would have exited with


def _stop(failure: Failure) -> None:
    """A job's failure, carried out of Hydra the way the command line's sys.exit leaves it."""
    raise Stop(failure)


def run(*overrides: str, launch_dir: str | Path | None = None) -> RunResult:
    """One run, as `python -m gradexp OVERRIDES` started in `launch_dir` (default: the current
    folder, where mlflow.db and outputs/ go) would run and record it; its RunResult (run_id,
    objective and objective_value, final_loss, metrics, history).

    Raises GradexpError with the command line's one line for a mistake a person can fix."""
    _refuse_non_overrides(overrides, "run")

    def job(cfg):
        return run_job(cfg, _stop)

    try:
        return _launch(list(overrides), job, launch_dir, multirun=False).return_value
    except GradexpError as error:  # Hydra's own hint says "add --multirun to your command line"
        if not error.line.startswith(AMBIGUOUS):
            raise
        said = error.line.split(SWEEP_HINT)[0]  # the command line's hint is -m
        raise GradexpError(f"{said}: to sweep over it, call gradexp.sweep(...)",
                           error.exit_code) from error.__cause__


def sweep(*overrides: str, launch_dir: str | Path | None = None) -> list[RunResult]:
    """A sweep, as `python -m gradexp -m OVERRIDES` would run it (one MLflow parent run, a child
    per job, the configured sweeper and launcher); the RunResult of each job run in this
    process, in the order they ran.

    Jobs a launcher runs in other processes (joblib, ray, submitit) leave their results in the
    parent's children only (MLflow, or `gradexp compare --sweep PARENT`); jobs skipped by
    sweep.skip_finished are not in the list. A sweep with failed jobs raises GradexpError after
    every job ran, as the command line exits 1."""
    _refuse_non_overrides(overrides, "sweep")
    results: list[RunResult] = []
    failed: list[int] = []

    def job(cfg):
        outcome = run_job(cfg, _stop)
        if outcome is None:
            failed.append(1)
        elif not isinstance(outcome, float):  # a float: a reused run's objective
            results.append(outcome)
        return sweeper_value(outcome)

    try:
        _launch(list(overrides), job, launch_dir, multirun=True)
    except SystemExit as exit:  # how the sweep callback (gradexp.sweeps) stops a sweep
        code = exit.code if isinstance(exit.code, int) else 1
        cause = exit.__context__
        if isinstance(cause, ConfigError):  # e.g. no MLflow server answers at tracking.uri
            raise GradexpError(str(cause), code) from cause
        if isinstance(cause, Exception):  # a bug: the callback printed its traceback
            raise cause from None
        if failed:
            raise GradexpError(f"{len(failed)} of {len(failed) + len(results)} jobs failed "
                               "(each said why above); the sweep's MLflow parent run ended "
                               "FAILED", code) from None
        if exit.code in (0, None):  # nothing left to run (a grid study that tried every
            return results  # point): said in its note, as the command line exits 0
        raise GradexpError(f"the sweep stopped (exit code {exit.code})", code) from None
    return results


def _refuse_non_overrides(overrides: tuple[Any, ...], call: str) -> None:
    """What is not an override, in one line: a list, dict or number (QA: an AttributeError
    "'list' object has no attribute 'startswith'" from app.mode_is_known, 17 lines deep), or a
    command line option (-m was "cannot read the override -m: LexerNoViableAltException")."""
    for value in overrides:
        if isinstance(value, str):
            continue
        if isinstance(value, list | tuple):
            got = f"a {type(value).__name__} {reprlib.repr(value)}: unpack it, " \
                  f"gradexp.{call}(*overrides)"
        elif isinstance(value, dict):
            got = f"a dict {reprlib.repr(value)}: give key=value strings, " \
                  f"gradexp.{call}(*[f'{{k}}={{v}}' for k, v in overrides.items()])"
        else:
            kind = "" if value is None else f" ({type(value).__name__})"
            got = f"{reprlib.repr(value)}{kind}: give 'key=value' strings, e.g. " \
                  f"gradexp.{call}('optimizer=adam', 'trainer.epochs=1')"
        raise TypeError(f"gradexp.{call}: overrides are strings, one per argument; got {got}")
    for value in overrides:
        if value in ("-m", "--multirun"):
            raise GradexpError(f"{value}: the command line's multirun flag; from Python, call "
                               "gradexp.sweep(...) with the overrides" if call == "run" else
                               f"{value}: gradexp.sweep runs a multirun already; pass the "
                               "overrides only", 2)
        if value.startswith("-"):  # never an override: Hydra's grammar starts with a key, + or ~
            raise GradexpError(f"{value}: gradexp.{call} takes overrides (key=value), not the "
                               f"command line's options; for {value}, run python -m gradexp", 2)


# config_errors' hint for a value Hydra cannot read is worded for the shell (SHELL_QUOTES); from
# Python the quotes go inside the string itself (QA).
PYTHON_QUOTES = "quote it for Hydra inside the Python string: "


def _said_for_python(line: str, error: BaseException, call: str) -> str:
    """The command line's line for an override Hydra cannot read, as advice from Python: one
    string holding several overrides ("optimizer=adam loss=mae", as typed in a shell) is
    several arguments (QA: it was told to quote the whole for Hydra inside the shell's
    quotes)."""
    from hydra.errors import OverrideParseException

    if not isinstance(error, OverrideParseException):
        return line
    words = error.override.split()
    if len(words) > 1 and all("=" in word or word.startswith("~") for word in words):
        return (f"cannot read the override {error.override!r}: it holds {len(words)} "
                f"overrides; pass each as its own argument: "
                f"gradexp.{call}({', '.join(map(repr, words))})")
    return line.replace(SHELL_QUOTES, PYTHON_QUOTES)


def _launch(overrides: list[str], job: Callable[[Any], Any], launch_dir: str | Path | None,
            *, multirun: bool) -> Any:
    """Hydra's run or multirun of `job`, as app.main has it done; Hydra's globals put back."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup
    from hydra.types import RunMode

    if launch_dir is not None and not Path(launch_dir).expanduser().is_dir():
        raise GradexpError(f"launch_dir={launch_dir}: no such folder", 2)  # not chdir's trace
    randomness = session_random_state()  # the caller's seeds: a run sets its own (seeds.py)
    _drawn_afresh()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # as app.main: before TensorFlow loads
    new_launch()  # the person's code may have changed since the last call (user_code)
    quiet_libraries()
    register_configs()
    backup = get_gh_backup()  # a GlobalHydra the caller set up (initialize, a test) comes back
    base = version.getbase()
    handlers, level = logging.root.handlers[:], logging.root.level
    try:
        with launch_folders_put_back(), _launched_from(launch_dir):
            version.setbase(VERSION_BASE)
            GlobalHydra.instance().clear()
            hydra = Hydra.create_main_hydra_file_or_module(
                calling_file=None, calling_module=TASK_MODULE,
                config_path=str(resource_dir("conf")), job_name=JOB_NAME)
            # As hydra.main: a config may ask for a mode; asking none, the call says it.
            mode = None if mode_is_known(overrides) else hydra.get_mode("config", overrides)
            if mode == RunMode.MULTIRUN and not multirun:
                raise GradexpError("this config is a sweep (hydra.mode=MULTIRUN): run it with "
                                   "gradexp.sweep(...)", 2)
            if mode is None or (multirun and mode == RunMode.RUN):
                overrides = [*overrides, f"hydra.mode={'MULTIRUN' if multirun else 'RUN'}"]
            if multirun:
                return hydra.multirun("config", job, overrides)
            return hydra.run("config", job, overrides)
    except Stop as stop:  # a job's, or the launcher's (app.Stop)
        settle(stop)  # a sweep's parent left open ends now, not when the session exits
        error = stop.__context__
        if isinstance(error, KeyboardInterrupt):  # Ctrl-C in a notebook stays an interrupt
            error_line(stop.failure.line)
            raise error from None
        raise GradexpError(stop.failure.line, stop.failure.exit_code) from error
    except KeyboardInterrupt as error:
        settle(error)
        raise
    except Exception as error:
        settle(error)
        failure = launch_failure(error, overrides)  # an unknown key, a missing option
        if failure is None:
            raise
        line = _said_for_python(failure.line, error, "sweep" if multirun else "run")
        raise GradexpError(line, failure.exit_code) from error
    finally:
        restore_gh_from_backup(backup)
        version.VersionBase.instance().version_base = base  # setbase takes no "unset"
        _restore_logging(handlers, level)
        restore_session_random_state(randomness)


def _drawn_afresh() -> None:
    """What a run draws unseeded starts from fresh entropy, as in a new `python -m gradexp`
    process: Python's `random` (Keras' unseeded initializers take their seeds from it), numpy's
    and Keras' global SeedGenerator (made anew from Python's at its next use). The session's
    state was saved and comes back after the call, untouched (QA: with it put back, every
    unseeded call drew the same seeds, and two calls of a builder with Keras' default
    initializers started from the very same weights; two command lines do not). A run that
    seeds (`seed=`, trainer.deterministic) seeds over this."""
    import random
    import sys

    random.seed()
    if "numpy" in sys.modules:
        import numpy as np

        np.random.seed()
    if "keras" in sys.modules:
        try:  # Keras' private module: a release that moves it leaves its generator as it was
            from keras.src.backend.common import global_state
            from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
        except ImportError:
            return
        global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, None)


@contextmanager
def _launched_from(folder: str | Path | None) -> Iterator[None]:
    """Run from `folder` as a person would `cd` there: Hydra takes the launch folder (relative
    paths, mlflow.db, outputs/) from the working directory."""
    if folder is None:
        yield
        return
    from gradexp.data import working_folder

    with working_folder(Path(folder).expanduser()):
        yield


def _restore_logging(handlers: list[logging.Handler], level: int) -> None:
    """Hydra configures Python's logging for each job (a console handler, the job's .log file);
    the caller's logging comes back, and the job's log file is closed."""
    for handler in logging.root.handlers[:]:
        if handler not in handlers:
            logging.root.removeHandler(handler)
            handler.close()
    for handler in handlers:
        if handler not in logging.root.handlers:
            logging.root.addHandler(handler)
    logging.root.setLevel(level)
