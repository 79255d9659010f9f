"""QA of the standalone gradient checker against tf.test.compute_gradient on TensorFlow ops:
a verdict about a check that never ran, tf.py_function, ops without a gradient."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradexp.gradcheck import check_gradients, check_variables

X = tf.constant(np.linspace(-1, 1, 6).reshape(2, 3))


@pytest.mark.parametrize("method", ["probe", "jacobian"])
def test_a_check_of_only_complex_or_integer_inputs_is_not_a_pass(method):
    """With only a complex128 (or int32) input the report said "Gradient check PASSED" with
    passed=True, its only entry "skip ... not checked": a verdict about nothing. Now one line
    naming each input and its dtype."""
    z = tf.complex(X, 0.5 * X)
    with pytest.raises(ValueError) as said:
        check_gradients(lambda z: tf.math.real(z * tf.math.conj(z)), [z], method=method)
    assert str(said.value) == (
        "not checked: no input of f is a non-empty floating-point tensor (x0: complex128), so "
        "there is no gradient to check; check a complex input as its real and imaginary parts, "
        "two float inputs (f(tf.complex(re, im)))")
    with pytest.raises(ValueError, match=r"^not checked: no input of f is a non-empty "
                                         r"floating-point tensor \(ids: int32; e: empty "
                                         r"float64\), so there is no gradient to check$"):
        check_gradients(lambda i, e: tf.cast(i, tf.float64) * 2.0,
                        [tf.constant([[0, 2, 1]]), tf.zeros([0], tf.float64)],
                        names=["ids", "e"], method=method)
    counter = tf.Variable(3)
    with pytest.raises(ValueError, match=r"^not checked: no variable of loss_fn .*\(counter"):
        check_variables(lambda: tf.cast(counter, tf.float64) ** 2, [counter], names=["counter"],
                        method=method)
    # One float input beside the skipped one: checked, as before
    report = check_gradients(lambda x, i: x * tf.cast(i, tf.float64), [X, tf.constant(2)],
                             method=method)
    assert report.passed and [e.checked for e in report.entries] == [True, False]


def _py_sin(y):
    return tf.py_function(tf.sin, [y], tf.float64)


@tf.custom_gradient
def _sin_5_percent_off(y):
    return tf.sin(y), lambda dy: dy * tf.cos(y) * 1.05


def test_a_differentiable_py_function_is_checked(capfd):
    """tf.py_function's gradient takes its forward's tape once: every check raised
    "UnknownError ... KeyError: b'pyfunc_27'" through ~65 frames, where compute_gradient and a
    tape agree on cos(x). Now checked, by every method, with nothing on stderr."""
    wrong = lambda y: tf.py_function(_sin_5_percent_off, [y], tf.float64)  # noqa: E731
    for f in (_py_sin, tf.function(_py_sin)):
        for options in ({"compile": False}, {}, {}, {"method": "jacobian"}):
            assert check_gradients(f, [X], **options).passed, options
    for f in (wrong, tf.function(wrong)):
        for options in ({"compile": False}, {"method": "jacobian"}):
            report = check_gradients(f, [X], **options)
            assert not report.passed and report.entries[0].error_to_tolerance > 100, options
    assert "KeyError" not in capfd.readouterr().err  # no traceback of a failed gradient


@pytest.mark.parametrize("compiled", [False, True])
def test_an_op_without_a_gradient_is_said_in_one_line(compiled):
    """tf.image.resize(method="area") (likewise tf.linalg.lu, logm, adjust_saturation) has no
    gradient: TensorFlow's LookupError came through ~31 frames of the checker. Now one line
    naming the op; still a LookupError, and a ValueError as the checker's other refusals."""
    image = tf.constant(np.random.default_rng(0).uniform(0.1, 0.9, (1, 4, 4, 1)))

    def area(x):
        return tf.image.resize(x, [2, 2], method="area")

    with pytest.raises(LookupError) as said:
        check_gradients(tf.function(area) if compiled else area, [image])
    assert isinstance(said.value, ValueError) and type(said.value).__name__ == "NoGradientError"
    where = " (at resize/ResizeArea)" if compiled else ""
    assert str(said.value) == (
        f"TensorFlow has no gradient for the op ResizeArea{where} in f, so there is no gradient "
        "to check; compute that step with ops that have one, or give it one "
        "(tf.custom_gradient, tf.RegisterGradient)")
    assert said.value.op == "ResizeArea"
    lu = tf.Variable(np.eye(3) * 2 + 0.1)
    with pytest.raises(LookupError, match="^TensorFlow has no gradient for the op Lu in loss_fn"):
        check_variables(lambda: tf.linalg.lu(lu)[0], [lu], method="jacobian")
