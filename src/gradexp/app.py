"""The command line: Hydra composes the config, `task` runs one job of it.

    python -m gradexp optimizer=adam loss=mae     one run
    python -m gradexp -m optimizer=sgd,adam       a sweep: one MLflow parent run, a child per job

Nothing heavy is imported here, so `--help`, `--cfg job` and config errors answer in about a
second; TensorFlow and MLflow load inside the job.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from gradexp.config_errors import (
    USER_ERRORS,
    flag_line,
    is_config_error,
    one_line,
    target_error,
)
from gradexp.console import SAID, error_line, note_line, quiet_libraries, stream_to_devnull
from gradexp.endings import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED
from gradexp.interrupts import sigterm_as_interrupt
from gradexp.metrics import register_resolver
from gradexp.resources import resource_dir
from gradexp.schema import ConfigError, register_schemas

VERSION_BASE = "1.3"  # Hydra 1.3's defaults (gradexp.api launches with the same)

# This process runs `python -m gradexp` (not gradexp.api's calls, whose sweeps keep every job in
# the caller's process): a packed sweep's helper processes may start as the sweep begins.
on_the_command_line = False


def register_experiments() -> None:
    """Offer every experiments/NAME.yaml as `experiment=NAME` (a `# @package _global_` preset).

    The presets live in their own top-level folder (not conf/experiment/), so they are handed to
    Hydra through its ConfigStore, which is always on the search path, wheel or checkout.
    """
    store = ConfigStore.instance()
    for preset in sorted(resource_dir("experiments").glob("*.yaml")):
        store.store(group="experiment", name=preset.stem, node=OmegaConf.load(preset),
                    package="_global_")


@dataclass(frozen=True)
class Failure:
    """How a job or a launch that stops says so: the one line a person reads, the exit code."""

    line: str
    exit_code: int
    sweep_goes_on: bool = True  # in a sweep with sweep.continue_on_failure, the others still run


def job_failure(error: BaseException, cfg: DictConfig) -> Failure | None:
    """What a job says for an exception it raised; None for a bug (it stays a traceback).

    The one mapping of the command line and of gradexp.run / gradexp.sweep (gradexp.api)."""
    from gradexp.endings import RunFailed

    if isinstance(error, (ConfigError, RunFailed)):
        return Failure(str(error), getattr(error, "exit_code", EXIT_BAD_INPUT))
    if isinstance(error, USER_ERRORS):  # e.g. a _target_ that cannot be imported (one line)
        message = target_error(error, cfg)
        return None if message is None else Failure(message, EXIT_BAD_INPUT)
    if isinstance(error, KeyboardInterrupt):  # SIGTERM's Terminated too
        return interrupt_failure(error, what_was_recorded(error, cfg))
    return server_gone(error, cfg)


def server_gone(error: BaseException, cfg: DictConfig) -> Failure | None:
    """An MLflow server that stopped answering during the run (a restart, a network cut): one
    line naming the run and how to continue it, not ~200 lines of urllib3's and MLflow's
    chained tracebacks (QA). None for any other error."""
    from gradexp.tracking_uri import redact_uri

    why = stopped_answering(error)
    if why is None:
        return None
    uri = redact_uri(str(OmegaConf.select(cfg, "tracking.uri", default="")))
    run_id = getattr(error, "run_id", None)
    then = (f"; once the server answers, trainer.resume={run_id} continues the run from its "
            f"last checkpoint in checkpoints/{run_id}, if it saved one" if run_id else "")
    return Failure(f"tracking.uri={uri}: the MLflow server stopped answering during the run "
                   f"({why}); what it stored before stays there{then}", 1)


def stopped_answering(error: BaseException) -> str | None:
    """Why the MLflow server stopped answering, in urllib3's innermost words, if `error` (or an
    error it came from) is MLflow's request that got no answer; None for any other error (a
    refusal with an error code, 401..., is not one)."""
    from gradexp.endings import chained

    cause = next((cause for cause in chained(error)
                  if type(cause).__name__ == "MlflowException"
                  and str(cause).startswith("API request to")
                  and " failed with exception " in str(cause)), None)
    if cause is None:
        return None
    why = str(cause)
    if "(Caused by " in why:  # urllib3's innermost words, without the parenthesis around them
        why = why.rsplit("(Caused by ", 1)[-1].removesuffix(")")
    return why[:200]


def what_was_recorded(error: BaseException, cfg: DictConfig) -> str:
    """What an interrupt left recorded: the run KILLED only if one had opened (run_experiment
    puts its id on the error); an interrupt while the data loads or the store is made has none."""
    if getattr(error, "run_id", None) is not None:
        status = getattr(error, "run_status", None)
        if status == "FINISHED":  # it landed once the run had ended: trained to its end
            return "the run had finished and is recorded as FINISHED"
        if status is None:  # its end was never stored (a server that hung): not KILLED (QA)
            return (f"the run {error.run_id} could not be ended in the store and stays RUNNING "
                    "until the next run or `gradexp compare` on the store marks it KILLED")
        return f"the run is recorded as {status}"
    tracking = OmegaConf.select(cfg, "tracking.name", default=None)
    if getattr(tracking, "value", tracking) == "none":
        return "nothing is recorded (tracking=none)"
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return "this job's run had not opened; the sweep's parent is recorded as KILLED"
    return "nothing was recorded (no run had opened)"


def interrupt_failure(error: KeyboardInterrupt, recorded: str, during: str = "") -> Failure:
    """Ctrl-C or SIGTERM (gradexp.endings.Terminated), `during` what if not a run: its line,
    saying what was `recorded`, and its exit code. It stops a sweep: the person asked for
    everything to stop."""
    from gradexp.endings import Terminated

    during = f" during {during}" if during else ""
    if isinstance(error, Terminated):
        return Failure(f"terminated (SIGTERM){during}: {recorded}", EXIT_TERMINATED,
                       sweep_goes_on=False)
    return Failure(f"interrupted (Ctrl-C){during}: {recorded}", EXIT_INTERRUPTED,
                   sweep_goes_on=False)


class Stop(BaseException):
    """A failure on its way out of Hydra, said once where the process or the call ends: the
    command line's main says its line and exits with its code, gradexp.run / gradexp.sweep
    raise it (gradexp.api). A BaseException, as the command line's sys.exit is: Hydra catches
    an Exception a job raises and goes on to the next jobs of a batch. Raised inside the
    `except` of the error it stands for, which stays its __context__."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.line)
        self.failure = failure


