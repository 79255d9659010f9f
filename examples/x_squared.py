"""Seed 004's opening example, checked two ways: the gradient of y = x² at x = 3 is 6.

    python examples/x_squared.py
"""

import tensorflow as tf

from gradexp.gradcheck import check_gradients

# Analytically, as seed 004 does: automatic differentiation with a GradientTape.
x = tf.Variable(3.0)
with tf.GradientTape() as tape:
    y = x**2
print("GradientTape:", tape.gradient(y, x).numpy())

# Numerically: central finite differences of x² at 3, against the same autodiff gradient.
report = check_gradients(lambda x: x**2, [tf.constant(3.0)], method="jacobian", names=["x"],
                         dtype="float64")
print("finite differences:", report.entries[0].worst_numerical)
print(report)
