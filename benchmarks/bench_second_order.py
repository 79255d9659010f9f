"""What an order-2 check costs next to an order-1 check of the same function, and forward mode.

    python benchmarks/bench_second_order.py              # about a minute on 2 CPU cores
    python benchmarks/bench_second_order.py --repeats 7

For a small MLP loss (rows of 10 features through tanh to 8 units, then a dense layer, MSE-like)
as a function of its n float64 parameters (a kernel and a bias each), each check eagerly
(compile=False, as a run's few checks are), on one input of n elements: check_gradients at
order 1 and order 2, probe and jacobian, and order 1 with modes=("rev", "fwd"). Printed per row:
the median seconds of --repeats warm checks (after one unmeasured), the evaluations and
backward passes the report counts (at order 2 an evaluation is a forward and a backward pass of
the loss, a backward pass one through the backward), and the time as a multiple of the order-1
check with the same method.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from gradexp.gradcheck import check_gradients


def mlp_loss(hidden: int):
    """(loss of a flat parameter vector, its starting value): 10 features -> hidden -> 1."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((32, 10)))
    y = tf.constant(rng.standard_normal((32, 1)))
    shapes = [(10, hidden), (hidden,), (hidden, 1), (1,)]
    sizes = [int(np.prod(s)) for s in shapes]

    def loss(theta):
        w1, b1, w2, b2 = (tf.reshape(p, s) for p, s in zip(tf.split(theta, sizes), shapes))
        return tf.reduce_mean(tf.square(tf.tanh(x @ w1 + b1) @ w2 + b2 - y))

    theta = tf.constant(rng.standard_normal(sum(sizes)) / 3)
    return loss, theta


def measure(f, theta, repeats: int, **options) -> tuple[float, object]:
    report = check_gradients(f, [theta], compile=False, **options)  # warm
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        report = check_gradients(f, [theta], compile=False, **options)
        seconds.append(time.perf_counter() - start)
    assert report.passed, report
    return statistics.median(seconds), report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'n':>5}  {'check':<28} {'seconds':>8} {'evals':>6} {'backward':>8}  {'x order 1':>9}")
    for hidden in (4, 16):
        f, theta = mlp_loss(hidden)
        n = int(theta.shape[0])
        base = {}
        for method in ("probe", "jacobian"):
            for label, options in ((f"{method}, order 1", {}),
                                   (f"{method}, order 2", {"order": 2}),
                                   (f"{method}, order 1, rev+fwd", {"modes": ("rev", "fwd")})):
                seconds, report = measure(f, theta, args.repeats, method=method, **options)
                base.setdefault(method, seconds)
                print(f"{n:>5}  {label:<28} {seconds:>8.3f} {report.function_evaluations:>6} "
                      f"{report.backward_passes:>8}  {seconds / base[method]:>8.1f}x")


if __name__ == "__main__":
    main()
