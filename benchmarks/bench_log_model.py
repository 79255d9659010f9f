"""What `tracking.log_model=true` adds to a run: the time of logging the served model (the
trained Keras network behind its standardization and softmax, gradexp.export, as an MLflow 3
LoggedModel linked to the run: signature, bundled loader, explicit pip requirements) into a
fresh sqlite store; and of logging a run's data sets as dataset inputs.

    python benchmarks/bench_log_model.py [REPEATS]

Prints a table: the first call in a process (it imports MLflow's model code) and the median of
the next REPEATS calls, for seed 004's linear model (one unnamed feature, a regression) and a
digits-sized MLP (64 named, standardized features, 10 classes).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(repeats: int = 5) -> None:
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    from gradexp.data import Dataset, Split, Standardization
    from gradexp.export import export
    from gradexp.mlflow_store import MlflowTracker
    from gradexp.models import linear, mlp

    rng = np.random.default_rng(0)
    line = Dataset("linear", "regression", rng.random((100, 1), "float32"),
                   rng.random((100, 1), "float32"))
    digits = Dataset("digits", "classification", rng.random((1437, 64), "float32"),
                     np.eye(10, dtype="float32")[rng.integers(0, 10, 1437)],
                     Split(rng.random((360, 64), "float32"),
                           np.eye(10, dtype="float32")[rng.integers(0, 10, 360)]),
                     features=[f"pixel_{i // 8}_{i % 8}" for i in range(64)],
                     labels=list(range(10)),
                     standardization=Standardization(np.full(64, 4.0), np.full(64, 6.0)))
    cases = {
        "linear (seed 004)": (linear(n_features=1, n_outputs=1, init_scale=1.0, seed=0), line),
        "mlp 64-[64,64]-10 (digits)": (mlp(n_features=64, n_outputs=10, hidden=[64, 64],
                                           activation="relu", dropout=0.0, seed=0), digits),
    }
    table = Table(title=f"seconds per call (median of {repeats} after the first)")
    for column in ("call", "model", "first call", "median"):
        table.add_column(column)
    with tempfile.TemporaryDirectory() as folder:
        tracker = MlflowTracker(f"sqlite:///{Path(folder) / 'mlflow.db'}", "bench", "bench")
        calls = {"export + log_keras_model":
                 lambda network, data: tracker.log_keras_model(export(network, data)),
                 "log_datasets": lambda network, data: tracker.log_datasets(
                     data.name, data.splits(), "bench")}
        for call, log in calls.items():
            for name, (network, data) in cases.items():
                times = []
                for _ in range(repeats + 1):
                    start = time.perf_counter()
                    log(network, data)
                    times.append(time.perf_counter() - start)
                table.add_row(call, name, f"{times[0]:.2f}",
                              f"{statistics.median(times[1:]):.2f}")
        tracker.end("FINISHED")
    Console().print(table)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
