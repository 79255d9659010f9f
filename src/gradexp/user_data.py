"""A person's own loader (`data=custom data._target_=my_data.load`): what it returned (arrays,
a pandas DataFrame, its own validation split, a tf.data.Dataset), checked before any run and made
a gradexp.data.Dataset as the built-in sets are: a target for every row, numbers where numbers
are needed, x_val's columns matched to x's by name, the columns' types for the logged model's
signature.

Plain numpy, no TensorFlow unless the loader returned a tf.data.Dataset (gradexp.tfdata).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from gradexp.csv_files import refuse_non_finite
from gradexp.data import (
    Dataset,
    Split,
    Standardization,
    _float32,
    encode_labels,
    standardized,
    tabular,
)
from gradexp.schema import ConfigError


def from_user_loader(load, *, name: str, task: str, val_fraction: float, test_fraction: float,
                     split_seed: int, standardize: bool, kwargs: dict,
                     materialize_mb: float = 1024, steps_per_epoch: int | None = None,
                     target: str | None = None) -> Dataset:
    """data=custom: call the person's `load(**data.kwargs)`. It may return a Dataset; arrays
    (x, y), which are split as a table (val_fraction, ...); its own splits
    ((x, y), (x_val, y_val)), used as they are; or a tf.data.Dataset of (x, y) (or a pair of
    them: training, validation), read as gradexp.tfdata says. A classification's y holds class
    labels of any kind. data.standardize applies to every form but a Dataset that has its own
    standardization: what the run records is what was done."""
    from gradexp import tfdata

    where = f"data._target_={target or name}"
    _refuse_uncallable(load, kwargs, where)
    loaded = load(**kwargs)  # a TypeError in its body is the loader's: its traceback tells
    if isinstance(loaded, Dataset):
        for split, part in loaded.splits().items():
            prefix = "" if split == "train" else f"{split}."
            _check_part(where, part.x, part.y, loaded.features, f"{prefix}x", f"{prefix}y",
                        "" if split == "train" else f"{split} ")
        return standardized(loaded) if standardize else loaded
    batch_size = stream = None
    if tfdata.is_dataset(loaded) or (isinstance(loaded, tuple | list) and
                                     any(tfdata.is_dataset(part) for part in loaded)):
        parts, batch_size, stream = tfdata.read(loaded, where, materialize_mb * 2 ** 20,
                                                steps_per_epoch)
    else:
        parts = _array_parts(loaded, where)
    if task != "classification":  # a regression's targets are numbers
        parts = [(x, _columns(y, f"{where}: the targets",
                              "; class labels? data.task=classification"), names)
                 for x, y, names in parts]
    parts = _same_columns(parts, where)
    # Before any split or run: mismatched rows would fail deep in the split (an IndexError)
    # or the loss, and a NaN would reach training as a "learning rate too high" divergence.
    for (x, y, names), (x_name, y_name, what) in zip(parts, (("x", "y", ""),
                                                             ("x_val", "y_val", "validation "))):
        _check_part(where, x, y, names, x_name, y_name, what)
    if stream is not None:
        data = _streamed(name, task, stream, parts, standardize, where)
    elif len(parts) == 1:
        (x, y, features), = parts
        data = tabular(name, task, x, y, val_fraction, test_fraction, split_seed, standardize,
                       features, where)
    else:
        (x, y, features), (x_val, y_val, _) = parts
        labels = None
        if task == "classification":
            (y, y_val), labels = encode_labels(y, y_val, where=where)
        # x and x_val as given (float64): standardized before any float32 cast, as tabular
        # does, so the training rows are the ones the logged model makes of the raw values.
        data = Dataset(name, task, x, _float32(y), Split(x_val, _float32(y_val)),
                       features=features, labels=labels)
        data = standardized(data) if standardize else replace(
            data, x=_float32(x), val=Split(_float32(x_val), data.val.y))
    data.batch_size = batch_size
    if data.features is not None:  # the signature takes the user's columns as they are typed
        data.integer_features, data.boolean_features = _typed_columns(
            _train_x(loaded), data.features)
    else:  # and unnamed ones in the dtype they came in
        data.raw_dtype = _raw_dtype(_train_x(loaded))
        data.raw_shape = _raw_shape(_train_x(loaded), data.n_features)
    return data


def _refuse_uncallable(load: Callable, kwargs: dict, where: str) -> None:
    """data.kwargs that the loader's signature does not take, in one line. Only the call: a
    TypeError raised inside the loader (len(5)) was told as "cannot be called with
    data.kwargs={}" and lost the line it came from (QA)."""
    import inspect

    try:
        signature = inspect.signature(load)
    except (TypeError, ValueError):  # a builtin or C callable: its own call will tell
        return
    try:
        signature.bind(**kwargs)
    except TypeError as error:
        raise ConfigError(f"{where}: cannot be called with data.kwargs={kwargs} ({error})"
                          ) from None


