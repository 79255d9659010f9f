"""Fair comparisons (issue 8): held-out rows for every data option, metrics that do not depend on
the training loss, and a sweep objective that ranks runs, tells Optuna its direction and drives
`gradexp compare`. Real data, real TensorFlow, a real sqlite MLflow store."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import conftest
from conftest import compose_config, run_cli
from gradexp.compare import main as compare
from gradexp.data import load_data
from gradexp.metrics import objective
from gradexp.schema import ConfigError


def rows(array: np.ndarray) -> set[tuple]:
    return {tuple(row) for row in np.asarray(array, dtype=np.float32)}


# ---------------------------------------------------------------- splits
@pytest.mark.parametrize(("option", "n_train"), [("linear", 100), ("sine", 256), ("blobs", 300)])
def test_synthetic_sets_draw_a_disjoint_validation_set_of_n_val_rows(option, n_train):
    data = load_data(compose_config(f"data={option}", "data.n_val=40").data)
    assert len(data.x) == n_train and len(data.val) == 40 and data.test is None
    assert not rows(np.hstack([data.x, data.y])) & rows(np.hstack([data.val.x, data.val.y]))
    assert load_data(compose_config(f"data={option}", "data.n_val=0").data).val is None


def test_the_validation_set_leaves_the_training_rows_as_they_were():
    with_val = load_data(compose_config("data.n_val=100").data)
    without = load_data(compose_config("data.n_val=0").data)
    np.testing.assert_array_equal(with_val.x, without.x)
    np.testing.assert_array_equal(with_val.y, without.y)


def test_blobs_validation_points_lie_around_the_training_centres():
    data = load_data(compose_config("data=blobs").data)
    centres = np.stack([data.x[data.y.argmax(1) == k].mean(0) for k in range(3)])
    nearest = np.linalg.norm(data.val.x[:, None] - centres[None], axis=2).argmin(1)
    assert (nearest == data.val.y.argmax(1)).mean() > 0.9


@pytest.mark.parametrize("name", ["diabetes", "iris", "wine", "breast_cancer", "digits"])
def test_tabular_splits_partition_the_rows(name):
    import sklearn.datasets

    loader = {"breast_cancer": "load_breast_cancer"}.get(name, f"load_{name}")
    everything = getattr(sklearn.datasets, loader)().data
    cfg = compose_config("data=sklearn", f"data.name={name}", "data.val_fraction=0.2",
                         "data.test_fraction=0.1", "data.standardize=false").data
    data = load_data(cfg)
    sizes = [len(data.x), len(data.val), len(data.test)]
    n = len(everything)
    assert sizes == [n - round(0.2 * n) - round(0.1 * n), round(0.2 * n), round(0.1 * n)]
    split_rows = [rows(part) for part in (data.x, data.val.x, data.test.x)]
    assert sum(len(part) for part in split_rows) == len(rows(everything))  # no row in two splits
    assert set().union(*split_rows) == rows(everything)


def test_standardizing_uses_the_training_rows_only(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("x,y\n" + "".join(f"{i},{2 * i}\n" for i in range(50)))
    cfg = compose_config("data=csv", f"data.path={table}", "data.target=y",
                         "data.test_fraction=0.2").data
    data = load_data(cfg)
    assert abs(data.x.mean()) < 1e-6 and abs(data.x.std() - 1) < 1e-5
    raw_train = data.y[:, 0] / 2  # y = 2x is left unscaled, so it gives back each row's raw x
    mean, std = raw_train.mean(), raw_train.std()
    for split in (data.val, data.test):  # scaled with the training rows' mean and std
        np.testing.assert_allclose(split.x[:, 0], (split.y[:, 0] / 2 - mean) / std, atol=1e-5)
        assert abs(split.x.mean()) > 1e-3  # not refitted to itself


def test_a_split_that_leaves_no_training_rows_is_refused():
    cfg = compose_config("data=sklearn", "data.name=iris", "data.val_fraction=0.6",
                         "data.test_fraction=0.5").data
    with pytest.raises(ConfigError, match="data.val_fraction=0.6, data.test_fraction=0.5"):
        load_data(cfg)


# ---------------------------------------------------------------- metrics in a run
def run(store: str, *overrides: str, tmp_path=None):
    return conftest.run(store, "gradcheck=off", *overrides, launch_dir=tmp_path)


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_a_regression_logs_train_and_val_metrics_at_the_progress_points(store, client):
    result = run(store)
    for key in ("train/mse", "train/mae", "train/r2", "val/mse", "val/mae", "val/r2"):
        assert [step for step, _ in history(client, result.run_id, key)] == list(
            range(10, 101, 10)), key
    # train/mse is the mse loss itself, after the last step
    assert result.metrics["train/mse"] == pytest.approx(result.final_loss, rel=1e-5)
    # 100 fresh points of y = 3x + 4 + 0.1·noise: the fitted line is off by little more than noise
    assert 0.005 < result.metrics["val/mse"] < 0.03
    assert result.metrics["val/r2"] > 0.95
    assert (result.objective, result.direction) == ("val/mse", "minimize")
    assert result.objective_value == result.metrics["val/mse"]
    tags = client.get_run(result.run_id).data.tags
    assert tags["gradexp.objective"] == "val/mse" and tags["gradexp.task"] == "regression"


def test_a_classification_logs_accuracy_well_above_chance_and_a_confusion_matrix(store, client):
    result = run(store, "data=blobs", "data.spread=2.5", "model=mlp", "model.hidden=[16]",
                 "loss=categorical_crossentropy", "optimizer=adam", "optimizer.learning_rate=0.02",
                 "trainer.epochs=60")
    assert result.objective == "val/accuracy" and result.direction == "maximize"
    assert result.metrics["val/accuracy"] > 0.8  # three classes: chance is 1/3
    assert result.metrics["val/crossentropy"] < 0.6
    plots = {a.path for a in client.list_artifacts(result.run_id, "plots")}
    assert "plots/confusion_matrix_val.png" in plots


def test_eval_metrics_and_every_can_be_chosen(store, client):
    result = run(store, "trainer.epochs=30", "eval.every=15",
                 "eval.metrics=[rmse,mse,{_target_:keras.metrics.MeanAbsoluteError,name:kmae}]",
                 "sweep.objective=val/rmse")
    assert set(result.metrics) == {f"{split}/{name}" for split in ("train", "val")
                                   for name in ("rmse", "mse", "kmae")}
    assert result.metrics["val/rmse"] == pytest.approx(math.sqrt(result.metrics["val/mse"]),
                                                       rel=1e-5)
    assert [step for step, _ in history(client, result.run_id, "val/kmae")] == [15, 30]
    assert result.objective_value == result.metrics["val/rmse"]


def test_a_test_split_is_evaluated_once_at_the_end(store, client):
    result = run(store, "data=sklearn", "data.name=diabetes", "data.test_fraction=0.2",
                 "optimizer=adam", "trainer.epochs=20")
    for key in ("test/mse", "test/mae", "test/r2"):
        assert [step for step, _ in history(client, result.run_id, key)] == [20]
    assert len(history(client, result.run_id, "val/mse")) == 2  # epochs 10 and 20


@pytest.mark.parametrize(("override", "message"), [
    ("eval.metrics=[mse,banana]", "eval.metrics: 'banana' is not a metric gradexp knows"),
    ("sweep.objective=val/accuracy", "sweep.objective=val/accuracy: the runs log val/ mse, mae"),
])
def test_a_metric_or_objective_the_run_cannot_log_is_refused_before_training(store, client,
                                                                             override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        run(store, override)
    assert not [r for e in client.search_experiments()
                for r in client.search_runs([e.experiment_id])]  # nothing recorded


def test_objective_auto_follows_the_task_and_direction_follows_the_metric():
    assert objective(compose_config()) == ("val/mse", "minimize")
    assert objective(compose_config("data=blobs")) == ("val/accuracy", "maximize")
    assert objective(compose_config("data=sklearn", "data.name=digits")) == (
        "val/accuracy", "maximize")
    assert objective(compose_config("sweep.objective=val/r2")) == ("val/r2", "maximize")
    assert objective(compose_config("sweep.objective=val/r2", "sweep.direction=minimize")) == (
        "val/r2", "minimize")
    # eval.metrics without the task's default: auto is the first of them (QA: eval.metrics=[mae]
    # was refused for sweep.objective=val/mse, a key the person never set)
    assert objective(compose_config("eval.metrics=[mae,r2]")) == ("val/mae", "minimize")
    assert objective(compose_config("eval.metrics=[r2,mse]")) == ("val/mse", "minimize")
    assert objective(compose_config("data=blobs", "eval.metrics=[{_target_:keras.metrics.AUC}]")
                     ) == ("val/auc", "maximize")


# ---------------------------------------------------------------- sweeps ranked by the objective
@pytest.fixture(scope="module")
def loss_sweep(tmp_path_factory):
    """`-m loss=mse,mae` on data with 20% outliers: mse wins on val/mse, mae on val/mae."""
    folder = tmp_path_factory.mktemp("loss_sweep")
    done = run_cli("-m", "loss=mse,mae", "data.outliers=0.2", "trainer.epochs=200",
                   "gradcheck=off", cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, done


def sweep_runs(folder):
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id],
                              order_by=["attributes.start_time DESC"])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return client, parents, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


@pytest.mark.slow
def test_a_loss_sweep_is_ranked_by_val_mse_not_by_each_loss(loss_sweep):
    folder, done = loss_sweep
    client, (parent,), children = sweep_runs(folder)
    assert len(children) == 2
    for child in children:
        assert {"val/mse", "val/mae", "val/r2"} <= set(child.data.metrics)
    best = min(children, key=lambda c: c.data.metrics["val/mse"])
    assert best.data.params["loss.name"] == "mse"
    # by its own training loss the mae run looks 10x better: the yardstick that misled
    by_final_loss = min(children, key=lambda c: c.data.metrics["final_loss"])
    assert by_final_loss.data.params["loss.name"] == "mae"
    assert parent.data.tags["gradexp.best_run_id"] == best.info.run_id
    assert parent.data.tags["gradexp.objective"] == "val/mse"
    assert client.get_run(best.info.run_id).data.tags["gradexp.best_in_sweep"] == "true"
    assert "best first by val/mse" in done.stdout
    plots = {a.path for a in client.list_artifacts(parent.info.run_id, "plots")}
    assert {"plots/sweep_loss_curves.png", "plots/sweep_val_mse_curves.png"} <= plots


@pytest.mark.slow
def test_objective_val_mae_picks_the_other_run(loss_sweep):
    folder, _ = loss_sweep
    # The same jobs again, reused (skip_finished), ranked by another yardstick.
    done = run_cli("-m", "loss=mse,mae", "data.outliers=0.2", "trainer.epochs=200",
                   "gradcheck=off", "sweep.skip_finished=true", "sweep.objective=val/mae",
                   cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    client, parents, children = sweep_runs(folder)
    newest = parents[0]
    best = client.get_run(newest.data.tags["gradexp.best_run_id"])
    assert best.data.params["loss.name"] == "mae"
    assert best.data.metrics["val/mae"] == min(c.data.metrics["val/mae"] for c in children)


@pytest.mark.slow
def test_gradexp_compare_ranks_by_the_objective_and_by(loss_sweep, capsys, monkeypatch):
    folder, _ = loss_sweep
    _, parents, _ = sweep_runs(folder)
    sweep = parents[-1].info.run_id  # the first sweep: the one whose children trained
    monkeypatch.chdir(folder)
    monkeypatch.setenv("COLUMNS", "250")

    def ranked(*extra: str) -> tuple[list[str], str]:
        assert compare(["--sweep", sweep, *extra]) == 0
        out = capsys.readouterr().out
        order = [name for line in out.splitlines() if line.startswith("│")
                 for name in ("mse", "mae") if f"│ {name} " in line]
        return order, out

    order, out = ranked()  # default: the objective the runs were recorded with
    assert order == ["mse", "mae"] and "val/mse ↑" in out  # smallest first
    assert "besides the swept keys (loss), no param differs" in out
    order, out = ranked("--by", "val/mae")
    assert order == ["mae", "mse"]
    order, out = ranked("--by", "val/r2")
    assert order == ["mse", "mae"] and "val/r2 ↓" in out  # r2: largest first


@pytest.mark.slow
def test_without_held_out_data_the_sweep_says_so_and_ranks_by_final_loss(tmp_path):
    done = run_cli("-m", "loss=mse,mae", "data.n_val=0", "trainer.epochs=5", "gradcheck=off",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "this run has no such metric" in out  # each job: the sweeper gets final_loss
    assert "no run has the sweep objective (val/mse" in out
    assert "best first by final_loss" in out
    _, (parent,), _ = sweep_runs(tmp_path)
    assert "gradexp.best_run_id" in parent.data.tags


@pytest.mark.slow
def test_optuna_is_told_the_objective_and_its_direction(tmp_path):
    done = run_cli("-m", "experiment=lr_search", "data=blobs", "model=mlp", "model.hidden=[8]",
                   "loss=categorical_crossentropy", "hydra.sweeper.n_trials=3",
                   "hydra.sweeper.sampler.n_startup_trials=3", "trainer.epochs=5",
                   "sweep.objective=auto", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(maximize the objective)" in done.stdout + done.stderr
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("lr_search").experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    best = max(children, key=lambda c: c.data.metrics["val/accuracy"])
    assert parent.data.metrics["best_value"] == pytest.approx(best.data.metrics["val/accuracy"])

    wrong = run_cli("-m", "experiment=lr_search", "hydra.sweeper.direction=maximize",
                    "hydra.sweeper.n_trials=1", cwd=tmp_path)
    assert wrong.returncode == 2
    assert "error: hydra.sweeper.direction=maximize, but sweep.objective val/mse is to minimize" \
        in wrong.stderr


# ---------------------------------------------------------------- your own data loader
LOADER = '''
import numpy as np

def table(n_rows=50):
    x = np.arange(n_rows, dtype=float)
    return x, 2 * x + 1                       # (x, y): gradexp splits it

def own_splits():
    x = np.linspace(0, 1, 30)
    return (x[:20], 3 * x[:20]), (x[20:], 3 * x[20:])   # ((x, y), (x_val, y_val)): used as given

def labels():
    x = np.random.default_rng(0).normal(size=(40, 2))
    return x, (x[:, 0] > 0).astype(int) + 5   # class labels 5 and 6
'''


def test_your_own_loader_from_the_launch_folder_is_split_like_a_table(tmp_path):
    (tmp_path / "my_data.py").write_text(LOADER)
    cfg = compose_config("data=custom", "data._target_=my_data.table", "+data.kwargs.n_rows=60",
                         "data.standardize=false")
    data = load_data(cfg.data, tmp_path)
    assert (len(data.x), len(data.val)) == (48, 12)
    assert rows(np.hstack([data.x, data.y])) | rows(np.hstack([data.val.x, data.val.y])) == {
        (float(i), float(2 * i + 1)) for i in range(60)}
    own = load_data(compose_config("data=custom", "data._target_=my_data.own_splits",
                                   "data.standardize=false").data, tmp_path)
    assert (len(own.x), len(own.val)) == (20, 10)
    np.testing.assert_allclose(own.val.y[:, 0], 3 * own.val.x[:, 0])
    labelled = load_data(compose_config("data=custom", "data._target_=my_data.labels",
                                        "data.task=classification").data, tmp_path)
    assert labelled.y.shape[1] == 2 and set(labelled.y.sum(1)) == {1.0}  # one-hot of 5 and 6


def test_a_run_on_your_loader_is_labelled_by_it_and_learns(tmp_path, store, client):
    (tmp_path / "my_data.py").write_text(LOADER)
    result = run(store, "data=custom", "data._target_=my_data.table", tmp_path=tmp_path)
    assert client.get_run(result.run_id).data.params["data.name"] == "my_data.table"
    assert result.metrics["val/r2"] > 0.99  # y = 2x + 1 on standardized x: a line fits it


@pytest.mark.parametrize(("target", "says"), [
    ("my_data.nope", "data._target_=my_data.nope: module my_data has no attribute 'nope'"),
    ("nowhere.load", "data._target_=nowhere.load: no module named 'nowhere'"),
])
def test_a_loader_that_is_not_there_is_one_line_naming_it(tmp_path, target, says):
    (tmp_path / "my_data.py").write_text(LOADER)
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_data(compose_config("data=custom", f"data._target_={target}").data, tmp_path)


def test_evaluations_past_the_eager_ones_give_the_same_numbers_compiled():
    """The first EAGER_CALLS evaluations run eagerly (cheaper than a trace), later ones compiled:
    a metric's curve must not jump where the switch happens."""
    from gradexp.data import Split
    from gradexp.evaluation import EAGER_CALLS, Evaluator
    from gradexp.models import build_model

    cfg = compose_config("model=mlp")
    model = build_model(cfg.model, 3, 2)
    rng = np.random.default_rng(0)
    splits = {name: Split(rng.normal(size=(50, 3)).astype(np.float32),
                          rng.normal(size=(50, 2)).astype(np.float32)) for name in ("train", "val")}
    evaluator = Evaluator(model, ["mse", "mae", "r2"], splits)
    values = [evaluator(("train", "val")) for _ in range(EAGER_CALLS + 2)]
    assert evaluator._compiled.experimental_get_tracing_count() == 1  # the last two compiled
    for key in values[0]:
        np.testing.assert_allclose(values[-1][key], values[0][key], rtol=1e-6)


