"""check_gradients(compile=True), the default: a plain Python function's first check runs
eagerly (cheaper than a trace for one check); from its second check on it is probed as a
tf.function, with the same verdict and report as its tf.function twin, its custom gradients
kept, one trace for repeated checks, and an eager fallback for code that does not trace.
"""

from __future__ import annotations

import gc
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf

from gradexp.gradcheck import check_gradients


def _same(a, b, *besides: str) -> None:
    """Two reports equal in everything but their timing (and ``besides``)."""
    a, b = a.to_dict(), b.to_dict()
    for key in ("seconds", *besides):
        a.pop(key)
        b.pop(key)
    assert a == b


def _mlp(x, w1, b1, w2):
    return tf.reduce_mean(tf.nn.softplus(tf.matmul(tf.tanh(tf.matmul(x, w1) + b1), w2)))


def _mlp_inputs(dtype="float64"):
    rng = np.random.default_rng(3)
    return [rng.standard_normal(s).astype(dtype) for s in ((5, 3), (3, 6), (6,), (6, 2))]


def _wrong_at(index: int, calls: list | None = None):
    """sum(sin(x))·2 whose hand-written gradient is doubled at one element."""

    @tf.custom_gradient
    def wrong_sin(x):
        mask = tf.one_hot(index, tf.size(x), dtype=x.dtype)
        return tf.reduce_sum(tf.sin(x)), lambda up: up * tf.cos(x) * (1.0 + mask)

    def f(x):
        if calls is not None:
            calls.append(tf.executing_eagerly())  # False: a trace
        return 2.0 * wrong_sin(x)

    return f


def test_a_plain_function_and_its_tf_function_twin_give_the_same_report():
    xs = _mlp_inputs()
    names = ["x", "w1", "b1", "w2"]
    first = check_gradients(_mlp, xs, names=names)  # eager: its first check
    _same(first, check_gradients(_mlp, xs, names=names, compile=False))
    plain = check_gradients(_mlp, xs, names=names)  # compiled from here on
    assert plain.passed, str(plain)
    _same(plain, check_gradients(tf.function(_mlp), xs, names=names))
    # The compiled check skips one evaluation: its output's shape comes from the trace.
    assert first.passed and first.function_evaluations == plain.function_evaluations + 1
    assert first.max_abs_error == pytest.approx(plain.max_abs_error, rel=1e-3, abs=1e-12)


def test_a_wrong_custom_gradient_in_a_plain_function_is_caught_when_compiled():
    calls: list = []
    f = _wrong_at(37, calls)
    first = check_gradients(f, [np.linspace(-1.0, 1.0, 100)])
    assert not first.passed and first.entries[0].worst_input_index == (37,)
    assert len(calls) == first.function_evaluations  # eager: its body ran at every evaluation
    calls.clear()
    report = check_gradients(f, [np.linspace(-1.0, 1.0, 100)])
    assert not report.passed
    assert report.entries[0].worst_input_index == (37,)
    # Compiled, not evaluated call by call: f's Python body ran at its trace only.
    assert len(calls) == 1 < report.function_evaluations
    _same(report, check_gradients(tf.function(_wrong_at(37)), [np.linspace(-1.0, 1.0, 100)]))
    eager = check_gradients(_wrong_at(37), [np.linspace(-1.0, 1.0, 100)], compile=False)
    assert not eager.passed and eager.entries[0].worst_input_index == (37,)


def _with_numpy(index: int | None, calls: list):
    """A function that calls .numpy() (a check of its input), so it cannot be traced."""

    def f(x):
        calls.append(1)
        if not np.all(np.isfinite(x.numpy())):
            raise ValueError("x must be finite")
        return 2.0 * _wrong_at(index)(x) if index is not None else tf.reduce_sum(tf.sin(x))

    return f


@pytest.mark.parametrize("index", [None, 5])
def test_a_function_that_does_not_trace_is_checked_eagerly_with_the_same_report(index):
    x = np.linspace(-1.0, 1.0, 20)
    calls: list = []
    f = _with_numpy(index, calls)
    check_gradients(f, [x])  # its first check: eager, no trace tried
    calls.clear()
    report = check_gradients(f, [x])
    tried = len(calls)  # the failed traces, then every eager evaluation
    calls.clear()
    _same(report, check_gradients(f, [x], compile=False))
    eager = len(calls)
    assert tried > eager
    assert report.passed is (index is None)
    assert not report.notes  # silent: nothing about compiling in the report
    if index is not None:
        assert report.entries[0].worst_input_index == (index,)
    calls.clear()
    _same(check_gradients(f, [x]), report)
    assert len(calls) == eager  # again: straight to the eager check, no trace tried


def test_numpy_on_tensors_gets_the_eager_verdict():
    """np.tanh of a tensor has no gradient: the eager check says so, and so does the default."""

    def f(x):
        return tf.reduce_sum(tf.constant(np.tanh(x)) * x)

    x = np.linspace(-1.0, 1.0, 10)
    check_gradients(f, [x])  # eager: its first check
    report = check_gradients(f, [x])  # the trace fails: eager again
    assert not report.passed
    _same(report, check_gradients(f, [x], compile=False))