def _raw_dtype(x: Any) -> str | None:
    """The dtype of unnamed features as the loader gave them: numpy's float64 rows were refused
    by a float32 signature, and a float32 cast lost a timestamp's digits before the model's
    float64 standardization (QA). None for what is not numbers as given."""
    from gradexp import tfdata

    if tfdata.is_dataset(x):
        spec = x.element_spec[0] if isinstance(x.element_spec, tuple) else None
        dtype = getattr(spec, "dtype", None)
        return dtype.name if dtype is not None and (dtype.is_floating or dtype.is_integer) \
            else None
    dtype = x.dtype if isinstance(getattr(x, "dtype", None), np.dtype) else np.asarray(x).dtype
    return dtype.name if dtype.kind in "fiub" else None


def _raw_shape(x: Any, n_features: int) -> tuple[int, ...] | None:
    """A row's shape as the loader gave it, where that is not (n_features,): () for a 1-D x,
    (8, 8, 1) for images. None for arrays of rows x columns and for a tf.data stream."""
    from gradexp import tfdata

    if tfdata.is_dataset(x):
        return None
    shape = tuple(int(size) for size in np.shape(x)[1:])
    return None if shape == (n_features,) else shape


def _streamed(name: str, task: str, stream, parts: list, standardize: bool,
              where: str = "data._target_") -> Dataset:
    """A training stream (gradexp.tfdata): one pass for the features' statistics and the
    classes, then the Dataset of its first rows (what checks and train/ metrics use), the
    validation part if any, and the prepared stream the trainer iterates."""
    from gradexp import tfdata

    (x, y, features), *rest = parts
    mean, std, classes, rows = tfdata.statistics(stream, task == "classification")
    x_val, y_val = (rest[0][0], rest[0][1]) if rest else (None, None)
    labels = None
    if task == "classification":
        given = [y] + ([y_val] if rest else [])
        encoded, labels = encode_labels(*([classes] if classes is not None else []), *given,
                                        where=where)
        y, y_val = encoded[-len(given)], (encoded[-1] if rest else None)
    scaling = Standardization(mean, np.where(std > 0, std, 1.0)) if standardize else None

    def scale(part: np.ndarray) -> np.ndarray:
        return _float32(part if scaling is None else (part - scaling.mean) / scaling.scale)

    val = Split(scale(x_val), _float32(y_val)) if rest else None
    data = Dataset(name, task, scale(x), _float32(y), val, features=features, labels=labels,
                   standardization=scaling)
    data.stream = tfdata.prepared(stream, None if scaling is None else scaling.mean,
                                  None if scaling is None else scaling.scale,
                                  labels if classes is not None else None)
    data.stream_rows, data.stream_steps = rows, stream.steps_per_epoch
    return data