# ---------------------------------------------------------------- the Keras metrics
def _reference(name: str, y: np.ndarray, p: np.ndarray) -> float:
    """What gradexp's own formulas (float32 TensorFlow) gave before Keras' metrics replaced
    them: gradexp/evaluation.py as issue 19 found it."""
    import tensorflow as tf

    y, p = tf.constant(y), tf.constant(p)
    if name in ("mse", "rmse"):
        mse = tf.reduce_mean(tf.square(y - p))
        return float(tf.sqrt(mse) if name == "rmse" else mse)
    if name == "mae":
        return float(tf.reduce_mean(tf.abs(y - p)))
    if name == "r2":
        residual = tf.reduce_sum(tf.square(y - p), axis=0)
        total = tf.reduce_sum(tf.square(y - tf.reduce_mean(y, axis=0)), axis=0)
        return float(tf.reduce_mean(1.0 - residual / tf.maximum(total, 1e-12)))
    if name == "accuracy":
        hits = tf.equal(y > 0.5, p > 0.0) if y.shape[-1] == 1 else tf.equal(
            tf.argmax(y, axis=-1), tf.argmax(p, axis=-1))
        return float(tf.reduce_mean(tf.cast(hits, tf.float32)))
    if y.shape[-1] == 1:
        return float(tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=p)))
    return float(tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=p)))


