"""The model a run logs serves (issue 18, item 6): `mlflow.pyfunc.load_model("runs:/ID/model")`
takes the raw features a person has (by column name where the data names them), gives class
probabilities and records the labels, holds the weights the run reports, is a LoggedModel linked
to its run beside the run's dataset inputs and source, and loads where the person's own layers'
module is not importable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

import conftest
from conftest import compose_config
from gradexp.data import load_data


@pytest.fixture
def served(store, monkeypatch):
    """mlflow.pyfunc.load_model with runs:/ URIs of the test's store. The environment variable
    (restored after the test), not mlflow.set_tracking_uri: that one stays set in the process."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    return lambda run_id: mlflow.pyfunc.load_model(f"runs:/{run_id}/model")


def run(store: str, *overrides: str, launch_dir: Path | None = None):
    return conftest.run(store, "gradcheck=off", *overrides, launch_dir=launch_dir)


def raw_rows(*data_overrides: str, launch_dir: Path | None = None):
    """The run's own split of the data, not standardized: the rows as the person has them."""
    cfg = compose_config(*data_overrides, "data.standardize=false")
    return load_data(cfg.data, launch_dir)


def frame(x: np.ndarray, columns: list[str]):
    import pandas as pd

    return pd.DataFrame(x.astype(np.float64), columns=columns)


WINE = ("data=sklearn", "data.name=wine")


def test_wine_probabilities_from_raw_rows_reproduce_the_runs_val_accuracy(store, client,
                                                                          served):
    result = run(store, *WINE, "model=mlp", "loss=categorical_crossentropy", "trainer.epochs=8")
    data = raw_rows(*WINE)
    model = served(result.run_id)
    probabilities = model.predict(frame(data.val.x, data.features))
    info = model.metadata.metadata
    assert info["labels"] == [0, 1, 2]  # wine's own target values, in the columns' order
    assert list(probabilities.columns) == [0, 1, 2]
    p = probabilities.to_numpy()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)  # probabilities, not logits
    truth = data.val.y.argmax(axis=1)
    accuracy = np.mean(p.argmax(axis=1) == truth)
    crossentropy = -np.mean(np.log(p[np.arange(len(truth)), truth]))
    assert accuracy == pytest.approx(result.metrics["val/accuracy"], abs=1e-6)
    assert crossentropy == pytest.approx(result.metrics["val/crossentropy"], rel=1e-4)
    assert 0.4 < accuracy < 1.0  # 8 epochs: some rows wrong, so the match means something
    # The signature is the raw features' schema by scikit-learn's column names.
    assert model.metadata.signature.inputs.input_names() == data.features
    assert "od280/od315_of_diluted_wines" in data.features
    # The labels without loading the model: the MLmodel file's metadata.
    import mlflow.models

    assert mlflow.models.get_model_info(f"runs:/{result.run_id}/model").metadata["labels"] == \
        [0, 1, 2]
    # The Keras model itself: the standardization in front of the trained network.
    assert "standardize" in [layer.name for layer in model.get_raw_model().layers]


def write_houses(path: Path, n: int = 120) -> None:
    """A csv as a person has one: integer and decimal columns, the price in thousands."""
    rng = np.random.default_rng(3)
    area, rooms = rng.integers(40, 200, n), rng.integers(1, 6, n)
    age = rng.uniform(0, 50, n).round(1)
    price = 1.0 + 0.02 * area + 0.3 * rooms - 0.01 * age + rng.normal(0, 0.1, n)
    path.write_text("area,rooms,age,price\n" + "".join(
        f"{a},{r},{g},{p:.3f}\n" for a, r, g, p in zip(area, rooms, age, price)))


HOUSES = ("data=csv", "data.path=houses.csv", "data.target=price")


def test_a_csv_regression_restored_by_early_stopping_reproduces_its_val_mse(tmp_path, store,
                                                                            client, served):
    import pandas as pd

    write_houses(tmp_path / "houses.csv")
    result = run(store, *HOUSES, "model=mlp", "optimizer=adam", "optimizer.learning_rate=0.05",
                 "trainer.epochs=200", "eval.every=1", "trainer.early_stopping.enabled=true",
                 "trainer.early_stopping.patience=5", launch_dir=tmp_path)
    metrics = client.get_run(result.run_id).data.metrics
    assert metrics["best_epoch"] < metrics["stopped_epoch"]  # the best weights were put back
    rows = pd.read_csv(tmp_path / "houses.csv")  # integer columns, as pandas reads them
    data = raw_rows(*HOUSES, launch_dir=tmp_path)
    held_out = rows.drop(columns="price").iloc[_val_index(len(rows))]
    np.testing.assert_allclose(held_out.to_numpy(np.float32), data.val.x)
    predicted = served(result.run_id).predict(held_out).to_numpy()
    mse = np.mean((predicted - data.val.y) ** 2)
    assert mse == pytest.approx(result.metrics["val/mse"], rel=1e-4)