def launch_failure(error: BaseException, overrides: Sequence[str] = ()) -> Failure | None:
    """What the command line says for an error before (or around) the jobs: a config Hydra
    cannot compose from `overrides` (an unknown key, a missing option); None for anything else."""
    if is_config_error(error, overrides):  # GROUP=null is Hydra's ValueError (QA)
        from gradexp.resume import refusal_of_overrides

        # a resume's overrides judged against the run's recorded config, not the default (QA)
        line = refusal_of_overrides(list(overrides), Path.cwd()) or one_line(error, overrides)
        return Failure(line, EXIT_BAD_INPUT, sweep_goes_on=False)
    return None


def error_message(error: BaseException, cfg: DictConfig | None = None,
                  overrides: Sequence[str] = ()) -> str | None:
    """The one `error:` line for `error` (None: a bug, which stays a traceback): a job's (with
    its `cfg`) or, without it, Hydra's composition of `overrides`."""
    failure = job_failure(error, cfg) if cfg is not None else launch_failure(error, overrides)
    return None if failure is None else failure.line


def _recorded_outside_jobs() -> str:
    """What an interrupt outside any job left: a sweep's parent, which its exit hook ends KILLED
    (the jobs that ended keep their runs), or nothing."""
    from gradexp.sweeps import parent_left_open

    if parent_left_open():
        return "the sweep's parent run is recorded as KILLED; the jobs that ended keep their runs"
    return "nothing was recorded (no run had opened)"


def _exit(failure: Failure) -> NoReturn:
    error_line(failure.line)
    sys.exit(failure.exit_code)


def register_configs() -> None:
    """What Hydra's config search finds beyond conf/: the schemas, the presets, our resolver."""
    from gradexp.sweep_configs import share_the_config_store

    register_schemas()
    register_experiments()
    register_resolver()
    share_the_config_store()  # each composition ~15% cheaper (a sweep composes every job)


