"""Dead runs: a run says where it runs and that it still does; the next run on the store marks
the RUNNING runs that stopped saying so KILLED.

A run killed with `kill -9` (the OOM killer, a power cut, a cluster's preemption) cannot end
itself and would stay RUNNING for good. So every run records its host (`gradexp.host`), its
process (`gradexp.pid`) and a heartbeat (`gradexp.heartbeat`, a UTC time), which its tracker
refreshes at stretch ends and checkpoints, at most every HEARTBEAT_SECONDS. The next
`python -m gradexp` and `gradexp compare` on the store judge its RUNNING runs:

- on this host, by the process alone: gone (os.kill(pid, 0) says so) is dead; alive is alive,
  however old the heartbeat (a long gradient check, a sweep parent waiting on its jobs);
- on another host (SLURM, Ray), by the heartbeat: older than tracking.stale_after minutes is dead.

Never judged dead: this process's own runs, a run without a heartbeat (not gradexp's, or from
before heartbeats), and a parent (a run with children, mlflow.parentRunId) while one of its
children is alive or, across hosts, gave a sign of life (heartbeat or end) within stale_after.
Children of a packed group share a process, so they are found, and marked, together.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from gradexp.tag_keys import HEARTBEAT_TAG, HOST_TAG, PARENT_TAG, PID_TAG

HEARTBEAT_SECONDS = 30.0  # a write (~12-25 ms on sqlite) at most this often: nothing to notice


def now_utc() -> str:
    """The heartbeat's value: an ISO 8601 UTC time, to the second (readable in the MLflow UI)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def process_tags() -> dict[str, str]:
    """Where this run runs, and a first heartbeat: written with the run (no extra write)."""
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid()), HEARTBEAT_TAG: now_utc()}


def process_exists(pid: int) -> bool:
    """Whether a process of this id runs on this host (signal 0 checks, sends nothing); a
    zombie (killed, not yet reaped by its parent) has stopped running."""
    if pid <= 0:  # 0 and -1 would name process groups, not a process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    except OSError:  # a pid the system does not accept: no such process
        return False
    try:  # Linux: the state follows the command's closing parenthesis
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _heartbeat_seconds(tags: dict) -> float | None:
    try:
        return datetime.fromisoformat(tags[HEARTBEAT_TAG]).timestamp()
    except (KeyError, ValueError, TypeError):
        return None


def why_dead(run, stale_after_minutes: float, now: float | None = None) -> str | None:
    """Why a RUNNING run's process is dead, by its own tags; None while it may be alive."""
    tags = run.data.tags
    beat = _heartbeat_seconds(tags)
    if beat is None:
        return None  # not a run of ours to judge
    host = tags.get(HOST_TAG)
    if host == socket.gethostname():
        try:
            pid = int(tags.get(PID_TAG, ""))
        except ValueError:
            return None
        if pid == os.getpid() or process_exists(pid):
            return None
        return f"its process {pid} on {host} is gone"
    silent = (time.time() if now is None else now) - beat
    if silent > stale_after_minutes * 60:
        return f"no heartbeat for {silent / 60:.0f} minutes"
    return None


def still_running(run, stale_after_minutes: float, now: float | None = None) -> str | None:
    """Where a RUNNING run of ours still runs, as "process PID on HOST (its heartbeat is N s
    old)"; None when it is not RUNNING, is dead (why_dead), or has no heartbeat to judge it by.
    A resume of it would have two processes write one run (QA: steps 3-10 twice)."""
    tags = run.data.tags
    beat = _heartbeat_seconds(tags)
    if run.info.status != "RUNNING" or beat is None or \
            why_dead(run, stale_after_minutes, now) is not None:
        return None
    age = max(0.0, (time.time() if now is None else now) - beat)
    return (f"process {tags.get(PID_TAG, '?')} on {tags.get(HOST_TAG, '?')} "
            f"(its heartbeat is {age:.0f} s old)")


def _last_sign(run) -> float:
    """The newest sign of life of a run: its heartbeat or its end, in seconds since the epoch."""
    beat = _heartbeat_seconds(run.data.tags) or 0.0
    return max(beat, (run.info.end_time or 0) / 1000)


@dataclass
class DeadRun:
    run_id: str
    reason: str
    last_sign: float  # seconds since the epoch: when it was last heard of (its end time)