def test_columns_named_with_spaces_are_the_trimmed_names_in_the_config_and_the_model(
        tmp_path, store, served):
    # Before: the header was trimmed but data.target=" price" (as the file spells it) was not:
    # "no such column", though the logged model then named its inputs trimmed.
    import pandas as pd

    write_houses(tmp_path / "plain.csv")
    text = (tmp_path / "plain.csv").read_text()
    (tmp_path / "spaced.csv").write_text(" area, rooms ,age, price" + text[text.index("\n"):])
    result = run(store, "data=csv", "data.path=spaced.csv", 'data.target=" price"',
                 'data.features=[" area","rooms ",age]', "trainer.epochs=5",
                 launch_dir=tmp_path)
    model = served(result.run_id)
    inputs = model.metadata.signature.inputs
    assert inputs.input_names() == ["area", "rooms", "age"]
    assert [spec.type.name for spec in inputs.inputs] == ["long", "long", "double"]
    # The file as pandas reads it, its names trimmed: the model takes it, as it was trained.
    rows = pd.read_csv(tmp_path / "spaced.csv").rename(columns=str.strip)
    held_out = rows.iloc[_val_index(len(rows))]
    predicted = model.predict(held_out.drop(columns="price")).to_numpy()
    mse = np.mean((predicted[:, 0] - held_out["price"].to_numpy()) ** 2)
    assert mse == pytest.approx(result.metrics["val/mse"], rel=1e-4)


def _val_index(n: int, val_fraction: float = 0.2, split_seed: int = 0) -> np.ndarray:
    """gradexp.data.tabular's validation rows (no test split)."""
    return np.random.default_rng(split_seed).permutation(n)[:max(1, round(val_fraction * n))]


@pytest.mark.slow
def test_the_model_is_a_logged_model_of_the_run_beside_its_data_and_source(tmp_path, store,
                                                                           client):
    from mlflow.entities import LoggedModelStatus

    import gradexp.mlflow_store

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "start"], cwd=tmp_path, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                            text=True, check=True).stdout.strip()
    result = run(store, "trainer.epochs=3", launch_dir=tmp_path)
    stored = client.get_run(result.run_id)
    [model] = client.search_logged_models([result.experiment_id])
    assert (model.name, model.source_run_id, model.status) == ("model", result.run_id,
                                                               LoggedModelStatus.READY)
    # The run's outputs: what the runs table's "Logged models" column shows.
    assert [(o.model_id, o.step) for o in stored.outputs.model_outputs] == [(model.model_id, 3)]
    datasets = {i.tags[0].value: i.dataset for i in stored.inputs.dataset_inputs}
    assert set(datasets) == {"train", "val"}
    assert {d.name for d in datasets.values()} == {"linear"}
    assert json.loads(datasets["train"].profile)["features_shape"] == [100, 1]
    assert json.loads(datasets["val"].profile)["features_shape"] == [100, 1]
    assert datasets["train"].digest != datasets["val"].digest
    tags = stored.data.tags
    assert tags["mlflow.source.git.commit"] == commit
    assert tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.source.name"] == gradexp.source_tags.entry_point()


@pytest.mark.parametrize(("argv0", "shown"), [
    ("/venv/lib/python3.11/site-packages/gradexp/__main__.py", "gradexp"),  # python -m gradexp
    ("/venv/bin/gradexp", "gradexp"), ("train.py", "train.py")])
def test_the_source_names_the_entry_point(monkeypatch, argv0, shown):
    from gradexp.source_tags import entry_point

    monkeypatch.setattr(sys, "argv", [argv0])
    assert entry_point() == shown


LAYERS = '''
import keras


class Scale(keras.layers.Layer):  # not registered: found by the config's module and name
    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


@keras.saving.register_keras_serializable(package="serving_test")
class Shift(keras.layers.Layer):
    def build(self, input_shape):
        self.offset = self.add_weight(shape=(input_shape[-1],), initializer="zeros")

    def call(self, x):
        return x + self.offset


def build(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    hidden = Shift()(Scale(0.5)(keras.layers.Dense(8, activation="tanh")(inputs)))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(hidden))
'''

ELSEWHERE = '''
import importlib.util, json, sys

sys.modules["gradexp"] = None  # as where gradexp is not installed: importing it fails
assert importlib.util.find_spec("serving_layers") is None  # nor is the person's module
import mlflow
import numpy as np

model = mlflow.pyfunc.load_model(f"runs:/{sys.argv[1]}/model")
x = np.array(json.loads(sys.argv[2]), dtype=np.float32)
print(json.dumps(np.asarray(model.predict(x)).ravel().tolist()))
'''


