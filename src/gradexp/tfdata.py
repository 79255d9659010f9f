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
`data.materialize_mb` megabytes of features and targets; then every part of a run works on it as
on any table. An infinite one (`.repeat()`, which needs `data.steps_per_epoch`) or a larger one
is streamed: the trainer iterates it every epoch (one pass, or `data.steps_per_epoch` batches),
after one pass for the standardization's statistics and the classes; the gradient checks and
the `train/` metrics use its first SAMPLE_ROWS rows, a fixed sample the run records
(gradexp.data.sample_rows). A validation Dataset must fit in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gradexp.schema import ConfigError

READ_ROWS = 4096  # rows per read of an unbatched Dataset
SAMPLE_ROWS = 1024  # a streamed Dataset's first rows: the checks' and train/ metrics' rows


class _TooLarge(Exception):
    """The Dataset does not fit the memory rule; the message says why, for a validation set."""


@dataclass
class Stream:
    """A training Dataset too large for memory (or infinite), as the loader gave it."""

    dataset: Any
    batched: bool
    names: list[str] | None  # a dict x's keys, in order
    steps_per_epoch: int | None  # None: an epoch is one pass

    def epoch(self):
        """One epoch's elements (for the statistics pass)."""
        return self.dataset.take(self.steps_per_epoch) if self.steps_per_epoch else self.dataset


def is_dataset(value: Any) -> bool:
    """Whether `value` is a tf.data.Dataset, without importing TensorFlow (a loader that made
    one imported it already)."""
    module = type(value).__module__ or ""
    return module.startswith("tensorflow") and hasattr(value, "element_spec") \
        and hasattr(value, "cardinality")


def read(loaded: Any, where: str, limit_bytes: float, steps_per_epoch: int | None = None
         ) -> tuple[list[tuple[np.ndarray, np.ndarray, list[str] | None]], int | None,
                    Stream | None]:
    """The parts a loader returned as (x, y, feature names) arrays, one part (training) or two
    (training, validation); the rows of the training Dataset's batches (None: unbatched); and
    the training Stream when it is streamed (its part is then its first SAMPLE_ROWS rows)."""
    from gradexp.user_data import _array_parts

    given = [loaded] if is_dataset(loaded) else list(loaded)
    if len(given) != 2 and not is_dataset(loaded):
        raise ConfigError(f"{where}: returned {len(given)} parts with a tf.data.Dataset; want a "
                          "tf.data.Dataset of (x, y), or two parts: (training, validation)")
    parts, batch_size, stream = [], None, None
    for which, part in zip(("training", "validation"), given):
        if not is_dataset(part):
            parts += _array_parts(part, f"{where}: its {which} part")
            continue
        said = f"{where}: its {which} tf.data.Dataset"
        try:
            x, y, names, batch = _materialize(part, said, limit_bytes)
        except _TooLarge as why:
            if which == "validation":
                raise ConfigError(f"{said} {why}; a validation set must fit in memory") from None
            stream = _stream(part, said, steps_per_epoch)
            x, y, names, _ = _materialize(_rows(stream).take(SAMPLE_ROWS), said, float("inf"))
            batch = _first_batch_rows(stream)
        parts.append((x, y, names))
        batch_size = batch if which == "training" else batch_size
    return parts, batch_size, stream


