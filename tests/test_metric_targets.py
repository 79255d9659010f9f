"""Keras metrics given by `_target_` in eval.metrics (QA): ranked by the direction Keras declares
for them (a sweep's best run, early stopping's best epoch), computed on the probabilities the
logged model gives, and refused in one line before the run when they give one number a class."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import conftest
from conftest import compose_config
from gradexp.data import load_data
from gradexp.metrics import direction_of, objective
from gradexp.schema import ConfigError

IRIS = ("data=sklearn", "data.name=iris", "model=mlp", "loss=categorical_crossentropy",
        "optimizer=adam", "gradcheck=off")
F1_MACRO = "{_target_:keras.metrics.F1Score,average:macro}"


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def no_runs(client) -> bool:
    return not [run for experiment in client.search_experiments()
                for run in client.search_runs([experiment.experiment_id])]


# ---------------------------------------------------------------- direction
@pytest.mark.heavy  # ~4 s: loads Keras, builds each of its metric classes
def test_the_keras_classes_directions_gradexp_knows_are_the_ones_keras_declares():
    import inspect

    import keras

    from gradexp.metrics import DECLARED, KERAS_DIRECTIONS

    arguments = {"IoU": {"num_classes": 2, "target_class_ids": [0]},
                 "OneHotIoU": {"num_classes": 2, "target_class_ids": [0]},
                 "MeanIoU": {"num_classes": 2}, "OneHotMeanIoU": {"num_classes": 2},
                 "SensitivityAtSpecificity": {"specificity": 0.5},
                 "SpecificityAtSensitivity": {"sensitivity": 0.5},
                 "PrecisionAtRecall": {"recall": 0.5}, "RecallAtPrecision": {"precision": 0.5}}
    declared = {}
    for name, cls in vars(keras.metrics).items():
        if inspect.isclass(cls) and issubclass(cls, keras.metrics.Metric) \
                and name not in ("Metric", "MeanMetricWrapper"):
            direction = getattr(cls(**arguments.get(name, {})), "_direction", None)
            if direction is not None:
                declared[name.lower()] = DECLARED[direction]
    assert KERAS_DIRECTIONS == declared
    assert declared["f1score"] == "maximize"  # the QA case, which came out minimize


@pytest.mark.parametrize("metric", ["F1Score", "FBetaScore", "R2Score", "CosineSimilarity",
                                    "SensitivityAtSpecificity"])
def test_a_keras_class_objective_is_maximized_as_keras_declares_it(metric):
    # QA: these came out minimize (their names end in none of accuracy, r2, auc...): a sweep
    # over them tagged its worst run best, and told Optuna to minimize
    name, spec = metric.lower(), f"{{_target_:keras.metrics.{metric}}}"
    assert objective(compose_config("data=blobs", f"eval.metrics=[{spec}]",
                                    f"sweep.objective=val/{name}")) == (f"val/{name}", "maximize")


def test_a_keras_class_keeps_its_direction_under_a_name_of_yours_and_nothing_is_imported(
        monkeypatch):
    # `${gradexp.direction:}` (Optuna's direction) and `--cfg job` stay fast: Keras is not
    # imported to know it (an import now would fail)
    monkeypatch.setitem(sys.modules, "keras", None)
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    cfg = compose_config("data=blobs", "eval.metrics=[accuracy,"
                         "{_target_:keras.metrics.F1Score,average:macro,name:macro},"
                         "{_target_:keras.metrics.MeanSquaredError,name:mse_accuracy}]",
                         "sweep.objective=val/macro")
    assert objective(cfg) == ("val/macro", "maximize")
    assert direction_of("val/mse_accuracy", cfg) == "minimize"  # a Keras error class's, not
    assert direction_of("val/mse_accuracy") == "maximize"  # what its name alone would say
    assert direction_of("val/f1score") == "maximize"  # by name: Keras' class of that name


@pytest.mark.heavy  # ~6 s each
@pytest.mark.parametrize(("spec", "name"), [
    (F1_MACRO, "f1score"),
    ("{_target_:keras.metrics.F1Score,average:macro,name:macro}", "macro"),  # a name of yours
])
def test_early_stopping_on_a_keras_f1_keeps_the_epoch_of_the_highest_f1(store, client, spec,
                                                                        name):
    # QA: it took F1 as smaller-is-better, stopped while F1 rose and put back the lowest epoch
    result = conftest.run(store, *IRIS, "optimizer.learning_rate=0.003", "trainer.epochs=30",
                          "eval.every=1", f"eval.metrics=[accuracy,{spec}]",
                          "trainer.early_stopping.enabled=true",
                          f"trainer.early_stopping.monitor=val/{name}",
                          "trainer.early_stopping.patience=3", f"sweep.objective=val/{name}")
    run = client.get_run(result.run_id)
    assert run.data.tags["gradexp.direction"] == "maximize"  # what a sweep ranks its runs by
    f1 = dict(history(client, result.run_id, f"val/{name}"))
    best = max(f1.values())
    assert f1[int(run.data.metrics["best_epoch"])] == best
    assert best > min(f1.values()) + 0.1  # F1 rose: keeping the lowest would be far off
    assert result.metrics[f"val/{name}"] == pytest.approx(best, abs=1e-6)  # its weights put back


MY_METRICS = '''
import keras

def fscore():
    return keras.metrics.F1Score(average="macro")  # declares larger is better
'''


def test_a_function_returning_a_keras_metric_against_its_direction_is_refused(store, client,
                                                                              tmp_path):
    # its direction read from its name (fscore: minimize) would rank the worst run best
    (tmp_path / "my_metrics.py").write_text(MY_METRICS)
    with pytest.raises(ConfigError) as refused:
        conftest.run(store, *IRIS, "trainer.epochs=2", "sweep.objective=val/fscore",
                     "eval.metrics=[{_target_:my_metrics.fscore}]", launch_dir=tmp_path)
    assert str(refused.value) == (
        "sweep.objective=val/fscore: my_metrics.fscore (eval.metrics) declares larger is "
        "better, but its name says minimize: set sweep.direction=maximize")
    assert no_runs(client)


# ---------------------------------------------------------------- probabilities, not logits
@pytest.fixture
def served(store, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    return lambda run_id: mlflow.pyfunc.load_model(f"runs:/{run_id}/model")


@pytest.mark.heavy  # ~8 s
def test_keras_metrics_and_functions_read_the_logged_models_probabilities(store, served):
    # QA: AUC, Precision, Recall were given gradexp's logits (val/auc 0.92 logged, 0.95 from
    # the logged model's probabilities)
    import keras
    import pandas as pd

    data_overrides = ("data=sklearn", "data.name=breast_cancer")
    result = conftest.run(
        store, *data_overrides, "model=mlp", "loss=binary_crossentropy", "optimizer=adam",
        "optimizer.learning_rate=0.003", "trainer.epochs=3", "gradcheck=off",
        "eval.metrics=[accuracy,crossentropy,{_target_:keras.metrics.AUC,name:auc},"
        "{_target_:keras.metrics.Precision,name:precision},"
        "{_target_:keras.metrics.Recall,name:recall},"
        "{_target_:keras.metrics.binary_crossentropy,_partial_:true,name:bce}]")
    data = load_data(compose_config(*data_overrides, "data.standardize=false").data,
                     independent_outputs=True)  # the run's one column: P(label 1)
    rows = pd.DataFrame(data.val.x.astype(np.float64), columns=data.features)
    p = np.asarray(served(result.run_id).predict(rows), np.float32)
    y = data.val.y
    assert ((p > 0) & (p < 1)).all()
    auc = keras.metrics.AUC()
    auc.update_state(y, p)
    yes = p > 0.5
    logged = result.metrics
    assert logged["val/auc"] == pytest.approx(float(auc.result()), abs=1e-6)
    assert logged["val/precision"] == pytest.approx((yes & (y == 1)).sum() / yes.sum(), abs=1e-6)
    assert logged["val/recall"] == pytest.approx((yes & (y == 1)).sum() / (y == 1).sum(),
                                                 abs=1e-6)
    # a function by `_target_` too: Keras' crossentropy of probabilities, the built-in's value
    assert logged["val/bce"] == pytest.approx(logged["val/crossentropy"], rel=1e-4)
    assert logged["val/accuracy"] == pytest.approx(np.mean(yes == (y == 1)), abs=1e-6)


# ---------------------------------------------------------------- one number a metric
def test_a_per_class_metric_is_refused_in_one_line_before_the_run(store, client):
    # QA: F1Score's default average=None (one F1 a class): the run trained and ended FAILED in
    # a traceback (trainer.py: float(value[s]), "only 0-dimensional arrays")
    with pytest.raises(ConfigError) as refused:
        conftest.run(store, *IRIS, "trainer.epochs=2",
                     "eval.metrics=[accuracy,{_target_:keras.metrics.F1Score}]")
    assert str(refused.value) == (
        "eval.metrics: keras.metrics.F1Score gives 3 numbers (shape (3,): one a class or "
        "output), but each metric is logged as one number: have it average them, e.g. "
        "{_target_: keras.metrics.F1Score, average: macro}")
    assert no_runs(client)


ROBUST = '''
import tensorflow as tf

def pseudo_huber(y_true, y_pred):
    return tf.sqrt(1.0 + tf.square(y_pred - y_true)) - 1.0
'''


def test_a_regression_with_a_loss_of_yours_gives_keras_metrics_its_values(store, client,
                                                                          tmp_path):
    """A loss gradexp does not know reads like logits to it: the regression's values must not
    be squashed into probabilities for a `_target_` metric (review of the fix above)."""
    (tmp_path / "robust.py").write_text(ROBUST)
    result = conftest.run(store, "loss._target_=robust.pseudo_huber", "trainer.epochs=20",
                          "gradcheck=off", "tracking.log_model=false",
                          "eval.metrics=[mae,{_target_:keras.metrics.MeanAbsoluteError,"
                          "name:kmae}]", "sweep.objective=val/mae", launch_dir=tmp_path)
    metrics = client.get_run(result.run_id).data.metrics
    assert metrics["val/kmae"] == pytest.approx(metrics["val/mae"], rel=1e-5)
    assert metrics["val/mae"] > 1.0  # far from what a sigmoid in (0, 1) would give