@pytest.mark.slow
def test_a_model_with_your_layers_loads_where_their_module_is_not_importable(tmp_path, store):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "serving_layers.py").write_text(LAYERS)
    (elsewhere / "load.py").write_text(ELSEWHERE)
    result = run(store, "model=custom", "model._target_=serving_layers.build",
                 "optimizer=adam", "trainer.epochs=20", launch_dir=project)
    val = load_data(compose_config().data).val  # seed 004's line: not standardized
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "load.py", result.run_id, json.dumps(val.x.tolist())],
                          cwd=elsewhere, env={**env, "MLFLOW_TRACKING_URI": store},
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    predicted = np.array(json.loads(done.stdout.strip().splitlines()[-1]))
    mse = np.mean((predicted - val.y.ravel()) ** 2)
    assert mse == pytest.approx(result.metrics["val/mse"], rel=1e-4)


def test_a_classifications_labels_are_the_values_in_your_target_column(tmp_path, store, served):
    import pandas as pd

    rng = np.random.default_rng(5)
    x = rng.normal(size=(90, 2))
    grade = np.array([3, 5, 8])[(x[:, 0] > -0.4).astype(int) + (x[:, 0] > 0.4)]
    pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "grade": grade}).to_csv(tmp_path / "grades.csv",
                                                                      index=False)
    keys = ("data=csv", "data.path=grades.csv", "data.target=grade",
            "data.task=classification")
    result = run(store, *keys, "model=mlp", "optimizer=adam", "trainer.epochs=5",
                 launch_dir=tmp_path)
    model = served(result.run_id)
    assert model.metadata.metadata["labels"] == [3, 5, 8]  # yours, not column indices
    data = raw_rows(*keys, launch_dir=tmp_path)
    probabilities = model.predict(frame(data.val.x, ["a", "b"]))
    assert list(probabilities.columns) == [3, 5, 8]
    predicted = probabilities.idxmax(axis=1).to_numpy()  # a label per row, as the README says
    truth = np.array([3, 5, 8])[data.val.y.argmax(axis=1)]
    assert np.mean(predicted == truth) == pytest.approx(result.metrics["val/accuracy"], abs=1e-6)


TAGS = '''
import numpy as np


def load():
    """Two independent yes/no tags per row (several labels a row: both, one or none)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2)).astype("float32")
    return x, np.stack([x[:, 0] > 0, x[:, 1] > 0], axis=1).astype("float32")
'''


def test_a_binary_crossentropy_over_several_columns_serves_a_probability_per_column(
        tmp_path, store, served):
    """Binary crossentropy trains each column as its own sigmoid; the logged model put a softmax
    across them, so a row with both tags got probabilities summing to 1 (0.13 and 0.87 for a
    row whose tags are both yes)."""
    (tmp_path / "tags.py").write_text(TAGS)
    keys = ("data=custom", "data._target_=tags.load", "data.task=classification")
    result = run(store, *keys, "model=mlp", "loss=binary_crossentropy", "optimizer=adam",
                 "optimizer.learning_rate=0.05", "trainer.epochs=150", launch_dir=tmp_path)
    rows = np.array([[2.0, 2.0], [-2.0, -2.0], [2.0, -2.0], [-2.0, 2.0]], np.float32)
    model = served(result.run_id)
    probabilities = np.asarray(model.predict(rows))
    assert ((probabilities > 0.5) == np.array([[1, 1], [0, 0], [1, 0], [0, 1]], bool)).all()
    # Its accuracy is the share of labels right, as Keras' fit reports for a binary
    # crossentropy; it was the categorical one (argmax against the first yes), 0.80 here.
    data = raw_rows(*keys, launch_dir=tmp_path)
    right = (np.asarray(model.predict(data.val.x)) > 0.5) == (data.val.y > 0.5)
    assert result.metrics["val/accuracy"] == pytest.approx(np.mean(right), abs=1e-6)
    assert result.metrics["val/accuracy"] > 0.95
    # Several labels a row: no confusion matrix, whose argmax would call a row the first yes
    files = {f.path for f in MlflowClient(store).list_artifacts(result.run_id, "plots")}
    assert files == {"plots/loss_curve.png"}


def test_a_yes_no_label_under_a_binary_crossentropy_is_one_sigmoid_column(tmp_path, store,
                                                                        served):
    """A label column of two classes with loss=binary_crossentropy, as a Keras user trains it:
    its two one-hot columns were two labels of their own, val/accuracy the share of both
    columns right (0.9875 where 0.975 of the rows were) and the logged model two sigmoids
    whose rows did not sum to 1."""
    import pandas as pd

    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 2))
    label = np.where(x[:, 0] + 0.3 * rng.normal(size=200) > 0, "yes", "no")
    pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "label": label}).to_csv(tmp_path / "yes_no.csv",
                                                                      index=False)
    keys = ("data=csv", "data.path=yes_no.csv", "data.target=label",
            "data.task=classification")
    result = run(store, *keys, "model=mlp", "loss=binary_crossentropy", "optimizer=adam",
                 "trainer.epochs=20", launch_dir=tmp_path)
    model = served(result.run_id)
    data = raw_rows(*keys, launch_dir=tmp_path)
    probabilities = model.predict(frame(data.val.x, ["a", "b"]))
    assert list(probabilities.columns) == ["yes"]  # the probability of the second label
    truth = data.val.y.argmax(axis=1) == 1  # one-hot, as any other loss reads the label
    right = (probabilities["yes"].to_numpy() > 0.5) == truth
    assert result.metrics["val/accuracy"] == pytest.approx(np.mean(right), abs=1e-6)
    files = {f.path for f in MlflowClient(store).list_artifacts(result.run_id, "plots")}
    assert "plots/confusion_matrix_val.png" in files  # one class a row: its matrix


