"""Gradient checks inside a run: recorded in MLflow, near zero for the built-in models and
losses, and loud for a wrong gradient (model=buggy_linear)."""

from __future__ import annotations

import json

import pytest

from conftest import run
from gradexp.loop import GradientCheckFailed


def read_json(client, run_id: str, path: str) -> dict:
    with open(client.download_artifacts(run_id, path)) as handle:
        return json.load(handle)


def test_default_check_runs_at_start_and_end_and_is_recorded(store, client):
    result = run(store, "trainer.epochs=20")
    assert result.gradcheck_passed is True
    passed = client.get_metric_history(result.run_id, "gradcheck/passed")
    assert sorted((m.step, m.value) for m in passed) == [(0, 1.0), (20, 1.0)]
    metrics = client.get_run(result.run_id).data.metrics
    assert metrics["gradcheck/max_abs_error"] < 1e-8  # float64: differences far below float32's
    assert metrics["gradcheck/W/max_abs_error"] < 1e-8 and metrics["gradcheck/b/passed"] == 1.0
    files = {a.path for a in client.list_artifacts(result.run_id, "gradcheck")}
    assert {"gradcheck/report_epoch_00000.json", "gradcheck/report_epoch_00020.json"} <= files
    assert not any("heatmap" in f for f in files)  # W and b have one element: nothing to draw
    report = read_json(client, result.run_id, "gradcheck/report_epoch_00020.json")
    assert report["passed"] is True and set(report["reports"]) == {"variables/probe",
                                                                  "variables/jacobian"}


@pytest.mark.parametrize("overrides", [
    ("loss=mse",), ("loss=mae",), ("loss=huber",), ("loss=log_cosh",),
    ("model=mlp", "model.hidden=[8,8]", "data=sine"),
    ("model=mlp", "model.hidden=[6]", "model.activation=relu", "loss=huber", "data=sine"),
    ("model=mlp", "model.hidden=[6]", "data=blobs", "loss=categorical_crossentropy"),
    ("model=mlp", "model.hidden=[6]", "data=blobs", "loss=binary_crossentropy"),
    ("data.n_features=4", "gradcheck.wrt=both"),
])
@pytest.mark.heavy  # ~3 s
def test_built_in_models_and_losses_pass_with_errors_near_zero(store, client, overrides):
    # No heat maps and no LoggedModel: a fifth of these runs was drawing the MLPs' heat maps
    # (test_jacobian_heat_maps_are_drawn_for_small_variables_after_training draws them), and
    # neither changes a check.
    result = run(store, "trainer.epochs=3", "gradcheck=strict", "gradcheck.every_n_epochs=2",
                 "gradcheck.plots=false", "tracking.log_model=false", *overrides)
    assert result.gradcheck_passed is True
    metrics = client.get_run(result.run_id).data.metrics
    assert metrics["gradcheck/max_rel_error"] < 1e-5


def test_wrong_custom_gradient_is_caught_and_located(store, client):
    result = run(store, "model=buggy_linear", "gradcheck=jacobian", "trainer.epochs=5")
    assert result.gradcheck_passed is False
    stored = client.get_run(result.run_id)
    assert stored.info.status == "FINISHED"  # on_fail=warn: recorded, training went on
    metrics = stored.data.metrics
    assert metrics["gradcheck/passed"] == 0.0
    assert metrics["gradcheck/W/passed"] == 0.0 and metrics["gradcheck/b/passed"] == 1.0
    assert metrics["gradcheck/W/max_rel_error"] == pytest.approx(0.1, rel=0.05)  # bug_scale 1.1
    report = read_json(client, result.run_id, "gradcheck/report_epoch_00000.json")
    (w_entry,) = [e for e in report["reports"]["variables/jacobian"]["entries"]
                  if e["name"] == "W"]
    assert w_entry["passed"] is False


@pytest.mark.heavy  # ~2.4 s
def test_on_fail_fail_ends_the_run_failed_with_the_report_kept(store, client):
    with pytest.raises(GradientCheckFailed, match="gradient check failed at epoch 0.*W"):
        run(store, "model=buggy_linear", "gradcheck=strict", "trainer.epochs=5")
    (stored,) = client.search_runs(["1"])
    assert stored.info.status == "FAILED"
    assert stored.data.tags["gradexp.failure"] == "gradcheck"
    files = {a.path for a in client.list_artifacts(stored.info.run_id, "gradcheck")}
    assert "gradcheck/report_epoch_00000.json" in files


