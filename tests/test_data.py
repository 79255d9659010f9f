"""Data as people bring it (issue 21, item 1): a loader's tf.data.Dataset (batched or not, with its
own validation set or split here), class labels of any kind (a csv's 'species' column, a loader's
text labels) mapped to columns and recorded, and a run that records what happened to its data
(rows per split, standardization, who batched). Real TensorFlow, real Hydra compose, a real
sqlite MLflow store."""

from __future__ import annotations

import gzip
import json
import re
import sys
import traceback

import numpy as np
import pytest

import gradexp
from conftest import compose_config
from gradexp.csv_files import read_csv
from gradexp.data import load_data
from gradexp.loop import run_experiment
from gradexp.schema import ConfigError

LOADERS = '''
import numpy as np
import tensorflow as tf

def _rows(n, seed=0):
    x = np.random.default_rng(seed).uniform(-1, 1, size=(n, 2)).astype("float32")
    return x, (3 * x[:, :1] - x[:, 1:] + 1).astype("float32")

def rows(n=60):                          # unbatched (x, y) elements: split here like a table
    return tf.data.Dataset.from_tensor_slices(_rows(n))

def batched(n=60, batch=16):             # the loader batched it: its batches train
    return tf.data.Dataset.from_tensor_slices(_rows(n)).batch(batch)

def with_val(batch=0):                   # its own validation set, used as given
    train, val = (tf.data.Dataset.from_tensor_slices(_rows(n, seed)) for n, seed in ((50, 0),
                                                                                     (20, 1)))
    return (train.batch(batch), val.batch(7)) if batch else (train, val)

def named(n=40):                         # dict elements: the features' names are the keys
    x, y = _rows(n)
    return tf.data.Dataset.from_tensor_slices(({"area": x[:, 0], "rooms": x[:, 1]}, y)).batch(8)

def species(n=90):                       # text labels in a tf.string tensor
    x = np.random.default_rng(2).normal(size=(n, 2)).astype("float32")
    names = np.array(["setosa", "versicolor", "virginica"])[(x[:, 0] > -0.4).astype(int)
                                                            + (x[:, 0] > 0.4)]
    return tf.data.Dataset.from_tensor_slices((x, names))

def forever():                           # infinite, batched: data.steps_per_epoch says an epoch
    return tf.data.Dataset.from_tensor_slices(_rows(40)).shuffle(40, seed=0).repeat().batch(8)

def forever_rows():
    return tf.data.Dataset.from_tensor_slices(_rows(40)).repeat()

def big(n=1500):                         # larger than a small data.materialize_mb: streamed
    train = tf.data.Dataset.from_tensor_slices(_rows(n))
    return train, tf.data.Dataset.from_tensor_slices(_rows(20, seed=1))

def text_labels():                       # numpy arrays, labels as Python strings
    x = np.random.default_rng(3).normal(size=(60, 2))
    return x, np.where(x[:, 1] > 0, "up", "down")

def bool_labels():                       # numpy bools, as a comparison gives them
    x = np.random.default_rng(3).normal(size=(60, 2))
    return x, x[:, 1] > 0

def own_splits():
    x = np.linspace(0, 10, 30)
    return (x[:20], 3 * x[:20]), (x[20:], 3 * x[20:])


def image_list():                        # a list of images, one a row (review)
    rng = np.random.default_rng(0)
    return [rng.normal(size=(4, 4)) for _ in range(30)], rng.normal(size=30)
'''


@pytest.fixture
def launch(tmp_path):
    (tmp_path / "my_loaders.py").write_text(LOADERS)
    return tmp_path


def test_a_list_of_images_one_a_row_is_rows_not_several_inputs(launch):
    # review: the refusal of Keras' several-inputs form ([a, b]) took a list of 30 images for
    # 30 inputs; a list as long as y is rows
    data = loaded(launch, "image_list")
    assert data.x.shape[1] == 16 and data.raw_shape == (4, 4)


def loaded(launch, target: str, *overrides: str):
    cfg = compose_config("data=custom", f"data._target_=my_loaders.{target}", *overrides)
    return load_data(cfg.data, launch)


def run(store: str, launch, *overrides: str, quiet: bool = True):
    cfg = compose_config(f"tracking.uri={store}", "gradcheck=off", *overrides)
    return run_experiment(cfg, quiet=quiet, launch_dir=launch)


def tags(client, run_id: str) -> dict[str, str]:
    return client.get_run(run_id).data.tags


def artifact_json(client, run_id: str, path: str):
    with open(client.download_artifacts(run_id, path), encoding="utf-8") as handle:
        return json.load(handle)


# ---------------------------------------------------------------- tf.data loaders
def test_an_unbatched_tf_data_set_is_split_like_a_table_and_batched_by_the_trainer(launch):
    data = loaded(launch, "rows", "data.standardize=false")
    assert (len(data.x), len(data.val)) == (48, 12) and data.batch_size is None
    everything = np.vstack([np.hstack([data.x, data.y]), np.hstack([data.val.x, data.val.y])])
    x = np.random.default_rng(0).uniform(-1, 1, size=(60, 2)).astype("float32")
    assert {tuple(r) for r in everything} == {tuple(r) for r in np.hstack(
        [x, 3 * x[:, :1] - x[:, 1:] + 1])}


