"""Ctrl-C and SIGTERM in a sweep whose jobs run in joblib's worker processes
(`hydra/launcher=joblib`): the sweep's process stops the workers' jobs before joblib kills them.

On an interrupt, joblib ends its loky workers with SIGKILL at once: a job training there could
not end its run, which stayed RUNNING until a later run on the store found its process gone.
And a terminal's Ctrl-C reaches the workers too (one process group), while `kill -INT PID`,
or a launch with SIGINT ignored (`nohup ... &`), reaches none of them. So signals are the
sweep process's, as with the packed launcher's helpers (gradexp.packed.replay_processes):

- a worker ignores Ctrl-C from its first job on, and SIGTERM between jobs; during a job SIGTERM
  is an interrupt (gradexp.interrupts.sigterm_as_interrupt), and the job leaves a marker, its
  pid, in the sweep folder;
- the sweep's process, on its first Ctrl-C or SIGTERM, leaves a stop marker (no worker starts
  another job), sends each worker with a job one SIGTERM, waits until their jobs have ended
  their runs KILLED and said so in their own line (at most STOP_TIMEOUT), and only then lets
  the interrupt land, where joblib ends the workers. A second signal stops the wait.

A worker's job checks the stop marker after leaving its own marker, and the sweep's process
lists the job markers after leaving its stop marker: a job either sees the stop or is stopped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

STOP_TIMEOUT = 120.0  # seconds the workers' jobs get to end their runs KILLED
_STOP = "stop"
_SWEEP_PID = "sweep_pid"  # the sweep's own process: its jobs are not a worker's


def jobs_dir(sweep_dir: str | Path) -> Path:
    """Where the jobs running in workers leave their pids, and the sweep its stop marker."""
    return Path(sweep_dir) / ".gradexp_worker_jobs"


def in_joblib_worker(launcher_target: str, sweep_dir: str | Path) -> bool:
    """Whether this job runs in a worker process of Hydra's joblib launcher: another process
    than the sweep's, whose pid WorkersStoppedFirst left in the jobs folder (n_jobs=1 runs the
    jobs in the sweep's own process, which may itself be some multiprocessing child)."""
    if not launcher_target.endswith(".JoblibLauncher"):
        return False
    try:
        sweep_pid = int((jobs_dir(sweep_dir) / _SWEEP_PID).read_text())
    except (OSError, ValueError):
        return False  # no sweep process took the signals: nothing to hand them to
    return sweep_pid != os.getpid()


@contextlib.contextmanager
def worker_job(sweep_dir: str | Path) -> Iterator[bool]:
    """Around a job in a joblib worker: signals as the module says, the job's marker; yields
    whether the job may run (False: the sweep is stopping, the job must not start)."""
    from gradexp.interrupts import sigterm_as_interrupt

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep's process takes it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # between jobs: nothing to end
    folder = jobs_dir(sweep_dir)
    marker = folder / str(os.getpid())
    with sigterm_as_interrupt():
        try:  # a SIGTERM landing right after the touch still takes the marker away
            folder.mkdir(parents=True, exist_ok=True)
            marker.touch()
            yield not (folder / _STOP).exists()
        finally:
            marker.unlink(missing_ok=True)


class WorkersStoppedFirst:
    """In the sweep's process, for a joblib sweep: Ctrl-C and SIGTERM stop the workers' jobs
    before they land (stop_worker_jobs). Ignored signals stay ignored."""

    def __init__(self, sweep_dir: str | Path) -> None:
        self.sweep_dir = Path(sweep_dir).resolve()
        self.previous: dict[int, object] = {}

    def install(self) -> None:
        folder = jobs_dir(self.sweep_dir)
        shutil.rmtree(folder, ignore_errors=True)  # an earlier sweep's
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / _SWEEP_PID).write_text(str(os.getpid()))  # in_joblib_worker
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                handler = signal.getsignal(sig)
                if handler in (signal.SIG_IGN, None):
                    continue
                signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: signals are not ours to take
                return
            self.previous[sig] = handler

    def restore(self) -> None:
        """The handlers as they were, where ours is still in place."""
        for sig, handler in self.previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, handler)
        self.previous = {}

    def _handle(self, signum, frame) -> None:
        previous = self.previous.get(signum, signal.SIG_DFL)
        self.restore()  # once: a second signal stops the wait below
        stop_worker_jobs(self.sweep_dir)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.raise_signal(signum)


def stop_worker_jobs(sweep_dir: str | Path, timeout: float = STOP_TIMEOUT) -> None:
    """No worker starts another job; each job running in one gets one SIGTERM, and this waits
    until they have ended (their runs KILLED), a worker is gone, or `timeout` passed."""
    import multiprocessing

    from gradexp.liveness import process_exists

    folder = jobs_dir(sweep_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / _STOP).touch()
        marked = [int(path.name) for path in folder.iterdir() if path.name.isdigit()]
    except OSError:
        return
    # Only this process's workers: a marker a dead worker left may name another process now
    ours = {child.pid for child in multiprocessing.active_children()}
    running = [pid for pid in marked if pid in ours]
    for pid in running:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(
            (folder / str(pid)).exists() and process_exists(pid) for pid in running):
        time.sleep(0.05)
