"""Where seed 004's own training loop really ends: W and b after 100 epochs of SGD(0.1).

The tutorial prints W = 3.000123, b = 4.000456 (invented). Its loop starts from unseeded random
values, so each run ends elsewhere; this runs the loop (verbatim: bench_runner.SEED_004) N times
and prints the spread, next to which `python -m gradexp` (model.seed=0, data.seed=0) reaches
W = 2.91, b = 4.05.

    python benchmarks/seed_004_spread.py [N]
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_runner import seed_source  # noqa: E402  (the seed's code, kept in one place)


def seed_004_once() -> tuple[float, float]:
    """Run the seed's script once (its prints swallowed); return its final W and b."""
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(seed_source(100), namespace)  # noqa: S102  (our own constant: the seed verbatim)
    return float(namespace["W"].numpy()[0]), float(namespace["b"].numpy()[0])


def main(runs: int) -> None:
    import numpy as np

    results = np.array([seed_004_once() for _ in range(runs)])
    for name, column in (("W", results[:, 0]), ("b", results[:, 1])):
        print(f"seed 004 loop, {runs} runs: {name} mean {column.mean():.3f}, "
              f"min {column.min():.3f}, max {column.max():.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