def test_a_batched_tf_data_set_keeps_its_batch_size_and_the_run_says_so(launch, store, client,
                                                                        capsys):
    data = loaded(launch, "batched")
    assert data.batch_size == 16 and len(data.x) + len(data.val) == 60
    result = run(store, launch, "data=custom", "data._target_=my_loaders.batched",
                 "trainer.batch_size=5", "trainer.epochs=40", "optimizer.learning_rate=0.05",
                 quiet=False)
    recorded = tags(client, result.run_id)
    assert recorded["gradexp.data.batched_by"] == "loader"
    assert recorded["gradexp.data.batch_size"] == "16"
    assert "batches of 16 rows train; trainer.batch_size=5 is not used" in capsys.readouterr().err
    assert result.metrics["val/r2"] > 0.9  # it trained on them


@pytest.mark.parametrize("batch", [0, 10])
def test_a_tf_data_set_with_its_own_validation_set_is_used_as_given(launch, store, client, batch):
    data = loaded(launch, "with_val", f"+data.kwargs.batch={batch}", "data.standardize=false")
    assert (len(data.x), len(data.val), data.test) == (50, 20, None)
    np.testing.assert_allclose(data.val.y[:, 0], 3 * data.val.x[:, 0] - data.val.x[:, 1] + 1,
                               rtol=1e-5)
    assert data.batch_size == (batch or None)
    result = run(store, launch, "data=custom", "data._target_=my_loaders.with_val",
                 f"+data.kwargs.batch={batch}", "trainer.epochs=60",
                 "optimizer.learning_rate=0.1")
    recorded = tags(client, result.run_id)
    assert (recorded["gradexp.data.rows.train"], recorded["gradexp.data.rows.val"],
            recorded["gradexp.data.rows.test"]) == ("50", "20", "0")
    assert recorded["gradexp.data.batch_size"] == str(batch or 50)
    assert result.metrics["val/r2"] > 0.9


@pytest.mark.heavy  # ~2.4 s
def test_named_features_of_a_dict_are_the_columns_of_the_logged_model(launch, store, client,
                                                                      monkeypatch):
    import mlflow
    import pandas as pd

    data = loaded(launch, "named")
    assert data.features == ["area", "rooms"] and data.batch_size == 8
    result = run(store, launch, "data=custom", "data._target_=my_loaders.named",
                 "trainer.epochs=30")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    model = mlflow.pyfunc.load_model(f"runs:/{result.run_id}/model")
    assert model.metadata.get_input_schema().input_names() == ["area", "rooms"]
    assert model.predict(pd.DataFrame({"rooms": [0.0], "area": [0.5]})).shape == (1, 1)


STREAM = ("data.materialize_mb=0.01",)  # 10 kB: 1,500 rows of 2 features and 1 target stream


def test_a_tf_data_set_larger_than_materialize_mb_is_streamed_standardized(launch):
    data = loaded(launch, "big", *STREAM)
    assert data.stream is not None and data.stream_rows == 1500 and len(data.x) == 1024
    np.testing.assert_allclose(data.x, loaded(launch, "big", *STREAM).x)  # the first rows
    streamed = np.concatenate([x for x, _ in data.stream.batch(500).as_numpy_iterator()])
    assert streamed.shape == (1500, 2)
    np.testing.assert_allclose(streamed.mean(0), 0, atol=1e-5)  # standardized on all rows
    np.testing.assert_allclose(streamed.std(0), 1, atol=1e-4)
    assert len(data.val) == 20  # its own validation set, in memory
    np.testing.assert_allclose(data.x, streamed[:1024], rtol=1e-5)


@pytest.mark.heavy  # ~4 s
def test_a_streamed_run_trains_checks_its_sample_and_records_it(launch, store, client, capsys):
    cfg = compose_config(f"tracking.uri={store}", "data=custom", "data._target_=my_loaders.big",
                         *STREAM, "trainer.batch_size=100", "trainer.epochs=20",
                         "optimizer.learning_rate=0.05", "gradcheck.every_n_epochs=10")
    result = run_experiment(cfg, quiet=False, launch_dir=launch)
    recorded = tags(client, result.run_id)
    assert (recorded["gradexp.data.streamed"], recorded["gradexp.data.rows.train"],
            recorded["gradexp.data.sample_rows"], recorded["gradexp.data.batch_size"]) == (
        "true", "1500", "1024", "100")
    assert "is streamed (1500 rows an epoch); gradient checks and train/ metrics use its " \
           "first 1024 rows" in capsys.readouterr().err
    assert result.gradcheck_passed is True and result.epochs == 20
    assert result.metrics["val/r2"] > 0.95
    losses = [m.value for m in client.get_metric_history(result.run_id, "loss")]
    assert len(losses) == 20 and losses[-1] < losses[0] / 5


def test_an_infinite_tf_data_set_streams_steps_per_epoch_batches(launch, store, client):
    with pytest.raises(ConfigError, match=re.escape(
            "data._target_=my_loaders.forever: its training tf.data.Dataset is infinite "
            "(.repeat()): set data.steps_per_epoch")):
        loaded(launch, "forever")
    with pytest.raises(ConfigError, match=re.escape(
            "its training tf.data.Dataset is infinite and not batched: batch it (.batch(n))")):
        loaded(launch, "forever_rows", "data.steps_per_epoch=5")
    result = run(store, launch, "data=custom", "data._target_=my_loaders.forever",
                 "data.steps_per_epoch=5", "trainer.epochs=30", "optimizer.learning_rate=0.1")
    recorded = tags(client, result.run_id)
    assert recorded["gradexp.data.batch_size"] == "8" and recorded["gradexp.data.rows.val"] == "0"
    assert result.final_loss < 0.05  # y = 3a - b + 1, exactly: a line fits it


