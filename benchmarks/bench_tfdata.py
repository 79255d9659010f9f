"""Benchmark: one loader's rows as numpy arrays, as a tf.data.Dataset read into memory, and as a
streamed tf.data.Dataset (data.materialize_mb below its size), trained alike.

    python benchmarks/bench_tfdata.py                 # 20,000 rows x 8 features, about a minute
    python benchmarks/bench_tfdata.py --rows 100000 --epochs 3

Each way runs `gradexp.loop.run_experiment` in this process (tracking=none, gradcheck=off,
a linear model, SGD, MSE, trainer.batch_size=256) for --epochs epochs; the table gives the time
from the first to the last stretch of training (`Trainer.train`, wrapped from outside), per
epoch, and the whole run's wall time (loading and, when streamed, the statistics pass included).
A warm-up run goes first (TensorFlow's one-off costs). Times are one run each on whatever
machine runs it: compare the rows, not across machines.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

LOADER = '''
import numpy as np
import tensorflow as tf

def _rows(n):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 8)).astype("float32")
    return x, (x @ np.arange(1, 9, dtype="float32")[:, None] + 0.1).astype("float32")

def arrays(n):
    return _rows(n)

def dataset(n):
    return tf.data.Dataset.from_tensor_slices(_rows(n)).batch(256)
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import compose_config
    from gradexp.loop import run_experiment
    from gradexp.trainer import Trainer

    seconds: list[float] = []
    original = Trainer.train

    def timed(self, stops):
        started = time.perf_counter()
        yield from original(self, stops)
        seconds.append(time.perf_counter() - started)

    Trainer.train = timed
    megabytes = args.rows * 9 * 4 / 2 ** 20
    ways = [("numpy arrays (x, y)", "arrays", ()),
            ("tf.data, read into memory", "dataset", ()),
            ("tf.data, streamed", "dataset", (f"data.materialize_mb={megabytes / 4:g}",))]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "bench_loaders.py").write_text(LOADER)
        # The first run in a process pays TensorFlow's one-off costs: a warm-up run, not shown.
        for label, loader, extra in [("warm-up", "arrays", ()), *ways]:
            cfg = compose_config("tracking=none", "gradcheck=off", "data=custom",
                                 f"data._target_=bench_loaders.{loader}",
                                 f"+data.kwargs.n={args.rows}", "data.val_fraction=0", *extra,
                                 "trainer.batch_size=256", f"trainer.epochs={args.epochs}",
                                 "optimizer.learning_rate=0.01")
            started = time.perf_counter()
            result = run_experiment(cfg, quiet=True, launch_dir=Path(folder))
            wall = time.perf_counter() - started
            if label != "warm-up":
                rows.append((label, seconds[-1] / args.epochs, wall, result.final_loss))
    print(f"{args.rows:,} rows x 8 features ({megabytes:.2f} MB), batches of 256, "
          f"{args.epochs} epochs")
    print(f"{'data':28} {'train s/epoch':>14} {'run wall s':>11} {'final loss':>11}")
    for label, per_epoch, wall, loss in rows:
        print(f"{label:28} {per_epoch:14.3f} {wall:11.2f} {loss:11.4g}")


if __name__ == "__main__":
    main()