@pytest.mark.heavy  # ~2 s
def test_jacobian_heat_maps_are_drawn_for_small_variables_after_training(store, client):
    result = run(store, "model=mlp", "model.hidden=[4]", "data=sine", "gradcheck=jacobian",
                 "trainer.epochs=2")
    files = {a.path for a in client.list_artifacts(result.run_id, "gradcheck")}
    # dense0/kernel is 1x4, dense1/kernel 4x1, dense0/bias 4: drawn; dense1/bias (1): not
    assert {"gradcheck/heatmap_dense0_kernel_epoch_00002.png",
            "gradcheck/heatmap_dense1_kernel_epoch_00002.png",
            "gradcheck/heatmap_dense0_bias_epoch_00002.png"} <= files
    assert not any("dense1_bias" in f or "epoch_00000.png" in f for f in files)


def test_heat_maps_keep_the_variables_shape_and_mark_the_worst_element():
    """A kernel is drawn as its rows and columns, a bias as one row; a gradient wrong in one
    element is outlined there, in every panel, with its two values written below."""
    import numpy as np
    import tensorflow as tf
    from matplotlib.patches import Rectangle

    from gradexp.gradcheck import check_gradients
    from gradexp.heatmaps import heatmaps
    from gradexp.plots import jacobian_heatmaps
    from gradexp.run_checks import CheckResult

    x = tf.constant(np.random.default_rng(0).normal(size=(5, 3)))
    mask = np.ones((3, 2))
    mask[2, 1] = 1.5  # the backward is wrong for kernel[2, 1] only

    @tf.custom_gradient
    def scaled(kernel):
        return tf.identity(kernel), lambda upstream: upstream * mask

    def loss(kernel, bias):
        return tf.reduce_sum(tf.square(x @ scaled(kernel) + bias))

    kernel, bias = tf.constant(np.full((3, 2), 0.3)), tf.constant([0.1, -0.2], tf.float64)
    report = check_gradients(loss, [kernel, bias], method="jacobian",
                             names=["dense/kernel", "dense/bias"])
    maps = heatmaps(CheckResult(epoch=3, reports={"variables/jacobian": report}))
    assert maps["dense/kernel"].analytical.shape == (3, 2) and maps["dense/kernel"].worst == (2, 1)
    assert maps["dense/bias"].analytical.shape == (1, 2) and maps["dense/bias"].worst is None
    assert maps["dense/bias"].shape == (2,)

    drawn = maps["dense/kernel"]
    figure = jacobian_heatmaps("dense/kernel", drawn.analytical, drawn.numerical,
                               worst=drawn.worst, shape=drawn.shape)
    panels = [axis for axis in figure.axes if axis.get_title()]
    assert [axis.get_title() for axis in panels] == [
        "analytical (autodiff)", "numerical (finite differences)", "analytical − numerical"]
    for axis in panels:
        assert list(axis.get_xticks()) == [0, 1] and list(axis.get_yticks()) == [0, 1, 2]
        boxes = [p for p in axis.patches if isinstance(p, Rectangle)]
        assert {(box.get_x(), box.get_y()) for box in boxes} == {(0.5, 1.5)}  # column 1, row 2
    assert figure.get_suptitle() == "gradient of the loss w.r.t. dense/kernel (shape 3 × 2)"
    caption = " ".join(text.get_text() for text in figure.texts)
    assert "the worst element dense/kernel[2, 1]: analytical" in caption
    bias = maps["dense/bias"]
    figure = jacobian_heatmaps("dense/bias", bias.analytical, bias.numerical, shape=bias.shape)
    assert figure.get_suptitle() == "gradient of the loss w.r.t. dense/bias (shape 2)"
    assert not any(axis.patches for axis in figure.axes)