def test_a_stream_without_batches_needs_a_batch_size_and_a_large_val_set_is_refused(launch,
                                                                                     store):
    cfg = compose_config(f"tracking.uri={store}", "data=custom", "data._target_=my_loaders.big",
                         *STREAM)
    with pytest.raises(ConfigError, match="trainer.batch_size=null: a streamed tf.data.Dataset"):
        run_experiment(cfg, quiet=True, launch_dir=launch)
    with pytest.raises(ConfigError, match=re.escape(
            "data._target_=my_loaders.big: its validation tf.data.Dataset holds more than "
            "data.materialize_mb=0.0001 MB; a validation set must fit in memory")):
        loaded(launch, "big", "data.materialize_mb=0.0001")


@pytest.mark.heavy  # ~3 s
def test_a_streamed_classification_maps_text_labels_as_in_memory(launch, store, client):
    in_memory = loaded(launch, "species", "data.task=classification", "+data.kwargs.n=1200")
    data = loaded(launch, "species", "data.task=classification", "+data.kwargs.n=1200",
                  *STREAM)
    assert data.stream is not None and data.labels == in_memory.labels == [
        "setosa", "versicolor", "virginica"]
    x, y = next(data.stream.batch(1200).as_numpy_iterator())
    raw = np.random.default_rng(2).normal(size=(1200, 2)).astype("float32")
    truth = (raw[:, 0] > -0.4).astype(int) + (raw[:, 0] > 0.4)
    np.testing.assert_array_equal(y.argmax(1), truth)
    np.testing.assert_array_equal(y.sum(1), 1)
    result = run(store, launch, "data=custom", "data._target_=my_loaders.species",
                 "data.task=classification", "+data.kwargs.n=1200", *STREAM,
                 "trainer.batch_size=200", "model=mlp", "loss=categorical_crossentropy",
                 "optimizer=adam", "optimizer.learning_rate=0.05", "trainer.epochs=10")
    assert result.metrics["train/accuracy"] > 0.8  # on the recorded sample of 1024 rows
    assert artifact_json(client, result.run_id, "data/labels.json")["labels"] == data.labels


# ---------------------------------------------------------------- labels of any kind
@pytest.mark.heavy  # ~2.1 s
def test_text_labels_from_a_tf_data_loader_are_sorted_into_columns_and_recorded(launch, store,
                                                                                 client):
    data = loaded(launch, "species", "data.task=classification")
    assert data.labels == ["setosa", "versicolor", "virginica"]
    assert data.y.shape[1] == 3 and set(data.y.sum(axis=1)) == {1.0}
    result = run(store, launch, "data=custom", "data._target_=my_loaders.species",
                 "data.task=classification", "model=mlp", "loss=categorical_crossentropy",
                 "optimizer=adam", "optimizer.learning_rate=0.05", "trainer.epochs=40")
    assert result.metrics["val/accuracy"] > 0.7
    assert artifact_json(client, result.run_id, "data/labels.json") == {
        "labels": ["setosa", "versicolor", "virginica"],
        "index": {"setosa": 0, "versicolor": 1, "virginica": 2}}
    assert tags(client, result.run_id)["gradexp.data.classes"] == "3"


def test_true_false_labels_from_numpy_keep_their_names(launch):
    # QA: numpy bools were labelled [0, 1], the same labels from a csv or tf.data [False, True]
    assert loaded(launch, "bool_labels", "data.task=classification").labels == [False, True]


def test_text_labels_from_numpy_arrays_train(launch):
    data = loaded(launch, "text_labels", "data.task=classification")
    assert data.labels == ["down", "up"]
    raw = np.random.default_rng(3).normal(size=(60, 2))
    standardized_up = data.x[:, 1] * data.standardization.scale[1] + data.standardization.mean[1]
    assert set(np.round(standardized_up, 4)) <= set(np.round(raw[:, 1], 4))
    up = data.y[:, 1] == 1
    assert (standardized_up[up] > 0).all() and (standardized_up[~up] <= 0).all()


SPECIES = "a,b,species\n" + "".join(
    f"{a:.3f},{b:.3f},{name}\n" for a, b, name in zip(
        np.random.default_rng(4).normal(size=120), np.random.default_rng(5).normal(size=120),
        np.array(["virginica", "setosa", "versicolor"] * 40)))


def test_a_csv_of_species_names_trains_and_its_logged_model_predicts_the_names(tmp_path, store,
                                                                               client,
                                                                               monkeypatch):
    import mlflow
    import pandas as pd

    rng = np.random.default_rng(6)
    x = rng.normal(size=(150, 2))
    names = np.array(["setosa", "versicolor", "virginica"])[(x[:, 0] > -0.4).astype(int)
                                                            + (x[:, 0] > 0.4)]
    pd.DataFrame({"petal": x[:, 0], "sepal": x[:, 1], "species": names}).to_csv(
        tmp_path / "iris.csv", index=False)
    keys = ("data=csv", "data.path=iris.csv", "data.target=species", "data.task=classification")
    result = run(store, tmp_path, *keys, "model=mlp", "loss=categorical_crossentropy",
                 "optimizer=adam", "optimizer.learning_rate=0.05", "trainer.epochs=60")
    assert result.metrics["val/accuracy"] > 0.8
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    model = mlflow.pyfunc.load_model(f"runs:/{result.run_id}/model")
    assert model.metadata.metadata["labels"] == ["setosa", "versicolor", "virginica"]
    rows = pd.DataFrame({"petal": [-2.0, 0.0, 2.0], "sepal": [0.0, 0.0, 0.0]})
    predicted = model.predict(rows).idxmax(axis=1).tolist()  # the documented way to labels
    assert predicted == ["setosa", "versicolor", "virginica"]
    assert artifact_json(client, result.run_id, "data/labels.json")["index"]["virginica"] == 2


