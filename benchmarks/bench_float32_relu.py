"""How well the probe judges a float32 relu network: false alarms and misses over weight seeds.

    python benchmarks/bench_float32_relu.py [SEEDS]      # default 10 seeds, ~1 minute

A Dense(64, relu)-Dense(10) network's cross-entropy on 512 standardized digits, in float32 (how
a model that cannot run in float64 is checked), its four variables checked jointly as a run
checks them, with Glorot-uniform weights drawn from each seed; correct, and with the relu's
backward off by 1%, 2% and 5%. In float32 no usable step avoids the kinks such a network puts
near every point: the check rests on judging a failing probe by the mean of the gradient along
its step (docs/gradcheck.md, "A step across kinks"). Prints, per case, how many seeds passed
and the worst error-to-tolerance ratio.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def network_loss(relu_error: float):
    import tensorflow as tf
    from sklearn.datasets import load_digits

    x, labels = load_digits(return_X_y=True)
    spread = np.where(x.std(0) > 0, x.std(0), 1.0)
    x = tf.constant(((x - x.mean(0)) / spread)[:512], tf.float32)
    y = tf.one_hot(labels[:512], 10)

    @tf.custom_gradient
    def relu(z):
        return tf.nn.relu(z), lambda up: up * tf.cast(z > 0, z.dtype) * (1 + relu_error)

    def loss(k1, b1, k2, b2):
        logits = relu(x @ k1 + b1) @ k2 + b2
        return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y, logits))

    return loss


def weights(seed: int) -> list:
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    return [tf.constant(value, tf.float32) for value in (
        rng.uniform(-1, 1, (64, 64)) * np.sqrt(6 / 128), np.zeros(64),
        rng.uniform(-1, 1, (64, 10)) * np.sqrt(6 / 74), np.zeros(10))]


def main(seeds: int) -> None:
    from gradexp.gradcheck.joint import check_jointly

    print(f"{'relu backward':16} {'passed':>8} {'worst ratio':>12} {'seconds':>8}")
    for error in (0.0, 0.01, 0.02, 0.05):
        loss, passed, worst = network_loss(error), 0, 0.0
        start = time.perf_counter()
        for seed in range(seeds):
            report = check_jointly(loss, weights(seed), names=["k1", "b1", "k2", "b2"],
                                   probes=4)
            passed += report.passed
            worst = max(worst, max(entry.error_to_tolerance for entry in report.entries))
        name = "correct" if error == 0 else f"{error:.0%} off"
        print(f"{name:16} {passed:>5}/{seeds:<2} {worst:12.2f} {time.perf_counter() - start:8.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