@pytest.mark.parametrize(("outputs", "names"), [
    (1, ["mse", "mae", "rmse", "r2"]), (3, ["mse", "mae", "rmse", "r2"]),
    (1, ["accuracy", "crossentropy"]), (4, ["accuracy", "crossentropy"])])
def test_the_built_in_metrics_give_the_values_gradexp_computed_itself(outputs, names):
    """Keras' metrics (eager and inside a compiled evaluation) agree with the formulas they
    replaced to 1e-6 relative, on whole splits of two sizes."""
    import tensorflow as tf

    from gradexp.data import Split
    from gradexp.evaluation import Evaluator

    rng = np.random.default_rng(outputs)
    splits = {}
    for split, n in (("train", 200), ("val", 37)):
        p = rng.normal(size=(n, outputs)).astype(np.float32)
        if "accuracy" in names:
            labels = rng.integers(0, max(outputs, 2), n)
            y = (labels[:, None] if outputs == 1 else np.eye(outputs)[labels]).astype(np.float32)
        else:
            y = (p + rng.normal(scale=0.5, size=p.shape) + 2).astype(np.float32)
        splits[split] = Split(p, y)  # x: the model's outputs themselves (an identity model)
    evaluator = Evaluator(tf.identity, names, splits)
    compiled = tf.function(evaluator.tensors)
    for values in (evaluator(["train", "val"]),
                   {k: float(v) for k, v in compiled(("train", "val")).items()}):
        for split, (p, y) in ((s, (splits[s].x, splits[s].y)) for s in ("train", "val")):
            for name in names:
                assert values[f"{split}/{name}"] == pytest.approx(
                    _reference(name, y, p), rel=1e-6), (split, name)


