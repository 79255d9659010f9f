"""Benchmark: sweep.pruner on a 16-job digits learning-rate sweep with bad rates.

    python benchmarks/bench_pruning.py                  # median pruner (~3-5 minutes)
    python benchmarks/bench_pruning.py --pruner asha
    python benchmarks/bench_pruning.py --pruner asha --launcher packed   # one packed group

The sweep: experiment=digits_mlp's job (Adam, 30 epochs, mini-batches of 64, evaluated every
3 epochs), its learning rate at 16 log-spaced values from 1e-5 to 1 (the small ones barely learn
in 30 epochs), in a fixed shuffled order (a grid listed smallest first would make the bad rates
Optuna's startup trials), gradcheck=off, no logged model. It runs twice in this process
(gradexp.sweep, Hydra's basic launcher or --launcher packed), each in a fresh folder: without a
pruner and with one.
Printed: the epochs trained by all jobs, the wall time (the machine may be shared), the jobs
pruned, and the best configuration of each sweep by val/accuracy (the parent's best run).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

import numpy as np

# experiment=digits_mlp's job, without its sweep over widths and dropout
DIGITS = ("data=sklearn", "data.name=digits", "model=mlp", "model.hidden=[64]",
          "model.activation=relu", "loss=categorical_crossentropy", "optimizer=adam",
          "trainer.epochs=30", "trainer.batch_size=64", "trainer.log_every=3",
          "tracking.experiment=digits_mlp")
RATES = [float(f"{rate:.3g}") for rate in np.geomspace(1e-5, 1.0, 16)]
random.Random(0).shuffle(RATES)


def sweep(pruner: str, folder: Path, launcher: str = "basic") -> dict:
    from mlflow import MlflowClient

    import gradexp

    started = time.perf_counter()
    results = gradexp.sweep(*DIGITS, f"optimizer.learning_rate={','.join(map(str, RATES))}",
                            f"sweep.pruner={pruner}", "gradcheck=off", "tracking.log_model=false",
                            f"hydra/launcher={launcher}", launch_dir=folder)
    seconds = time.perf_counter() - started
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    child = client.get_run(results[0].run_id)
    parent = client.get_run(child.data.tags["mlflow.parentRunId"])
    best = client.get_run(parent.data.tags["gradexp.best_run_id"])
    return {"epochs": sum(result.epochs for result in results), "jobs": len(results),
            "pruned": sum(result.epochs < 30 for result in results), "seconds": seconds,
            "best": best.data.params["optimizer.learning_rate"],
            "best_value": best.data.metrics["val/accuracy"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pruner", default="median",
                        choices=["median", "percentile", "asha", "hyperband"])
    parser.add_argument("--launcher", default="basic", choices=["basic", "packed"])
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    print(f"learning rates, in the order run: {', '.join(map(str, RATES))}")
    rows = {}
    for pruner in ("none", args.pruner):
        with tempfile.TemporaryDirectory() as folder:
            rows[pruner] = sweep(pruner, Path(folder), args.launcher)
    none, pruned = rows["none"], rows[args.pruner]
    print(f"\n{'sweep.pruner':<14}{'jobs':>6}{'pruned':>8}{'epochs':>8}{'seconds':>9}"
          f"  best learning rate (val/accuracy)")
    for name, row in rows.items():
        print(f"{name:<14}{row['jobs']:>6}{row['pruned']:>8}{row['epochs']:>8}"
              f"{row['seconds']:>9.1f}  {row['best']} ({row['best_value']:.4f})")
    saved = 1 - pruned["epochs"] / none["epochs"]
    same = "the same" if pruned["best"] == none["best"] else "a DIFFERENT"
    print(f"\n{args.pruner}: {saved:.0%} fewer epochs trained (target >= 30%), {same} best "
          "configuration")


if __name__ == "__main__":
    main()