def _stream(dataset, where: str, steps_per_epoch: int | None) -> Stream:
    import tensorflow as tf

    infinite = int(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY
    if infinite and not steps_per_epoch:
        raise ConfigError(f"{where} is infinite (.repeat()): set data.steps_per_epoch (batches "
                          "per epoch), or drop the .repeat() (trainer.epochs says how often the "
                          "data is seen)")
    x_spec, y_spec = dataset.element_spec
    if infinite and not _batched(x_spec, y_spec):
        raise ConfigError(f"{where} is infinite and not batched: batch it (.batch(n)), so "
                          "data.steps_per_epoch counts its batches")
    return Stream(dataset, _batched(x_spec, y_spec),
                  list(x_spec) if isinstance(x_spec, dict) else None, steps_per_epoch)


def _rows(stream: Stream):
    return stream.dataset.unbatch() if stream.batched else stream.dataset


def _first_batch_rows(stream: Stream) -> int | None:
    if not stream.batched:
        return None
    x, _ = next(iter(stream.dataset.take(1)))
    first = next(iter(x.values())) if isinstance(x, dict) else x
    return int(first.shape[0])


def statistics(stream: Stream, classification: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """One pass (one epoch) over a stream: the features' mean and std (float64), the sorted
    distinct labels of a classification (None otherwise) and the rows."""
    total = squares = low = high = None
    rows, classes = 0, set()
    batches = stream.epoch() if stream.batched else stream.epoch().batch(READ_ROWS)
    for x, y in batches.as_numpy_iterator():
        columns = [np.asarray(x[name]) for name in stream.names] if stream.names else [x]
        n = len(columns[0])
        x = np.concatenate([np.asarray(c).reshape(n, -1).astype(np.float64) for c in columns], 1)
        total = x.sum(0) if total is None else total + x.sum(0)
        squares = (x ** 2).sum(0) if squares is None else squares + (x ** 2).sum(0)
        low = x.min(0) if low is None else np.minimum(low, x.min(0))
        high = x.max(0) if high is None else np.maximum(high, x.max(0))
        rows += n
        y = np.asarray(y).reshape(n, -1)
        if classification and y.shape[1] == 1:
            classes.update(v.decode("utf-8", "replace") if isinstance(v, bytes) else v
                           for v in y[:, 0].tolist())
    mean = total / rows
    std = np.sqrt(np.maximum(squares / rows - mean ** 2, 0.0))
    # A column constant in the stream: its value, spread 0 (from the running sums, E[x²] - mean²
    # left ~1e-9 of a constant 0.1, which the served model would divide by)
    constant = high == low
    mean, std = np.where(constant, low, mean), np.where(constant, 0.0, std)
    return mean, std, (np.array(sorted(classes), dtype=object)[:, None] if classes else None), rows


def prepared(stream: Stream, mean: np.ndarray | None, scale: np.ndarray | None,
             labels: list | None):
    """The stream as the trainer takes it: (x, y) float32, x standardized when `mean` is given,
    a classification's labels one-hot in the order of `labels` (None: y as given)."""
    import tensorflow as tf

    batched = stream.batched
    if labels is not None and all(isinstance(label, str) for label in labels):
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(labels), tf.range(len(labels), dtype=tf.int64)), -1)
        index = table.lookup
    elif labels is not None:
        keys = tf.constant(np.asarray(labels, dtype=np.float64))

        def index(y):  # the labels are sorted: a label's column is where it sorts in
            found = tf.searchsorted(keys, tf.reshape(tf.cast(y, tf.float64), [-1]))
            return tf.reshape(found, tf.shape(y))

    def flat(value, dtype=tf.float32):
        value = tf.cast(value, dtype) if dtype is not None else value
        return tf.reshape(value, [tf.shape(value)[0], -1]) if batched else tf.reshape(value, [-1])

    def convert(x, y):
        parts = [x[name] for name in stream.names] if stream.names else [x]
        # Standardized in float64, then float32, as gradexp.data scales rows in memory and the
        # logged model does: a float32 timestamp (~1.7e9) is rounded to 128 s first.
        x = tf.concat([flat(part, tf.float64) for part in parts], axis=-1)
        if mean is not None:
            x = (x - tf.constant(mean, tf.float64)) / tf.constant(scale, tf.float64)
        x = tf.cast(x, tf.float32)
        if labels is not None and flat(y, None).shape[-1] in (1, None):
            y = tf.one_hot(index(tf.squeeze(flat(y, None), -1)), len(labels))
        return x, flat(y)

    return stream.dataset.map(convert, num_parallel_calls=tf.data.AUTOTUNE)


def _materialize(dataset, where: str, limit_bytes: float
                 ) -> tuple[np.ndarray, np.ndarray, list[str] | None, int | None]:
    """Every element of `dataset` as arrays: x (rows, features) float64, y (rows, columns) as
    given; the features' names (a dict's keys); the rows of its first batch if batched."""
    import tensorflow as tf

    spec = dataset.element_spec
    if isinstance(spec, tuple) and len(spec) == 3:  # Keras' fit takes (x, y, sample_weight)
        raise ConfigError(f"{where} gives (x, y, sample_weight) elements; gradexp weighs every "
                          "row alike: map them to (x, y) (dataset.map(lambda x, y, w: (x, y)))")
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
        raise _TooLarge("is infinite (.repeat())")
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
            raise _TooLarge(f"holds more than data.materialize_mb={limit_bytes / 2 ** 20:g} MB")
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
