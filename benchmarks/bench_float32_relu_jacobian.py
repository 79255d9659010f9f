"""How well the jacobian method judges small float32 relu networks: false alarms and misses.

    python benchmarks/bench_float32_relu_jacobian.py [SEEDS]   # default 10 seeds, ~2 minutes

Networks small enough for method=auto's exact Jacobian (a few hundred parameters), in float32
(how a model that cannot run in float64 is checked), their variables checked by
check_gradients(method="jacobian", dtype="float32") as a run's jacobian check calls it, with
Glorot-uniform weights and small random biases drawn from each seed:

* digits: Dense(8, relu)-Dense(3), cross-entropy on the 256 first digits 0-2, standardized
  over all digits 0-2 (547 parameters);
* regression: Dense(16, relu)-Dense(1), mean squared error on 256 rows of a synthetic
  regression with 8 standardized features (161 parameters).

Each correct, and with the relu's backward off by 1%, 2% and 5% (a tf.custom_gradient relu).
In float32 no usable step avoids the kinks such a network puts near every point: the check
rests on judging a failing column by the mean of its analytical column along the step
(docs/gradcheck.md, "A step across kinks"). Prints, per case, how many seeds passed, the worst
error-to-tolerance ratio and the seconds.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROWS = 256


def digits_data():
    from sklearn.datasets import load_digits

    x, labels = load_digits(return_X_y=True)
    keep = labels < 3
    x, labels = x[keep], labels[keep]
    spread = np.where(x.std(0) > 0, x.std(0), 1.0)
    return ((x - x.mean(0)) / spread)[:ROWS], np.eye(3)[labels[:ROWS]], 8


def regression_data():
    rng = np.random.default_rng(1234)
    x = rng.normal(size=(ROWS, 8))
    y = np.tanh(x @ rng.normal(size=(8, 1))) + 0.1 * rng.normal(size=(ROWS, 1))
    return x, y, 16


def network_loss(data, relu_error: float):
    import tensorflow as tf

    x, y, _ = data
    x, y = tf.constant(x, tf.float32), tf.constant(y, tf.float32)

    @tf.custom_gradient
    def relu(z):
        return tf.nn.relu(z), lambda up: up * tf.cast(z > 0, z.dtype) * (1 + relu_error)

    def loss(k1, b1, k2, b2):
        out = relu(x @ k1 + b1) @ k2 + b2
        if y.shape[1] > 1:
            return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y, out))
        return tf.reduce_mean((out - y) ** 2)

    return loss


def weights(data, seed: int) -> list:
    import tensorflow as tf

    x, y, hidden = data
    n_in, n_out = x.shape[1], y.shape[1]
    rng = np.random.default_rng(seed)
    return [tf.constant(value, tf.float32) for value in (
        rng.uniform(-1, 1, (n_in, hidden)) * np.sqrt(6 / (n_in + hidden)),
        rng.normal(size=hidden) * 0.1,
        rng.uniform(-1, 1, (hidden, n_out)) * np.sqrt(6 / (hidden + n_out)),
        rng.normal(size=n_out) * 0.1)]


def main(seeds: int) -> None:
    from gradexp.gradcheck import check_gradients

    print(f"{'network':11} {'relu backward':14} {'passed':>8} {'worst ratio':>12} "
          f"{'seconds':>8}")
    for network, data in (("digits", digits_data()), ("regression", regression_data())):
        for error in (0.0, 0.01, 0.02, 0.05):
            loss, passed, worst = network_loss(data, error), 0, 0.0
            start = time.perf_counter()
            for seed in range(seeds):
                report = check_gradients(loss, weights(data, seed), method="jacobian",
                                         dtype="float32", names=["k1", "b1", "k2", "b2"])
                passed += report.passed
                worst = max(worst, max(entry.error_to_tolerance for entry in report.entries))
            name = "correct" if error == 0 else f"{error:.0%} off"
            print(f"{network:11} {name:14} {passed:>5}/{seeds:<2} {worst:12.2f} "
                  f"{time.perf_counter() - start:8.1f}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
