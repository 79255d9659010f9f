"""Data sets: each `data=` option becomes a Dataset of float32 numpy arrays, split into the
training rows and the held-out rows (validation, test) every run is judged on.

Plain numpy, no TensorFlow: the data is ready (and its errors reported) before TensorFlow loads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from gradexp.csv_files import read_csv
from gradexp.schema import ConfigError
from gradexp.tag_keys import (
    DATA_BATCH_SIZE_TAG,
    DATA_BATCHED_BY_TAG,
    DATA_CLASSES_TAG,
    DATA_ROWS_PREFIX,
    DATA_SAMPLE_ROWS_TAG,
    DATA_STANDARDIZED_TAG,
    DATA_STREAMED_TAG,
)


@dataclass
class Split:
    """Rows of one split: x (n_rows, n_features) and y (n_rows, n_outputs), float32."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return self.x.shape[0]


@dataclass
class Standardization:
    """What the features were standardized with: x_standardized = (x - mean) / scale, per
    feature (scale is the training rows' std, 1 for a constant column). The logged model applies
    it itself, so it takes the raw features (gradexp.export)."""

    mean: np.ndarray
    scale: np.ndarray


@dataclass
class Dataset:
    """The training rows (`x`, `y`) and the held-out splits the run is judged on.

    `val` is evaluated during training (`val/<metric>`), `test` once at the end (`test/<metric>`);
    either may be None (data.n_val=0, data.test_fraction=0).
    """

    name: str
    task: str  # "regression" | "classification" (one-hot y)
    x: np.ndarray
    y: np.ndarray
    val: Split | None = None
    test: Split | None = None
    features: list[str] | None = None  # the columns' names (a csv's header, scikit-learn's)
    integer_features: list[str] | None = None  # those whose values are all integers in the file
    boolean_features: list[str] | None = None  # true/false columns (a csv's, a DataFrame's bool)
    labels: list | None = None  # a classification: the class of each one-hot column, your values
    standardization: Standardization | None = None  # None: x is as given
    batch_size: int | None = None  # a loader's tf.data batches: their rows (trainer's otherwise)
    # A streamed tf.data training set (gradexp.tfdata): x, y are then its first rows (a sample)
    stream: Any = None  # the tf.data.Dataset the trainer iterates: (x, y) float32, prepared
    stream_rows: int | None = None  # rows per epoch, counted in the statistics pass
    stream_steps: int | None = None  # data.steps_per_epoch; None: an epoch is one pass
    # Unnamed features: their dtype as your loader gave them (numpy's name), which the logged
    # model's signature takes (MLflow refuses any other for a tensor); None: float32
    raw_dtype: str | None = None
    # Unnamed features whose rows your loader gave in another shape than (n_features,): a 1-D x
    # (one feature, shape ()) or images (8, 8, 1). They train as flat rows; the logged model's
    # signature takes them as given (its predict refused a 1-D x, QA). None: (n_features,)
    raw_shape: tuple[int, ...] | None = None
    notes: list[str] = field(default_factory=list)  # how the data was read, for the console

    def steps_per_epoch(self, batch_size: int | None) -> int:
        """Optimizer steps in one epoch with batches of `batch_size` rows (None: full batch)."""
        if self.stream is not None and self.stream_steps:
            return self.stream_steps
        rows = self.stream_rows or len(self.x)
        return -(-rows // min(batch_size or rows, rows))

    @property
    def n_features(self) -> int:
        return self.x.shape[1]

    @property
    def n_outputs(self) -> int:
        return self.y.shape[1]

    def splits(self) -> dict[str, Split]:
        """The splits that exist, by the prefix their metrics are logged under."""
        named = {"train": Split(self.x, self.y), "val": self.val, "test": self.test}
        return {name: split for name, split in named.items() if split is not None}


def load_data(cfg: DictConfig, base_dir: Path | None = None,
              independent_outputs: bool = False) -> Dataset:
    """Build the data set `data._target_` names, with the other `data.*` keys as its arguments.

    Relative paths (`data.path`, a user loader's own files) start at `base_dir`, the launch
    folder: a sweep job may run in another working folder (Ray, SLURM). `independent_outputs`:
    the loss judges each output column on its own (gradexp.losses.independent_outputs), and a
    yes/no label is then one column (binary_label_column).
    """
    data = _load(cfg, base_dir)
    return binary_label_column(data) if independent_outputs else data


def binary_label_column(data: Dataset) -> Dataset:
    """A classification of two classes, one a row, as one column: 1 for labels[1], 0 for
    labels[0], as a Keras user trains a yes/no label with a binary crossentropy (one sigmoid
    output). Its two one-hot columns were two labels of their own: val/accuracy the share of
    both columns right (0.9875 where 0.975 of the rows were), the logged model two sigmoids
    whose rows did not sum to 1. Columns that are not one class a row in every split (two
    labels of their own, a row may have both) stay as they are."""
    if data.task != "classification" or data.n_outputs != 2 or data.stream is not None:
        return data
    splits = [data.y, *(split.y for split in (data.val, data.test) if split is not None)]
    if not all(np.isin(y, (0.0, 1.0)).all() and (y.sum(axis=1) == 1).all() for y in splits):
        return data

    def second(split: Split | None) -> Split | None:
        return None if split is None else Split(split.x, split.y[:, 1:])
    return replace(data, y=data.y[:, 1:], val=second(data.val), test=second(data.test),
                   labels=data.labels or [0, 1])


def _load(cfg: DictConfig, base_dir: Path | None) -> Dataset:
    from gradexp.user_code import importable, locate

    kwargs = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    importable(base_dir or Path.cwd())  # data._target_=my_data.load names my_data.py there
    target = kwargs.pop("_target_")
    kwargs.pop("resample", None)  # read by gradexp.seeds, not by a loader
    load = locate("data._target_", target)
    # Called directly, not through hydra.utils.instantiate, which would wrap a ConfigError
    # (a bad csv cell, say) in its own exception and lose the one line meant for the person.
    with working_folder(base_dir or Path.cwd()):
        if getattr(load, "__module__", None) == __name__:  # gradexp's own loaders
            return load(**kwargs)
        from gradexp.user_data import from_user_loader

        return from_user_loader(load, **kwargs, target=target)


@dataclass
class DataRecord:
    """What a run records about its data: what happened, not what was asked. Tags (MLflow params
    are the config, which sweep.skip_finished matches on), the class labels as
    data/labels.json, and the notes the console prints."""

    tags: dict[str, str]
    labels: list | None
    notes: list[str]

    def labels_json(self) -> str | None:
        """data/labels.json: the classes in column order, and each one's column."""
        import json

        if self.labels is None:
            return None
        return json.dumps({"labels": self.labels, "index": {
            str(label): column for column, label in enumerate(self.labels)}}, indent=1)


def data_record(data: Dataset, trainer_batch_size: int | None) -> DataRecord:
    """The rows of each split, whether the features were standardized, who batched them (the
    loader's tf.data batches or trainer.batch_size) and the classes, for the run to record."""
    rows = {name: len(split) for name, split in data.splits().items()}
    notes = list(data.notes)
    if data.stream is not None:  # the trainer iterates it; x, y are its first rows
        if data.batch_size is None and trainer_batch_size is None:
            raise ConfigError("trainer.batch_size=null: a streamed tf.data.Dataset (larger than "
                              "data.materialize_mb, or infinite) trains in batches: set "
                              "trainer.batch_size, or batch the Dataset in your loader")
        rows["train"] = data.stream_rows
        notes.append(f"the training tf.data.Dataset is streamed ({data.stream_rows} rows an "
                     f"epoch); gradient checks and train/ metrics use its first {len(data.x)} "
                     "rows" + ("" if data.val is not None else
                               "; it is not split (data.val_fraction): no validation rows"))
    tags = {DATA_ROWS_PREFIX + name: str(rows.get(name, 0))
            for name in ("train", "val", "test")}
    tags[DATA_STANDARDIZED_TAG] = str(data.standardization is not None).lower()
    if data.stream is not None:
        tags[DATA_STREAMED_TAG] = "true"
        tags[DATA_SAMPLE_ROWS_TAG] = str(len(data.x))
    if data.batch_size is not None:
        tags[DATA_BATCHED_BY_TAG] = "loader"
        ignored = (f"; trainer.batch_size={trainer_batch_size} is not used"
                   if trainer_batch_size not in (None, data.batch_size) else "")
        notes.append(f"the loader's tf.data.Dataset is batched: batches of {data.batch_size} "
                     f"rows train{ignored}")
    batch = data.batch_size or trainer_batch_size or rows["train"]
    tags[DATA_BATCH_SIZE_TAG] = str(min(batch, rows["train"]))
    if data.labels is not None:
        tags[DATA_CLASSES_TAG] = str(len(data.labels))
    return DataRecord(tags, data.labels, notes)


@contextmanager
def working_folder(folder: Path) -> Iterator[None]:
    """Run a block in `folder`, then return to where we were (contextlib.chdir needs 3.11)."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _float32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


# ---------------------------------------------------------------- synthetic sets
# The training rows come from numpy's generator seeded with data.seed, exactly as before held-out
# data existed (seed 004's default run still ends at W = 2.909, b = 4.045); the n_val validation
# rows from the same distribution through a stream of their own.
def _synthetic(name: str, task: str, seed: int, n_samples: int, n_val: int, draw) -> Dataset:
    """`draw(rng, n)` -> (x, y): the training rows, then the validation rows."""
    x, y = draw(np.random.default_rng(seed), n_samples)
    val = Split(*map(_float32, draw(np.random.default_rng([seed, 1]), n_val))) if n_val else None
    return Dataset(name, task, _float32(x), _float32(y), val)


def linear(*, n_samples: int, n_features: int, slope: float, intercept: float, noise: float,
           outliers: float, outlier_scale: float, seed: int, n_val: int, name: str = "linear",
           task: str = "regression") -> Dataset:
    """Seed 004: x uniform in [0, 1), y = slope·x + intercept + noise·N(0, 1)."""
    def draw(rng: np.random.Generator, n: int):
        x = rng.random((n, n_features))
        y = slope * x.sum(axis=1, keepdims=True) + intercept
        y += noise * rng.standard_normal((n, 1))
        n_outliers = int(round(outliers * n))
        if n_outliers:
            rows = rng.choice(n, size=n_outliers, replace=False)
            y[rows] += outlier_scale * np.abs(rng.standard_normal((n_outliers, 1)))
        return x, y

    return _synthetic(name, task, seed, n_samples, n_val, draw)


def sine(*, n_samples: int, frequency: float, noise: float, seed: int, n_val: int,
         name: str = "sine", task: str = "regression") -> Dataset:
    """A nonlinear regression: y = sin(2π·frequency·x) + noise, x uniform in [-1, 1)."""
    def draw(rng: np.random.Generator, n: int):
        x = rng.uniform(-1.0, 1.0, size=(n, 1))
        return x, np.sin(2 * math.pi * frequency * x) + noise * rng.standard_normal(x.shape)

    return _synthetic(name, task, seed, n_samples, n_val, draw)


def blobs(*, n_samples: int, n_features: int, n_classes: int, spread: float, seed: int,
          n_val: int, name: str = "blobs", task: str = "classification") -> Dataset:
    """Classification: points around n_classes random centres, one-hot targets."""
    centres = None

    def draw(rng: np.random.Generator, n: int):
        nonlocal centres
        if centres is None:  # drawn first from the training stream; validation shares them
            centres = rng.uniform(-5.0, 5.0, size=(n_classes, n_features))
        labels = rng.integers(0, n_classes, size=n)
        x = centres[labels] + spread * rng.standard_normal((n, n_features))
        return x, np.eye(n_classes)[labels]

    return _synthetic(name, task, seed, n_samples, n_val, draw)


# ---------------------------------------------------------------- tabular sets
SKLEARN_SETS = {  # data.name -> (loader in sklearn.datasets, task); all ship with scikit-learn
    "diabetes": ("load_diabetes", "regression"),
    "iris": ("load_iris", "classification"),
    "wine": ("load_wine", "classification"),
    "breast_cancer": ("load_breast_cancer", "classification"),
    "digits": ("load_digits", "classification"),
}


def sklearn(*, name: str, val_fraction: float, test_fraction: float, split_seed: int,
            standardize: bool, task: str | None = None) -> Dataset:
    """One of scikit-learn's bundled data sets, read from the files it ships (no download)."""
    if name not in SKLEARN_SETS:
        raise ConfigError(f"data.name={name}: must be one of {', '.join(SKLEARN_SETS)}")
    import sklearn.datasets

    loader, own_task = SKLEARN_SETS[name]
    bunch = getattr(sklearn.datasets, loader)()
    return tabular(name, task or own_task, bunch.data, bunch.target[:, None], val_fraction,
                   test_fraction, split_seed, standardize,
                   features=[str(name) for name in bunch.feature_names])


def csv_table(*, path: str, target: str, task: str, val_fraction: float, test_fraction: float,
              split_seed: int, standardize: bool, features: list[str] | None = None,
              name: str = "csv") -> Dataset:
    """Your own table: the `target` column is y, every other column (or `features`) a feature."""
    table = read_csv(path, target, task, features)
    data = tabular(Path(path).stem, task, table.x, table.y, val_fraction, test_fraction,
                   split_seed, standardize, features=table.features,
                   where=f"data.target={target.strip()}")
    data.integer_features = table.integer_features
    data.boolean_features = table.boolean_features
    data.notes = table.notes
    return data


def tabular(name: str, task: str, x: np.ndarray, y: np.ndarray, val_fraction: float,
            test_fraction: float, split_seed: int, standardize: bool,
            features: list[str] | None = None, where: str = "data.target") -> Dataset:
    """Split rows into train / val / test (shuffled by split_seed), one-hot the labels of a
    classification, and standardize the features with the training rows' mean and std only, so
    nothing of the held-out rows leaks into training. The Dataset records the classes and the
    standardization, which the logged model carries (gradexp.export). `where`: what a mistake
    in the labels names (the csv's data.target, a loader's data._target_)."""
    labels = None
    if task == "classification":
        (y,), labels = encode_labels(y, where=where)
    n = len(x)
    n_test, n_val = _held_out(n, test_fraction), _held_out(n, val_fraction)
    if n - n_val - n_test < 1:
        raise ConfigError(
            f"data.val_fraction={val_fraction}, data.test_fraction={test_fraction}: "
            f"they leave none of the {n} rows for training; make them smaller")
    test, val, train = np.split(np.random.default_rng(split_seed).permutation(n),
                                [n_test, n_test + n_val])
    standardization = None
    if standardize:  # in float64, on the rows as read
        standardization = standardization_of(x[train])
        x = (x - standardization.mean) / standardization.scale  # a constant column becomes 0

    def rows(index: np.ndarray) -> Split | None:
        return Split(_float32(x[index]), _float32(y[index])) if len(index) else None

    return Dataset(name, task, _float32(x[train]), _float32(y[train]), rows(val), rows(test),
                   features=features, labels=labels, standardization=standardization)


def standardization_of(x: np.ndarray) -> Standardization:
    """The mean and std of the training rows `x`, per column, in float64; a column whose rows
    are all equal has scale 1 (it becomes 0). Told by max == min, not std == 0: the float64
    mean of a constant 0.1 misses it by an ulp, its std is ~1e-17, and dividing by that made the
    column ±1 in training and its served model's inputs blow up by 1e16."""
    x = np.asarray(x, np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0)
    if not len(x):
        return Standardization(mean, np.ones(mean.shape))
    low = x.min(axis=0)
    constant = x.max(axis=0) == low  # its value is its mean, exactly: it becomes 0
    return Standardization(np.where(constant, low, mean),
                           np.where(constant | ~(std > 0), 1.0, std))


def standardized(data: Dataset) -> Dataset:
    """`data` with every split's features scaled by the training rows' mean and std (a constant
    column's scale is 1, so it becomes 0), recorded in `data.standardization`. A data set
    standardized already (a loader's own Dataset) is returned as it is."""
    if data.standardization is not None:
        return data
    scaling = standardization_of(data.x)

    def scale(x: np.ndarray) -> np.ndarray:
        return _float32((x - scaling.mean) / scaling.scale)

    def split(part: Split | None) -> Split | None:
        return None if part is None else Split(scale(part.x), part.y)

    return replace(data, x=scale(data.x), val=split(data.val), test=split(data.test),
                   standardization=scaling)


def encode_labels(*parts: np.ndarray, where: str = "data.target"
                  ) -> tuple[list[np.ndarray], list]:
    """One-hot targets of a classification and the label of each column: the sorted distinct
    values of every part together (as scikit-learn's LabelEncoder sorts them), so 'setosa' is
    column 0 of every split. Targets of more than one column are taken as one-hot (or class
    probabilities) already, their labels the column numbers. A single class is refused,
    naming `where`: it would train to accuracy 1 on nothing to tell apart."""
    if parts[0].ndim == 2 and parts[0].shape[1] > 1:
        return [_float32(part) for part in parts], list(range(parts[0].shape[1]))
    values = [np.asarray(part).reshape(-1) for part in parts]
    values = [part.astype(str) if part.dtype.kind in "SO" and _texts(part) else part
              for part in values]
    kinds = {_label_kind(part) for part in values if part.size}
    if len(kinds) > 1:  # numpy would turn 1.0 into the text '1.0', a class of its own (QA)
        mixed = " in one split and ".join(sorted(kinds))
        raise ConfigError(f"{where}: the class labels are {mixed} in another; give labels of "
                          "one kind (all text or all numbers) in every split")
    try:
        classes = np.unique(np.concatenate(values))
    except TypeError as error:  # e.g. numbers and text mixed in an object array
        raise ConfigError(f"{where}: the class labels cannot be sorted ({error}); give labels "
                          "of one kind (all text or all numbers)") from None
    if len(classes) == 1:
        rows = sum(len(part) for part in values)
        raise ConfigError(f"{where}: only one class ({_plain(classes)[0]!r}) in {rows} rows; a "
                          "classification needs 2 or more")
    eye = np.eye(len(classes), dtype=np.float32)
    return [eye[np.searchsorted(classes, part)] for part in values], _plain(classes)


def _label_kind(labels: np.ndarray) -> str:
    """text, numbers (Python numbers held as objects too: a pandas object column) or objects."""
    import numbers

    if labels.dtype.kind in "SU":
        return "text"
    if labels.dtype.kind in "biuf" or all(isinstance(value, numbers.Number)
                                          for value in labels.tolist()):
        return "numbers"
    return "objects"


def _texts(values: np.ndarray) -> bool:
    """Whether an object or bytes array holds text (bytes from tf.data are decoded)."""
    return all(isinstance(value, str | bytes | np.str_ | np.bytes_) for value in values.tolist())


def _plain(classes: np.ndarray) -> list:
    """Class values as plain Python values for json: 1.0 read from a csv is the label 1, b'cat'
    from a tf.data string tensor the label 'cat'."""
    values = [value.decode("utf-8", "replace") if isinstance(value, bytes) else value
              for value in classes.tolist()]
    if all(isinstance(v, float) and v.is_integer() for v in values):
        return [int(v) for v in values]
    return values


def _held_out(n: int, fraction: float) -> int:
    """Rows for a held-out split: the fraction of n, at least one when the fraction is > 0."""
    return max(1, round(fraction * n)) if fraction > 0 else 0