def find_dead_runs(client, experiment_ids: Sequence[str],
                   stale_after_minutes: float) -> list[DeadRun]:
    """The RUNNING runs of these experiments that are dead: one search, and one more per dead
    candidate that might be a parent (rare)."""
    from gradexp.mlflow_store import find_runs

    if not experiment_ids:
        return []
    running = find_runs(client, list(experiment_ids), "attributes.status = 'RUNNING'",
                        max_results=10_000)
    now = time.time()
    dead = []
    for run in running:
        reason = why_dead(run, stale_after_minutes, now)
        if reason is None:
            continue
        run_id = run.info.run_id
        children = find_runs(client, [run.info.experiment_id],
                             f"tags.`{PARENT_TAG}` = '{run_id}'", max_results=10_000)
        if any(child.info.status == "RUNNING" and why_dead(child, stale_after_minutes) is None
               for child in children):
            continue  # a child still works for it (a launcher's jobs outlive it)
        last = max([_last_sign(run), *(_last_sign(child) for child in children)])
        if run.data.tags.get(HOST_TAG) != socket.gethostname() and \
                now - last <= stale_after_minutes * 60:
            continue  # a parent elsewhere whose jobs were heard from lately
        dead.append(DeadRun(run_id, reason, last))
    return dead


def mark_dead_runs(client, experiment_ids: Sequence[str], stale_after_minutes: float,
                   say: Callable[[str], None] | None = None) -> list[str]:
    """Mark the dead RUNNING runs KILLED (tag gradexp.status_reason, end time = when last heard
    of), each said in one line; returns their ids."""
    from gradexp.mlflow_store import mark_killed, read_run

    marked = []
    for found in find_dead_runs(client, experiment_ids, stale_after_minutes):
        # Read again: a run that ended between the search and now (its process then exited)
        # has its own status, which stands.
        if read_run(client, found.run_id).info.status != "RUNNING":
            continue
        mark_killed(client, found.run_id, f"marked KILLED: {found.reason}",
                    int(found.last_sign * 1000))
        marked.append(found.run_id)
        if say is not None:
            say(f"marked run {found.run_id} KILLED: {found.reason}")
    return marked


# When this process last searched a sweep's experiment for dead runs: (uri, experiment,
# parent run) -> time.monotonic(). A sweep's jobs in one process search once a heartbeat period.
_SEARCHED: dict[tuple[str, str, str], float] = {}


def mark_dead_in_experiment(uri: str, experiment: str, stale_after_minutes: float,
                            say: Callable[[str], None] | None = None,
                            parent_run_id: str | None = None) -> list[str]:
    """`mark_dead_runs` in one experiment, by name, of the store at `uri` (a run's start). A
    sweep's child (`parent_run_id`) searches only if its sweep has not in this process within
    HEARTBEAT_SECONDS: a run that dies meanwhile is found by a later job, and a job is spared a
    search of the store (~30 ms on sqlite)."""
    from gradexp.mlflow_store import experiment_named, open_client

    if parent_run_id is not None:
        key, now = (uri, experiment, parent_run_id), time.monotonic()
        last = _SEARCHED.get(key)
        if last is not None and now - last < HEARTBEAT_SECONDS:
            return []
        _SEARCHED[key] = now

    client = open_client(uri)
    found = experiment_named(client, experiment)
    if found is None:
        return []
    return mark_dead_runs(client, [found.experiment_id], stale_after_minutes, say)


def mark_dead_children(client, experiment_id: str, parent_run_id: str,
                       stale_after_minutes: float) -> list[str]:
    """Mark the RUNNING children of a sweep's parent that are dead (why_dead) KILLED, end time
    = when last heard of: a sweep stopped early ends them before its parent (gradexp.sweeps).
    Their ids."""
    from gradexp.mlflow_store import find_runs, mark_killed, read_run

    running = find_runs(client, [experiment_id], f"tags.`{PARENT_TAG}` = '{parent_run_id}' "
                        "and attributes.status = 'RUNNING'", max_results=10_000)
    marked = []
    for run in running:
        reason = why_dead(run, stale_after_minutes)
        if reason is None or read_run(client, run.info.run_id).info.status != "RUNNING":
            continue
        mark_killed(client, run.info.run_id, f"marked KILLED: {reason}",
                    int(_last_sign(run) * 1000))
        marked.append(run.info.run_id)
    return marked