def test_timestamps_far_from_zero_are_served_as_the_run_trained_on_them(tmp_path, store,
                                                                        served):
    """Unix timestamps (~1.7e9, spread 1000 s): the run standardizes them in float64, but the
    logged model cast the raw rows to float32 first (128 s apart there) and standardized in
    float32: val/mse 0.00013, the model's on the same raw rows 0.22."""
    import pandas as pd

    rng = np.random.default_rng(5)
    t = (1.7e9 + rng.uniform(0, 1000, 200).round()).astype(np.int64)
    y = (t - 1.7e9) / 100 + rng.normal(size=200) * 0.01
    pd.DataFrame({"t": t, "y": y}).to_csv(tmp_path / "ts.csv", index=False)
    result = run(store, "data=csv", "data.path=ts.csv", "data.target=y", "model=linear",
                 "trainer.epochs=30", launch_dir=tmp_path)
    assert result.metrics["val/mse"] < 0.01
    model = served(result.run_id)
    rows = pd.read_csv(tmp_path / "ts.csv").iloc[_val_index(200)]  # t: int64, as written
    predicted = model.predict(rows[["t"]]).to_numpy()[:, 0]
    mse = np.mean((predicted - rows["y"].to_numpy()) ** 2)
    assert mse == pytest.approx(result.metrics["val/mse"], rel=1e-3)
    # The Keras model itself takes float64 rows (called, not Keras' predict: see docs/mlflow.md)
    network = model.get_raw_model()
    assert network.inputs[0].dtype == "float64"
    called = np.asarray(network(rows[["t"]].to_numpy(np.float64)))[:, 0]
    np.testing.assert_allclose(called, predicted, rtol=1e-6)


TYPED = '''
import numpy as np
import pandas as pd


def load():
    """Columns as a person's DataFrame has them: int64, nullable Int64, bool, float."""
    rng = np.random.default_rng(3)
    x1, k = rng.normal(size=150), rng.integers(1, 6, 150)
    rows = pd.DataFrame({"x1": x1, "k": k, "m": pd.array(k * 2, dtype="Int64"),
                         "flag": x1 > 0})
    return rows, 2 * x1 + k + rng.normal(size=150) * 0.1
'''


def test_a_loaders_integer_and_bool_columns_are_typed_so_in_the_signature(tmp_path, store,
                                                                          served):
    """Before: the signature said double for every column of a loader's DataFrame, and MLflow
    refused the loader's own rows: "Can not safely convert int64 to float64" (a csv's bool
    column likewise)."""
    import pandas as pd

    (tmp_path / "typed.py").write_text(TYPED)
    result = run(store, "data=custom", "data._target_=typed.load", "trainer.epochs=5",
                 launch_dir=tmp_path)
    model = served(result.run_id)
    inputs = model.metadata.signature.inputs
    assert [(spec.name, spec.type.name) for spec in inputs.inputs] == [
        ("x1", "double"), ("k", "long"), ("m", "long"), ("flag", "boolean")]
    sys.path.insert(0, str(tmp_path))
    try:
        rows, _ = __import__("typed").load()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("typed", None)
    assert model.predict(rows).shape == (150, 1)
    # A csv's true/false column, read by pandas as bool
    rows = rows.assign(y=np.arange(150.0))
    rows.drop(columns="m").to_csv(tmp_path / "flags.csv", index=False)
    result = run(store, "data=csv", "data.path=flags.csv", "data.target=y", "trainer.epochs=2",
                 launch_dir=tmp_path)
    model = served(result.run_id)
    assert [spec.type.name for spec in model.metadata.signature.inputs.inputs] == [
        "double", "long", "boolean"]
    read = pd.read_csv(tmp_path / "flags.csv")
    assert read["flag"].dtype == bool
    assert model.predict(read.drop(columns="y")).shape == (150, 1)