def _same_columns(parts: list, where: str) -> list:
    """A loader's own split, x_val's columns matched to x's: by name when both have names
    (DataFrames, tf.data dicts), reordered as x's; else by position, as many as x's. Before,
    x_val's columns [k, x1] were evaluated as x's [x1, k] without a word, and a different
    count was a numpy broadcast or Keras traceback."""
    if len(parts) < 2:
        return parts
    (x, y, names), (x_val, y_val, val_names) = parts
    if names is not None and val_names is not None and names != val_names:
        if sorted(names) != sorted(val_names) or len(set(names)) < len(names):
            raise ConfigError(f"{where}: x_val's columns ({', '.join(val_names)}) are not x's "
                              f"({', '.join(names)}); x_val needs the same columns, matched by "
                              "name")
        x_val = x_val[:, [val_names.index(name) for name in names]]
        return [(x, y, names), (x_val, y_val, names)]
    if x.shape[1] != x_val.shape[1]:
        raise ConfigError(f"{where}: x_val has {x_val.shape[1]} columns but x has "
                          f"{x.shape[1]}; x_val needs x's features, column for column")
    return parts


def _train_x(loaded: Any) -> Any:
    """The training features as the loader returned them: x of (x, y) or of ((x, y), ...), or
    the (training) tf.data.Dataset."""
    from gradexp import tfdata

    first = loaded[0] if isinstance(loaded, tuple | list) and loaded else loaded
    if isinstance(first, tuple | list) and len(first) == 2 and not tfdata.is_dataset(first[0]):
        return first[0]  # ((x, y), (x_val, y_val))
    return loaded if tfdata.is_dataset(loaded) else first


def _typed_columns(x: Any, features: list[str]) -> tuple[list[str], list[str]]:
    """The integer and the true/false columns among `features`, by the type the loader gave
    them (a DataFrame's int64, Int64 or bool column; a tf.data dict's int64 or bool feature):
    the logged model's signature must take the rows as typed, since MLflow refuses int64 or bool
    for a double column. A vector feature's columns (name[i]) take its type."""
    from gradexp import tfdata

    if tfdata.is_dataset(x):
        spec = x.element_spec[0]
        kinds = ({name: ("i" if part.dtype.is_integer else "b" if part.dtype.is_bool else "f")
                  for name, part in spec.items()} if isinstance(spec, dict) else {})
    elif hasattr(x, "dtypes") and hasattr(x, "columns"):  # a pandas DataFrame
        kinds = {str(column): dtype.kind for column, dtype in zip(x.columns, x.dtypes)}
    else:
        return [], []
    kind = {name: kinds.get(name.split("[")[0] if name not in kinds else name, "f")
            for name in features}
    return ([name for name in features if kind[name] in "iu"],
            [name for name in features if kind[name] == "b"])


def _check_part(where: str, x: np.ndarray, y: np.ndarray, names: list[str] | None,
                x_name: str, y_name: str, what: str) -> None:
    """A loader's part (x, y): a target for every row of features, and numbers that can be
    trained on (the csv's check, refuse_non_finite), named as the loader returned them."""
    if len(x) != len(y):
        raise ConfigError(f"{where}: {x_name} has {len(x)} rows but {y_name} has {len(y)}; "
                          f"each row of {x_name} needs its target in the same row of {y_name}")
    if x.ndim == 2 and x.shape[1] == 0:  # numpy.zeros((80, 0)): Keras aborted the process (QA)
        raise ConfigError(f"{where}: {x_name} has {len(x)} rows but no feature columns (a "
                          "select_dtypes('number') of text columns?); give at least one "
                          "column of numbers")
    refuse_non_finite(x, where, _element(x_name, x, names), f"the {what}features {x_name}")
    if y.dtype.kind == "f":  # a classification's labels may be text: only numbers can be NaN
        refuse_non_finite(y, where, _element(y_name, y), f"the {what}targets {y_name}")
    elif y.dtype.kind == "O":  # labels as objects (text, say): None, NaN or pandas' NA among them
        refuse_missing_labels(y, where, _element(y_name, y), f"the {what}targets {y_name}")


