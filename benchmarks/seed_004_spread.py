"""Where seed 004's own training loop really ends: W and b after 100 epochs of SGD(0.1).

The tutorial prints W = 3.000123, b = 4.000456 (invented). Its loop starts from unseeded random
values, so each run ends elsewhere; this runs the loop (verbatim, minus the printing) N times and
prints the spread, next to what `python -m gradexp` (model.seed=0, data.seed=0) reaches.

    python benchmarks/seed_004_spread.py [N]
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def seed_004_once() -> tuple[float, float]:
    """Seed 004's linear regression, as written (data and start both unseeded)."""
    import numpy as np
    import tensorflow as tf

    X = np.random.rand(100, 1)
    y = 3 * X + 4 + np.random.randn(100, 1) * 0.1
    W = tf.Variable(np.random.randn(1), dtype=tf.float32)
    b = tf.Variable(np.random.randn(1), dtype=tf.float32)

    def loss_function(y_true, y_pred):
        return tf.reduce_mean(tf.square(y_true - y_pred))

    optimizer = tf.optimizers.SGD(learning_rate=0.1)
    for _ in range(100):
        with tf.GradientTape() as tape:
            y_pred = W * X + b
            loss = loss_function(y, y_pred)
        gradients = tape.gradient(loss, [W, b])
        optimizer.apply_gradients(zip(gradients, [W, b]))
    return float(W.numpy()[0]), float(b.numpy()[0])


def main(runs: int) -> None:
    import numpy as np

    results = np.array([seed_004_once() for _ in range(runs)])
    for name, column in (("W", results[:, 0]), ("b", results[:, 1])):
        print(f"seed 004 loop, {runs} runs: {name} mean {column.mean():.3f}, "
              f"min {column.min():.3f}, max {column.max():.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