def task(cfg: DictConfig) -> float:
    """One job of the command line: run it, return its sweep objective to the sweeper."""
    return sweeper_value(run_job(cfg, _exit))


def run_job(cfg: DictConfig, stop: Callable[[Failure], NoReturn]):
    """One job, run as Hydra hands it over: the RunResult; in a sweep, the objective (float) of
    a FINISHED run it reused, or None when it failed and the sweep goes on (said in one line).

    A failure a person can act on goes to `stop`, which does not return: the command line says
    the line and exits, gradexp.run raises it."""
    from gradexp.run_params import masked_dirname
    from gradexp.sweeps import child_run_name, parent_run_file
    from gradexp.worker_signals import in_joblib_worker, worker_job

    # Again in the job: Hydra has set up its logging by now, and some launchers (Ray) run jobs
    # in processes that never ran main().
    quiet_libraries()
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    # From the launch folder: Ray and SLURM may run a job in another working folder (issue 4).
    sweep_dir = Path(hydra_cfg.runtime.cwd) / hydra_cfg.sweep.dir
    parent = parent_run_file(sweep_dir) if multirun else None
    swept = child_run_name(hydra_cfg, sweep_dir) if multirun else None  # only what varies
    run_name = cfg.tracking.run_name or swept or masked_dirname(hydra_cfg) or "defaults"
    if multirun and in_joblib_worker(str(hydra_cfg.launcher.get("_target_", "")), sweep_dir):
        # Signals are the sweep process's (gradexp.worker_signals): it stops this job before
        # joblib kills this process, and once it stops no job starts here.
        with worker_job(sweep_dir) as may_run:
            if not may_run:
                return None
            return _run_job(cfg, stop, hydra_cfg, sweep_dir, parent, run_name)
    return _run_job(cfg, stop, hydra_cfg, sweep_dir, parent, run_name)


def _run_job(cfg: DictConfig, stop: Callable[[Failure], NoReturn], hydra_cfg, sweep_dir: Path,
             parent: Path | None, run_name: str):
    from gradexp.loop import run_experiment
    from gradexp.sweep_reuse import resume_killed_run, reuse_finished_run
    from gradexp.sweeps import note_failed_job, note_sweep_stop

    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        # sweep.skip_finished (issue 4, gradexp/sweeps.py): a config that FINISHED is not rerun.
        reused = reuse_finished_run(cfg, hydra_cfg) if multirun else None
        if reused is not None:
            return reused
        if multirun:  # sweep.resume_killed: continue this config's KILLED run, if it has one
            cfg = resume_killed_run(cfg, hydra_cfg)
        return run_experiment(
            cfg,
            run_name=run_name,
            launch_dir=Path(hydra_cfg.runtime.cwd),
            hydra_dir=Path(hydra_cfg.runtime.output_dir),
            parent_run_id=parent.read_text().strip() if parent and parent.exists() else None,
            show_config=not multirun,  # a sweep's jobs differ only in what Hydra prints per job
        )
    except BaseException as error:
        if multirun:  # the job before it may be ending in the background: stored first
            from gradexp.callbacks.recorder import wait_for_ends

            wait_for_ends()
        failure = job_failure(error, cfg)
        if failure is None:
            raise
        if multirun and failure.sweep_goes_on and cfg.sweep.continue_on_failure:
            error_line(failure.line)
            if getattr(error, "run_id", None) is None:  # no child run says it: tell the parent
                note_failed_job(sweep_dir, hydra_cfg.job.num, run_name, failure.line)
            return None  # the sweep goes on; its summary lists this job as FAILED
        if multirun and failure.sweep_goes_on:  # sweep.continue_on_failure=false: its line,
            note_sweep_stop(sweep_dir, failure.line)  # for the parent's reason (joblib, Ray)
        stop(failure)