def refuse_missing_labels(labels: np.ndarray, where: str,
                          subject: Callable[[tuple[int, ...]], str], held_by: str) -> None:
    """`WHERE: y[3] is None (every row needs a class label: fill or drop those rows; 1 such
    value in the targets y)`, as refuse_non_finite names a NaN among numbers and a csv an empty
    label cell. A missing label (None, NaN, pandas' NA) among text labels was "the class labels
    cannot be sorted", naming neither the loader nor the row."""
    missing = np.frompyfunc(_missing, 1, 1)(labels).astype(bool)
    if not missing.any():
        return
    first = tuple(int(i) for i in np.argwhere(missing)[0])
    n = int(missing.sum())
    raise ConfigError(f"{where}: {subject(first)} is {labels[first]} (every row needs a class "
                      f"label: fill or drop those rows; {n} such value{'s' * (n > 1)} in "
                      f"{held_by})")


def _missing(value: Any) -> bool:
    """None, NaN (a float, NaT) or pandas' NA: a value that is no label."""
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN and NaT differ from themselves
    except TypeError:  # pandas' NA: its comparisons are NA, whose truth is ambiguous
        return True
    except ValueError:  # an array as a label: not missing (np.unique says what it is)
        return False


def _element(name: str, array: np.ndarray, columns: list[str] | None = None
             ) -> Callable[[tuple[int, ...]], str]:
    """How to name one value of a rows x columns array: y[3] (one column), x[3, 1], with the
    column's name when it has one (a DataFrame's)."""
    def named(index: tuple[int, ...]) -> str:
        row, column = index[0], (index[1] if len(index) > 1 else 0)
        if array.ndim < 2 or array.shape[1] == 1:
            shown = f"{name}[{row}]"
        else:
            shown = f"{name}[{row}, {column}]"
        return shown + (f" (column '{columns[column]}')" if columns else "")

    return named


FEATURES_HINT = "; leave text columns out, or encode them as numbers, in your loader"


def _array_parts(loaded: Any, where: str) -> list[tuple[np.ndarray, np.ndarray, list | None]]:
    """(x, y) -> one part; ((x, y), (x_val, y_val)) -> two: features as float64 columns, y as
    given (a classification's labels may be text), the features' names of a DataFrame's x."""
    pairs = isinstance(loaded, tuple | list) and len(loaded) == 2
    if pairs and all(isinstance(part, tuple | list) and len(part) == 2 for part in loaded):
        for (x, y), (x_name, y_name) in zip(loaded, (("x", "y"), ("x_val", "y_val"))):
            _refuse_unsized(x, y, where, x_name, y_name)
            _refuse_inputs_list(x, y, where, x_name)
        return [(_features(x, where, x_name), _targets(y), _names(x))
                for (x, y), x_name in zip(loaded, ("x", "x_val"))]
    if pairs:
        x, y = loaded
        _refuse_unsized(x, y, where, "x", "y")
        _refuse_inputs_list(x, y, where, "x")
        return [(_features(x, where, "x"), _targets(y), _names(x))]
    if isinstance(loaded, tuple | list) and len(loaded) == 4:  # train_test_split's order
        raise ConfigError(f"{where}: returned 4 items (train_test_split's x_train, x_val, "
                          "y_train, y_val?); return ((x_train, y_train), (x_val, y_val))")
    raise ConfigError(f"{where}: returned a {type(loaded).__name__}; a data loader returns "
                      "(x, y) arrays, ((x, y), (x_val, y_val)), a tf.data.Dataset of (x, y) "
                      "(or two: training, validation) or a gradexp.data.Dataset")


def _refuse_unsized(x: Any, y: Any, where: str, x_name: str, y_name: str) -> None:
    """None or a single number for x or y, in one line (QA: "len() of unsized object" with a
    traceback from _columns / _targets)."""
    for value, name, what in ((x, x_name, "rows x features"), (y, y_name, "one target a row")):
        # not np.ndim: it reads a list of arrays of several shapes as a ragged array, and raises
        if value is None or np.isscalar(value) or getattr(value, "ndim", None) == 0:
            kind = "0-d array" if isinstance(value, np.ndarray) else type(value).__name__
            got = "None" if value is None else f"a single {kind} ({value})"
            raise ConfigError(f"{where}: returned {name} = {got}; a data loader returns (x, y) "
                              f"as arrays of rows (numpy, lists, pandas), {name}: {what}")