def test_a_text_target_of_a_regression_or_a_text_feature_is_one_line(tmp_path):
    (tmp_path / "iris.csv").write_text(SPECIES)
    with pytest.raises(ConfigError, match=re.escape(
            "column 'species' line 2 is not a number: 'virginica' (class labels? "
            "data.task=classification)")):
        read_csv(str(tmp_path / "iris.csv"), "species")
    (tmp_path / "ids.csv").write_text("id,x,y\nr1,1,2\nr2,2,4\nr3,3,6\n")
    with pytest.raises(ConfigError, match=re.escape(
            "column 'id' line 2 is not a number: 'r1' (features must be numbers: choose them "
            "with data.features=[...])")):
        read_csv(str(tmp_path / "ids.csv"), "y")
    table = read_csv(str(tmp_path / "ids.csv"), "y", features=["x"])
    assert table.features == ["x"] and table.x[:, 0].tolist() == [1, 2, 3]
    cfg = compose_config("data=csv", f"data.path={tmp_path / 'ids.csv'}", "data.target=y",
                         "data.features=[x]", "data.val_fraction=0")
    assert load_data(cfg.data).features == ["x"]
    with pytest.raises(ConfigError, match="data.features: no such column 'z'"):
        read_csv(str(tmp_path / "ids.csv"), "y", features=["x", "z"])


# ---------------------------------------------------------------- a loader's data mistakes
# numpy only, so a refusal is answered without TensorFlow, as a person's loader would be.
BAD_LOADERS = """
import numpy as np
from gradexp.data import Dataset, Split

def _x(n=20):
    return np.random.default_rng(0).normal(size=(n, 2))

def short_y():                            # 20 rows of features, 10 targets
    return _x(), np.zeros(10)

def nan_x():
    x = _x()
    x[3, 1], x[5, 0] = np.nan, np.inf
    return x, x.sum(axis=1)

def nan_y():
    y = _x().sum(axis=1)
    y[2] = np.nan
    return _x(), y

def own_split_short():                    # its own validation split, one target short
    return (_x(), np.zeros(20)), (_x(5), np.zeros(4))

def own_split_nan():
    x_val = _x(5)
    x_val[0, 0] = np.nan
    return (_x(), np.zeros(20)), (x_val, np.zeros(5))

def dataset_nan():                        # a gradexp Dataset, its test split with an inf
    test_x = _x(5).astype("float32")
    test_x[4, 1] = -np.inf
    return Dataset("mine", "regression", _x().astype("float32"), np.zeros((20, 1), "float32"),
                   test=Split(test_x, np.zeros((5, 1), "float32")))

def text_column():                        # a DataFrame with a column of text
    import pandas as pd
    return pd.DataFrame({"area": _x()[:, 0], "city": ["a", "b"] * 10}), np.zeros(20)

def text_labels():                        # class labels, task left at regression
    return _x(), np.array(["yes", "no"] * 10)

def own_split_other_columns():            # x_val has a column x has not
    import pandas as pd
    x = pd.DataFrame(_x(), columns=["x1", "k"])
    return (x, np.zeros(20)), (x.assign(z=0.0).iloc[:5], np.zeros(5))

def own_split_wider():                    # arrays: 3 columns of x_val against 2
    return (_x(), np.zeros(20)), (np.ones((5, 3)), np.zeros(5))

def one_class():                          # every label 'a'
    return _x(), np.array(["a"] * 20)

def pandas_na():                          # an Int64 column with pandas' NA
    import pandas as pd
    x = pd.DataFrame(_x(), columns=["x1", "k"])
    x["k"] = pd.array([1, 2, None, 4] * 5, dtype="Int64")
    return x, np.zeros(20)

def thousands():                          # prices written with thousands separators
    return _x(), np.array(["8,208.8", "1,020.5"] * 10)

def no_columns():                         # select_dtypes('number') of a frame of text
    return np.zeros((20, 0)), np.zeros(20)

def no_rows():                            # a filter that kept nothing
    import pandas as pd
    x = pd.DataFrame(_x(), columns=["x1", "k"])
    return x[x.x1 > 100], np.zeros(0)

def named_dict():                         # Keras' named inputs, as arrays
    x = _x()
    return {"a": x[:, 0], "b": x[:, 1]}, np.zeros(20)

def inputs_list():                        # Keras' multi-input form: a list of arrays
    x = _x()
    return [x[:, :1], x], np.zeros(20)

def inputs_list_1d():                     # ... of one feature each
    x = _x()
    return [x[:, 0], x[:, 1]], np.zeros(20)

def repeated_names():                     # two columns named a
    import pandas as pd
    return pd.DataFrame(_x(), columns=["a", "a"]), np.zeros(20)

def label_kinds():                        # text labels, numbers in its own validation split
    return (_x(), np.array(["1", "2"] * 10)), (_x(4), np.array([1, 2, 1, 2]))

def weighted_stream():                    # Keras' (x, y, sample_weight) elements
    import tensorflow as tf
    return tf.data.Dataset.from_tensor_slices((_x(), np.zeros(20), np.ones(20)))

def split_four():                         # return train_test_split(x, y) as it comes
    x = _x()
    return x[:15], x[15:], np.zeros(15), np.zeros(5)

def buggy():                              # a bug in the loader's own body
    return _x(), len(5)
"""