def sweeper_value(outcome) -> float:
    """What a job returns to the sweeper: its objective (sweep.objective, e.g. the final
    val/mse); the final loss, said so, when the run has no such metric; NaN for a failed job."""
    if outcome is None:
        return float("nan")
    if isinstance(outcome, float):  # a reused run's objective
        return outcome
    value = outcome.objective_value
    if value is None:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            note_line(f"sweep.objective={outcome.objective}: this run has no such metric (is "
                      "there held-out data? data.n_val, data.val_fraction); the sweeper gets "
                      f"its final_loss instead ({outcome.final_loss:.6g})")
        return outcome.final_loss
    return value


def multirun_flag_first(args: list[str]) -> list[str]:
    """`-m`/`--multirun` anywhere on the line: Hydra's parser takes it only before the
    overrides (`experiment=lr_search -m trainer.epochs=50` would be a usage error)."""
    flags = [arg for arg in args if arg in ("-m", "--multirun")]
    return flags[:1] + [arg for arg in args if arg not in ("-m", "--multirun")]


def mode_is_known(arguments: list[str]) -> bool:
    """No option, no hydra.* override and no preset: nothing can ask for a multirun."""
    return all(not arg.startswith("-") and "experiment" not in arg
               and not arg.lstrip("+~").startswith("hydra") for arg in arguments)


@contextlib.contextmanager
def _mode_known(arguments: list[str]) -> Iterator[None]:
    """Spare Hydra one of its two compositions of the config (~0.15-0.3 s) on a plain run.

    Before running, Hydra composes the whole config once only to read `hydra.mode` (a config may
    ask for a multirun without -m), then composes it again for the job. Only hydra.* keys and a
    preset can set the mode, and gradexp's own config files do not: so when the command line
    has no option (-m, --cfg, -cd...), no hydra.* override and no preset, the answer is known
    (none: a single run) and the first composition is skipped.
    """
    from hydra._internal.hydra import Hydra

    original = Hydra.get_mode
    if mode_is_known(arguments):
        Hydra.get_mode = lambda self, config_name, overrides: None
    try:
        yield
    finally:
        Hydra.get_mode = original


def main() -> None:
    """The `gradexp` console script and `python -m gradexp`."""
    # A crash inside TensorFlow's C++ (a segfault) would otherwise end the process with no word
    # on stderr; faulthandler prints the Python stack of every thread first.
    faulthandler.enable()
    try:
        try:
            _main()
        except BaseException as error:
            settle(error)
            raise
        settle(None)
    finally:
        # The process ends next. Python's shutdown would walk TensorFlow's, Keras' and MLflow's
        # object graphs with its cycle collector: 1.4-2 s here, even after a bare `import
        # tensorflow, mlflow` (benchmarks/bench_fixed_cost.py). Frozen objects are skipped;
        # atexit handlers, finalizers and flushes still run, and the OS takes the memory back.
        gc.freeze()


def settle(error: BaseException | None) -> None:
    """Before the process ends, however it ends (`error`: what ends it, None for a return; also
    a gradexp.run / gradexp.sweep call that stops, whose process goes on):
    the sweep child still ending in the background is stored, then a sweep's parent left open
    is ended as the way out says: KILLED for Ctrl-C or SIGTERM, FAILED for a failure (a job
    that stopped the sweep, an error), each with its reason. Here, not in atexit hooks:
    those run after concurrent.futures stopped every executor's thread, and a run's last
    writes failed there. A further Ctrl-C or SIGTERM stops the wait, one line, its exit code
    (the end still completes as the threads are joined)."""
    # No run made and no sweep opened: nothing to wait for or end. A joblib or Ray sweep's
    # process runs no job (no recorder) yet holds the parent: it is ended here, not by the
    # exit hook's "the process ended before the sweep's end", KILLED on a failure (QA).
    made_runs = f"{__package__}.callbacks.recorder" in sys.modules
    if not made_runs and f"{__package__}.sweeps" not in sys.modules:
        return
    from gradexp.sweeps import end_open_parents

    def wait_for_ends() -> None:
        if made_runs:
            from gradexp.callbacks.recorder import wait_for_ends as wait

            wait()

    exiting = isinstance(error, SystemExit | Stop)
    code = error.code if isinstance(error, SystemExit) else \
        error.failure.exit_code if isinstance(error, Stop) else None
    try:
        with sigterm_as_interrupt():
            wait_for_ends()
            if isinstance(error, KeyboardInterrupt) or code in (EXIT_INTERRUPTED,
                                                                  EXIT_TERMINATED):
                end_open_parents("KILLED", "interrupted (Ctrl-C or SIGTERM): the jobs that ended "
                                 "keep their runs")  # the UI said nothing of why (QA)
            elif error is not None and not (exiting and code in (0, None)):
                end_open_parents("FAILED", f"the sweep stopped before its end: {_said(error)}")
    except KeyboardInterrupt as again:
        _exit(interrupt_failure(again, "the runs still being stored end as the process exits",
                                "the sweep's last writes"))