SHAPED = '''
import keras
import numpy as np


def line():
    """One feature given as a 1-D x, as people write a line's data."""
    x = np.random.default_rng(0).uniform(-1, 1, 80).astype("float32")
    return x, 3 * x + 4


def images():
    """Images of 4x4 pixels, one channel, as Keras' datasets give them."""
    x = np.random.default_rng(1).normal(size=(90, 4, 4, 1)).astype("float32")
    return x, x.mean(axis=(1, 2, 3)) > 0


def cnn(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    h = keras.layers.Conv2D(2, 3, activation="relu")(keras.layers.Reshape((4, 4, 1))(inputs))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(keras.layers.Flatten()(h)))
'''


@pytest.mark.heavy  # ~4 s
def test_rows_a_loader_gave_as_a_1d_x_or_as_images_are_what_the_model_takes(tmp_path, store,
                                                                            served):
    """Before: the signature took (-1, n_features) only, so the logged model refused a loader's
    own 1-D x ("Shape of input (2,) does not match expected shape (-1, 1)") and its images."""
    (tmp_path / "shaped.py").write_text(SHAPED)
    sys.path.insert(0, str(tmp_path))
    try:
        shaped = __import__("shaped")
        result = run(store, "data=custom", "data._target_=shaped.line", "trainer.epochs=3",
                     launch_dir=tmp_path)
        model = served(result.run_id)
        x, _ = shaped.line()
        assert model.metadata.signature.inputs.inputs[0].shape == (-1,)
        predicted = model.predict(x[:5])
        network = model.get_raw_model()
        np.testing.assert_allclose(predicted, np.asarray(network(x[:5, None])), rtol=1e-6)

        result = run(store, "data=custom", "data._target_=shaped.images",
                     "data.task=classification", "model=custom", "model._target_=shaped.cnn",
                     "loss=categorical_crossentropy", "trainer.epochs=3", launch_dir=tmp_path)
        model = served(result.run_id)
        x, _ = shaped.images()
        assert model.metadata.signature.inputs.inputs[0].shape == (-1, 4, 4, 1)
        probabilities = model.predict(x[:6])
        assert probabilities.shape == (6, 2)
        np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("shaped", None)


# A person's builders as they are often written: compiled inside (as Keras tutorials do) with a
# loss of their own, a layer whose get_config leaves out an __init__ argument, a Lambda layer.
OWN_BUILDERS = '''
import keras
import tensorflow as tf


def own_mse(y_true, y_pred):
    return tf.reduce_mean(tf.square(y_true - y_pred), axis=-1)


def compiled(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(n_outputs)(hidden))
    model.compile(optimizer="adam", loss=own_mse)
    return model


class Scale(keras.layers.Layer):
    def __init__(self, units):  # no **kwargs: Keras cannot rebuild it from its config
        super().__init__()
        self.units = units

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], self.units), name="w")

    def call(self, x):
        return x @ self.w

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def unloadable(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(Scale(4)(inputs)))


def named(n_features, n_outputs):  # named layers: Keras' own names count up per model
    inputs = keras.Input((n_features,), name="x")
    outputs = keras.layers.Dense(n_outputs, name="out")(Scale(4)(inputs))
    return keras.Model(inputs, outputs, name="net")


def with_lambda(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    doubled = keras.layers.Lambda(lambda t: t * 2.0)(inputs)
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(doubled))


def lambda_of_ops(n_features, n_outputs):  # Keras cannot infer its output shape as it loads
    inputs = keras.Input((n_features,))
    bent = keras.layers.Lambda(lambda t: 2.0 * t + keras.ops.sin(t))(inputs)
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(bent))
'''


@pytest.mark.parametrize("builder", ["compiled", "with_lambda"])
@pytest.mark.heavy  # ~3 s
def test_a_model_compiled_with_your_loss_or_with_a_lambda_is_checked_in_float64_and_loads(
        tmp_path, store, client, served, builder):
    # Compiled with a loss of the person's: its compile config named own_mse, which neither the
    # float64 twin's clone nor the logged model's load could find (checked in float32 with a
    # warning; logged FINISHED, and unloadable). A Lambda: refused by Keras' safe mode in both.
    (tmp_path / "own_builders.py").write_text(OWN_BUILDERS)
    result = conftest.run(store, "model=custom", f"model._target_=own_builders.{builder}",
                          "trainer.epochs=2", "gradcheck.at_end=false", launch_dir=tmp_path)
    assert conftest.read_report(client, result.run_id, 0)["dtype"] == "float64"
    data = load_data(compose_config().data)  # seed 004's line: no standardization
    predicted = served(result.run_id).predict(data.val.x)
    assert np.mean((np.ravel(predicted) - data.val.y[:, 0]) ** 2) == pytest.approx(
        result.metrics["val/mse"], rel=1e-4)


