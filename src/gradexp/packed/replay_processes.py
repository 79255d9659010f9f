"""Replaying a packed sweep's jobs in more than one process (`hydra.launcher.processes`).

After a packed group trains (in well under a second for seed 004's line), its jobs are replayed
one by one: each opens its child run, writes its params and metrics, runs its checks, draws its
curves and saves its model. That Python work, ~0.4-0.5 s a job, is most of a packed sweep's
wall time, and one process uses one core for it. So the sweep starts helper processes as it
begins (start_early, from gradexp.sweeps: their TensorFlow import, ~5 s, overlaps the checks of
every job and the parent run's opening); the first helper plans the sweep and trains its packed
groups while the launcher imports TensorFlow for its own jobs; then the launcher and each helper
take the next job waiting and run it exactly as the launcher would: Hydra's `run_job` with the
job's config and, for a packed job, its packed training handed over (gradexp.packed.replay; a
job that runs sequentially trains there), so the child run is the same whichever process
recorded it.

A helper is `python -m gradexp.packed.replay_processes FD`, talking over a socket pair (FD is its
end): the launcher may first ask the plan (every job's config: a gradexp.packed.plan.Planned
back), then sends what `run_job` needs once (Hydra's context, the task function, Hydra's global
state, sys.path), then one job at a time; the helper answers each with the job's JobReturn, or
with how its job stopped the sweep (a failure said in its one line, an interrupt).
Its output goes where the launcher's does. Signals are the launcher's: a helper ignores Ctrl-C
(which a terminal sends the whole process group), and when the launcher stops, for whatever
reason, it sends each helper still running one SIGTERM: the helper's running job ends KILLED, as
any job does on SIGTERM, and says so in its line. No run is left RUNNING.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

STOP_TIMEOUT = 120.0  # seconds a helper gets to end its job's run KILLED before it is killed


def why_not_here(*, command_line: bool, pruned: bool, sweeper: str) -> str | None:
    """Why a sweep asking for hydra.launcher.processes above 1 runs its jobs in this process
    alone; None when helpers may run them."""
    if not command_line:
        return "gradexp.sweep runs every job in its own process, so its list holds every result"
    if pruned:
        return ("sweep.pruner judges each job against the jobs finished before it, in a "
                "sequential sweep's order")
    if sweeper != "BasicSweeper":
        return (f"{sweeper} launches batch after batch, and a later batch has no planning "
                "left to hide a helper's start behind")
    if os.name != "posix":
        return "a helper gets its end of a socket pair by inheritance, which Windows does not do"
    return None


def import_for_jobs() -> None:
    """What every job imports, loaded ahead (a helper as it starts; the launcher while a helper
    plans)."""
    from gradexp.tensorflow_import import import_tensorflow

    import_tensorflow()
    import matplotlib.pyplot  # noqa: F401 - the runs' plots
    import mlflow  # noqa: F401

    import gradexp.app  # noqa: F401
    import gradexp.callbacks.recorder  # noqa: F401
    import gradexp.loop  # noqa: F401


# Helpers the sweep started as it began, for its launcher to take (started_early)
_EARLY: list[ReplayHelpers] = []


def start_early(config: Any, *, command_line: bool) -> None:
    """A packed sweep asking for hydra.launcher.processes above 1 (`config`, the sweep's): start
    its helpers now, before every job is checked and the parent run opens, ~4 s of the
    launcher's that their start (~5 s) overlaps. Nothing where the launcher would not use them
    (why_not_here) or the setting is no count (its check says that); helpers no launcher took
    are stopped as the sweep ends or the process exits."""
    from gradexp.pruning import pruner_name
    from gradexp.sweep_checks import plugin_name

    launcher = config.hydra.launcher
    processes = launcher.get("processes", 1) if plugin_name(launcher) == "PackedLauncher" \
        else 1
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 2 \
            or why_not_here(command_line=command_line, pruned=pruner_name(config) != "none",
                            sweeper=plugin_name(config.hydra.sweeper)) is not None:
        return
    if not _EARLY:
        atexit.register(close_early)
    _EARLY.append(ReplayHelpers(processes - 1, str(config.hydra.runtime.cwd)))


def started_early(count: int, launch_dir: str) -> ReplayHelpers | None:
    """The helpers start_early started for `count` and `launch_dir`, now the caller's."""
    for helpers in _EARLY:
        if helpers.count == count and helpers.launch_dir == launch_dir:
            _EARLY.remove(helpers)
            return helpers
    return None


def close_early() -> None:
    """Stop the helpers no launcher took (the sweep stopped before its launch, a config error)."""
    while _EARLY:
        _EARLY.pop().close()


@dataclass(frozen=True)
class Stopped:
    """How a helper's job stopped the sweep (a failure or an interrupt it said in its line), or
    the helper died (`line`: what this process says, None when the job said it)."""

    exit_code: int
    line: str | None = None


class ReplayHelpers:
    """Helper processes that run a packed sweep's jobs beside the launcher's own process.

    Made early (each helper starts at once); `replay(context, take, job)` has each helper take
    job numbers from `take` (None: no job left) until none is left, in a thread of its own that
    waits on its helper; `finish` waits for them and gives each job's JobReturn; `close` stops
    whatever still runs."""

    def __init__(self, count: int, launch_dir: str) -> None:
        self._helpers = [_Helper(launch_dir) for _ in range(count)]
        self.count = count
        self.launch_dir = launch_dir
        self.taken = 0  # jobs the helpers took
        self.plan_failure: str | None = None  # why the first helper could not plan
        self._threads: list[threading.Thread] = []
        self.returns: dict[int, Any] = {}
        self.stopped: Stopped | None = None  # the first job that stopped the sweep
        self._closing = False  # the sweep is stopping: no helper starts another job

    def replay(self, context: dict[str, Any], take: Callable[[], int | None],
               job: Callable[[int], tuple[Any, Any]]) -> None:
        """Each helper replays the jobs it takes: `job(number)` gives (sweep config, Trained)."""
        self._start(context, take, job, None)

    def plan_and_replay(self, context: dict[str, Any], take: Callable[[], int | None],
                        job: Callable[[int], tuple[Any, Any]], configs: dict[int, Any],
                        launch_dir: Path, trained: dict[int, Any]) -> Any | None:
        """As replay, but the first helper plans the sweep (every job's Hydra config by number)
        and trains its packed groups first, and says so; `trained` gets what they trained
        before any helper takes a job, while this process imports what its own jobs need. The
        gradexp.packed.plan.Planned; None if the helper could not plan (no helper takes a job
        then: this process plans, and a config the plan cannot build fails there as it always
        did; or the helper died: plan_failure says why)."""
        planning = _Planning(configs, str(launch_dir), trained)
        self._start(context, take, job, planning)
        import_for_jobs()
        planning.arrived.wait()
        self.plan_failure = planning.why
        return planning.planned

    def _start(self, context: dict[str, Any], take: Callable[[], int | None],
               job: Callable[[int], tuple[Any, Any]], planning: _Planning | None) -> None:
        setup = _dumps(("setup", context))  # once, for every helper
        for index, helper in enumerate(self._helpers):
            thread = threading.Thread(target=self._serve,
                                      args=(helper, setup, take, job, planning, index == 0),
                                      name="gradexp-replay-helper", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, helper: _Helper, setup: bytes, take: Callable[[], int | None],
               job: Callable[[int], tuple[Any, Any]], planning: _Planning | None,
               first: bool) -> None:
        try:
            helper.send(setup)
            if planning is not None:
                if first:
                    result = None
                    try:
                        kind, value = helper.ask(("plan", planning.configs, planning.launch_dir))
                        result, planning.why = (value, None) if kind == "planned" else (None, value)
                    finally:  # whatever happened, the launcher waiting on it goes on
                        planning.got(result)
                planning.arrived.wait()
                if planning.planned is None:
                    return
            while self.stopped is None and not self._closing:
                number = take()
                if number is None:
                    break
                self.taken += 1
                config, trained = job(number)
                kind, value = helper.ask(("job", number, config, trained))
                if kind == "stopped":
                    self.stopped = self.stopped or Stopped(value)
                    return
                self.returns[number] = value
            helper.ask(("end",))  # its runs' last writes stored, before the parent's summary
            helper.ended = True
        except Exception as error:  # noqa: BLE001 - the helper died or was stopped (EOFError,
            # OSError), or a job's config or result would not pickle: the sweep stops, said
            self.stopped = self.stopped or Stopped(1, (
                f"a replay process (hydra.launcher.processes) ended before its jobs did "
                f"({type(error).__name__}: {error}); hydra.launcher.processes=1 records every "
                "job in this process"))

    def exit_if_stopped(self) -> None:
        """A helper's job stopped the sweep: this process stops it too, with that job's exit
        code (SystemExit, as a job of its own that stops the sweep), saying the line if the
        job could not."""
        if self.stopped is None:
            return
        from gradexp.callbacks.recorder import wait_for_ends
        from gradexp.console import error_line

        wait_for_ends()  # this process's last job, ending in the background: stored first
        if self.stopped.line is not None:
            error_line(self.stopped.line)
        sys.exit(self.stopped.exit_code)

    def finish(self) -> dict[int, Any]:
        """Wait for the helpers' jobs; their JobReturns by job number (or the sweep stops, as
        exit_if_stopped)."""
        for thread in self._threads:
            thread.join()
        self.exit_if_stopped()
        return self.returns

    def close(self) -> None:
        """Stop the helpers: SIGTERM ends a running job's run KILLED; a helper with no job
        waiting for one ends at once. None starts another job meanwhile (the jobs still queued
        would run while this process waits, and one past STOP_TIMEOUT would be left RUNNING)."""
        self._closing = True
        for helper in self._helpers:
            helper.stop()
        for thread in self._threads:
            thread.join(timeout=STOP_TIMEOUT)


@dataclass
class _Planning:
    """The first helper's plan of the sweep, which the launcher and the other helpers wait for."""

    configs: dict[int, Any]  # every job's Hydra config, by number
    launch_dir: str
    trained: dict[int, Any]  # filled with what the packed groups trained
    arrived: threading.Event = field(default_factory=threading.Event)
    planned: Any = None  # gradexp.packed.plan.Planned; None: the helper could not plan
    why: str | None = "the helper process ended"  # why it could not

    def got(self, result: Any) -> None:
        if result is not None:
            self.trained.update(result.trained)
        self.planned = result
        self.arrived.set()


class _Helper:
    """One helper process and the launcher's end of its socket pair."""

    def __init__(self, launch_dir: str) -> None:
        ours, theirs = socket.socketpair()
        # TensorFlow's C++ start-up chatter off, as app.main sets it before TensorFlow loads
        env = {"TF_CPP_MIN_LOG_LEVEL": "3", **os.environ}
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno())], cwd=launch_dir, env=env,
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self.connection = Connection(ours.detach())
        self.ended = False  # it replayed its jobs and stored their runs: it exits by itself

    def send(self, message: bytes) -> None:
        self.connection.send_bytes(message)

    def ask(self, message: tuple) -> tuple[str, Any]:
        self.connection.send_bytes(_dumps(message))
        return pickle.loads(self.connection.recv_bytes())

    def stop(self) -> None:
        if self.process.poll() is None:
            if self.ended:  # its exit (~0.15 s) overlaps the sweep's end: reap_ended waits
                if not _EXITING:
                    atexit.register(reap_ended)
                _EXITING.append(self.process)
            else:
                self.process.terminate()
                _wait_or_kill(self.process)
        self.connection.close()


