"""Data sets: each `data=` option becomes a Dataset of float32 numpy arrays.

Plain numpy, no TensorFlow: the data is ready (and its errors reported) before TensorFlow loads.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from gradexp.schema import ConfigError


@dataclass
class Dataset:
    name: str
    x: np.ndarray  # (n_samples, n_features), float32
    y: np.ndarray  # (n_samples, n_outputs), float32
    feature_names: list[str]

    @property
    def n_features(self) -> int:
        return self.x.shape[1]

    @property
    def n_outputs(self) -> int:
        return self.y.shape[1]


def load_data(cfg: DictConfig, base_dir: Path | None = None) -> Dataset:
    """Build the data set `cfg` names; a relative csv path starts at `base_dir` (launch folder)."""
    makers = {"linear": linear, "sine": sine, "blobs": blobs}
    if cfg.name == "csv" or "path" in cfg:
        return from_csv(cfg.path, cfg.target, base_dir or Path.cwd())
    if cfg.name not in makers:
        raise ConfigError(f"data.name={cfg.name}: must be one of linear, sine, blobs, csv")
    return makers[cfg.name](cfg)


def _float32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def linear(cfg: DictConfig) -> Dataset:
    """Seed 004: x uniform in [0, 1), y = slope·x + intercept + noise·N(0, 1)."""
    rng = np.random.default_rng(cfg.seed)
    x = rng.random((cfg.n_samples, cfg.n_features))
    y = cfg.slope * x.sum(axis=1, keepdims=True) + cfg.intercept
    y += cfg.noise * rng.standard_normal((cfg.n_samples, 1))
    n_outliers = int(round(cfg.outliers * cfg.n_samples))
    if n_outliers:
        rows = rng.choice(cfg.n_samples, size=n_outliers, replace=False)
        y[rows] += cfg.outlier_scale * np.abs(rng.standard_normal((n_outliers, 1)))
    names = [f"x{i}" for i in range(cfg.n_features)]
    return Dataset("linear", _float32(x), _float32(y), names)


def sine(cfg: DictConfig) -> Dataset:
    """A nonlinear regression: y = sin(2π·frequency·x) + noise, x uniform in [-1, 1)."""
    rng = np.random.default_rng(cfg.seed)
    x = rng.uniform(-1.0, 1.0, size=(cfg.n_samples, 1))
    y = np.sin(2 * math.pi * cfg.frequency * x) + cfg.noise * rng.standard_normal(x.shape)
    return Dataset("sine", _float32(x), _float32(y), ["x"])


def blobs(cfg: DictConfig) -> Dataset:
    """Classification: points around n_classes random centres, one-hot targets."""
    rng = np.random.default_rng(cfg.seed)
    centres = rng.uniform(-5.0, 5.0, size=(cfg.n_classes, cfg.n_features))
    labels = rng.integers(0, cfg.n_classes, size=cfg.n_samples)
    x = centres[labels] + cfg.spread * rng.standard_normal((cfg.n_samples, cfg.n_features))
    y = np.eye(cfg.n_classes)[labels]
    names = [f"x{i}" for i in range(cfg.n_features)]
    return Dataset("blobs", _float32(x), _float32(y), names)


def from_csv(path: str, target: str, base_dir: Path) -> Dataset:
    """Read a csv with a header row; the target column is y, every other column a feature.

    Every problem a person can cause (missing file, no such column, a non-numeric cell, NaN) is a
    ConfigError whose message names the path and, where there is one, the column and row.
    """
    file = Path(path) if Path(path).is_absolute() else base_dir / path
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
    return Dataset(file.stem, _float32(x), _float32(y), features)


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
