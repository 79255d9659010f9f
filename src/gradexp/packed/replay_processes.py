"""Replaying a packed sweep's jobs in more than one process (`hydra.launcher.processes`).

After a packed group trains (in well under a second for seed 004's line), its jobs are replayed
one by one: each opens its child run, writes its params and metrics, runs its checks, draws its
curves and saves its model. That Python work, ~0.4-0.5 s a job, is most of a packed sweep's
wall time, and one process uses one core for it. So the launcher starts helper processes as
soon as it knows the sweep's size (their TensorFlow import, ~5 s, overlaps the planning and the
packed training), and then it and each helper take the next job waiting and run it exactly as
the launcher would: Hydra's `run_job` with the job's config and, for a packed job, its packed
training handed over (gradexp.packed.replay; a job that runs sequentially trains there), so the
child run is the same whichever process recorded it.

A helper is `python -m gradexp.packed.replay_processes FD`, talking over a socket pair (FD is its
end): the launcher sends what `run_job` needs once (Hydra's context, the task function, Hydra's
global state, sys.path), then one job at a time; the helper answers each with the job's
JobReturn, or with how its job stopped the sweep (a failure said in its one line, an interrupt).
Its output goes where the launcher's does. Signals are the launcher's: a helper ignores Ctrl-C
(which a terminal sends the whole process group), and when the launcher stops, for whatever
reason, it sends each helper still running one SIGTERM: the helper's running job ends KILLED, as
any job does on SIGTERM, and says so in its line. No run is left RUNNING.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
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
        self._threads: list[threading.Thread] = []
        self.returns: dict[int, Any] = {}
        self.stopped: Stopped | None = None  # the first job that stopped the sweep
        self._closing = False  # the sweep is stopping: no helper starts another job

    def replay(self, context: dict[str, Any], take: Callable[[], int | None],
               job: Callable[[int], tuple[Any, Any]]) -> None:
        """Each helper replays the jobs it takes: `job(number)` gives (sweep config, Trained)."""
        setup = _dumps(context)  # once, for every helper
        for helper in self._helpers:
            thread = threading.Thread(target=self._serve, args=(helper, setup, take, job),
                                      name="gradexp-replay-helper", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, helper: _Helper, setup: bytes, take: Callable[[], int | None],
               job: Callable[[int], tuple[Any, Any]]) -> None:
        try:
            helper.send(setup)
            while self.stopped is None and not self._closing:
                number = take()
                if number is None:
                    break
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
            if not self.ended:
                self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.connection.close()


def _dumps(value: Any) -> bytes:
    # cloudpickle: a task function defined where it cannot be imported by name still goes
    import cloudpickle

    return cloudpickle.dumps(value)


# --- the helper's side ------------------------------------------------------------------------


def _serve(connection: Connection) -> int:
    """Replay the jobs sent until told to end; the exit code."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import configure_log, setup_globals

    from gradexp.callbacks.recorder import wait_for_ends
    from gradexp.packed.replay import handed_over

    context = pickle.loads(connection.recv_bytes())
    sys.path[:] = context["sys_path"]
    setup_globals()
    Singleton.set_state(context["singleton_state"])
    launcher_config = context["config"]
    configure_log(launcher_config.hydra.hydra_logging, launcher_config.hydra.verbose)
    while True:
        message = pickle.loads(connection.recv_bytes())
        if message[0] == "end":
            wait_for_ends()
            connection.send_bytes(pickle.dumps(("ended", None)))
            return 0
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
    # What every job imports, loaded now: the launcher is still planning and training
    from gradexp.tensorflow_import import import_tensorflow

    import_tensorflow()
    import matplotlib.pyplot  # noqa: F401 - the runs' plots
    import mlflow  # noqa: F401

    import gradexp.app  # noqa: F401
    import gradexp.callbacks.recorder  # noqa: F401
    import gradexp.loop  # noqa: F401

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

