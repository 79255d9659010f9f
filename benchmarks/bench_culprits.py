"""What naming the wrong layer costs, and what it finds, on examples/culprit_models.py.

For each example model, with its 5%-off softplus block and with its correct twin (bug=0):
gradexp.gradcheck.culprits.check_layers on the same rows a small run checks, best of REPEATS
calls (the first call of a process also pays Keras' and TensorFlow's first-use costs, shown
apart). Prints one table row per model: the culprits found, how many layer calls were checked
and in which dtype, and the seconds.

    python benchmarks/bench_culprits.py [ROWS] [REPEATS]      # default 48 rows, 3 repeats
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))

import numpy as np  # noqa: E402

BUILDERS = ("functional", "nested", "subclassed", "shared", "noisy")


def main(rows: int = 48, repeats: int = 3) -> None:
    import culprit_models
    import tensorflow as tf

    from gradexp.gradcheck.culprits import check_layers

    x = np.random.default_rng(0).standard_normal((rows, 3)).astype("float32")
    print(f"check_layers on {rows} rows, best of {repeats} calls\n")
    print("| model | bug | culprits | layer calls checked | dtypes | first call s | best s |")
    print("|---|---|---|---|---|---|---|")
    for builder in BUILDERS:
        for bug in (0.05, 0.0):
            network = getattr(culprit_models, builder)(3, 1, bug=bug)
            network(tf.zeros((1, 3)))
            times = []
            for _ in range(repeats + 1):
                start = time.perf_counter()
                verdicts = check_layers(network, x, training=True)
                times.append(time.perf_counter() - start)
            culprits = ", ".join(v.name for v in verdicts if not v.passed) or "-"
            dtypes = ", ".join(sorted({v.dtype for v in verdicts}))
            print(f"| {builder} | {bug} | {culprits} | {len(verdicts)} | {dtypes} | "
                  f"{times[0]:.2f} | {min(times[1:]):.2f} |")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
