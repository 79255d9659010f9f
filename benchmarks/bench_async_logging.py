"""MLflow's asynchronous logging against gradexp's background metric writer, on sqlite.

    python benchmarks/bench_async_logging.py [--epochs 300] [--metrics 6] [--work-ms 2]
                                             [--repeats 3]

A stand-in training loop of EPOCHS epochs (each WORK_MS of numpy work, which releases the GIL as
TensorFlow's kernels do) records METRICS points an epoch into a fresh sqlite store, one way per
row:

- sync log_batch: `MlflowClient.log_batch` each epoch, waited on (what a plain loop does);
- mlflow async: `log_batch(..., synchronous=False)` each epoch (MLflow's asynchronous logging,
  what `mlflow.config.enable_async_logging()` turns on for the fluent API), then
  `mlflow.flush_async_logging()`;
- gradexp, flush each epoch: gradexp.mlflow_store.MlflowTracker's log_metric + flush each epoch
  (its one-thread writer), then wait();
- gradexp, as recorded: the same tracker fed as the recorder feeds it (log_history per epoch, a
  write when FLUSH_SECONDS have passed or a batch of 1,000 is full), then flush() and wait().

Prints the median over REPEATS (alternating the ways, so machine load falls on all alike) of the
seconds the loop sees (its epochs and its logging calls), the total seconds until every point is
stored, and the points the store holds (every way must hold EPOCHS x METRICS).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def work(ms: float, matrix) -> None:
    """About `ms` of BLAS work (the GIL released, as in a compiled training call)."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        matrix @ matrix


def names(count: int) -> list[str]:
    base = ["loss", "grad_norm", "val/mse", "val/mae", "train/mse", "train/mae", "W", "b"]
    return [base[i] if i < len(base) else f"extra_{i}" for i in range(count)]


def timed(epochs, ms, matrix, log_epoch, drain=lambda: None) -> tuple[float, float]:
    """The stand-in loop: `log_epoch(epoch)` after each epoch's work, then `drain()` until every
    point is stored. Returns the seconds the loop saw and the seconds until stored."""
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        work(ms, matrix)
        log_epoch(epoch)
    loop = time.perf_counter() - start
    drain()
    return loop, time.perf_counter() - start


def sync_batches(client, run_id, epochs, keys, ms, matrix):
    from mlflow.entities import Metric

    def log_epoch(epoch):
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, 1.0 / epoch, now, epoch) for k in keys])

    return timed(epochs, ms, matrix, log_epoch)


def mlflow_async(client, run_id, epochs, keys, ms, matrix):
    import mlflow
    from mlflow.entities import Metric

    operations = []

    def log_epoch(epoch):
        now = int(time.time() * 1000)
        operations.append(client.log_batch(
            run_id, metrics=[Metric(k, 1.0 / epoch, now, epoch) for k in keys],
            synchronous=False))

    def drain():
        for operation in operations:  # flush_async_logging() alone left points unwritten here
            operation.wait()
        mlflow.flush_async_logging()

    return timed(epochs, ms, matrix, log_epoch, drain)


def gradexp_each_epoch(tracker, epochs, keys, ms, matrix):
    def log_epoch(epoch):
        for key in keys:
            tracker.log_metric(key, 1.0 / epoch, epoch)
        tracker.flush()

    return timed(epochs, ms, matrix, log_epoch, tracker.wait)


def gradexp_as_recorded(tracker, epochs, keys, ms, matrix):
    def drain():
        tracker.flush()
        tracker.wait()

    return timed(epochs, ms, matrix,
                 lambda epoch: tracker.log_history([epoch], {key: [1.0 / epoch] for key in keys}),
                 drain)


WAYS = {"sync log_batch": sync_batches, "mlflow async": mlflow_async,
        "gradexp, flush each epoch": gradexp_each_epoch,
        "gradexp, as recorded": gradexp_as_recorded}


def one(way: str, epochs: int, keys: list[str], ms: float, matrix) -> tuple[float, float, int]:
    from mlflow import MlflowClient

    from gradexp.mlflow_store import MlflowTracker

    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{folder}/mlflow.db"
        tracker = MlflowTracker(uri, "bench", way)  # the store made, the run open: not timed
        if way.startswith("gradexp"):
            loop, total = WAYS[way](tracker, epochs, keys, ms, matrix)
        else:
            loop, total = WAYS[way](tracker.client, tracker.run_id, epochs, keys, ms, matrix)
        client = MlflowClient(uri)
        points = sum(len(client.get_metric_history(tracker.run_id, key)) for key in keys)
        tracker.end("FINISHED")
        return loop, total, points


def main() -> None:
    import logging
    import os

    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--metrics", type=int, default=6)
    parser.add_argument("--work-ms", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_ASYNC_LOGGING_THREADPOOL_SIZE", "1")  # one sqlite writer
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    keys, matrix = names(args.metrics), np.ones((120, 120))
    for way in WAYS:  # warm: MLflow's imports, sqlite's schema, the async queue's threads
        one(way, 5, keys, 0.0, matrix)
    results: dict[str, list[tuple[float, float, int]]] = {way: [] for way in WAYS}
    for _ in range(args.repeats):
        for way in WAYS:
            results[way].append(one(way, args.epochs, keys, args.work_ms, matrix))
    alone = args.epochs * args.work_ms / 1000
    print(f"{args.epochs} epochs x {args.metrics} metrics, {args.work_ms:g} ms of work an epoch "
          f"({alone:.2f} s without logging), sqlite; median of {args.repeats}")
    print(f"{'way':28} {'loop s':>8} {'total s':>8} {'points':>7}")
    for way, rows in results.items():
        loop = statistics.median(r[0] for r in rows)
        total = statistics.median(r[1] for r in rows)
        points = {r[2] for r in rows}
        print(f"{way:28} {loop:8.3f} {total:8.3f} {'/'.join(map(str, sorted(points))):>7}")


if __name__ == "__main__":
    main()