@pytest.mark.heavy  # ~3 s
def test_a_model_that_would_not_load_back_is_said_and_not_logged(tmp_path, store, client,
                                                                 capsys):
    # Keras saved it, then could not load it (Scale.__init__ takes no `name`): the run was
    # FINISHED, its model unloadable, nothing said.
    (tmp_path / "own_builders.py").write_text(OWN_BUILDERS)
    result = conftest.run(store, "model=custom", "model._target_=own_builders.unloadable",
                          "trainer.epochs=2", "gradcheck=off", launch_dir=tmp_path, quiet=False)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["gradexp.model_logged"] == "false"
    said = [line for line in capsys.readouterr().out.splitlines() if "not logged" in line]
    assert len(said) == 1 and "would not load back" in said[0] \
        and "Scale.__init__() got an unexpected keyword argument" in said[0], said
    assert not client.search_logged_models([run.info.experiment_id])  # none left FAILED
    # Keras' bold escapes reached the line and the tag as "[1m" (QA)
    conftest.run(store, "model=custom", "model._target_=own_builders.lambda_of_ops",
                 "trainer.epochs=2", "gradcheck=off", launch_dir=tmp_path, quiet=False)
    said = [line for line in capsys.readouterr().out.splitlines() if "not logged" in line]
    assert len(said) == 1 and "infer the shape of the Lambda's output" in said[0], said
    assert "\x1b" not in said[0] and "[1m" not in said[0]


@pytest.mark.heavy  # ~8 s
def test_a_network_is_loaded_back_once_per_architecture_and_its_own_code(
        tmp_path, store, client, monkeypatch):
    # A sweep's later job of an architecture that loaded is not loaded again (~20 ms a job),
    # but the next launch checks its own: the same config from another module of the same name
    # (another launch folder's own_builders.py) cannot load here, and must be said.
    import gradexp
    from gradexp import serving

    loads = []
    load_network = serving.load_network
    monkeypatch.setattr(serving, "load_network",
                        lambda folder: loads.append(folder) or load_network(folder))
    fixed, broken = tmp_path / "fixed", tmp_path / "broken"
    fixed.mkdir(), broken.mkdir()
    # Both save Scale's config as {"name": "scale", "units": 4, ...}; Keras' load passes that
    # name to Scale.__init__, which only the fixed one takes
    (fixed / "own_builders.py").write_text(OWN_BUILDERS.replace(
        "def __init__(self, units):", "def __init__(self, units, **kwargs):").replace(
        "super().__init__()", 'super().__init__(**{"name": "scale", **kwargs})'))
    (broken / "own_builders.py").write_text(OWN_BUILDERS.replace(
        "super().__init__()", 'super().__init__(name="scale")'))
    model = (f"tracking.uri={store}", "model=custom", "model._target_=own_builders.named",
             "trainer.epochs=1", "gradcheck=off")
    jobs = gradexp.sweep(*model, "optimizer.learning_rate=0.01,0.02", launch_dir=fixed)
    for job in jobs:  # logged: the tag is there only to say it was not
        assert "gradexp.model_logged" not in client.get_run(job.run_id).data.tags
    assert len(loads) == 1  # the second job's network: the same architecture, not loaded
    result = gradexp.run(*model, launch_dir=broken)
    assert client.get_run(result.run_id).data.tags["gradexp.model_logged"] == "false"
    assert len(loads) == 2

PROBABILITIES = '''
import keras


def sigmoid_out(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    return keras.Model(inputs, keras.layers.Dense(n_outputs, activation="sigmoid")(hidden))


@keras.saving.register_keras_serializable(package="probability_test")
class OwnSoftmax(keras.layers.Layer):
    """Probabilities Keras' own softmax did not make: no logits behind them to recover."""

    def call(self, x):
        e = keras.ops.exp(x - keras.ops.max(x, axis=-1, keepdims=True))
        return e / keras.ops.sum(e, axis=-1, keepdims=True)


def softmax_out(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    return keras.Model(inputs, OwnSoftmax()(keras.layers.Dense(n_outputs)(hidden)))


def keras_softmax_out(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    return keras.Model(inputs, keras.layers.Dense(n_outputs, activation="softmax")(hidden))
'''


def write_classes(path: Path, labels: list[str], n: int = 240) -> None:
    """Rows whose label is told by the features: a class per cluster centre."""
    import pandas as pd

    rng = np.random.default_rng(7)
    which = rng.integers(0, len(labels), n)
    x = rng.normal(size=(n, 2)) * 0.6 + np.stack([np.cos(2 * which), np.sin(2 * which)], 1) * 2
    pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "label": np.array(labels)[which]}).to_csv(
        path, index=False)