def test_max_rows_checks_a_fixed_subset_and_says_how_many(store, client):
    from gradexp.run_checks import checked_rows

    rows = checked_rows(1000, 100)
    assert len(set(rows)) == 100 and list(rows) == sorted(rows)
    assert list(rows) == list(checked_rows(1000, 100))  # the same subset at every check
    assert list(checked_rows(50, 100)) == list(range(50))  # fewer rows than asked: all

    result = run(store, "model=mlp", "model.hidden=[6]", "data=blobs",
                 "loss=categorical_crossentropy", "trainer.epochs=4", "gradcheck=probe",
                 "gradcheck.every_n_epochs=2", "gradcheck.max_rows=40")
    assert result.gradcheck_passed is True
    history = client.get_metric_history(result.run_id, "gradcheck/rows")
    assert sorted((m.step, m.value) for m in history) == [(0, 40.0), (2, 40.0), (4, 40.0)]
    report = read_json(client, result.run_id, "gradcheck/report_epoch_00004.json")
    assert report["rows"] == 40 and report["rows_total"] > 40


@pytest.mark.heavy  # ~4 s
def test_a_large_model_is_checked_on_fewer_rows_and_says_how_many(store, client, capfd):
    # 2 x 1024 + 1024 x 512 + 512 x 3 weights (~530k): 2^26 / that = 126 rows of the 300, not
    # max_rows' 512 (a 1.1M-parameter model's float64 check on 512 rows cost ~1.3 s)
    from gradexp.run_checks import MIN_ROWS, ROW_WORK

    result = run(store, "model=mlp", "model.hidden=[1024,512]", "data=blobs",
                 "loss=categorical_crossentropy", "trainer.epochs=1", "gradcheck=probe",
                 "gradcheck.at_end=false", "tracking.log_model=false")
    assert result.gradcheck_passed is True
    params = (2 * 1024 + 1024) + (1024 * 512 + 512) + (512 * 3 + 3)
    report = read_json(client, result.run_id, "gradcheck/report_epoch_00000.json")
    assert report["rows"] == max(MIN_ROWS, ROW_WORK // params) == 126
    assert report["rows_total"] == 300
    # and the console says it once, beside the value asked (the param records that value)
    said = capfd.readouterr().err  # a note, on stderr
    assert said.count("gradcheck.max_rows=512: the checks use 126 of the 300 training rows on "
                      f"this model of {params:,} parameters") == 1
    assert client.get_run(result.run_id).data.params["gradcheck.max_rows"] == "512"
    small = run(store, "model=mlp", "model.hidden=[6]", "data=blobs",
                "loss=categorical_crossentropy", "trainer.epochs=1", "gradcheck=probe",
                "gradcheck.at_end=false", "tracking.log_model=false")
    assert read_json(client, small.run_id, "gradcheck/report_epoch_00000.json")["rows"] == 300
    assert "the checks use" not in capfd.readouterr().err  # nothing capped: nothing said


def test_a_wrong_variable_is_named_by_the_joint_probe_of_a_run(store, client):
    """model=buggy_linear's wrong W among two variables, through the joint probe of
    gradcheck=probe: W named with its element, b passes."""
    result = run(store, "model=buggy_linear", "gradcheck=probe", "trainer.epochs=2")
    metrics = client.get_run(result.run_id).data.metrics
    assert metrics["gradcheck/W/passed"] == 0.0 and metrics["gradcheck/b/passed"] == 1.0
    report = read_json(client, result.run_id, "gradcheck/report_epoch_00000.json")
    (w_entry,) = [e for e in report["reports"]["variables/probe"]["entries"] if e["name"] == "W"]
    assert w_entry["worst_input_index"] == [0, 0]


@pytest.mark.parametrize("method", ["probe", "jacobian"])
@pytest.mark.heavy  # ~3 s
def test_eager_checks_and_compiled_checks_agree(store, client, method):
    """A run with two checks runs them eagerly, one that checks every epoch compiles them: both
    find the same wrong element of model=buggy_linear's W at epoch 0, with the same error."""
    entries = []
    for every in ("null", "1"):
        result = run(store, "model=buggy_linear", f"gradcheck={method}",
                     f"gradcheck.every_n_epochs={every}", "trainer.epochs=3")
        report = read_json(client, result.run_id, "gradcheck/report_epoch_00000.json")
        entries += [e for e in report["reports"][f"variables/{method}"]["entries"]
                    if e["name"] == "W"]
    eager, compiled = entries
    assert eager["passed"] is False and compiled["passed"] is False
    assert eager["worst_input_index"] == compiled["worst_input_index"]
    assert eager["max_abs_error"] == pytest.approx(compiled["max_abs_error"], rel=1e-6)


def _numbers(report: dict) -> dict:
    """A check's report without what differs between an eager and a compiled check by design:
    its time and what it cost (the eager one evaluates the loss once more and takes the shares
    from a backward pass of its own)."""
    for r in report["reports"].values():
        for key in ("seconds", "function_evaluations", "backward_passes"):
            r.pop(key)
    for verdict in report["culprit_checks"]:  # the wrong layer's own check: its time too
        verdict["report"].pop("seconds")
    return report


def _assert_same(compiled: dict, eager: dict, path: str = "") -> None:
    """Equal reports: the same verdicts, entries, notes and counts; floats to 1e-9 relative
    (the shares' norms round differently; a stale VJP or direction would be off by far more)."""
    assert type(compiled) is type(eager), path
    if isinstance(compiled, dict):
        assert compiled.keys() == eager.keys(), path
        for key in compiled:
            _assert_same(compiled[key], eager[key], f"{path}/{key}")
    elif isinstance(compiled, list):
        assert len(compiled) == len(eager), path
        for i, (a, b) in enumerate(zip(compiled, eager)):
            _assert_same(a, b, f"{path}[{i}]")
    elif isinstance(compiled, float):
        assert compiled == pytest.approx(eager, rel=1e-9, abs=1e-300), path
    else:
        assert compiled == eager, path


RELU_RUN = ("model=mlp", "model.hidden=[64]", "model.activation=relu", "data=blobs",
            "loss=categorical_crossentropy", "trainer.epochs=3")


@pytest.mark.parametrize("overrides, full_path", [
    # relu: later checks retry probes that cross a kink at one smaller step (one call for the
    # retried probes' evaluations), the fast paths of a run's later checks (kept VJPs)
    (RELU_RUN, False),
    # the same with that retry off: the full path (steps 2h, the kink test's two VJPs in one
    # call, the retries at smaller steps in one call a round), which a retry that does not
    # settle a probe still takes
    (RELU_RUN, True),
    (("model=buggy_linear", "trainer.epochs=3"), False),  # the wrong W named at every check
])
@pytest.mark.heavy  # ~4 s
def test_a_runs_later_checks_report_what_a_fresh_eager_check_reports(store, monkeypatch,
                                                                     overrides, full_path):
    """Every check of a run that checks every epoch (compiled, traced once, its VJPs, directions
    and shapes kept from check to check) against a fresh eager check of the same parameters."""
    import gradexp.run_checks as verification

    check = verification.check_training_gradients
    pairs = []

    def both(cfg, model, loss_cfg, data, epoch, eager=False):
        result = check(cfg, model, loss_cfg, data, epoch, eager)
        fresh = check(cfg, model, loss_cfg, data, epoch, eager=True)
        pairs.append((epoch, eager, result.to_dict(), fresh.to_dict()))
        return result

    monkeypatch.setattr(verification, "check_training_gradients", both)
    if full_path:
        from gradexp.gradcheck import probe

        monkeypatch.setattr(probe, "_retry_failing", lambda *args: None)
    result = run(store, "gradcheck=probe", "gradcheck.every_n_epochs=1", *overrides)
    assert [(epoch, eager) for epoch, eager, *_ in pairs] == [(e, False) for e in range(
        int(overrides[-1].split("=")[1]) + 1)]
    # Compiled, the shares are the probes' own backward passes (v and -v/2): 2, not 3.
    costs = [c["reports"]["variables/probe"]["backward_passes"] for *_, c, _ in pairs]
    assert "model=buggy_linear" in overrides or costs[1] == 2, costs
    for _, _, compiled, eager in pairs:
        _assert_same(_numbers(compiled), _numbers(eager))
    note = "crossed a kink" if full_path else "disagreed at step"
    retried = [e for *_, c, _ in pairs for r in c["reports"].values() for e in r["entries"]
               if any(note in n for n in e["notes"])]
    if "model=buggy_linear" in overrides:
        assert result.gradcheck_passed is False
        assert all(not c["passed"] for *_, c, _ in pairs)
    else:
        assert result.gradcheck_passed is True
        assert retried, "no check of this run crossed a kink: the test lost its point"
