"""What finding dead runs adds to a run's start: `mark_dead_in_experiment` (gradexp.liveness, the
call run_experiment makes before it opens its run) on a sqlite store of N runs, of which RUNNING
are RUNNING and alive (this process's, so none is marked: the search is all it costs), and once
more with one dead run among them (what marking it adds).

    python benchmarks/bench_dead_runs.py [N ...] [--running R] [--repeats K]

Each store is filled through MlflowClient like real runs (40 params, 8 tags, 5 metrics a run).
Prints per N the median seconds of: the marking in a new process once the store is open
(opening it, importing MLflow and building its engine, is paid by the run's tracker anyway;
shown for scale), the marking again in the same process, and the marking when one dead run
is found and marked KILLED.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "src"))


def fill(store: str, n: int, running: int) -> None:
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from gradexp.liveness import process_tags

    client = MlflowClient(store)
    experiment = client.create_experiment("gradexp")
    now = int(time.time() * 1000)
    for index in range(n):
        tags = process_tags() if index < running else {}
        run = client.create_run(experiment, tags=tags)
        client.log_batch(run.info.run_id,
                         params=[Param(f"group.key_{k}", str(k * index)) for k in range(40)],
                         metrics=[Metric(f"metric_{k}", float(k), now, 1) for k in range(5)],
                         tags=[RunTag(f"tag_{k}", "x") for k in range(8)])
        if index >= running:
            client.set_terminated(run.info.run_id, "FINISHED")


# A new process: opening the store (importing MLflow, its engine), which a run's tracker does
# anyway, then the marking on the open store: what the run's start pays for it.
COLD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from gradexp.liveness import mark_dead_in_experiment
from gradexp.mlflow_store import open_client
started = time.perf_counter()
open_client(sys.argv[2]).search_experiments(max_results=1)
opened = time.perf_counter()
mark_dead_in_experiment(sys.argv[2], "gradexp", 10.0)
print(opened - started, time.perf_counter() - opened)
"""


def timed(store: str, repeats: int) -> float:
    from gradexp.liveness import mark_dead_in_experiment

    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        mark_dead_in_experiment(store, "gradexp", 10.0)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def add_dead_run(store: str) -> None:
    from mlflow import MlflowClient

    from gradexp.liveness import HOST_TAG, PID_TAG, process_tags

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a process that ran here and is gone
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("gradexp").experiment_id
    client.create_run(experiment, tags={**process_tags(), HOST_TAG: socket.gethostname(),
                                        PID_TAG: str(child.pid)})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", nargs="*", type=int, default=[100, 1000])
    parser.add_argument("--running", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    print(f"{'runs':>6} {'running':>7} {'marking s':>10} {'again s':>8} {'+1 dead s':>10} "
          f"{'(opening the store s)':>22}")
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as folder:
            store = f"sqlite:///{Path(folder) / 'mlflow.db'}"
            fill(store, n, args.running)
            warm = timed(store, args.repeats)
            fresh = [[float(v) for v in subprocess.run(
                [sys.executable, "-c", COLD, str(HERE / "src"), store], capture_output=True,
                text=True, check=True).stdout.split()] for _ in range(args.repeats)]
            opening = statistics.median(f[0] for f in fresh)
            first = statistics.median(f[1] for f in fresh)
            dead = []
            for _ in range(args.repeats):
                add_dead_run(store)
                dead.append(timed(store, 1))
            print(f"{n:>6} {args.running:>7} {first:>10.4f} {warm:>8.4f} "
                  f"{statistics.median(dead):>10.4f} {opening:>22.3f}")


if __name__ == "__main__":
    main()