@pytest.mark.parametrize(("loss", "ending"), [
    (("loss._target_=keras.losses.BinaryFocalCrossentropy",), "sigmoid_out"),  # from_logits:
    (("loss=binary_crossentropy", "loss.from_logits=false"), "sigmoid_out"),  # False by default
    (("loss=categorical_crossentropy", "loss.from_logits=false"), "softmax_out"),
    # a loss with no from_logits: the model's own Keras softmax says it (review)
    (("loss._target_=keras.losses.KLDivergence",), "keras_softmax_out"),
], ids=["focal_by_its_default", "binary_told", "categorical_told", "kl_by_the_models_softmax"])
def test_a_model_ending_in_probabilities_is_measured_and_served_as_probabilities(
        tmp_path, store, served, loss, ending):
    """QA: a model ending in a sigmoid, its loss reading probabilities, was evaluated as if it
    gave logits (accuracy thresholded at 0: every row 'yes', val/accuracy 0.417 where the model
    scored 0.933; crossentropy softmaxed again), and where the loss's from_logits was its class's
    default (not in the config) the logged model took a second sigmoid: probabilities 0.51-0.73."""
    labels = ["cat", "dog", "emu"] if "softmax" in ending else ["no", "yes"]
    write_classes(tmp_path / "classes.csv", labels)
    (tmp_path / "probability_models.py").write_text(PROBABILITIES)
    keys = ("data=csv", "data.path=classes.csv", "data.target=label",
            "data.task=classification")
    result = run(store, *keys, "model=custom", f"model._target_=probability_models.{ending}",
                 *loss, "optimizer=adam", "optimizer.learning_rate=0.05", "trainer.epochs=40",
                 launch_dir=tmp_path)
    data = raw_rows(*keys, *loss[:1], launch_dir=tmp_path)
    probabilities = served(result.run_id).predict(frame(data.val.x, ["a", "b"])).to_numpy()
    if probabilities.shape[1] == 1:  # a yes/no label: the probability of "yes"
        probabilities = np.hstack([1 - probabilities, probabilities])
    truth = data.val.y.argmax(axis=1)  # one-hot, as the rows are loaded without the loss
    accuracy = np.mean(probabilities.argmax(axis=1) == truth)
    log_loss = -np.mean(np.log(np.clip(probabilities[np.arange(len(truth)), truth], 1e-7, 1)))
    assert accuracy > 0.9  # the classes are apart: what the run's model learned
    assert probabilities.max() > 0.95  # squashed twice, none came above 0.73
    assert result.metrics["val/accuracy"] == pytest.approx(accuracy, abs=1e-6)
    if "focal" not in loss[0]:  # the focal loss is not a crossentropy of the probabilities
        assert result.metrics["val/crossentropy"] == pytest.approx(log_loss, rel=1e-3)


@pytest.mark.parametrize("labels", [["no", "yes"], ["cat", "dog", "emu"]], ids=["yes_no", "three"])
def test_classes_regressed_with_mse_are_scored_and_served_as_scores(tmp_path, store, served,
                                                                    labels):
    """QA: mse on one-hot classes (a warning says it trains) regresses each output toward its
    0 or 1; the logged model put a softmax on those scores (a perfect fit could not pass 0.58)
    and called them probabilities, and a yes/no score was counted 'yes' above 0, not 0.5."""
    from mlflow.models import get_model_info

    write_classes(tmp_path / "classes.csv", labels)
    keys = ("data=csv", "data.path=classes.csv", "data.target=label",
            "data.task=classification")
    result = run(store, *keys, "model=mlp", "loss=mse", "optimizer=adam",
                 "optimizer.learning_rate=0.05", "trainer.epochs=40", launch_dir=tmp_path)
    data = raw_rows(*keys, launch_dir=tmp_path)
    model = served(result.run_id)
    scores = model.predict(frame(data.val.x, ["a", "b"])).to_numpy()
    assert "Softmax" not in {type(layer).__name__ for layer in model.get_raw_model().layers}
    truth = data.val.y.argmax(axis=1)
    predicted = scores.argmax(axis=1) if scores.shape[1] > 1 else (scores[:, 0] > 0.5)
    assert np.mean(predicted == truth) > 0.9
    assert result.metrics["val/accuracy"] == pytest.approx(np.mean(predicted == truth),
                                                           abs=1e-6)
    assert get_model_info(f"runs:/{result.run_id}/model").metadata["outputs"] == "scores"


def test_a_column_whose_spread_is_below_kerass_epsilon_is_served_as_the_run_trained_on_it(
        tmp_path, store, served):
    """QA: a capacitance in farads (~5e-9, std ~1e-9): the run divides by its std, the logged
    model's Normalization by max(std, keras.config.epsilon() = 1e-7), a hundredth of the
    column: val/mse 0.036, the model's on the same raw rows 8.27. A column constant in the file
    (0.1) has a std of ~1e-16, not 0, in float64, and is served as the run trained on it too."""
    import pandas as pd

    rng = np.random.default_rng(11)
    n = 200
    a, b, c = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    cap = 5e-9 + 1e-9 * c
    y = a + 0.5 * b + 2.0 * c + rng.normal(size=n) * 0.05
    pd.DataFrame({"a": a, "cap_farad": cap, "b": b, "unit": 0.1, "y": y}).to_csv(
        tmp_path / "tiny.csv", index=False)
    result = run(store, "data=csv", "data.path=tiny.csv", "data.target=y", "model=mlp",
                 "optimizer=adam", "optimizer.learning_rate=0.02", "trainer.epochs=60",
                 launch_dir=tmp_path)
    assert result.metrics["val/mse"] < 0.5  # it learned the capacitance's part
    model = served(result.run_id)
    rows = pd.read_csv(tmp_path / "tiny.csv").iloc[_val_index(n)]
    predicted = model.predict(rows.drop(columns="y")).to_numpy()[:, 0]
    mse = np.mean((predicted - rows["y"].to_numpy()) ** 2)
    assert mse == pytest.approx(result.metrics["val/mse"], rel=1e-3)


