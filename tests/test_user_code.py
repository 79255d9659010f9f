"""User losses by `_target_` from the launch folder: they train, name their runs, fail early and in
one line when they cannot be called, and their hand-written gradients are checked, in float64
where the code allows it and in float32 (its own dtype) where it does not."""

from __future__ import annotations

import math
import runpy
import shutil
import sys
from pathlib import Path

import pytest

import conftest
from conftest import REPO, compose_config, read_report, run_cli
from gradexp.config_checks import check_ranges
from gradexp.config_errors import USER_ERRORS
from gradexp.loop import GradientCheckFailed
from gradexp.schema import ConfigError
from gradexp.user_code import label_by_target

FAST = ("trainer.epochs=5", "data.n_samples=32", "data.outliers=0.1", "gradcheck.plots=false",
        "tracking.log_model=false")  # no test here reads the heat maps or the LoggedModel

# A new user's module: a plain function returning one loss per sample (as Keras loss functions
# do), one with a signature that is not (y_true, y_pred), a constant, and a class that is not a
# loss. The example module examples/robust_losses.py is copied beside it.
MYLOSSES = '''
import tensorflow as tf

def pseudo_huber(y_true, y_pred, delta=1.0):
    r = (y_pred - y_true) / delta
    return delta * delta * (tf.sqrt(1 + r * r) - 1)

def one_arg(y):
    return y

def capped(y_true, y_pred):  # Python `if` on a tensor: tf.function's autograph makes it a cond
    loss = tf.reduce_mean(tf.square(y_pred - y_true))
    if loss > 1e6:
        loss = loss / 1e6
    return loss

DELTA = 1.0

class NotALoss:
    def __init__(self, delta=1.0):
        self.delta = delta
'''
MODULES = ("mylosses", "robust_losses", "broken")


@pytest.fixture
def launch(tmp_path: Path, monkeypatch) -> Path:
    """A launch folder with user modules, importable only while the test runs."""
    folder = tmp_path / "launch"
    folder.mkdir()
    (folder / "mylosses.py").write_text(MYLOSSES)
    (folder / "broken.py").write_text("import math\nVALUE = 1 / 0\n")
    shutil.copy(REPO / "examples" / "robust_losses.py", folder)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in MODULES:
        sys.modules.pop(name, None)
    yield folder
    for name in MODULES:
        sys.modules.pop(name, None)


def run(store, launch, *overrides):
    return conftest.run(store, *FAST, *overrides, launch_dir=launch)


