"""What `tracking.log_model=true` adds to a run: the time of logging the trained Keras model
(MLflow's Keras flavor, signature, explicit pip requirements) into a fresh sqlite store.

    python benchmarks/bench_log_model.py [REPEATS]

Prints a table: the first call in a process (it imports mlflow.keras) and the median of the
next REPEATS calls, for seed 004's linear model and a digits-sized MLP.
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

    from gradexp.models import linear, mlp
    from gradexp.tracking import MlflowTracker

    networks = {
        "linear (seed 004)": (linear(n_features=1, n_outputs=1, init_scale=1.0, seed=0), 1),
        "mlp 64-[64,64]-10 (digits)": (mlp(n_features=64, n_outputs=10, hidden=[64, 64],
                                           activation="relu", dropout=0.0, seed=0), 64),
    }
    table = Table(title=f"log_keras_model: seconds per call (median of {repeats} after the first)")
    for column in ("model", "first call", "median"):
        table.add_column(column)
    with tempfile.TemporaryDirectory() as folder:
        tracker = MlflowTracker(f"sqlite:///{Path(folder) / 'mlflow.db'}", "bench", "bench")
        for name, (network, n_features) in networks.items():
            x = np.zeros((5, n_features), dtype="float32")
            times = []
            for _ in range(repeats + 1):
                start = time.perf_counter()
                tracker.log_keras_model(network, x)
                times.append(time.perf_counter() - start)
            table.add_row(name, f"{times[0]:.2f}", f"{statistics.median(times[1:]):.2f}")
        tracker.end("FINISHED")
    Console().print(table)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
