"""Beyond first order: order=2 checks the gradient's own derivative (a backward whose value is
right but which stop_gradient, numpy or a constant makes wrong to differentiate), an input or
variable that gets no gradient is named, and modes=("rev", "fwd") compares forward-mode JVPs."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import conftest
import gradexp
from conftest import read_report
from gradexp.gradcheck import check_gradients, check_variables


def softplus_with(kind: str):
    """softplus with a hand-written backward whose value is always right (sigmoid(x)); its own
    derivative is right only for kind="right"."""

    @tf.custom_gradient
    def softplus(x):
        def backward(upstream):
            if kind == "right":
                slope = tf.sigmoid(x)
            elif kind == "stop_gradient":
                slope = tf.stop_gradient(tf.sigmoid(x))
            else:  # "numpy": the same values, computed off the tape
                slope = tf.numpy_function(lambda a: 1 / (1 + np.exp(-a)), [x], x.dtype)
            return upstream * slope

        return tf.nn.softplus(x), backward

    return softplus


X = np.linspace(-2.0, 2.0, 7)


def weighted(kind: str):
    softplus = softplus_with(kind)
    return lambda x: tf.reduce_sum(softplus(x) * tf.range(1.0, 8.0, dtype=x.dtype))


@pytest.mark.parametrize("method", ["probe", "jacobian"])
@pytest.mark.parametrize("kind", ["stop_gradient", "numpy"])
def test_order_2_catches_a_backward_whose_own_derivative_is_wrong(method, kind):
    f, x = weighted(kind), tf.constant(X)
    assert check_gradients(f, [x], method=method).passed  # its value is right: order 1 passes
    report = check_gradients(f, [x], method=method, order=2)
    assert not report.passed and report.order == 2
    (entry,) = report.entries
    assert not entry.passed and entry.max_rel_error > 0.5  # the Hessian's diagonal: 0 vs sigma'
    assert "derivative is None" in " ".join(entry.notes)  # and why: nothing depends on x
    assert report.to_dict()["order"] == 2 and "order 2" in str(report)


@pytest.mark.parametrize("method", ["probe", "jacobian"])
def test_order_2_passes_the_right_backward_and_a_non_scalar_function(method):
    x = tf.constant(X)
    report = check_gradients(weighted("right"), [x], method=method, order=2)
    assert report.passed and report.order == 2 and report.max_rel_error < 1e-5
    # A non-scalar f (a fixed random cotangent) with two inputs: cross terms d2f / dx dw too.
    w = tf.constant(np.arange(1.0, 8.0).reshape(7, 1) / 7)
    both = check_gradients(lambda x, w: softplus_with("right")(x[None, :] * 1.5) @ w * x[0],
                           [x, w], method=method, order=2, names=["x", "w"])
    assert both.passed and [e.name for e in both.entries] == ["x", "w"]
    assert both.output_shape == (14,)  # g: x's 7 gradient elements, then w's 7


def test_order_2_of_variables_catches_a_stop_gradient_backward():
    kernel = tf.Variable(np.linspace(-1.0, 1.0, 6).reshape(3, 2))
    x = tf.constant(np.random.default_rng(0).normal(size=(4, 3)))
    for kind, passes in (("right", True), ("stop_gradient", False)):
        softplus = softplus_with(kind)

        def loss(softplus=softplus):
            return tf.reduce_mean(softplus(x @ kernel) ** 2)

        assert check_variables(loss, [kernel], names=["kernel"]).passed
        report = check_variables(loss, [kernel], names=["kernel"], order=2)
        assert report.passed is passes, report
    np.testing.assert_array_equal(kernel.numpy(), np.linspace(-1.0, 1.0, 6).reshape(3, 2))


def test_an_input_and_a_variable_with_no_gradient_are_named():
    a, b = tf.constant([1.0, 2.0], tf.float64), tf.constant([3.0], tf.float64)
    report = check_gradients(lambda a, b: tf.reduce_sum(a**3), [a, b], names=["a", "unused"])
    assert report.passed  # 0 = 0 is right here, but not silently:
    assert report.disconnected == ["unused"] and report.to_dict()["disconnected"] == ["unused"]
    assert "no gradient" in " ".join(report.entries[1].notes)
    assert not any("no gradient" in n for n in report.entries[0].notes)
    # Order 2 names it too, and a variable a loss never reads as well.
    assert check_gradients(lambda a, b: tf.reduce_sum(a**3), [a, b], names=["a", "unused"],
                           order=2).disconnected == ["unused"]
    used, idle = tf.Variable([0.5, 1.5], dtype=tf.float64), tf.Variable([2.0], dtype=tf.float64)
    report = check_variables(lambda: tf.reduce_sum(tf.sin(used)), [used, idle],
                             names=["used", "idle"], method="jacobian")
    assert report.passed and report.disconnected == ["idle"]
    # A gradient that is 0 but connected (relu off everywhere) is not "disconnected".
    zero = check_gradients(lambda a: tf.reduce_sum(tf.nn.relu(-a)), [a])
    assert zero.passed and zero.disconnected == []


@pytest.mark.parametrize("method", ["probe", "jacobian"])
def test_forward_mode_agrees_on_a_normal_function(method):
    x = tf.constant(np.random.default_rng(1).normal(size=(2, 5)))
    w = tf.constant(np.random.default_rng(2).normal(size=(5, 3)))
    report = check_gradients(lambda x, w: tf.tanh(x @ w) ** 2, [x, w], method=method,
                             modes=("rev", "fwd"), names=["x", "w"])
    assert report.passed and report.modes == ("rev", "fwd")
    assert [(e.name, e.mode) for e in report.entries] == [
        ("x", "rev"), ("w", "rev"), ("x (fwd)", "fwd"), ("w (fwd)", "fwd")]
    assert all(e.probes == 4 and e.max_rel_error < 1e-6 for e in report.entries[2:])
    # The default is reverse mode only: no forward-mode entries.
    assert [e.name for e in check_gradients(lambda x: tf.tanh(x), [x]).entries] == ["x0"]


@tf.custom_gradient
def square_5_percent_off(x):
    """x², its backward 5% off for negative x."""

    def backward(upstream):
        return upstream * 2 * x * tf.where(x < 0, tf.constant(1.05, x.dtype),
                                           tf.constant(1.0, x.dtype))

    return x * x, backward


def test_forward_mode_of_a_wrong_custom_gradient_eagerly_and_in_a_tf_function():
    """What TensorFlow does: eagerly, ForwardAccumulator differentiates a tf.custom_gradient's
    forward ops (the custom backward is not used: JVPs agree with finite differences); in a
    tf.function it derives forward mode from the backward (JVPs agree with reverse mode). The
    fwd entry fails either way and says which pair disagreed."""
    x = tf.constant(np.linspace(-2.0, 2.0, 6))
    eager = check_gradients(square_5_percent_off, [x], modes=("rev", "fwd"), compile=False)
    compiled = check_gradients(tf.function(square_5_percent_off), [x], modes=("rev", "fwd"))
    for report, agrees_with in ((eager, "finite differences"), (compiled, "the reverse-mode")):
        rev, fwd = report.entries
        assert not rev.passed and not fwd.passed and fwd.mode == "fwd"
        assert f"JVPs agree with {agrees_with}" in " ".join(fwd.notes), fwd.notes
    assert "eagerly, forward mode differentiates" in " ".join(eager.entries[1].notes)
    assert "in a tf.function" in " ".join(compiled.entries[1].notes)


def test_an_op_without_a_forward_mode_derivative_is_a_note_not_a_failure():
    @tf.custom_gradient
    def sin_numpy_backward(x):  # a right backward, computed in numpy
        return tf.sin(x), lambda up: tf.numpy_function(lambda u, a: u * np.cos(a), [up, x],
                                                       x.dtype)

    # In a tf.function forward mode is derived from that backward, which numpy makes opaque:
    # no JVP (None), said in a note, the reverse-mode check unaffected.
    x = tf.constant(X)
    report = check_gradients(tf.function(sin_numpy_backward), [x], modes=("rev", "fwd"))
    rev, fwd = report.entries
    assert report.passed and rev.checked and rev.passed and not fwd.checked
    assert "not checked in forward mode" in fwd.notes[0] and "None" in fwd.notes[0]
    # Eagerly the accumulator differentiates tf.sin itself: checked, and right.
    eager = check_gradients(sin_numpy_backward, [x], modes=("rev", "fwd"), compile=False)
    assert eager.passed and eager.entries[1].checked


def test_order_and_modes_are_validated():
    x = tf.constant(X)
    with pytest.raises(ValueError, match="order=3"):
        check_gradients(tf.sin, [x], order=3)
    with pytest.raises(ValueError, match="modes="):
        check_gradients(tf.sin, [x], modes=("fwd",))


# ---------------------------------------------------------------- in a run
MODELS = (conftest.REPO / "examples" / "order2_models.py").read_text()  # the docs' example
FAST = ("trainer.epochs=3", "data.n_samples=32", "gradcheck.plots=false",
        "tracking.log_model=false")  # no test here reads the heat maps or the LoggedModel


@pytest.fixture
def launch(tmp_path, monkeypatch):
    with conftest.user_modules(tmp_path, monkeypatch, order2_models=MODELS) as folder:
        yield folder


def run(store, launch, *overrides, quiet=True):
    return conftest.run(store, *FAST, *overrides, launch_dir=launch, quiet=quiet)


@pytest.mark.parametrize(("kind", "passes"), [("stop_gradient", False), ("right", True)])
@pytest.mark.heavy  # ~4 s
def test_a_run_with_order_2_fails_a_stop_gradient_layer_and_passes_the_right_one(
        store, client, launch, kind, passes):
    result = run(store, launch, "model=custom", "model._target_=order2_models.build",
                 f"+model.kwargs.kind={kind}", "gradcheck.order=2")
    assert result.gradcheck_passed is passes
    metrics = client.get_run(result.run_id).data.metrics
    assert metrics["gradcheck/order"] == 2.0 and metrics["gradcheck/passed"] == float(passes)
    report = read_report(client, result.run_id, 0)
    assert report["order"] == 2 and report["passed"] is passes
    assert report["reports"]["variables/probe"]["passed"] is True  # order 1: its value is right
    second = report["reports"]["variables/order2/probe"]
    assert second["order"] == 2 and second["passed"] is passes
    if not passes:  # the variables before the wrong backward are the ones it misleads
        failed = {e["name"] for e in second["entries"] if not e["passed"]}
        assert "encoder/kernel" in failed
    # The same run at order 1 (the default) does not see it.
    first = run(store, launch, "model=custom", "model._target_=order2_models.build",
                f"+model.kwargs.kind={kind}")
    assert first.gradcheck_passed is True
    assert client.get_run(first.run_id).data.metrics["gradcheck/order"] == 1.0


@pytest.mark.heavy  # ~4 s
def test_the_console_says_it_was_the_second_order_check_that_failed(store, launch, capsys):
    # A person reading the console must tell "the gradients are wrong" from "the gradients
    # are right but their own derivatives are not": the warning, its culprit line and the
    # summary row all name the second-order check.
    run(store, launch, "model=custom", "model._target_=order2_models.build",
        "+model.kwargs.kind=stop_gradient", "gradcheck.order=2", "gradcheck.at_end=false",
        quiet=False)
    out = capsys.readouterr().out
    lines = out[out.index("warning:"):].splitlines()
    assert lines[0].startswith("warning: second-order gradient check failed at epoch 0 "
                               "(Hessian-vector products; first order passed): relative error")
    assert lines[1].startswith("  wrong layer: softplus_block, its second derivatives checked "
                               "alone in float64")
    assert "gradient check failed" not in out.replace("second-order gradient check failed", "")
    summary = " ".join(out[out.rindex("gradient check"):].replace("│", " ").split())  # its row
    assert "FAILED (second order) at epoch 0 (1 check;" in summary


@pytest.mark.filterwarnings("ignore:Gradients do not exist")  # Keras says it too, in training
def test_a_run_names_a_variable_that_gets_no_gradient(store, client, launch, capsys):
    result = run(store, launch, "model=custom", "model._target_=order2_models.build_idle",
                 "gradcheck.method=jacobian", quiet=False)
    out = capsys.readouterr().out
    assert "no gradient reaches head/idle" in out
    assert out.count("no gradient reaches") == 1  # said once, at the first check
    tags = client.get_run(result.run_id).data.tags
    assert tags["gradexp.gradcheck.disconnected"] == "head/idle"
    assert read_report(client, result.run_id, 0)["disconnected"] == ["head/idle"]
    assert read_report(client, result.run_id, 3)["disconnected"] == []  # asked at the first


@pytest.mark.filterwarnings("ignore:Gradients do not exist")
def test_every_job_of_a_sweep_names_the_variable_that_gets_no_gradient(store, client, launch):
    # The jobs share the checked loss (gradexp.shared_programs), and its one answer on which
    # variables reach the loss: each child says it, not only the first.
    results = gradexp.sweep(f"tracking.uri={store}", "model=custom",
                            "model._target_=order2_models.build_idle", "seed=0,1",
                            "trainer.epochs=2", "tracking.log_model=false", launch_dir=launch)
    assert len(results) == 2
    for result in results:
        tags = client.get_run(result.run_id).data.tags
        assert tags["gradexp.gradcheck.disconnected"] == "head/idle"
        assert read_report(client, result.run_id, 0)["disconnected"] == ["head/idle"]
