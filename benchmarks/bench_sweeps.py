"""Benchmark: one 8-job sweep, launched four ways, as a person would run it.

    python benchmarks/bench_sweeps.py                 # 100 epochs a job, once each (~5 minutes)
    python benchmarks/bench_sweeps.py --repeat 3      # the median of 3
    python benchmarks/bench_sweeps.py --epochs 3      # tiny jobs: start-up costs only

The 8 jobs: optimizer sgd|adam|rmsprop|adagrad x loss mse|mae, gradcheck=off, on seed 004's line.
Each way runs in a fresh temp folder whose MLflow sqlite store is created first, untimed (a
one-off cost of a new store, the same for every way):

1. `python -m gradexp -m ...`: Hydra's basic (sequential) launcher, every job in one process;
2. the same with `hydra/launcher=joblib hydra.launcher.n_jobs=2`: two worker processes;
3. 8 separate `python -m gradexp optimizer=X loss=Y` processes, one after another (a shell loop);
4. the same 8 processes, 2 at a time (xargs -P 2).

Reported: the wall time (median of --repeat), per job, and how many processes imported
TensorFlow (counted, not assumed: every process runs with PYTHONPROFILEIMPORTTIME=1 and each
"| tensorflow" import line on stderr is one import; GRADEXP_TF_CHATTER=1 keeps stderr open while
TensorFlow loads, which gradexp otherwise silences). Each way must leave 8 FINISHED runs; the
script checks that. The machine may be shared: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from itertools import product
from pathlib import Path

OPTIMIZERS = ("sgd", "adam", "rmsprop", "adagrad")
LOSSES = ("mse", "mae")


def gradexp(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`python -m gradexp ARGS`, its stderr kept for the import count."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "GRADEXP_TF_CHATTER": "1",
           "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", "gradexp", *args], cwd=cwd, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        tail = "\n".join(line for line in done.stderr.splitlines()
                         if not line.startswith("import time:"))[-2000:]
        raise SystemExit(f"python -m gradexp {' '.join(args)} failed:\n{tail}")
    return done


def tensorflow_imports(stderr: str) -> int:
    return sum(1 for line in stderr.splitlines()
               if line.startswith("import time:") and line.split("|")[-1].strip() == "tensorflow")


def sweep_args(epochs: int) -> list[str]:
    return ["-m", f"optimizer={','.join(OPTIMIZERS)}", f"loss={','.join(LOSSES)}",
            "gradcheck=off", f"trainer.epochs={epochs}"]


def job_args(epochs: int) -> list[list[str]]:
    return [[f"optimizer={opt}", f"loss={loss}", "gradcheck=off", f"trainer.epochs={epochs}"]
            for opt, loss in product(OPTIMIZERS, LOSSES)]


def sequential(folder: Path, epochs: int) -> list[str]:
    return [gradexp(sweep_args(epochs), folder).stderr]


def joblib_two(folder: Path, epochs: int) -> list[str]:
    return [gradexp([*sweep_args(epochs), "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
                    folder).stderr]


def separate(folder: Path, epochs: int) -> list[str]:
    return [gradexp(args, folder).stderr for args in job_args(epochs)]


def separate_two_at_a_time(folder: Path, epochs: int) -> list[str]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return [done.stderr for done in pool.map(lambda a: gradexp(a, folder), job_args(epochs))]


WAYS = {
    "sweep, sequential launcher (-m)": sequential,
    "sweep, joblib launcher, 2 workers": joblib_two,
    "8 separate processes, one after another": separate,
    "8 separate processes, 2 at a time": separate_two_at_a_time,
}


def make_store(folder: Path) -> str:
    """Create the folder's MLflow sqlite store (untimed) and return its URI."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()
    return uri


def finished_runs(uri: str) -> int:
    """Runs that trained (a sweep's parent has no final_loss) and FINISHED."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("gradexp")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return sum(r.info.status == "FINISHED" and "final_loss" in r.data.metrics for r in runs)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=100, help="trainer.epochs of every job")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each way (median)")
    args = parser.parse_args()

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # "Creating initial tables..." notes
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"TensorFlow {version('tensorflow')}, MLflow {version('mlflow')}; "
          f"load average before: {load()}")
    times: dict[str, list[float]] = {name: [] for name in WAYS}
    imports: dict[str, int] = {}
    for round_ in range(args.repeat):
        for name, way in WAYS.items():  # interleaved, so a busy minute hurts every way alike
            with tempfile.TemporaryDirectory(prefix="bench-sweeps-") as tmp:
                folder = Path(tmp)
                uri = make_store(folder)
                start = time.perf_counter()
                stderrs = way(folder, args.epochs)
                times[name].append(time.perf_counter() - start)
                imports[name] = sum(tensorflow_imports(err) for err in stderrs)
                if not imports[name]:
                    raise SystemExit(f"{name}: no TensorFlow import seen on stderr; the count "
                                     "is broken (does gradexp still honour GRADEXP_TF_CHATTER?)")
                runs = finished_runs(uri)
                if runs != 8:
                    raise SystemExit(f"{name}: {runs} FINISHED runs, expected 8")
            print(f"  round {round_ + 1}: {name}: {times[name][-1]:.1f} s", flush=True)

    baseline = statistics.median(times["8 separate processes, one after another"])
    print(f"\nload average after: {load()}\n")
    print(f"8 jobs (4 optimizers x 2 losses), trainer.epochs={args.epochs}, gradcheck=off; "
          f"median of {args.repeat}:\n")
    print("| how | processes importing TensorFlow | wall time | per job | vs 8 processes |")
    print("|---|---:|---:|---:|---:|")
    for name in WAYS:
        wall = statistics.median(times[name])
        print(f"| {name} | {imports[name]} | {wall:.1f} s | {wall / 8:.1f} s | "
              f"{baseline / wall:.2f}x |")


if __name__ == "__main__":
    main()