LOADER_MISTAKES = [
    ("short_y", "x has 20 rows but y has 10; each row of x needs its target in the same row of "
     "y"),
    ("nan_x", "x[3, 1] is nan (NaN or infinite values cannot be trained on; 2 such values in "
     "the features x)"),
    ("nan_y", "y[2] is nan (NaN or infinite values cannot be trained on; 1 such value in the "
     "targets y)"),
    ("own_split_short", "x_val has 5 rows but y_val has 4; each row of x_val needs its target in "
     "the same row of y_val"),
    ("own_split_nan", "x_val[0, 0] is nan (NaN or infinite values cannot be trained on; 1 such "
     "value in the validation features x_val)"),
    ("dataset_nan", "test.x[4, 1] is -inf (NaN or infinite values cannot be trained on; 1 such "
     "value in the test features test.x)"),
    # Before: neither named the column nor said what to do (a csv's line does both)
    ("text_column", "the features must be numbers (column 'city': 'a'); leave text columns "
     "out, or encode them as numbers, in your loader"),
    ("text_labels", "the targets must be numbers ('yes'); class labels? "
     "data.task=classification"),
    # Before: silently trained on no column of x_val's z / a numpy broadcast traceback
    ("own_split_other_columns", "x_val's columns (x1, k, z) are not x's (x1, k); x_val needs "
     "the same columns, matched by name"),
    ("own_split_wider", "x_val has 3 columns but x has 2; x_val needs x's features, column for "
     "column"),
    # Before: "column 'k': '<NA>'" and the advice for text columns
    ("pandas_na", "the features must be numbers (column 'k': a missing value: gradexp does not "
     "impute: fill or drop those rows)"),
    # Before: "class labels? data.task=classification", which trained a price as classes
    ("thousands", "the targets must be numbers ('8,208.8') (a number with thousands "
     "separators: write it without them, e.g. pandas.read_csv(path, thousands=',')"
     ".to_csv(path, index=False))"),
    # Before: trained to val/accuracy 1 and exit 0
    ("one_class", "only one class ('a') in 20 rows; a classification needs 2 or more",
     "data.task=classification"),
    # QA (2026-12-05) before: a run opened, then Keras aborted the process (the run RUNNING)
    ("no_columns", "x has 20 rows but no feature columns (a select_dtypes('number') of text "
     "columns?); give at least one column of numbers"),
    # ... a ValueError traceback (cannot reshape array of size 0)
    ("no_rows", "the features have no rows (a filter that kept nothing?); give at least one "
     "row"),
    # ... 3.9 KB of the dict's repr, and advice for text columns
    ("named_dict", "the features x are a dict (a, b); give a pandas DataFrame, one column per "
     "name (pd.DataFrame(x)), or a tf.data.Dataset of (dict, y)"),
    # QA (2026-12-06) before: a numpy broadcasting traceback, exit 1; "x has 2 rows but y has 20"
    ("inputs_list", "the features x are a list of 2 arrays (shapes (20, 1), (20, 2): Keras' "
     "form for a model of several inputs); gradexp feeds a model one array of rows x features: "
     "give np.column_stack(x) (a DataFrame to keep names) and slice it inside the model"),
    ("inputs_list_1d", "the features x are a list of 2 arrays (shapes (20,), (20,): Keras' "
     "form for a model of several inputs); gradexp feeds a model one array of rows x features: "
     "give np.column_stack(x) (a DataFrame to keep names) and slice it inside the model"),
    # ... trained; the logged model's predict could not take the frame back
    ("repeated_names", "x has 2 columns named 'a'; give each column its own name"),
    # ... four classes '1', '1.0', '2', '2.0' and a val/accuracy on classes never trained
    ("label_kinds", "the class labels are numbers in one split and text in another; give "
     "labels of one kind (all text or all numbers) in every split", "data.task=classification"),
    # ... "gives elements of tuple", not saying sample weights are not taken
    # ... "returned a tuple", its order not said
    ("split_four", "returned 4 items (train_test_split's x_train, x_val, y_train, y_val?); "
     "return ((x_train, y_train), (x_val, y_val))"),
    ("weighted_stream", "its training tf.data.Dataset gives (x, y, sample_weight) elements; "
     "gradexp weighs every row alike: map them to (x, y) (dataset.map(lambda x, y, w: (x, y)))"),
]


@pytest.mark.parametrize(("loader", "said", "task"),
                         [(*m, "data.task=regression")[:3] for m in LOADER_MISTAKES],
                         ids=[m[0] for m in LOADER_MISTAKES])
