"""A loader's tf.data.Dataset, read into the arrays every part of a run works on (held-out
metrics, gradient checks, standardization, the logged model's signature).

What a loader may return (data=custom): a tf.data.Dataset of (x, y) elements, x an array or a
dict of named features (each a number or a vector per row), y a target or a class label (a
number or text); or two of them, (training, validation); or a training Dataset and
(x_val, y_val) arrays. Batched or not: a Dataset whose x has a leading batch dimension
(`.batch(n)`: rank 2, or a first dimension of None; a dict whose components all have the same
first dimension) is batched, and its batches' rows become the run's batch size (the loader's
batching wins over trainer.batch_size, and the run says so); an unbatched one is batched as
trainer.batch_size says.

The rule for memory: a Dataset is read once, into memory, when it ends within
`data.materialize_mb` megabytes of features and targets; an infinite one (`.repeat()`) or a
larger one is refused in one line naming the key, since gradexp does not stream yet (every part
of a run wants the whole training set: the compiled epochs, the checks' fixed rows, the
standardization's statistics).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradexp.schema import ConfigError

READ_ROWS = 4096  # rows per read of an unbatched Dataset


def is_dataset(value: Any) -> bool:
    """Whether `value` is a tf.data.Dataset, without importing TensorFlow (a loader that made
    one imported it already)."""
    module = type(value).__module__ or ""
    return module.startswith("tensorflow") and hasattr(value, "element_spec") \
        and hasattr(value, "cardinality")


def read(loaded: Any, where: str, limit_bytes: float
         ) -> tuple[list[tuple[np.ndarray, np.ndarray, list[str] | None]], int | None]:
    """The parts a loader returned as (x, y, feature names) arrays, one part (training) or two
    (training, validation), and the rows of the training Dataset's batches (None: unbatched)."""
    from gradexp.data import _array_parts

    given = [loaded] if is_dataset(loaded) else list(loaded)
    if len(given) != 2 and not is_dataset(loaded):
        raise ConfigError(f"{where}: returned {len(given)} parts with a tf.data.Dataset; want a "
                          "tf.data.Dataset of (x, y), or two parts: (training, validation)")
    parts, batch_size = [], None
    for which, part in zip(("training", "validation"), given):
        if is_dataset(part):
            x, y, names, batch = _materialize(part, f"{where}: its {which} tf.data.Dataset",
                                              limit_bytes)
            parts.append((x, y, names))
            batch_size = batch if which == "training" else batch_size
        else:
            parts += _array_parts(part, f"{where}: its {which} part")
    return parts, batch_size


def _materialize(dataset, where: str, limit_bytes: float
                 ) -> tuple[np.ndarray, np.ndarray, list[str] | None, int | None]:
    """Every element of `dataset` as arrays: x (rows, features) float64, y (rows, columns) as
    given; the features' names (a dict's keys); the rows of its first batch if batched."""
    import tensorflow as tf

    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise ConfigError(f"{where} gives elements of {_describe(spec)}; want (x, y) elements "
                          "(x an array or a dict of named features)")
    x_spec, y_spec = spec
    names = list(x_spec) if isinstance(x_spec, dict) else None
    for name, part in (x_spec.items() if names else [("x", x_spec)]):
        if not isinstance(part, tf.TensorSpec) or not (
                part.dtype.is_floating or part.dtype.is_integer or part.dtype.is_bool):
            shown = "x" if names is None else f"the feature '{name}'"
            raise ConfigError(f"{where}: {shown} holds {_describe(part)}; features must be "
                              "numbers")
    if int(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY:
        raise ConfigError(f"{where} is infinite (.repeat()); gradexp reads a tf.data.Dataset into "
                          "memory and does not stream yet: drop the .repeat() (trainer.epochs "
                          "says how often the data is seen)")
    batched = _batched(x_spec, y_spec)
    xs, ys, size = [], [], 0
    for x, y in (dataset if batched else dataset.batch(READ_ROWS)).as_numpy_iterator():
        columns = [np.asarray(x[name]) for name in names] if names else [np.asarray(x)]
        rows = len(columns[0])
        widths = [c.reshape(rows, -1).shape[1] for c in columns]  # each feature's columns
        xs.append(np.concatenate([c.reshape(rows, -1).astype(np.float64) for c in columns], 1))
        ys.append(np.asarray(y).reshape(rows, -1))
        size += xs[-1].nbytes // 2 + ys[-1].nbytes  # float32 once trained on
        if size > limit_bytes:
            raise ConfigError(f"{where} holds more than data.materialize_mb="
                              f"{limit_bytes / 2 ** 20:g} MB; gradexp reads a tf.data.Dataset "
                              "into memory and does not stream yet: raise data.materialize_mb "
                              "if the memory is there, or load fewer rows")
    if not xs:
        raise ConfigError(f"{where} is empty")
    batch_size = len(xs[0]) if batched else None
    feature_names = None
    if names:
        feature_names = [name if width == 1 else f"{name}[{i}]"
                         for name, width in zip(names, widths) for i in range(width)]
    y = np.concatenate(ys)
    if y.dtype.kind == "O":  # tf.string labels come as bytes: they are text
        y = np.vectorize(lambda v: v.decode("utf-8", "replace"), otypes=[object])(y)
    return np.concatenate(xs), y, feature_names, batch_size


def _batched(x_spec, y_spec) -> bool:
    """Whether elements are batches: x of rank 2 (rows of features), or a first dimension of
    None (`.batch(n)`); a dict x when every component, y too, has the same first dimension."""
    if isinstance(x_spec, dict):
        shapes = [spec.shape for spec in (*x_spec.values(), y_spec)]
        return all(shape.rank and shape.rank >= 1 for shape in shapes) and \
            len({shape[0] for shape in shapes}) == 1
    shape = x_spec.shape
    return shape.rank is not None and (shape.rank >= 2 or (shape.rank == 1 and shape[0] is None))


def _describe(spec: Any) -> str:
    dtype = getattr(spec, "dtype", None)
    if dtype is not None:
        return f"{dtype.name} {list(spec.shape)}"
    return type(spec).__name__