def _sklearn_r2(y: np.ndarray, p: np.ndarray) -> float:
    """scikit-learn's r2_score (force_finite, uniform average) on the exact values: float64,
    since r2_score on float32 equal targets divides by its own rounding (-4.5e15 at 0.1 x 7).
    By hand where scikit-learn is not installed (it is no dependency of gradexp)."""
    y, p = np.asarray(y, np.float64), np.asarray(p, np.float64)
    try:
        from sklearn.metrics import r2_score
    except ImportError:
        residual = ((y - p) ** 2).sum(0)
        total = ((y - y.mean(0)) ** 2).sum(0)
        safe = np.where(total == 0, 1.0, total)
        return float(np.where(total == 0, residual == 0, 1 - residual / safe).mean())
    return float(r2_score(y, p))


_RNG = np.random.default_rng(7)
_Y3 = (_RNG.normal(size=(40, 3)) + 2).astype(np.float32)
_P3 = (_Y3 + _RNG.normal(scale=0.5, size=_Y3.shape)).astype(np.float32)
_TENTHS = np.full((7, 1), 0.1, np.float32)  # float32's mean of these is not 0.1: SS_tot ~4e-16


@pytest.mark.parametrize(("y", "p"), [
    pytest.param(_Y3[:, :1], _P3[:, :1], id="one output"),
    pytest.param(_Y3, _P3, id="three outputs"),
    pytest.param(_Y3[:2], _P3[:2], id="two rows"),
    pytest.param(np.full((5, 1), 3.0), np.full((5, 1), 3.0), id="equal targets, exact"),
    pytest.param(np.full((5, 1), 3.0), np.arange(5.0)[:, None], id="equal targets, off"),
    pytest.param(_TENTHS, _TENTHS, id="equal tenths, exact"),
    pytest.param(_TENTHS, _TENTHS + 0.5, id="equal tenths, off"),
    pytest.param([[1.0, 2.0], [1.0, 3.0]], [[1.0, 2.0], [1.0, 2.0]], id="one column equal"),
    pytest.param([[1.0, 2.0], [1.0, 3.0]], [[0.0, 2.0], [1.0, 3.0]], id="other column exact"),
])
def test_r2_is_scikit_learns_also_on_equal_targets(y, p):
    """r2 as scikit-learn's r2_score gives it, to 1e-6, eager and compiled: a column of equal
    targets scores 1.0 if predicted exactly, else 0.0 (it was -1e12 times the error)."""
    import tensorflow as tf

    from gradexp.data import Split
    from gradexp.evaluation import Evaluator

    y, p = np.asarray(y, np.float32), np.asarray(p, np.float32)
    evaluator = Evaluator(tf.identity, ["r2"], {"val": Split(p, y)})
    for value in (evaluator(["val"])["val/r2"],
                  float(tf.function(evaluator.tensors)(("val",))["val/r2"])):
        assert value == pytest.approx(_sklearn_r2(y, p), rel=1e-6, abs=1e-7)