def test_a_loaders_row_counts_and_nan_are_one_line_before_any_run(tmp_path, loader, said, task):
    # Before: rows 20 vs 10 was an IndexError traceback from the split (exit 1); a NaN trained
    # and ended "diverged ... the learning rate is probably too high", or a run finished with
    # NaN metrics (a NaN in y or in a validation split).
    (tmp_path / "bad_loaders.py").write_text(BAD_LOADERS)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # none made yet: a refusal makes none
    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp.run(f"tracking.uri={store}", "data=custom",
                    f"data._target_=bad_loaders.{loader}", task, launch_dir=tmp_path)
    assert str(refused.value) == f"data._target_=bad_loaders.{loader}: {said}"
    assert refused.value.exit_code == 2
    assert not (tmp_path / "mlflow.db").exists()


def test_a_type_error_in_the_loaders_own_body_keeps_its_traceback(tmp_path):
    # QA: len(5) inside the loader was "cannot be called with data.kwargs={} (object of type
    # 'int' has no len())", its file and line lost; only a call its signature refuses is that
    (tmp_path / "bad_loaders.py").write_text(BAD_LOADERS)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(TypeError, match="has no len") as raised:
        gradexp.run(f"tracking.uri={store}", "data=custom", "data._target_=bad_loaders.buggy",
                    launch_dir=tmp_path)
    assert any(frame.name == "buggy" for frame in traceback.extract_tb(raised.tb))


TYPED_LOADERS = """
import numpy as np
import pandas as pd

def _houses(n=20):
    rng = np.random.default_rng(0)
    x = pd.DataFrame({"area": rng.uniform(50, 150, n), "kids": rng.integers(0, 4, n),
                      "rooms": rng.integers(1, 6, n)})
    return x, (x["area"] * 2).to_numpy()

def kids_category():                      # integers as a pandas category
    x, y = _houses()
    x["kids"] = x["kids"].astype("category")
    return x, y

def rooms_text():                         # numbers written as strings
    x, y = _houses()
    x["rooms"] = x["rooms"].astype(str)
    return x, y

def rooms_string_dtype():
    x, y = _houses()
    x["rooms"] = x["rooms"].astype(str).astype("string")
    return x, y

def rooms_objects():                      # Python ints in an object column
    x, y = _houses()
    x["rooms"] = x["rooms"].astype(object)
    return x, y

def float_objects():                      # floats in an object column: the signature takes them
    x, y = _houses()
    x["area"] = x["area"].astype(object)
    return x, y

def text_array():                         # numpy: the whole table as strings
    x, y = _houses()
    return x.to_numpy().astype(str), y

def own_split_category():                 # x_val's column a category, x's not
    x, y = _houses()
    x_val = x.iloc[15:].copy()
    x_val["kids"] = x_val["kids"].astype("category")
    return (x.iloc[:15], y[:15]), (x_val, y[15:])

def kids_int():                           # the advice followed: trains
    x, y = kids_category()
    x["kids"] = x["kids"].astype(int)
    return x, y

def _labels(n=20):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 2))
    return x, np.where(x[:, 0] > 0, "up", "down").astype(object)

def none_label():                         # one text label missing as None
    x, y = _labels()
    y[3] = None
    return x, y

def nan_label():
    x, y = _labels()
    y[3] = np.nan
    return x, y

def na_label():                           # pandas' string column with NA
    x, y = _labels()
    y = pd.Series(y, dtype="string")
    y[3] = pd.NA
    return x, y

def none_label_list():                    # a list of labels, two missing
    x, y = _labels()
    y = y.tolist()
    y[5] = y[7] = None
    return x, y

def none_label_own_split():
    x, y = _labels()
    y[16] = None
    return (x[:15], y[:15]), (x[15:], y[15:])

def mixed_labels():                       # text and a number: labels of two kinds
    x, y = _labels()
    y[3] = 7
    return x, y
"""

NOT_TYPED_AS_NUMBERS = [
    ("kids_category", "column 'kids' is a pandas category: give numbers "
     "(df['kids'].astype(int)) or one column per category (pd.get_dummies(df, "
     "columns=['kids']))"),
    ("rooms_text", "column 'rooms' holds numbers as text ('5'): give numbers "
     "(pd.to_numeric(df['rooms']))"),
    ("rooms_string_dtype", "column 'rooms' holds numbers as text ('5'): give numbers "
     "(pd.to_numeric(df['rooms']))"),
    ("rooms_objects", "column 'rooms' holds numbers as Python objects (dtype object): give "
     "numbers (pd.to_numeric(df['rooms']))"),
    ("text_array", "the features x hold numbers as text: give numbers (x.astype(float))"),

    ("own_split_category", "column 'kids' is a pandas category: give numbers "
     "(df['kids'].astype(int)) or one column per category (pd.get_dummies(df, "
     "columns=['kids']))"),
]


@pytest.mark.parametrize(("loader", "said"), NOT_TYPED_AS_NUMBERS,
                         ids=[case[0] for case in NOT_TYPED_AS_NUMBERS])
def test_numbers_held_as_a_category_or_text_are_refused_naming_the_column(tmp_path, loader,
                                                                           said):
    """Before: they converted to numbers and trained, but the logged model's signature took
    a double column and its predict refused the loader's own x ("Incompatible input types for
    column kids. Can not safely convert category to float64")."""
    (tmp_path / "typed_loaders.py").write_text(TYPED_LOADERS)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # none made yet: a refusal makes none
    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp.run(f"tracking.uri={store}", "data=custom",
                    f"data._target_=typed_loaders.{loader}", launch_dir=tmp_path)
    assert str(refused.value) == f"data._target_=typed_loaders.{loader}: {said}"
    assert refused.value.exit_code == 2
    assert not (tmp_path / "mlflow.db").exists()