def test_the_x_squared_example_finds_6_both_ways(capsys):
    runpy.run_path(str(REPO / "examples" / "x_squared.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "GradientTape: 6.0" in out and "Gradient check PASSED" in out
    assert "analytical 6, numerical 6 " in out


# ---------------------------------------------------------------- labels (no TensorFlow)
@pytest.mark.parametrize(("overrides", "name"), [
    (("loss=mse",), "mse"),
    (("loss=huber", "loss._target_=keras.losses.Huber"), "huber"),
    (("loss._target_=mylosses.pseudo_huber",), "mylosses.pseudo_huber"),
    (("loss=huber", "loss._target_=robust_losses.PseudoHuber"), "robust_losses.PseudoHuber"),
    (("loss._target_=mylosses.pseudo_huber", "loss.name=my_label"), "my_label"),
])
def test_loss_name_follows_a_replaced_target(overrides, name):
    cfg = label_by_target(compose_config(*overrides))
    assert cfg.loss.name == name
    assert label_by_target(cfg).loss.name == name  # idempotent


# ---------------------------------------------------------------- training with user code
@pytest.mark.parametrize(("overrides", "checked_in"), [
    (("loss._target_=robust_losses.PseudoHuber",), "float32"),  # a float32-only Keras class
    (("loss._target_=mylosses.pseudo_huber",), "float64"),  # a plain function, per sample
    (("loss=huber", "loss._target_=robust_losses.pseudo_huber", "loss.delta=0.5"), "float64"),
])
def test_user_loss_trains_is_labelled_and_its_gradient_passes(store, client, launch, overrides,
                                                              checked_in):
    result = run(store, launch, *overrides)
    stored = client.get_run(result.run_id)
    target = next(o for o in overrides if o.startswith("loss._target_=")).split("=")[1]
    assert stored.info.status == "FINISHED"
    assert stored.data.params["loss.name"] == target
    assert stored.data.params["loss._target_"] == target
    assert math.isfinite(result.final_loss)
    assert result.history["loss"][-1] < result.history["loss"][0]  # it learned
    assert result.gradcheck_passed is True
    first = read_report(client, result.run_id, 0)
    assert first["dtype"] == checked_in
    assert first["reports"]["variables/probe"]["dtype_used"] == checked_in
    if checked_in == "float32":  # the fallback is said, in the report and as a tag
        assert "cannot run in float64" in first["notes"][0]
        assert "checked in float32" in first["notes"][0]
        assert stored.data.tags["gradexp.gradcheck_dtype"] == "float32"
    else:
        assert first["notes"] == []


def test_python_control_flow_on_tensors_in_a_user_loss_trains(store, client, launch):
    """The trainer's own loop is written without autograph (converting it cost ~0.4 s a run);
    user code it calls is still converted, as tf.function would convert it."""
    result = run(store, launch, "loss._target_=mylosses.capped", "gradcheck=off")
    assert client.get_run(result.run_id).info.status == "FINISHED"
    assert result.history["loss"][-1] < result.history["loss"][0]


@pytest.mark.heavy  # ~4 s
def test_compiled_checks_find_a_float32_only_loss_and_say_so_as_eager_ones_do(store, client,
                                                                             launch):
    """A run checking every epoch compiles its checks, which try float64 by tracing instead of
    an eager trial first: a float32-only loss still ends in float32 checks, said as before, and
    a wrong custom gradient in such a run is still caught (gradcheck=probe, checked jointly)."""
    result = run(store, launch, "loss._target_=robust_losses.PseudoHuber",
                 "gradcheck.every_n_epochs=1")
    assert result.gradcheck_passed is True
    stored = client.get_run(result.run_id)
    for epoch in (0, 3, 5):
        checked = read_report(client, result.run_id, epoch)
        assert checked["dtype"] == "float32" and checked["passed"] is True
        assert checked["reports"]["variables/probe"]["dtype_used"] == "float32"
    assert "cannot run in float64" in read_report(client, result.run_id, 0)["notes"][0]
    assert stored.data.tags["gradexp.gradcheck_dtype"] == "float32"

    result = run(store, launch, "model=buggy_linear", "gradcheck=probe",
                 "gradcheck.every_n_epochs=1")
    assert result.gradcheck_passed is False
    first = read_report(client, result.run_id, 0)
    assert first["dtype"] == "float64" and first["notes"] == []
    (w_entry,) = [e for e in first["reports"]["variables/probe"]["entries"] if e["name"] == "W"]
    assert w_entry["passed"] is False and w_entry["worst_input_index"] == [0, 0]


@pytest.mark.heavy  # ~4 s
def test_a_bound_argument_reaches_the_function(store, client, launch):
    """delta=0.5 is bound to the function (a key the option lacks, added with +): its loss
    differs from the function's default delta=1.0, which loss=huber's delta=1.0 also gives."""
    target = "loss._target_=robust_losses.pseudo_huber"
    half = run(store, launch, target, "+loss.delta=0.5")
    one = run(store, launch, "loss=huber", target, "loss.delta=1.0")
    default = run(store, launch, target)
    assert client.get_run(half.run_id).data.params["loss.delta"] == "0.5"
    assert half.final_loss != pytest.approx(one.final_loss)
    assert one.final_loss == pytest.approx(default.final_loss)


def test_keys_go_to_user_code_unchecked_but_typos_in_built_in_options_are_refused():
    check_ranges(compose_config("loss._target_=mylosses.pseudo_huber", "+loss.delta=0.5"))
    with pytest.raises(ConfigError, match=r"^loss.delt=0.5: .*did you mean loss.delta\?"):
        check_ranges(compose_config("loss=huber", "+loss.delt=0.5"))


# ---------------------------------------------------------------- wrong backward passes
@pytest.mark.parametrize(("target", "checked_in"), [
    ("robust_losses.PseudoHuberWrongBranch", "float32"),
    ("robust_losses.pseudo_huber_wrong_branch", "float64"),
])
@pytest.mark.heavy  # ~2.3 s
def test_a_wrong_branch_of_the_backward_is_caught_and_located(store, client, launch, target,
                                                               checked_in):
    result = run(store, launch, f"loss._target_={target}")
    assert result.gradcheck_passed is False
    stored = client.get_run(result.run_id)
    assert stored.info.status == "FINISHED"  # on_fail=warn
    assert stored.data.metrics["gradcheck/W/passed"] == 0.0
    first = read_report(client, result.run_id, 0)
    assert first["dtype"] == checked_in and first["passed"] is False
    entries = {e["name"]: e for e in first["reports"]["variables/jacobian"]["entries"]}
    # At epoch 0 every residual is beyond delta, so every gradient is 10% too large.
    for name in ("W", "b"):
        entry = entries[name]
        assert entry["passed"] is False
        assert entry["worst_input_index"] == ([0, 0] if name == "W" else [0])
        assert entry["worst_analytical"] == pytest.approx(1.1 * entry["worst_numerical"],
                                                          rel=1e-3)


def test_on_fail_fail_ends_the_run_failed(store, client, launch):
    # The loss is wrong, not a layer: the message says so and names the worst variable.
    with pytest.raises(GradientCheckFailed, match=r"epoch 0: relative error .* \([Wb], variables/"
                                                  r"probe\)\n  no layer is wrong alone"):
        run(store, launch, "loss._target_=robust_losses.PseudoHuberWrongBranch",
            "gradcheck.on_fail=fail")
    (stored,) = client.search_runs(["1"])
    assert stored.info.status == "FAILED"
    assert stored.data.tags["gradexp.failure"] == "gradcheck"


# ---------------------------------------------------------------- bad targets
@pytest.mark.parametrize(("target", "line"), [
    ("mylosses.nope", "loss._target_=mylosses.nope: module mylosses has no attribute 'nope'"),
    ("nomodule.fn", "loss._target_=nomodule.fn: no module named 'nomodule'"),
    ("mylosses.one_arg", "loss._target_=mylosses.one_arg: cannot be called as "
                         "one_arg(y_true, y_pred): too many positional arguments"),
    ("mylosses.DELTA", "loss._target_=mylosses.DELTA: is a float, not a loss class or a "
                       "function (y_true, y_pred)"),
    ("mylosses.NotALoss", "loss._target_=mylosses.NotALoss: instances of NotALoss cannot be "
                          "called"),
    ("broken.loss", "loss._target_=broken.loss: importing broken raised ZeroDivisionError: "
                    "division by zero (broken.py:2)"),
    ("pseudo_huber", "loss._target_=pseudo_huber: name the module too"),
])
def test_a_bad_loss_target_is_one_line_before_any_run(store, client, launch, target, line):
    with pytest.raises(ConfigError) as caught:
        run(store, launch, f"loss._target_={target}")
    message = str(caught.value)
    assert message.startswith(line) and "\n" not in message
    assert client.search_experiments() == [] or client.search_runs(
        [e.experiment_id for e in client.search_experiments()]) == []


def test_extra_keys_the_function_does_not_take_are_one_line(store, launch):
    line = (r"^loss._target_=mylosses.pseudo_huber: cannot be called as pseudo_huber\(y_true, "
            r"y_pred, from_logits=True\): got an unexpected keyword argument 'from_logits'")
    with pytest.raises(ConfigError, match=line):
        run(store, launch, "loss=binary_crossentropy", "loss._target_=mylosses.pseudo_huber")


# ---------------------------------------------------------------- gradcheck.dtype
def test_gradcheck_in_float32_passes_the_built_in_model_and_says_so(store, client, launch):
    result = run(store, launch, "gradcheck.dtype=float32")
    assert result.gradcheck_passed is True
    first = read_report(client, result.run_id, 0)
    assert first["dtype"] == "float32" and first["notes"] == []
    probe = first["reports"]["variables/probe"]
    assert probe["dtype_used"] == probe["dtype_requested"] == "float32"
    # float32's tolerance 3e-3, not float64's 1e-5; the joint probe over all variables shrinks
    # it by the smallest variable's share of the directional derivative, by at most 100x.
    assert 3e-5 <= probe["rtol"] <= 3e-3


@pytest.mark.heavy  # ~2.4 s
def test_a_wrong_custom_layer_gradient_is_caught_in_float32_too(store, client, launch):
    result = run(store, launch, "model=buggy_linear", "gradcheck.dtype=float32")
    metrics = client.get_run(result.run_id).data.metrics
    assert metrics["gradcheck/W/passed"] == 0.0 and metrics["gradcheck/b/passed"] == 1.0
    assert metrics["gradcheck/W/max_rel_error"] == pytest.approx(0.1, rel=0.05)  # bug_scale 1.1


def test_the_checker_evaluates_in_float32_when_asked():
    import numpy as np
    import tensorflow as tf

    from gradexp.gradcheck import check_gradients

    x = np.random.default_rng(0).standard_normal(8)  # float64 inputs, checked in float32
    report = check_gradients(lambda x: tf.reduce_sum(tf.tanh(x)), [x], dtype="float32")
    assert report.passed and report.dtype_used == "float32" and report.dtype_requested == "float32"
    # float32's rtol for the probe method (3e-3 for the jacobian method): docs/gradcheck.md
    assert report.entries[0].dtype == "float32" and report.entries[0].rtol == 3e-4
    with pytest.raises(ValueError, match="'float64' or 'float32'"):
        check_gradients(lambda x: tf.reduce_sum(x), [x], dtype="bfloat16")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32"])
def test_gradcheck_dtypes_too_coarse_are_refused_at_config_time(dtype):
    from gradexp.app import error_message

    override = f"gradcheck.dtype={dtype}"
    with pytest.raises(USER_ERRORS) as refused:  # a closed set: refused as Hydra composes
        compose_config(override)
    assert error_message(refused.value, overrides=[override]) == (
        f"{override}: must be float64 or float32 (float16 and bfloat16 finite differences are "
        "too coarse to check gradients with)")


# ---------------------------------------------------------------- across the process boundary
@pytest.mark.slow
def test_cli_bad_target_exits_2_with_one_line_and_no_run(tmp_path, launch):
    done = run_cli("loss._target_=mylosses.nope", f"tracking.uri=sqlite:///{tmp_path}/m.db",
                   f"hydra.run.dir={tmp_path}/out", cwd=launch)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: loss._target_=mylosses.nope: module mylosses has no attribute "
                      "'nope'"]
    assert not (tmp_path / "m.db").exists()  # not even a store was opened


@pytest.mark.slow
def test_cli_wrong_gradient_with_on_fail_fail_exits_1(tmp_path, launch, client, store):
    done = run_cli("loss._target_=robust_losses.PseudoHuberWrongBranch", "gradcheck=strict",
                   *FAST, f"tracking.uri={store}", f"hydra.run.dir={tmp_path}/out", cwd=launch)
    assert done.returncode == 1, done.stderr
    assert "checked in float32" in done.stdout
    assert "gradient check failed at epoch 0" in done.stderr
    (stored,) = client.search_runs(["1"])
    assert stored.info.status == "FAILED"
    assert stored.data.params["loss.name"] == "robust_losses.PseudoHuberWrongBranch"