# Helpers that stored their last runs and are exiting by themselves (_Helper.stop)
_EXITING: list[subprocess.Popen] = []


def reap_ended() -> None:
    """Wait for the helpers exiting by themselves (the sweep's end, or this process's exit)."""
    while _EXITING:
        _wait_or_kill(_EXITING.pop())


def _wait_or_kill(process: subprocess.Popen) -> None:
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _dumps(value: Any) -> bytes:
    # cloudpickle: a task function defined where it cannot be imported by name still goes
    import cloudpickle

    return cloudpickle.dumps(value)


# --- the helper's side ------------------------------------------------------------------------


def _serve(connection: Connection) -> int:
    """Plan if asked, and replay the jobs sent until told to end; the exit code."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import configure_log, setup_globals

    from gradexp.callbacks.recorder import wait_for_ends
    from gradexp.metrics import register_resolver
    from gradexp.packed.replay import handed_over

    _, context = pickle.loads(connection.recv_bytes())  # ("setup", context)
    sys.path[:] = context["sys_path"]
    setup_globals()
    register_resolver()
    Singleton.set_state(context["singleton_state"])
    launcher_config = context["config"]
    configure_log(launcher_config.hydra.hydra_logging, launcher_config.hydra.verbose)
    while True:
        message = pickle.loads(connection.recv_bytes())
        if message[0] == "end":
            wait_for_ends()
            connection.send_bytes(pickle.dumps(("ended", None)))
            return 0
        if message[0] == "plan":
            connection.send_bytes(_planned(*message[1:]))
            continue
        _, number, config, trained = message
        context["say"](number, trained)
        try:
            with handed_over(trained):
                returned = context["run_job"](config)
        except SystemExit as stop:  # the job said its line (a failure, an interrupt)
            wait_for_ends()
            code = stop.code if isinstance(stop.code, int) else 1
            connection.send_bytes(pickle.dumps(("stopped", code)))
            return code
        finally:
            configure_log(launcher_config.hydra.hydra_logging, launcher_config.hydra.verbose)
        connection.send_bytes(_returned(returned))


def _planned(configs: dict[int, Any], launch_dir: str) -> bytes:
    """The sweep planned and its groups trained here (gradexp.packed.plan.plan_and_train), said
    as the launcher says it; ("failed", why) for anything raised, which the launcher's own plan
    then meets and says as it always did."""
    import logging

    from gradexp.console import note_line
    from gradexp.interrupts import interrupts_deferred
    from gradexp.packed.plan import plan_and_train

    try:
        # held as the launcher holds it: SIGTERM (the launcher stopping) lands at the end
        with interrupts_deferred():
            planned = plan_and_train(configs, Path(launch_dir))
    except Exception as error:  # noqa: BLE001 - said by the launcher's own plan
        return pickle.dumps(("failed", f"{type(error).__name__}: {error}"))
    note_line(planned.line)
    launcher_log = logging.getLogger("hydra_plugins.gradexp_packed.packed_launcher")
    for line, noted in planned.lines():
        (note_line if noted else launcher_log.info)(line)
    return pickle.dumps(("planned", planned))


def _returned(returned: Any) -> bytes:
    """The JobReturn as the launcher's sweeper reads it; a failed job's exception, if it does
    not pickle, as a RuntimeError with its text (its traceback was printed here)."""
    try:
        return pickle.dumps(("returned", returned))
    except Exception:  # noqa: BLE001 - an exception of a user's that does not pickle
        error = returned._return_value
        returned._return_value = RuntimeError(f"{type(error).__name__}: {error}")
        return pickle.dumps(("returned", returned))


def main() -> None:
    import faulthandler
    import gc

    from gradexp.interrupts import sigterm_as_interrupt

    faulthandler.enable()
    # Ctrl-C at a terminal reaches the whole process group; the launcher alone takes it and
    # stops its helpers with one SIGTERM each (ReplayHelpers.close). A second signal landing
    # while a job ends its run KILLED could cut that short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    connection = Connection(int(sys.argv[1]))
    import_for_jobs()  # now: the launcher is still checking the jobs and opening the parent

    code = 130
    try:
        with sigterm_as_interrupt():
            code = _serve(connection)
    except (KeyboardInterrupt, EOFError):  # stopped with no job running: nothing to record
        from gradexp.callbacks.recorder import wait_for_ends

        wait_for_ends()  # but the last job's run, ending in the background, is stored first
    finally:
        gc.freeze()  # as app.main: no cycle collection of TensorFlow's graph at exit
    sys.exit(code)


if __name__ == "__main__":
    main()