def test_floats_held_as_python_objects_are_taken(tmp_path):
    (tmp_path / "typed_loaders.py").write_text(TYPED_LOADERS)
    cfg = compose_config("data=custom", "data._target_=typed_loaders.float_objects")
    assert load_data(cfg.data, tmp_path).n_features == 3


def test_the_advice_for_a_category_gives_an_integer_column_of_the_signature(tmp_path):
    (tmp_path / "typed_loaders.py").write_text(TYPED_LOADERS)
    cfg = compose_config("data=custom", "data._target_=typed_loaders.kids_int")
    assert load_data(cfg.data, tmp_path).integer_features == ["kids", "rooms"]


MISSING_LABELS = [
    ("none_label", "y[3] is None (every row needs a class label: fill or drop those rows; 1 "
     "such value in the targets y)"),
    ("nan_label", "y[3] is nan (every row needs a class label: fill or drop those rows; 1 "
     "such value in the targets y)"),
    ("na_label", "y[3] is <NA> (every row needs a class label: fill or drop those rows; 1 "
     "such value in the targets y)"),
    ("none_label_list", "y[5] is None (every row needs a class label: fill or drop those rows; "
     "2 such values in the targets y)"),
    ("none_label_own_split", "y_val[1] is None (every row needs a class label: fill or drop "
     "those rows; 1 such value in the validation targets y_val)"),
    ("mixed_labels", "the class labels cannot be sorted ('<' not supported between instances "
     "of 'int' and 'str'); give labels of one kind (all text or all numbers)"),
]


@pytest.mark.parametrize(("loader", "said"), MISSING_LABELS,
                         ids=[case[0] for case in MISSING_LABELS])
def test_a_missing_or_mixed_label_is_one_line_naming_the_loader(tmp_path, loader, said):
    """Before: "the class labels cannot be sorted ('<' not supported between instances of
    'NoneType' and 'str'); give labels of one kind", naming neither the loader nor the row
    (pandas' NA: "boolean value of NA is ambiguous"). Labels of two kinds keep that line,
    now after the loader's name."""
    (tmp_path / "typed_loaders.py").write_text(TYPED_LOADERS)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp.run(f"tracking.uri={store}", "data=custom",
                    f"data._target_=typed_loaders.{loader}", "data.task=classification",
                    launch_dir=tmp_path)
    assert str(refused.value) == f"data._target_=typed_loaders.{loader}: {said}"
    assert refused.value.exit_code == 2
    assert not (tmp_path / "mlflow.db").exists()


def test_a_csv_of_one_class_is_refused_naming_the_target(tmp_path):
    (tmp_path / "single.csv").write_text("x,label\n" + "".join(f"{i},a\n" for i in range(200)))
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp.run(f"tracking.uri={store}", "data=csv", "data.path=single.csv",
                    "data.target=label", "data.task=classification", launch_dir=tmp_path)
    assert str(refused.value) == ("data.target=label: only one class ('a') in 200 rows; a "
                                  "classification needs 2 or more")
    assert refused.value.exit_code == 2 and not (tmp_path / "mlflow.db").exists()


OWN_SPLITS = """
import numpy as np
import pandas as pd

def swapped():                            # x_val's columns in another order than x's
    x = pd.DataFrame({"x1": np.linspace(0, 1, 30), "k": np.arange(30) + 100.0})
    return (x.iloc[:20], np.zeros(20)), (x.iloc[20:][["k", "x1"]], np.zeros(10))

def timestamps():                         # a large offset, a small spread: float64 matters
    t = 1.7e9 + np.arange(40.0) * 25
    return (t[:30], np.zeros(30)), (t[30:], np.zeros(10))
"""


def test_a_loaders_own_validation_columns_are_matched_by_name_and_scaled_in_float64(tmp_path):
    # Before: x_val's [k, x1] was taken as x's [x1, k] by position (val/mse 9.9, not 0.012),
    # and a loader's own split was cast to float32 before its standardization.
    (tmp_path / "own_splits.py").write_text(OWN_SPLITS)
    cfg = compose_config("data=custom", "data._target_=own_splits.swapped",
                         "data.standardize=false")
    data = load_data(cfg.data, tmp_path)
    assert data.features == ["x1", "k"]
    np.testing.assert_allclose(data.val.x[:, 1], np.arange(20, 30) + 100.0)
    cfg = compose_config("data=custom", "data._target_=own_splits.timestamps")
    data = load_data(cfg.data, tmp_path)
    t = 1.7e9 + np.arange(40.0) * 25
    expected = (t - t[:30].mean()) / t[:30].std()
    np.testing.assert_allclose(data.x[:, 0], expected[:30], atol=1e-6)
    np.testing.assert_allclose(data.val.x[:, 0], expected[30:], atol=1e-6)


def test_a_tf_data_dicts_integer_and_bool_features_are_typed_so(tmp_path):
    (tmp_path / "typed_tf.py").write_text(
        "import numpy as np\nimport tensorflow as tf\n"
        "def load():\n"
        "    x = np.linspace(0, 1, 40)\n"
        "    return tf.data.Dataset.from_tensor_slices(({'x1': x.astype('float32'),\n"
        "        'k': np.arange(40), 'flag': x > 0.5}, x.astype('float32')))\n")
    cfg = compose_config("data=custom", "data._target_=typed_tf.load")
    data = load_data(cfg.data, tmp_path)
    assert (data.integer_features, data.boolean_features) == (["k"], ["flag"])


