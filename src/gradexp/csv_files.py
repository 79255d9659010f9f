"""A csv file as a data set's arrays (data=csv): read with pyarrow, every problem a person can
cause (a missing, compressed or binary file, no such column, a text or empty cell, NaN) one line
naming the path and, where there is one, the column and line. Plain numpy and pyarrow, no
TensorFlow: the file is read, and its errors said, before TensorFlow loads.

refuse_non_finite is the one NaN check, a csv's columns and a loader's arrays alike
(gradexp.data).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np

from gradexp.schema import ConfigError


class CsvTable(NamedTuple):
    x: np.ndarray
    y: np.ndarray  # float64 for a regression; the target's own values for a classification
    features: list[str]  # x's columns
    # Columns written as integers, which pandas.read_csv reads as int64: the logged model's
    # signature says so, since MLflow refuses int64 for a float64 column (not a safe cast).
    integer_features: list[str]


def read_csv(path: str, target: str, task: str = "regression",
             features: list[str] | None = None) -> CsvTable:
    """Read a csv with a header row (pyarrow.csv): the target column is y, every other column
    (or those `features` names) a numeric feature. A classification's target may hold any
    values (class names such as 'setosa', numbers); a regression's must be numbers.

    Every problem a person can cause (missing file, no such column, a non-numeric cell, NaN) is a
    ConfigError whose message names the path and, where there is one, the column and line.
    """
    import pyarrow as pa

    where = f"data.path={path}"
    table = _read_table(Path(path), where)
    header = [name.strip() for name in table.column_names]
    table = table.rename_columns(header)
    if target not in header:
        raise ConfigError(
            f"data.target={target}: no such column in {path} (columns: {', '.join(header)})")
    for name in features or ():
        if name not in header:
            raise ConfigError(f"data.features: no such column {name!r} in {path} "
                              f"(columns: {', '.join(header)})")
    chosen = list(features) if features else [name for name in header if name != target]
    if target in chosen:
        raise ConfigError(f"data.features: the target column '{target}' cannot be a feature")
    if not chosen:
        raise ConfigError(f"{where}: no feature columns besides the target '{target}'")
    # A text column (an id, a name) is not silently dropped: the person chooses the features.
    hint = " (features must be numbers: choose them with data.features=[...])"
    x = np.stack([_numbers(table.column(name), name, where, hint) for name in chosen], axis=1)
    column = table.column(target)
    if task == "classification":
        y = np.asarray(_labels_of(column, target, where), dtype=object)[:, None]
    else:
        y = _numbers(column, target, where, " (class labels? data.task=classification)")[:, None]
    integers = [name for name in chosen if pa.types.is_integer(table.column(name).type)]
    return CsvTable(x, y, chosen, integers)


def _read_table(file: Path, where: str):
    """The file as a pyarrow Table: only empty cells are missing ("nan" is a number, refused
    later by name), and a row with the wrong number of fields names its line."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if file.is_dir():
        raise ConfigError(f"{where}: a folder, not a file ({file}); name the csv file in it")
    if not file.is_file():
        raise ConfigError(f"{where}: no such file ({file})")
    _check_text(file, where)
    ragged = []

    def wrong_row(row) -> str:
        ragged.append(row)
        return "error"

    try:  # one thread: pyarrow then knows the line of a ragged row
        with _undecodable_rows() as undecodable:
            table = pacsv.read_csv(
                file, read_options=pacsv.ReadOptions(use_threads=False),
                parse_options=pacsv.ParseOptions(invalid_row_handler=wrong_row),
                convert_options=pacsv.ConvertOptions(null_values=[""], strings_can_be_null=True))
    except (OSError, pa.ArrowInvalid) as error:
        if undecodable:  # the error's text would print the row's raw bytes
            raise ConfigError(f"{where}: {NOT_UTF8}") from None
        if ragged:
            row = ragged[0]
            line = f"line {row.number}" if row.number is not None else f"the row {row.text!r}"
            raise ConfigError(f"{where}: {line} has {row.actual_columns} fields, the header has "
                              f"{row.expected_columns}") from None
        if "Empty CSV file" in str(error):
            table = None
        else:
            raise ConfigError(f"{where}: cannot read it ({error})") from None
    if table is None or table.num_rows == 0:
        raise ConfigError(f"{where}: the file is empty (want a header row and a data row at least)")
    if any(pa.types.is_binary(field.type) for field in table.schema):
        raise ConfigError(f"{where}: {NOT_UTF8}")
    return table