def test_a_std_too_small_for_the_served_model_is_refused_in_one_line_naming_the_column():
    """Below ~1e-154, 1 / std² (the inverted Normalization's variance) is no float64."""
    from gradexp.data import Dataset, Standardization
    from gradexp.export import export

    x = np.zeros((4, 2), dtype=np.float32)
    data = Dataset("tiny", "regression", x, x[:, :1], features=["a", "cap_farad"],
                   standardization=Standardization(np.zeros(2), np.array([1.0, 1e-160])))
    with pytest.raises(ValueError, match=r"^feature 'cap_farad': its standardization's std "
                                         r"1e-160 is too small to divide by \(below "
                                         r"~1e-154\); rescale or drop the column$"):
        export(None, data)


TIMESTAMPS = '''
import numpy as np


def load():
    """Unix timestamps a few thousand seconds apart, as numpy gives them: float64, unnamed."""
    rng = np.random.default_rng(0)
    t = 1.7e9 + rng.uniform(0, 3000, size=(300, 1))
    y = (t - 1.7e9) / 1000.0 + 0.01 * rng.standard_normal((300, 1))
    return (t[:240], y[:240]), (t[240:], y[240:])
'''


def test_a_loaders_unnamed_float64_rows_are_what_the_logged_model_takes(tmp_path, store,
                                                                       served):
    """QA: the signature took one float32 tensor whatever the loader gave: its own float64 rows
    were refused ("dtype of input float64 does not match expected dtype float32"), and cast to
    float32 a timestamp lost the digits the model's float64 standardization keeps (predictions
    22x the run's val/mse). The signature takes the dtype the loader gave."""
    (tmp_path / "timestamps.py").write_text(TIMESTAMPS)
    result = run(store, "data=custom", "data._target_=timestamps.load", "model=linear",
                 "trainer.epochs=100", launch_dir=tmp_path)
    model = served(result.run_id)
    assert model.metadata.get_input_schema().numpy_types()[0] == np.float64
    namespace: dict = {}
    exec(TIMESTAMPS, namespace)
    _, (x_val, y_val) = namespace["load"]()
    predicted = np.asarray(model.predict(x_val))  # the loader's own rows, as they are
    mse = float(np.mean((predicted - y_val) ** 2))
    assert mse == pytest.approx(result.metrics["val/mse"], rel=1e-3)


@pytest.mark.parametrize(("given", "dtype"), [
    (np.zeros((3, 2)), "float64"), (np.zeros((3, 2), np.float32), "float32"),
    (np.zeros((3, 2), np.int64), "int64"), ([[1, 2], [3, 4]], "int64"),
    ([[1.5, 2], [3, 4]], "float64"), (np.array([["a"]]), None)])
def test_unnamed_features_keep_the_dtype_the_loader_gave(given, dtype):
    from gradexp.user_data import _raw_dtype

    assert _raw_dtype(given) == dtype


NUMBERED_COLUMNS = '''
import numpy as np
import pandas as pd


def load():
    """pd.DataFrame(array): columns numbered 0, 1, not named."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 2))
    return pd.DataFrame(x), x @ np.array([2.0, -1.0])
'''


@pytest.mark.heavy  # ~5 s
def test_a_loaders_frame_of_numbered_columns_is_what_the_logged_model_takes(tmp_path, store,
                                                                           served):
    """QA: the signature named the columns '0', '1', and predict refused the loader's own frame
    ("Model is missing inputs ['0', '1']"). Numbered columns are positions: taken unnamed."""
    (tmp_path / "numbered.py").write_text(NUMBERED_COLUMNS)
    result = run(store, "data=custom", "data._target_=numbered.load", "trainer.epochs=5",
                 launch_dir=tmp_path)
    namespace: dict = {}
    exec(NUMBERED_COLUMNS, namespace)
    x, _ = namespace["load"]()
    model = served(result.run_id)
    predicted = np.asarray(model.predict(x.head(3)))  # the loader's own frame
    assert predicted.shape == (3, 1)
    np.testing.assert_allclose(predicted, model.predict(x.head(3).to_numpy()))
