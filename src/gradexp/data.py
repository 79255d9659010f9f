"""Data sets: each `data=` option becomes a Dataset of float32 numpy arrays, split into the
training rows and the held-out rows (validation, test) every run is judged on.

Plain numpy, no TensorFlow: the data is ready (and its errors reported) before TensorFlow loads.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from omegaconf import DictConfig, OmegaConf

from gradexp.schema import ConfigError


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
    labels: list | None = None  # a classification: the class of each one-hot column, your values
    standardization: Standardization | None = None  # None: x is as given

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


def load_data(cfg: DictConfig, base_dir: Path | None = None) -> Dataset:
    """Build the data set `data._target_` names, with the other `data.*` keys as its arguments.

    Relative paths (`data.path`, a user loader's own files) start at `base_dir`, the launch
    folder: a sweep job may run in another working folder (Ray, SLURM).
    """
    from gradexp.targets import importable, locate

    kwargs = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    importable(base_dir or Path.cwd())  # data._target_=my_data.load names my_data.py there
    load = locate("data._target_", kwargs.pop("_target_"))
    # Called directly, not through hydra.utils.instantiate, which would wrap a ConfigError
    # (a bad csv cell, say) in its own exception and lose the one line meant for the person.
    with working_folder(base_dir or Path.cwd()):
        if getattr(load, "__module__", None) == __name__:  # gradexp's own loaders
            return load(**kwargs)
        return from_user_loader(load, **kwargs)


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
              split_seed: int, standardize: bool, name: str = "csv") -> Dataset:
    """Your own table: the `target` column is y, every other numeric column a feature."""
    table = read_csv(path, target)
    data = tabular(Path(path).stem, task, table.x, table.y, val_fraction, test_fraction,
                   split_seed, standardize, features=table.features)
    data.integer_features = table.integer_features
    return data


def tabular(name: str, task: str, x: np.ndarray, y: np.ndarray, val_fraction: float,
            test_fraction: float, split_seed: int, standardize: bool,
            features: list[str] | None = None) -> Dataset:
    """Split rows into train / val / test (shuffled by split_seed), one-hot the labels of a
    classification, and standardize the features with the training rows' mean and std only, so
    nothing of the held-out rows leaks into training. The Dataset records the classes and the
    standardization, which the logged model carries (gradexp.export)."""
    labels = None
    if task == "classification":
        classes, index = np.unique(y[:, 0], return_inverse=True)
        y, labels = np.eye(len(classes))[index], _plain(classes)
    n = len(x)
    n_test, n_val = _held_out(n, test_fraction), _held_out(n, val_fraction)
    if n - n_val - n_test < 1:
        raise ConfigError(
            f"data.val_fraction={val_fraction}, data.test_fraction={test_fraction}: "
            f"they leave none of the {n} rows for training; make them smaller")
    test, val, train = np.split(np.random.default_rng(split_seed).permutation(n),
                                [n_test, n_test + n_val])
    standardization = None
    if standardize:
        mean, std = x[train].mean(axis=0), x[train].std(axis=0)
        standardization = Standardization(mean, np.where(std > 0, std, 1.0))
        x = (x - mean) / standardization.scale  # a constant column becomes 0

    def rows(index: np.ndarray) -> Split | None:
        return Split(_float32(x[index]), _float32(y[index])) if len(index) else None

    return Dataset(name, task, _float32(x[train]), _float32(y[train]), rows(val), rows(test),
                   features=features, labels=labels, standardization=standardization)


def _plain(classes: np.ndarray) -> list:
    """Class values as plain Python values for json: 1.0 read from a csv is the label 1."""
    values = classes.tolist()
    if all(isinstance(v, float) and v.is_integer() for v in values):
        return [int(v) for v in values]
    return values


def from_user_loader(load, *, name: str, task: str, val_fraction: float, test_fraction: float,
                     split_seed: int, standardize: bool, kwargs: dict) -> Dataset:
    """data=custom: call the person's `load(**data.kwargs)`. It may return a Dataset; arrays
    (x, y), which are split as a table (val_fraction, ...); or its own splits
    ((x, y), (x_val, y_val)), used as they are. A classification's y holds class labels."""
    where = f"data._target_={name}"
    try:
        loaded = load(**kwargs)
    except TypeError as error:
        raise ConfigError(f"{where}: cannot be called with data.kwargs={kwargs} ({error})"
                          ) from None
    if isinstance(loaded, Dataset):
        return loaded
    pairs = isinstance(loaded, tuple | list) and len(loaded) == 2
    if pairs and all(isinstance(part, tuple | list) and len(part) == 2 for part in loaded):
        (x, y), (x_val, y_val) = (_columns(a) for a in loaded[0]), (_columns(a) for a in loaded[1])
        labels = None
        if task == "classification":
            classes = np.unique(np.concatenate([y[:, 0], y_val[:, 0]]))
            y, y_val = (np.eye(len(classes))[np.searchsorted(classes, part[:, 0])]
                        for part in (y, y_val))
            labels = _plain(classes)
        return Dataset(name, task, _float32(x), _float32(y),
                       Split(_float32(x_val), _float32(y_val)), labels=labels)
    if pairs:
        x, y = (_columns(part) for part in loaded)
        return tabular(name, task, x, y, val_fraction, test_fraction, split_seed, standardize)
    raise ConfigError(f"{where}: returned a {type(loaded).__name__}; a data loader returns "
                      "(x, y) arrays, ((x, y), (x_val, y_val)) or a gradexp.data.Dataset")


def _columns(array) -> np.ndarray:
    """Rows x columns as float64: a 1-D array is one column."""
    array = np.asarray(array, dtype=np.float64)
    return array.reshape(len(array), -1)


def _held_out(n: int, fraction: float) -> int:
    """Rows for a held-out split: the fraction of n, at least one when the fraction is > 0."""
    return max(1, round(fraction * n)) if fraction > 0 else 0


class CsvTable(NamedTuple):
    x: np.ndarray
    y: np.ndarray
    features: list[str]  # x's columns
    # Columns written as integers, which pandas.read_csv reads as int64: the logged model's
    # signature says so, since MLflow refuses int64 for a float64 column (not a safe cast).
    integer_features: list[str]


def read_csv(path: str, target: str) -> CsvTable:
    """Read a csv with a header row: the target column is y, every other numeric column a
    feature.

    Every problem a person can cause (missing file, no such column, a non-numeric cell, NaN) is a
    ConfigError whose message names the path and, where there is one, the column and row.
    """
    file = Path(path)
    where = f"data.path={path}"
    if not file.is_file():
        raise ConfigError(f"{where}: no such file ({file})")
    try:
        with file.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{where}: cannot read it ({error})") from None
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if len(rows) < 2:
        raise ConfigError(f"{where}: the file is empty (want a header row and a data row at least)")
    header = [name.strip() for name in rows[0]]
    if target not in header:
        raise ConfigError(
            f"data.target={target}: no such column in {path} (columns: {', '.join(header)})"
        )
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ConfigError(
                f"{where}: line {line} has {len(row)} fields, the header has {len(header)}"
            )
    columns = {name: [row[i].strip() for row in rows[1:]] for i, name in enumerate(header)}
    numeric = {name: cells for name, cells in columns.items() if _is_numeric(cells[0])}
    if target not in numeric:
        raise ConfigError(f"{where}: the target column '{target}' is not numeric")
    features = [name for name in header if name in numeric and name != target]
    if not features:
        raise ConfigError(f"{where}: no numeric feature columns besides the target '{target}'")
    x = np.stack([_parse_column(name, numeric[name], where) for name in features], axis=1)
    y = _parse_column(target, numeric[target], where)[:, None]
    integers = [name for name in features if all(map(_is_integer, numeric[name]))]
    return CsvTable(x, y, features, integers)


def _is_integer(cell: str) -> bool:
    try:
        int(cell)
    except ValueError:
        return False
    return True


def _is_numeric(cell: str) -> bool:
    """A column whose first cell is a number is numeric; text columns (ids, names) are skipped."""
    try:
        float(cell)
    except ValueError:
        return cell == ""
    return True


def _parse_column(name: str, cells: list[str], where: str) -> np.ndarray:
    values = np.empty(len(cells), dtype=np.float64)
    for row, cell in enumerate(cells):
        line = row + 2  # the header is line 1
        try:
            values[row] = float(cell)
        except ValueError:
            shown = "empty" if cell == "" else f"not a number: {cell!r}"
            raise ConfigError(f"{where}: column '{name}' line {line} is {shown}") from None
        if not math.isfinite(values[row]):
            raise ConfigError(
                f"{where}: column '{name}' line {line} is {cell} "
                "(NaN or infinite values cannot be trained on)"
            )
    return values