def test_repeated_checks_of_the_same_function_trace_it_once():
    calls: list = []

    def f(x, w):
        # runs when f is traced: once, not at each check or evaluation (eagerly once a check:
        # the kept trace compared with f as it is now, plain_functions._agree)
        calls.append(tf.executing_eagerly())
        return tf.reduce_sum(tf.tanh(x @ w))

    rng = np.random.default_rng(0)
    for seed in range(5):  # new arrays of the same shapes, other seeds, as a loop of checks
        assert check_gradients(f, [rng.standard_normal((4, 3)), rng.standard_normal((3, 2))],
                               seed=seed).passed
        if seed == 0:  # the first check ran eagerly: the body at every evaluation
            calls.clear()
    assert calls.count(False) == 1 and calls.count(True) == 3  # one trace; one call a check
    check_gradients(f, [rng.standard_normal((6, 3)), rng.standard_normal((3, 2))])
    assert calls.count(False) == 2  # a new shape: traced for it, as tf.function does


def test_checks_alternating_between_two_shapes_each_get_their_own_trace_and_verdict():
    # The compiled calls are kept per input shape (compiled._concrete): a check of one shape
    # must never run the trace of the other. The gradient is wrong at element 7, which only
    # the longer input has; the body counts traces (an eager fallback would run it at every
    # evaluation).
    calls: list = []
    f = _wrong_at(7, calls)
    rng = np.random.default_rng(4)
    short, long = rng.standard_normal(5), rng.standard_normal(20)
    check_gradients(f, [short])  # eager: its first check
    calls.clear()
    for x in (short, long, short, long, short):
        report = check_gradients(f, [x])
        assert report.passed == (x is short), str(report)
        assert report.entries[0].shape == x.shape
        eager = check_gradients(_wrong_at(7), [x], compile=False)
        assert report.max_abs_error == pytest.approx(eager.max_abs_error, rel=1e-6, abs=1e-12)
        assert report.function_evaluations == eager.function_evaluations - 1
        assert report.backward_passes == eager.backward_passes
    # one trace a shape, and no eager fallback (one eager call a check, plain_functions._agree)
    assert calls.count(False) == 2 and calls.count(True) <= 5


def test_a_keras_model_and_a_bound_method_are_compiled_once():
    traced: list = []

    class Counting(keras.layers.Layer):
        def call(self, x):
            traced.append(tf.executing_eagerly())  # False: a trace
            return tf.tanh(x)

    model = keras.Sequential([keras.Input((4,), dtype="float64"),
                              keras.layers.Dense(3, dtype="float64"), Counting(dtype="float64")])
    x = np.random.default_rng(1).standard_normal((5, 4))
    assert check_gradients(model, [x], seed=0).passed  # its first check: eager
    before = len(traced)
    reports = [check_gradients(model, [x], seed=s) for s in range(3)]
    assert all(r.passed for r in reports)
    assert traced[before:].count(False) == 1
    _same(reports[0], check_gradients(model, [x], seed=0))

    class Loss:
        def __init__(self):
            self.calls = 0

        def value(self, x):
            self.calls += not tf.executing_eagerly()  # its traces
            return tf.reduce_sum(tf.exp(0.3 * x))

    loss = Loss()
    assert check_gradients(loss.value, [x]).passed  # eager: its first check
    loss.calls = 0
    for s in range(3):  # loss.value is a new bound method object at each access
        assert check_gradients(loss.value, [x], seed=s).passed
    assert loss.calls == 1


def test_float32_code_keeps_its_dtype_and_matches_its_twin():
    w = tf.constant(np.random.default_rng(2).standard_normal((3, 2)), tf.float32)

    def f(x):  # a float32 constant: cannot run in float64
        return tf.reduce_sum(tf.nn.softplus(x @ w))

    x = np.random.default_rng(3).standard_normal((4, 3)).astype("float32")
    check_gradients(f, [x], dtype="float64")  # its first check: eager
    report = check_gradients(f, [x], dtype="float64")
    assert report.passed and report.dtype_used == "float32"
    assert any("float64" in n for n in report.notes)
    # The dtype trial calls f as given, so a tf.function's note quotes its trace's error.
    _same(report, check_gradients(tf.function(f), [x], dtype="float64"), "notes")
    # Eagerly, the same but for one evaluation (the recorded forward the trace replaces).
    _same(report, check_gradients(f, [x], dtype="float64", compile=False),
          "function_evaluations")


def test_the_checked_function_is_not_kept_alive():
    def f(x):
        return tf.reduce_sum(x * x)

    check_gradients(f, [np.ones(3)])
    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None


def test_compile_must_be_a_bool():
    with pytest.raises(ValueError, match="compile="):
        check_gradients(tf.reduce_sum, [np.ones(3)], compile="yes")


_SCALE = {}  # the global a layer's call looks up, as notebook code does


def _define_scale(bug: float) -> None:
    @tf.custom_gradient
    def scale(x):
        return 2.0 * x, lambda up: up * 2.0 * (1.0 + bug)  # d(2x)/dx = 2, wrong by `bug`

    _SCALE["scale"] = scale


def test_a_gradient_redefined_between_checks_is_checked_as_redefined():
    # QA: from its second check on a callable is a kept trace; a notebook cell that redefined
    # the custom gradient its call reads left the trace as it was, and a 10% wrong gradient
    # passed (as a fresh process, or compile=False, failed it)
    class Scale(keras.layers.Layer):
        def call(self, x):
            return _SCALE["scale"](x)

    x = np.random.default_rng(0).normal(size=(8, 3))
    layer = Scale()
    _define_scale(0.0)
    assert check_gradients(layer, [x]).passed  # eager
    assert check_gradients(layer, [x]).passed  # traced
    _define_scale(0.1)
    assert not check_gradients(layer, [x]).passed
    _define_scale(0.0)  # and fixed again
    assert check_gradients(layer, [x]).passed
