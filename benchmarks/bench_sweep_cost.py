"""Benchmark: a sequential sweep's marginal cost a job against the in-process limit (issue 20,
item 1), side by side in one run.

    python benchmarks/bench_sweep_cost.py                        # this tree, 3 rounds (~6 min)
    python benchmarks/bench_sweep_cost.py --src before=/old/src --src after=src --rounds 3

The sweep is the issue's: 4 optimizers (sgd, momentum, adagrad, adam) x 4 learning rates (0.01,
0.03, 0.1, 0.3) on seed 004's problem, 100 full-batch epochs, the default checks and tracking
into sqlite, `python -m gradexp -m ...` (Hydra's basic launcher: every job in one process) in a
fresh temp folder whose store is created first, untimed. The marginal cost a job is the
difference between the 16-job sweep and a 2-job sweep (sgd at 0.01 and 0.03), divided by 14:
what a job adds once the process, its imports and the first traces are paid.

The limit, measured in this process: per job a fresh Keras Dense model, the job's optimizer,
and one traced `tf.function` running the 100 epochs (loss and grad norm per epoch in
TensorArrays), no tracking; the same 16 jobs, the seconds of jobs 3-16 averaged (the first
two pay TensorFlow's first-call costs).

Several --src trees run interleaved, round by round, so load drifts hit them alike; the table
prints each tree's median 2-job and 16-job wall times, the marginal cost a job and its ratio to
the limit (target: at most 1.5x), and the marginal CPU seconds a job (the sweep process's user +
system time: steadier than wall time on a loaded machine, but blind to overlap). Every sweep
must leave its 16 (or 2) children FINISHED.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before anything imports TensorFlow
OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam")
RATES = (0.01, 0.03, 0.1, 0.3)
EPOCHS = 100
TARGET = 1.5


def sweep_args(jobs: int) -> list[str]:
    if jobs == 2:
        return ["-m", "optimizer=sgd", "optimizer.learning_rate=0.01,0.03"]
    return ["-m", f"optimizer={','.join(OPTIMIZERS)}",
            f"optimizer.learning_rate={','.join(map(str, RATES))}"]


def finished_children(folder: Path) -> int:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{folder}/mlflow.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return sum(run.info.status == "FINISHED" for run in runs
               if "mlflow.parentRunId" in run.data.tags)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_sweep(src: str, jobs: int) -> tuple[float, float]:
    """Wall and CPU seconds of a `jobs`-job sweep of tree `src`, in a fresh folder with its
    store made."""
    env = {**os.environ, "PYTHONPATH": src, "TF_CPP_MIN_LOG_LEVEL": "3"}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        subprocess.run([sys.executable, "-m", "gradexp", "trainer.epochs=1", "gradcheck=off",
                        "tracking.experiment=setup"], cwd=folder, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started, cpu = time.perf_counter(), children_cpu()
        done = subprocess.run([sys.executable, "-m", "gradexp", *sweep_args(jobs),
                               f"trainer.epochs={EPOCHS}"], cwd=folder, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seconds, cpu = time.perf_counter() - started, children_cpu() - cpu
        if done.returncode:
            raise SystemExit(f"the {jobs}-job sweep of {src} failed:\n{done.stderr[-3000:]}")
        if (found := finished_children(folder)) != jobs:
            raise SystemExit(f"the {jobs}-job sweep of {src}: {found} of {jobs} children FINISHED")
        return seconds, cpu


def traced_epochs(tf, network, params, optimizer, xs, ys):
    """One job's training: a tf.function of `count` full-batch epochs."""
    @tf.function
    def train(count):
        losses = tf.TensorArray(tf.float32, size=count)
        norms = tf.TensorArray(tf.float32, size=count)
        for i in tf.range(count):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(ys - network(xs, training=True)))
            gradients = tape.gradient(loss, params)
            optimizer.apply_gradients(zip(gradients, params))
            losses = losses.write(i, loss)
            norms = norms.write(i, tf.linalg.global_norm(gradients))
        return losses.stack(), norms.stack()

    return train


def limit_seconds() -> list[float]:
    """The in-process limit: the seconds of each of the 16 jobs (fresh model, one trace)."""
    sys.path.insert(0, str(HERE / "src"))
    import keras
    import numpy as np
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # a new function per job is the point: no retrace warning
    rng = np.random.default_rng(42)  # seed 004's line: 100 rows, y = 3x + 4 + noise
    x = rng.random((100, 1)).astype("float32")
    y = (3 * x + 4 + 0.1 * rng.standard_normal((100, 1))).astype("float32")
    makers = {"sgd": lambda lr: keras.optimizers.SGD(lr),
              "momentum": lambda lr: keras.optimizers.SGD(lr, momentum=0.9),
              "adagrad": lambda lr: keras.optimizers.Adagrad(lr),
              "adam": lambda lr: keras.optimizers.Adam(lr)}
    seconds = []
    for name in OPTIMIZERS:
        for rate in RATES:
            start = time.perf_counter()
            network = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
            params = network.trainable_variables
            optimizer = makers[name](rate)
            optimizer.build(params)
            xs, ys = tf.constant(x), tf.constant(y)

            train = traced_epochs(tf, network, params, optimizer, xs, ys)
            losses, _ = train(tf.constant(EPOCHS))
            assert np.isfinite(losses.numpy()).all()
            seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", default=[],
                        help="[LABEL=]a src/ folder to run (repeat to compare; default: this "
                             "tree's src)")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    trees = [tuple(s.split("=", 1)) if "=" in s else (s, s) for s in options.src] \
        or [("this tree", str(HERE / "src"))]
    trees = [(label, str(Path(src).resolve())) for label, src in trees]
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    walls: dict[tuple[str, int], list[float]] = {}
    cpus: dict[tuple[str, int], list[float]] = {}
    for round_ in range(options.rounds):
        for label, src in trees:
            for jobs in (2, 16):
                seconds, cpu = timed_sweep(src, jobs)
                walls.setdefault((label, jobs), []).append(seconds)
                cpus.setdefault((label, jobs), []).append(cpu)
                print(f"round {round_ + 1}: {label}: {jobs} jobs {seconds:.1f} s "
                      f"(CPU {cpu:.1f} s), load {os.getloadavg()[0]:.1f}", flush=True)
    limit = limit_seconds()
    limit_job = statistics.mean(limit[2:])
    print(f"\nload average after: {os.getloadavg()[0]:.1f}; {options.rounds} rounds, medians")
    print(f"the limit: {limit_job:.3f} s a job (jobs 3-16; the first {limit[0]:.2f} s)\n")
    print("| tree | 2 jobs s | 16 jobs s | marginal s a job | / the limit "
          "| marginal CPU s a job |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, _ in trees:
        two = statistics.median(walls[(label, 2)])
        sixteen = statistics.median(walls[(label, 16)])
        marginal = (sixteen - two) / 14
        cpu = (statistics.median(cpus[(label, 16)]) - statistics.median(cpus[(label, 2)])) / 14
        print(f"| {label} | {two:.1f} | {sixteen:.1f} | {marginal:.3f} | "
              f"{marginal / limit_job:.1f}x | {cpu:.3f} |")
    print(f"\ntarget: at most {TARGET}x the limit")


if __name__ == "__main__":
    main()
