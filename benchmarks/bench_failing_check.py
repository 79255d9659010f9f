"""What a failing joint probe check costs when a wrong gradient reaches every variable.

A residual MLP (a tanh stem, BLOCKS blocks of Dense + tanh added to their input, a linear head;
6 blocks of width 128: 99,457 parameters) whose last block's tanh is a custom layer with a
tf.custom_gradient backward `bug` times the right one (1.0: correct; 1.1, 0.9: every variable
before it is wrong). Its float64 MSE on ROWS rows of a sine, as a compiled function of its
weights, checked as a run's check does (gradexp.gradcheck.joint.check_jointly with a kept,
compiled JointFunction, 4 probes): the first check of a process (it traces) and the best of
REPEATS later ones. Prints one row per bug: verdict, failing variables, evaluations, backward
passes, seconds.

    python benchmarks/bench_failing_check.py [BLOCKS] [WIDTH] [ROWS] [REPEATS]   # 6 128 256 3

Measured 2026-12-05 on the 2-core machine at a load of ~4 (another test suite running), 6
blocks, width 128, 256 rows: before (the rest checked jointly again without each wrong
variable) the failing check took 15 rounds, 2,754 evaluations, 1,794 backward passes, 42 s;
after, 798 evaluations, 126 backward passes, 3.5-5 s. A passing check: 14 evaluations, 2
backward passes, 0.06-0.2 s (0.7-1 s the first, which traces).
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def residual(blocks: int, width: int, bug: float):
    import keras
    import tensorflow as tf

    class ScaledTanh(keras.layers.Layer):
        def call(self, x):
            @tf.custom_gradient
            def scaled_tanh(z):
                def backward(upstream):
                    return upstream * (1 - tf.tanh(z) ** 2) * tf.cast(bug, z.dtype)
                return tf.tanh(z), backward

            return scaled_tanh(x)

    dtype = "float64"
    x = keras.Input((1,), dtype=dtype)
    h = keras.layers.Dense(width, activation="tanh", name="stem", dtype=dtype)(x)
    for b in range(blocks):
        z = keras.layers.Dense(width, name=f"dense_{b}", dtype=dtype)(h)
        z = (ScaledTanh(name="wrong", dtype=dtype) if b == blocks - 1
             else keras.layers.Activation("tanh", name=f"act_{b}", dtype=dtype))(z)
        h = keras.layers.Add(name=f"add_{b}", dtype=dtype)([h, z])
    return keras.Model(x, keras.layers.Dense(1, name="head", dtype=dtype)(h), name="net")


def check(blocks: int, width: int, rows: int, repeats: int, bug: float) -> str:
    import keras
    import numpy as np
    import tensorflow as tf

    from gradexp.gradcheck.joint import JointFunction, check_jointly, direction_scales

    keras.utils.set_random_seed(0)
    net = residual(blocks, width, bug)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(-1, 1, (rows, 1)))
    y = tf.sin(2 * np.pi * x)

    @tf.function(autograph=False)
    def loss(*weights):
        prediction, _ = net.stateless_call(list(weights), [], x, training=True)
        return tf.reduce_mean((prediction - y) ** 2)

    weights = [tf.constant(v.numpy()) for v in net.trainable_variables]
    names = [v.path.removeprefix("net/") for v in net.trainable_variables]
    shapes = [tuple(w.shape) for w in weights]
    joint = JointFunction(loss, shapes, direction_scales([int(np.prod(s)) for s in shapes]))
    seconds = []
    for _ in range(1 + repeats):
        start = time.perf_counter()
        report = check_jointly(loss, weights, names=names, probes=4, dtype="float64",
                               joint=joint)
        seconds.append(time.perf_counter() - start)
    failed = len(report.failed_entries)
    return (f"| {bug} | {'passed' if report.passed else 'FAILED'} | {failed} of "
            f"{len(names)} | {report.function_evaluations:,} | {report.backward_passes:,} | "
            f"{seconds[0]:.2f} | {min(seconds[1:]):.2f} |")


def main(blocks: int = 6, width: int = 128, rows: int = 256, repeats: int = 3) -> None:
    params = 2 * width + blocks * (width * width + width) + width + 1
    print(f"residual MLP, {blocks} blocks of width {width} ({params:,} parameters), "
          f"{rows} rows; first check, then best of {repeats}\n")
    print("| bug | verdict | variables failing | evaluations | backward passes | first s | "
          "best s |")
    print("|---|---|---|---|---|---|---|")
    for bug in (1.0, 1.1, 0.9):
        print(check(blocks, width, rows, repeats, bug), flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:5]))