def _refuse_inputs_list(x: Any, y: Any, where: str, name: str) -> None:
    """Keras' multi-input form, a list of arrays ([a, b]: one a model input), in one line: it
    was a numpy broadcasting traceback, or "x has 2 rows but y has 96" (QA). A list as long as
    y is rows (a list of images is one image a row: review), whatever each item's shape."""
    if not isinstance(x, list | tuple) or not x or not all(hasattr(p, "shape") for p in x):
        return
    shapes = [tuple(np.shape(part)) for part in x]
    rows = len(y) if hasattr(y, "__len__") else None
    if rows is not None and len(x) != rows and all(shape[:1] == (rows,) for shape in shapes):
        raise ConfigError(
            f"{where}: the features {name} are a list of {len(x)} arrays (shapes "
            f"{', '.join(map(str, shapes))}: Keras' form for a model of several inputs); "
            f"gradexp feeds a model one array of rows x features: give "
            f"np.column_stack({name}) (a DataFrame to keep names) and slice it inside "
            "the model")


def _features(x, where: str, name: str) -> np.ndarray:
    """A loader's features as float64 columns (_columns), given as numbers. Numbers held as a
    pandas category, as text ('3') or as Python objects used to convert here and train, but the
    logged model's signature takes a double column for them, and its predict refused the
    loader's own x ("Can not safely convert category to float64"): they are refused before any
    run, naming the column and the conversion to make."""
    if isinstance(x, dict):  # Keras' named inputs: their repr is the whole data (QA: 3.9 KB)
        raise ConfigError(f"{where}: the features {name} are a dict ({', '.join(map(str, x))}); "
                          "give a pandas DataFrame, one column per name (pd.DataFrame(x)), or a "
                          "tf.data.Dataset of (dict, y)")
    values = _columns(x, f"{where}: the features", FEATURES_HINT)
    if hasattr(x, "dtypes") and hasattr(x, "columns"):  # a pandas DataFrame
        _refuse_repeated_names(x, where, name)
        for index, dtype in enumerate(x.dtypes):
            column = x.iloc[:, index]
            if getattr(dtype, "kind", "O") not in NUMERIC_KINDS and not _held_as_objects(column):
                raise ConfigError(f"{where}: "
                                  f"{_not_numeric_column(column, x.columns[index])}")
        return values
    kind = getattr(getattr(x, "dtype", None), "kind", None)  # numpy's, a pandas Series'
    if kind is None:  # lists, a tf.Tensor: as numpy reads them
        kind = np.asarray(x).dtype.kind
    if kind in NUMERIC_KINDS:
        return values
    if hasattr(x, "to_frame"):  # a pandas Series: one column
        if _held_as_objects(x):
            return values
        named = x.name is not None
        raise ConfigError(f"{where}: {_not_numeric_column(x, x.name if named else name, named)}")
    first = np.asarray(x, dtype=object).ravel()[:1].tolist()
    held = "text" if first and isinstance(first[0], str | bytes) else "Python objects"
    raise ConfigError(f"{where}: the features {name} hold numbers as {held}: give numbers "
                      f"({name}.astype(float))")


# numpy's kinds of numbers (bool, signed and unsigned integers, floats); pandas' nullable Int64,
# Float64 and boolean columns have them too, a category or a string column has "O".
NUMERIC_KINDS = "biuf"


def _held_as_objects(column: Any) -> bool:
    """Floats in a column of Python objects (dtype object): MLflow's signature takes them as
    the double column they are, so they are not refused. (Python ints there are: the signature
    would say double, and MLflow does not cast int64 to it.)"""
    if getattr(column.dtype, "kind", None) != "O":
        return False
    return getattr(column.infer_objects().dtype, "kind", "O") == "f"