def _said(error: BaseException) -> str:
    """What stopped the process, in one line: the line it said, else its error."""
    from gradexp.endings import reason_of

    if isinstance(error, Stop):  # gradexp.run / gradexp.sweep: the line it raises
        return error.failure.line
    if SAID:  # the line it said as it stopped
        return SAID[-1]
    from gradexp.sweeps import stopping_line

    said = stopping_line()  # a job in another process (joblib, Ray) said it there (QA)
    if said is not None:
        return said
    cause = error.__context__ if isinstance(error, SystemExit) else error
    if cause is None:
        return f"exit code {error.code}"
    return f"{type(cause).__name__}: {reason_of(cause)}"


def _main() -> None:
    global on_the_command_line
    on_the_command_line = True
    # TensorFlow's C++ start-up chatter (CUDA probing, oneDNN notes) is noise here; its real
    # errors still surface as Python exceptions. A person can set their own level.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    quiet_libraries()
    if sys.argv[1:2] == ["compare"]:
        from gradexp.compare import main as compare

        sys.exit(compare(sys.argv[2:]))
    sys.argv[1:] = multirun_flag_first(sys.argv[1:])
    register_configs()
    run = hydra.main(config_path=str(resource_dir("conf")), config_name="config",
                     version_base=VERSION_BASE)(task)
    # Let Hydra's exceptions reach us (instead of its multi-line report) to say them in one line;
    # a person who asks for HYDRA_FULL_ERROR=1 gets Hydra's full traceback as usual.
    wants_traceback = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        arguments = sys.argv[1:]
        if "--version" in arguments:  # gradexp's, and what it runs on (gradexp.help)
            from gradexp.help import version_line

            print(version_line())
            return
        if "--help" in arguments or "-h" in arguments:  # ours: Hydra's takes ~3 s (gradexp.help)
            from gradexp.help import print_help

            try:
                print_help([a for a in arguments
                            if a not in ("--help", "-h", "-m", "--multirun")])
            except BrokenPipeError:  # `--help | head`: the reader had the lines it wanted
                stream_to_devnull(sys.stdout)
            return
        flag = flag_line(arguments)  # `--epochs 3`: argparse's usage said only "unrecognized"
        if flag is not None:
            _exit(Failure(flag, EXIT_BAD_INPUT))
        with _mode_known(arguments), sigterm_as_interrupt():
            run()
    except Stop as stop:  # e.g. Ctrl-C while hydra/launcher=packed trains, outside any job
        _exit(stop.failure)
    except KeyboardInterrupt as error:  # outside any job (a job says its own): Hydra's set-up,
        _exit(interrupt_failure(error, _recorded_outside_jobs()))  # a sweep's, between jobs
    except USER_ERRORS as error:
        if wants_traceback:
            raise
        _exit(launch_failure(error, sys.argv[1:]))
    except ValueError as error:  # Hydra's own refusal of two modes (-m --cfg job), a traceback
        if not wants_traceback and is_config_error(error, sys.argv[1:]):  # GROUP=null (QA)
            _exit(launch_failure(error, sys.argv[1:]))
        if wants_traceback or not str(error).startswith("Only one of --run, --multirun"):
            raise
        _exit(Failure(f"{error} (Hydra runs one at a time): to see a sweep job's config, give "
                      "that job's values without -m, e.g. python -m gradexp --cfg job "
                      "optimizer=adam", EXIT_BAD_INPUT))


if __name__ == "__main__":
    main()