@pytest.mark.parametrize(("prediction", "r2"), [(5.0, 1.0), (4.0, 0.0)])
def test_r2_of_one_row_is_that_of_equal_targets_not_nan(prediction, r2):
    """One row: r2_score says NaN ("not well-defined"); gradexp counts it as equal targets, so
    a sweep ranking by val/r2 gets a number."""
    import tensorflow as tf

    from gradexp.data import Split
    from gradexp.evaluation import Evaluator

    split = Split(np.array([[prediction]], np.float32), np.array([[5.0]], np.float32))
    assert Evaluator(tf.identity, ["r2"], {"val": split})(["val"]) == {"val/r2": r2}


def test_a_csv_with_one_validation_row_records_val_r2_0_not_minus_1e12(store, client, tmp_path):
    (tmp_path / "five.csv").write_text("x,y\n0,1\n1,3\n2,5\n3,7\n4,9\n")
    result = run(store, "data=csv", "data.path=five.csv", "data.target=y", "trainer.epochs=5",
                 tmp_path=tmp_path)
    assert client.get_run(result.run_id).data.tags["gradexp.data.rows.val"] == "1"
    assert history(client, result.run_id, "val/r2") == [(5, 0.0)]  # not exact after 5 epochs
    assert 0 < result.metrics["train/r2"] < 1  # four rows: an r2 as before


def test_the_built_in_metrics_directions_are_the_ones_keras_declares():
    import keras

    from gradexp.metrics import BUILTIN_METRICS, direction_of

    for name, (classes, direction) in BUILTIN_METRICS.items():
        for path in classes:
            declared = getattr(keras.metrics, path.rsplit(".", 1)[-1])()._direction
            assert {"up": "maximize", "down": "minimize"}[declared] == direction, path
        assert direction_of(f"val/{name}") == direction
    assert direction_of("val/auc") == "maximize" and direction_of("loss") == "minimize"