def _not_numeric_column(column: Any, name: Any, in_frame: bool = True) -> str:
    """Why a column of numbers (they converted) is not typed as numbers, and what to give
    instead; `in_frame`: a DataFrame's column (df['name']), else a Series given as `name`."""
    dtype = column.dtype
    kind = getattr(dtype, "kind", "O")
    what = f"column '{name}'" if in_frame else f"the features {name}"
    ref = f"df['{name}']" if in_frame else str(name)
    if str(dtype) == "category":
        cast = "int" if getattr(dtype.categories.dtype, "kind", "O") in "iu" else "float"
        return (f"{what} is a pandas category: give numbers ({ref}.astype({cast})) or one "
                f"column per category (pd.get_dummies(df, columns=['{name}']))")
    if kind == "M":
        return (f"{what} holds dates or times (dtype {dtype}): give numbers, e.g. seconds "
                f"({ref}.astype('int64') // 10**9)")
    if kind == "m":
        return f"{what} holds durations (dtype {dtype}): give numbers ({ref}.dt.total_seconds())"
    if kind == "c":
        return (f"{what} holds complex numbers: give their real and imaginary parts as two "
                f"columns ({ref}.to_numpy().real, .imag)")
    first = [value for value in column.tolist() if value is not None][:1]
    held = (f"numbers as text ({first[0]!r})" if first and isinstance(first[0], str | bytes)
            else f"numbers as Python objects (dtype {dtype})")
    return f"{what} holds {held}: give numbers (pd.to_numeric({ref}))"


def _columns(array, where: str = "data", hint: str = "") -> np.ndarray:
    """Rows x columns as float64: a 1-D array is one column. Text is refused, naming a
    DataFrame's first column of text, with `hint` (what to do about it)."""
    try:
        values = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError):
        from gradexp.csv_files import thousands_hint

        text = _first_text(array)
        hint = "" if "a missing value" in text else \
            thousands_hint(text.rsplit(": ", 1)[-1].strip("'")) or hint
        raise ConfigError(f"{where} must be numbers ({text}){hint}") from None
    if len(values) == 0:  # no reshape can infer a row's width from no rows
        raise ConfigError(f"{where} have no rows (a filter that kept nothing?); give at least "
                          "one row")
    return values.reshape(len(values), -1)


def _first_text(array) -> str:
    """The first value that is not a number, as `'a'`, after its DataFrame column's name."""
    columns = getattr(array, "columns", None)
    values = ([(f"column '{column}': ", value) for column in columns
               for value in array[column].tolist()] if columns is not None
              else [("", value) for value in np.asarray(array, dtype=object).ravel().tolist()])
    from gradexp.csv_files import NOT_IMPUTED

    for place, value in values:
        try:
            float(value)
        except (TypeError, ValueError):
            if value is None or str(value) == "<NA>":  # None, pandas' NA of an Int64 column
                return f"{place}a missing value: {NOT_IMPUTED}"
            return f"{place}{str(value)!r}"
    return "a value that is not a number"


def _targets(array) -> np.ndarray:
    """Rows x columns, the values as given: numbers or class labels (text, say)."""
    array = np.asarray(array)
    if array.dtype.kind not in "SUOb":  # bools stay: their labels are False, True (not 0, 1)
        array = array.astype(np.float64)
    return array.reshape(len(array), -1)


def _names(x: Any) -> list[str] | None:
    """The columns' names of a pandas DataFrame (x as a table), else None: also for a frame
    whose columns are numbered (pd.DataFrame(array): 0, 1, ...), which are positions, not
    names; as names "0", "1" the logged model refused the loader's own frame (QA)."""
    columns = getattr(x, "columns", None)
    if columns is None or list(columns) == list(range(len(columns))):  # 0, 1, ...: positions
        return None
    return [str(column) for column in columns]


def _refuse_repeated_names(x: Any, where: str, name: str) -> None:
    """A DataFrame with two columns of one name: x_val is matched to x by name, and the logged
    model's predict could not take the frame back (QA). The csv's check, for a loader's x."""
    names = _names(x) or []
    repeated = sorted({column for column in names if names.count(column) > 1})
    if repeated:
        raise ConfigError(f"{where}: {name} has {names.count(repeated[0])} columns named "
                          f"'{repeated[0]}'; give each column its own name")
