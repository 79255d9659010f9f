"""The model a run logs serves (issue 18, item 6): `mlflow.pyfunc.load_model("runs:/ID/model")`
takes the raw features a person has (by column name where the data names them), gives class
probabilities and records the labels, holds the weights the run reports, is a LoggedModel linked
to its run beside the run's dataset inputs and source, and loads where the person's own layers'
module is not importable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import compose_config
from gradexp.data import load_data
from gradexp.experiment import run_experiment


@pytest.fixture
def served(store, monkeypatch):
    """mlflow.pyfunc.load_model with runs:/ URIs of the test's store. The environment variable
    (restored after the test), not mlflow.set_tracking_uri: that one stays set in the process."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    return lambda run_id: mlflow.pyfunc.load_model(f"runs:/{run_id}/model")


def run(store: str, *overrides: str, launch_dir: Path | None = None):
    cfg = compose_config(f"tracking.uri={store}", "gradcheck=off", *overrides)
    return run_experiment(cfg, quiet=True, launch_dir=launch_dir)


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
    result = run(store, *WINE, "model=mlp", "trainer.epochs=8")
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


def _val_index(n: int, val_fraction: float = 0.2, split_seed: int = 0) -> np.ndarray:
    """gradexp.data.tabular's validation rows (no test split)."""
    return np.random.default_rng(split_seed).permutation(n)[:max(1, round(val_fraction * n))]
