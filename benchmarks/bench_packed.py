"""Benchmark: packed sweeps (hydra/launcher=packed) against the sequential launcher.

    python benchmarks/bench_packed.py                      # the issue's sizes (several minutes)
    python benchmarks/bench_packed.py --seeds 1 --digits-epochs 10   # a quicker look
    python benchmarks/bench_packed.py --only line --processes-rounds 3   # one vs two processes

Two sweeps, each run as a person runs it (`python -m gradexp -m ...` in a fresh temp folder,
wall time including the process's start-up), with the default checks and tracking on:

1. seed 004's line: 4 optimizers (sgd, momentum, adagrad, adam) x 4 learning rates x --seeds
   trainer seeds, 100 epochs, packed (as by default, and with a helper process:
   hydra.launcher.processes=2) and sequential, beside one default `python -m gradexp`
   process (the issue's target: the packed sweep within 3x of that one process);
2. the digits MLP (experiments/digits_mlp, mini-batches of 32): 4 optimizers x 4 learning rates,
   --digits-epochs epochs, packed and sequential (target: packed at least 3x faster).

Beside each packed sweep, its packed training alone (the launcher's own line: the compiled
program's calls, no tracking, no checks): the in-process limit of that sweep; the rest of its
wall time is each job's replay (its child run, evaluations, checks, plots, model), which the
sequential launcher pays as well. Every sweep must leave all its children FINISHED; the script
checks that. And beside both, KerasTuner's GridSearch over the same configurations with
`model.fit` (benchmarks/kerastuner_sweep.py, in a process of its own: the same arrays, model,
loss, epochs and batch size; no checks, no tracking), unless --kerastuner-trials 0. A trial of
the line's 100 one-batch epochs takes several seconds, so by default the line runs its first 8
trials and the table gives its time for all of them as the process's wall time plus the rest at
the measured seconds a trial, marked "est."; --kerastuner-trials N sets that (the digits run
all 16 unless N is smaller). With --src NAME=PATH (repeated) it compares trees instead: each
packed sweep under each tree's src/, alternated for --rounds rounds, median wall seconds.
KerasTuner needs `pip install ".[bench]"`. The machine may be shared: the load average is
printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
OPTIMIZERS = "optimizer=sgd,momentum,adagrad,adam"


# The packed launcher's line on its training alone (src/hydra_plugins/gradexp_packed)
TRAINED = re.compile(r"trained (\d+) packed jobs in \d+ programs?: ([\d.]+) s")


def digits_sweep(epochs: int) -> tuple[str, ...]:
    """The 16-job digits sweep: experiments/digits_mlp's model and checks, without its own
    sweep (widths x dropout), over 4 optimizers x 4 learning rates."""
    return ("-m", "data=sklearn", "data.name=digits", "model=mlp", "model.hidden=[64]",
            "loss=categorical_crossentropy", "gradcheck=probe", "gradcheck.max_rows=512",
            OPTIMIZERS, "optimizer.learning_rate=0.001,0.003,0.01,0.03", "trainer.batch_size=32",
            f"trainer.epochs={epochs}")


def timed(*args: str, src: str = SRC) -> tuple[float, int, float | None]:
    """Wall seconds of `python -m gradexp ARGS` (gradexp from `src`) in a fresh folder, its
    FINISHED runs, and the seconds its packed training took (None: nothing packed)."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "PYTHONPATH": src, "TF_CPP_MIN_LOG_LEVEL": "3"}
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "gradexp", *args], cwd=folder, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seconds = time.perf_counter() - started
        if done.returncode:
            raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout[-2000:]}")
        trained = TRAINED.search(done.stdout)
        from mlflow import MlflowClient

        client = MlflowClient(f"sqlite:///{folder}/mlflow.db")
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        finished = sum(run.info.status == "FINISHED" for run in runs
                       if "mlflow.parentRunId" in run.data.tags or len(runs) == 1)
        return seconds, finished, float(trained.group(2)) if trained else None