NOT_UTF8 = "cannot read it (not UTF-8 text)"
# Files that are not a table but hold one, by their first bytes: the hint says what to do.
PACKED = {b"\x1f\x8b": "gzip-compressed: gunzip it first",
          b"PK\x03\x04": "a zip archive: unzip it first"}
TEXT_SNIFF_BYTES = 64 * 1024
DECOMPRESSED_BY_NAME = (".gz", ".bz2", ".lz4", ".zst")  # pyarrow's codecs by file extension


def _check_text(file: Path, where: str) -> None:
    """A compressed or binary file is one line before pyarrow reads it: pyarrow would say
    "CSV parse error" with the row's raw bytes in it, or nothing useful. Only the first 64 KiB
    are read (a large csv is not read twice); bad bytes further on are caught while reading."""
    import codecs

    if file.suffix in DECOMPRESSED_BY_NAME:  # as pyarrow: h.csv.GZ is read as it is
        return  # pyarrow reads h.csv.gz decompressed: its text is checked as it is read
    with open(file, "rb") as handle:
        head = handle.read(TEXT_SNIFF_BYTES)
    for magic, hint in PACKED.items():
        if head.startswith(magic):
            raise ConfigError(f"{where}: cannot read it ({hint})")
    try:  # incremental: a character cut at the 64 KiB boundary is not an error
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: {NOT_UTF8}") from None


@contextmanager
def _undecodable_rows() -> Iterator[list]:
    """While pyarrow reads: a ragged row that is not UTF-8 makes pyarrow fail to decode it
    before calling the invalid_row_handler, and Python prints that UnicodeDecodeError as
    "Exception ignored in ..." with a traceback. Such errors are collected here instead (the
    read then fails, and the caller says "not UTF-8 text"); any other goes to the usual hook."""
    import sys

    caught: list = []
    before = sys.unraisablehook

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, UnicodeDecodeError):
            caught.append(unraisable.exc_value)
        else:
            before(unraisable)

    sys.unraisablehook = hook
    try:
        yield caught
    finally:
        sys.unraisablehook = before


def _numbers(column, name: str, where: str, hint: str = "") -> np.ndarray:
    """A column as float64; the first empty, non-numeric, NaN or infinite cell is one line."""
    import pyarrow as pa

    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        cells = column.to_pylist()
    else:  # text (pyarrow found a cell that is not a number) or dates: say which cell
        cells = [None if cell is None else str(cell) for cell in column.to_pylist()]
    values = np.empty(len(cells), dtype=np.float64)
    for row, cell in enumerate(cells):
        line = row + 2  # the header is line 1
        try:
            values[row] = float(cell.strip() if isinstance(cell, str) else cell)
        except (TypeError, ValueError):
            empty = cell is None or not str(cell).strip()
            shown = "empty" if empty else f"not a number: {cell!r}{hint}"
            raise ConfigError(f"{where}: column '{name}' line {line} is {shown}") from None
    refuse_non_finite(values, where, lambda index: f"column '{name}' line {index[0] + 2}")
    return values


NOT_FINITE = "NaN or infinite values cannot be trained on"


def refuse_non_finite(values: np.ndarray, where: str,
                      subject: Callable[[tuple[int, ...]], str], held_by: str | None = None
                      ) -> None:
    """The one refusal of NaN and infinite values, a csv's columns and a loader's arrays alike:
    `WHERE: SUBJECT is nan (NaN or infinite values cannot be trained on)`, SUBJECT naming the
    first one (`subject(index)`: a csv's column and line, an array's element) and, given
    `held_by` (what the array is), how many there are: one value named at a time, a person
    fixing a loader would meet the next one run after run."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    n = int(bad.sum())
    count = "" if held_by is None else f"; {n} such value{'s' * (n > 1)} in {held_by}"
    raise ConfigError(f"{where}: {subject(first)} is {values[first]} ({NOT_FINITE}{count})")


def _labels_of(column, name: str, where: str) -> list:
    """A classification target's cells as labels: numbers, text (class names), true/false."""
    cells = column.to_pylist()
    for row, cell in enumerate(cells):
        if cell is None or (isinstance(cell, float) and not math.isfinite(cell)):
            shown = "empty" if cell is None else str(cell)
            raise ConfigError(f"{where}: column '{name}' line {row + 2} is {shown} (every row "
                              "needs a class label)")
    if not all(isinstance(cell, str | int | float | bool) for cell in cells):
        cells = [str(cell) for cell in cells]  # dates, say: their text is the label
    return cells