def test_nan_in_a_tf_data_loaders_rows_is_refused_as_in_arrays(launch):
    (launch / "nan_tf.py").write_text(
        "import numpy as np\nimport tensorflow as tf\n"
        "def load():\n"
        "    x = np.ones((8, 2), 'float32')\n"
        "    x[6, 0] = np.nan\n"
        "    return tf.data.Dataset.from_tensor_slices((x, np.ones(8, 'float32')))\n")
    cfg = compose_config("data=custom", "data._target_=nan_tf.load")
    with pytest.raises(ConfigError, match=re.escape(
            "data._target_=nan_tf.load: x[6, 0] is nan (NaN or infinite values cannot be "
            "trained on; 1 such value in the features x)")):
        load_data(cfg.data, launch)


# ---------------------------------------------------------------- a csv that is not text
def test_a_gzipped_or_binary_csv_is_the_documented_line_without_raw_bytes(tmp_path,
                                                                         monkeypatch):
    rows = b"x,y\n" + b"".join(b"%d,%d\n" % (i, 2 * i) for i in range(200))
    (tmp_path / "h.csv").write_bytes(gzip.compress(rows))
    (tmp_path / "h.csv.gz").write_bytes(gzip.compress(rows))  # pyarrow decompresses by name
    (tmp_path / "h.csv.GZ").write_bytes(gzip.compress(rows))  # by a lower-case name only
    # Past the first 64 KiB, a ragged row that is not UTF-8: pyarrow fails to decode it for
    # the invalid-row handler, which Python reported as "Exception ignored ... Traceback".
    late = rows * 400 + b"1,\xff\xfe,3\n"
    assert len(late) > 64 * 1024
    (tmp_path / "late.csv").write_bytes(late)
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    for name, said in [("h.csv", "cannot read it (gzip-compressed: gunzip it first)"),
                       ("h.csv.GZ", "cannot read it (gzip-compressed: gunzip it first)"),
                       ("late.csv", "cannot read it (not UTF-8 text: save it as UTF-8, e.g. "
                        "pandas.read_csv(path, encoding='latin-1').to_csv('out.csv', "
                        "index=False) for a Latin-1 file)")]:
        with pytest.raises(ConfigError) as refused:
            read_csv(str(tmp_path / name), "y")
        assert str(refused.value) == f"data.path={tmp_path / name}: {said}"
    assert unraisable == []
    assert read_csv(str(tmp_path / "h.csv.gz"), "y").x[:, 0].tolist() == list(range(200))


# ---------------------------------------------------------------- what the run records
@pytest.mark.heavy  # ~3 s
def test_a_loaders_own_splits_are_standardized_as_the_config_says_and_recorded(launch, store,
                                                                                client):
    data = loaded(launch, "own_splits")  # data.standardize=true, the default
    assert abs(data.x.mean()) < 1e-5 and abs(data.x.std() - 1) < 1e-5
    raw_val = np.linspace(0, 10, 30)[20:]
    np.testing.assert_allclose(data.val.x[:, 0] * data.standardization.scale[0]
                               + data.standardization.mean[0], raw_val, rtol=1e-5)
    result = run(store, launch, "data=custom", "data._target_=my_loaders.own_splits",
                 "trainer.epochs=50", "optimizer.learning_rate=0.1")
    recorded = tags(client, result.run_id)
    assert client.get_run(result.run_id).data.params["data.standardize"] == "True"
    assert recorded["gradexp.data.standardized"] == "true"
    assert (recorded["gradexp.data.rows.train"], recorded["gradexp.data.rows.val"]) == ("20",
                                                                                         "10")
    off = run(store, launch, "data=custom", "data._target_=my_loaders.own_splits",
              "data.standardize=false", "trainer.epochs=2")
    assert tags(client, off.run_id)["gradexp.data.standardized"] == "false"


@pytest.mark.heavy  # ~2 s
def test_rows_per_split_and_standardization_are_recorded_for_the_built_in_sets(store, client,
                                                                               launch):
    result = run(store, launch, "data=sklearn", "data.name=iris", "data.test_fraction=0.1",
                 "trainer.epochs=2")
    recorded = tags(client, result.run_id)
    assert [recorded[f"gradexp.data.rows.{split}"] for split in ("train", "val", "test")] == [
        "105", "30", "15"]
    assert recorded["gradexp.data.standardized"] == "true"
    assert recorded["gradexp.data.batch_size"] == "105"  # full batch: trainer.batch_size=null
    linear = run(store, launch, "trainer.epochs=2")
    assert tags(client, linear.run_id)["gradexp.data.standardized"] == "false"


def test_a_column_constant_in_the_file_is_standardized_to_zero(tmp_path):
    # Its float64 mean misses 0.1 by an ulp and its std came out ~1e-17, not 0: divided by
    # that, the column trained as +-1 and the served model's inputs blew up by 1e16 (review)
    import pandas as pd

    rng = np.random.default_rng(0)
    pd.DataFrame({"x": rng.normal(size=97), "k": np.full(97, 0.1),
                  "y": rng.normal(size=97)}).to_csv(tmp_path / "k.csv", index=False)
    data = load_data(compose_config("data=csv", "data.path=k.csv", "data.target=y").data,
                     tmp_path)
    column = data.features.index("k")
    assert data.standardization.scale[column] == 1.0
    for split in (data.x, data.val.x):
        assert np.all(split[:, column] == 0.0)