def kerastuner(problem: str, seeds: int, epochs: int, trials: int) -> tuple[float, int, str]:
    """KerasTuner's GridSearch of the sweep `problem`, in a process of its own: its wall time
    (all trials, or estimated from the first `trials`), the trials run, and a label."""
    script = Path(__file__).with_name("kerastuner_sweep.py")
    env = {**os.environ, "PYTHONPATH": SRC, "TF_CPP_MIN_LOG_LEVEL": "3"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(script), problem, "--seeds", str(seeds),
                           "--epochs", str(epochs), "--trials", str(trials)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"kerastuner_sweep.py {problem} failed:\n{done.stdout[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    ran, grid = result["trials"], result["grid"]
    if ran == grid:
        return wall, ran, "KerasTuner GridSearch (model.fit)"
    estimate = wall + (grid - ran) * result["seconds"] / ran
    return estimate, ran, f"KerasTuner GridSearch, est. from {ran} trials"


def compare_trees(trees: list[str], sweeps: dict, rounds: int) -> None:
    """--src: each packed sweep under each tree, the trees alternated round by round (so load
    drifts hit them alike); the median wall seconds per tree."""
    named = dict(tree.split("=", 1) for tree in trees)
    walls: dict[tuple[str, str], list[float]] = {}
    for round_ in range(rounds):
        for name, sweep in sweeps.values():
            for tree, src in named.items():
                seconds, _, _ = timed(*sweep, "hydra/launcher=packed", src=src)
                walls.setdefault((name, tree), []).append(seconds)
                print(f"round {round_ + 1}: {name}: {tree}: {seconds:.1f} s", flush=True)
    print(f"\n{'packed sweep':<46} {'tree':<12} {'median wall s':>14}")
    for (name, tree), values in walls.items():
        print(f"{name:<46} {tree:<12} {statistics.median(values):>14.1f}")


def alternate_processes(sweeps: dict, rounds: int) -> None:
    """--processes-rounds: one default process, then each packed sweep in one process and in
    two (hydra.launcher.processes=2), alternated round by round; the medians and their ratios
    to the default process."""
    walls: dict[str, list[float]] = {}
    for round_ in range(rounds):
        runs = [("one default process", ())]
        for name, sweep in sweeps.values():
            runs += [(f"{name}: packed, one process", (*sweep, "hydra/launcher=packed")),
                     (f"{name}: packed, two processes", (*sweep, "hydra/launcher=packed",
                                                         "hydra.launcher.processes=2"))]
        for what, args in runs:
            walls.setdefault(what, []).append(timed(*args)[0])
            print(f"round {round_ + 1}: {what}: {walls[what][-1]:.1f} s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    one = statistics.median(walls["one default process"])
    print(f"\n{'what':<52} {'median wall s':>14} {'/ one process':>14}")
    for what, values in walls.items():
        median = statistics.median(values)
        print(f"{what:<52} {median:>14.1f} {median / one:>13.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4, help="trainer seeds in the line sweep")
    parser.add_argument("--digits-epochs", type=int, default=30)
    parser.add_argument("--only", choices=("line", "digits"), help="one of the two sweeps")
    parser.add_argument("--kerastuner-trials", type=int, default=8,
                        help="KerasTuner trials run of the line (0: no KerasTuner)")
    parser.add_argument("--src", action="append", default=[], metavar="NAME=PATH",
                        help="compare trees' packed sweeps instead (repeat; e.g. before=/old/src)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of --src")
    parser.add_argument("--processes-rounds", type=int, default=0, metavar="N",
                        help="instead: the packed sweeps in one and in two processes "
                             "(hydra.launcher.processes=2), alternated N rounds")
    options = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    seeds = ",".join(map(str, range(options.seeds)))
    line = ("-m", OPTIMIZERS, "optimizer.learning_rate=0.01,0.03,0.1,0.3",
            f"trainer.seed={seeds}")
    digits = digits_sweep(options.digits_epochs)
    sweeps = {"line": (f"line, {16 * options.seeds} jobs", line),
              "digits": (f"digits MLP, 16 jobs, {options.digits_epochs} epochs", digits)}
    sweeps = {key: value for key, value in sweeps.items() if options.only in (None, key)}
    if options.src:
        compare_trees(options.src, sweeps, options.rounds)
        return
    if options.processes_rounds:
        alternate_processes(sweeps, options.processes_rounds)
        return
    rows = []
    # A first import of TensorFlow after the machine booted reads it from disk (20 s once
    # here, 9 s warm): warmed first, so the default process is not charged for the cache.
    subprocess.run([sys.executable, "-c", "import tensorflow, mlflow, matplotlib.pyplot"],
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, check=True)
    one, _, _ = timed()
    rows.append(("one default process", 1, one))
    print(f"one default process: {one:.1f} s", flush=True)
    for key, (name, sweep) in sweeps.items():
        jobs = 16 * options.seeds if sweep is line else 16
        # packed as it runs by default (one process), packed with a helper process
        # (hydra.launcher.processes=2), and Hydra's basic launcher
        for launcher, extra in (("packed", ()), ("packed, two processes",
                                                 ("hydra.launcher.processes=2",)),
                                ("basic", ())):
            seconds, finished, trained = timed(
                *sweep, f"hydra/launcher={launcher.split(',')[0]}", *extra)
            if finished != jobs:
                raise SystemExit(f"{name} ({launcher}): {finished} of {jobs} jobs FINISHED")
            rows.append((f"{name}: {launcher}", jobs, seconds))
            print(f"{name}: {launcher}: {seconds:.1f} s", flush=True)
            if trained is not None:  # the in-process limit of a packed sweep: its training
                rows.append((f"{name}: packed training alone", jobs, trained))
        if options.kerastuner_trials:
            trials = options.kerastuner_trials if key == "line" else 16
            seconds, _, label = kerastuner(key, options.seeds if key == "line" else 1,
                                           100 if key == "line" else options.digits_epochs,
                                           min(trials, jobs))
            rows.append((f"{name}: {label}", jobs, seconds))
            print(f"{name}: {label}: {seconds:.1f} s", flush=True)
    print(f"\n{'what':<64} {'jobs':>5} {'wall s':>8} {'s a job':>8}")
    for what, jobs, seconds in rows:
        print(f"{what:<64} {jobs:>5} {seconds:>8.1f} {seconds / jobs:>8.2f}")
    seconds = {what: s for what, _, s in rows}
    for name, _ in sweeps.values():
        if f"{name}: packed" not in seconds:
            continue
        packed, basic = seconds[f"{name}: packed"], seconds[f"{name}: basic"]
        two = seconds[f"{name}: packed, two processes"]
        print(f"{name}: sequential / packed {basic / packed:.2f}x (in two processes "
              f"{basic / two:.2f}x); packed / one default process {packed / one:.1f}x (in two "
              f"processes {two / one:.1f}x; targets: line within 3x of one process, digits "
              ">= 3x)")
        tuner = [s for what, s in seconds.items() if what.startswith(f"{name}: KerasTuner")]
        if tuner:
            print(f"{name}: KerasTuner / packed {tuner[0] / packed:.1f}x, "
                  f"KerasTuner / sequential {tuner[0] / basic:.1f}x")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
