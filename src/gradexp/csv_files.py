"""A csv file as a data set's arrays (data=csv): read with pyarrow, every problem a person can
cause (a missing, compressed or binary file, no such or a repeated column, a file separated by
';' or tabs, a text, empty or missing (NA) cell, NaN) one line naming the path and, where there
is one, the column and the file's line (FileLines). Plain numpy and pyarrow, no TensorFlow: the
file is read, and its errors said, before TensorFlow loads.

refuse_non_finite is the one NaN check, a csv's columns and a loader's arrays alike
(gradexp.data).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
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
    notes: list[str]  # what was read otherwise than written, for the console (a pandas index)
    # true/false columns, which pandas.read_csv reads as bool: MLflow refuses bool for a
    # float64 column too, so the signature says boolean (they train as 1 and 0).
    boolean_features: list[str] = []


def read_csv(path: str, target: str, task: str = "regression",
             features: list[str] | None = None) -> CsvTable:
    """Read a csv with a header row (pyarrow.csv): the target column is y, every other column
    (or those `features` names) a numeric feature. A classification's target may hold any
    values (class names such as 'setosa', numbers); a regression's must be numbers.

    Column names are trimmed, in the header and in `target` and `features` alike, so the names
    trained on, the config's and the logged model's signature are one spelling. A first column
    with no name is the index pandas' DataFrame.to_csv writes: left out, as
    pandas.read_csv(path, index_col=0) leaves it out, and said in a note.

    Every problem a person can cause (missing file, no such or a repeated column, a non-numeric
    or missing cell, NaN) is a ConfigError whose message names the path and, where there is
    one, the column and the file's line.
    """
    import pyarrow as pa

    where = f"data.path={path}"
    file = Path(path).expanduser()  # data.path='~/x.csv', quoted past the shell, is home's
    lines = FileLines(file)
    table = _read_table(file, where, lines)
    header = [name.strip() for name in table.column_names]
    table = table.rename_columns(header)
    notes = []
    if header[0] == "" and len(header) > 1:
        # Its values are row numbers: as a feature they would leak the file's order into
        # the model.
        table, header = table.remove_column(0), header[1:]
        notes.append(f"{where}: its first column has no name, as the index DataFrame.to_csv "
                     "writes: left out as the rows' index, not a feature (as "
                     "pandas.read_csv(..., index_col=0) reads it)")
    # ' price' in the config names the column ' price' in the file: both are read trimmed.
    target = target.strip()
    features = None if features is None else [name.strip() for name in features]
    chosen = _chosen_columns(header, target, features, path)
    # A text column (an id, a name) is not silently dropped: the person chooses the features.
    hint = " (features must be numbers: choose them with data.features=[...])"
    x = np.stack([_numbers(table, name, where, lines, hint) for name in chosen], axis=1)
    column = table.column(target)
    if task == "classification":
        y = np.asarray(_labels_of(column, target, where, lines), dtype=object)[:, None]
    else:
        y = _numbers(table, target, where, lines,
                     " (class labels? data.task=classification)")[:, None]
    integers = [name for name in chosen if pa.types.is_integer(table.column(name).type)]
    booleans = [name for name in chosen if pa.types.is_boolean(table.column(name).type)
                or _spaced_booleans(table.column(name))]
    return CsvTable(x, y, chosen, integers, notes, booleans)


def _chosen_columns(header: list[str], target: str, features: list[str] | None,
                    path: str) -> list[str]:
    """The feature columns, once the target and `features` are found in the (trimmed) header."""
    if target not in header:
        raise ConfigError(f"data.target={target}: no such column in {path} "
                          f"(columns: {', '.join(header)})"
                          f"{_name_hint(target, header, 'data.target')}"
                          f"{_separator_hint(header, path)}{_headerless_hint(header)}")
    for name in features or ():
        if name not in header:
            raise ConfigError(f"data.features: no such column {name!r} in {path} "
                              f"(columns: {', '.join(header)})"
                              f"{_name_hint(name, header, 'data.features')}"
                              f"{_separator_hint(header, path)}")
    # [x1,x1] trained on the column twice, and the logged signature said "x1, x1"
    twice = next((name for i, name in enumerate(features or ()) if name in features[:i]), None)
    if twice is not None:
        raise ConfigError(f"data.features: {twice} is named twice; name each column once")
    chosen = list(features) if features else [name for name in header if name != target]
    if target in chosen:
        raise ConfigError(f"data.features: the target column '{target}' cannot be a feature")
    if not chosen:
        raise ConfigError(f"data.path={path}: no feature columns besides the target '{target}'")
    if "" in chosen:  # "column '' line 2 is empty" said what, not why
        raise ConfigError(f"data.path={path}: a column has no name (columns: {', '.join(header)})"
                          "; lines that end with a comma make one: remove the trailing commas, "
                          "or choose the features with data.features=[...]")
    _refuse_repeated_columns(header, [target, *chosen], path)
    return chosen


def _name_hint(name: str, header: list[str], key: str) -> str:
    """For a name not in the header: the column it differs from only in case ('Y' for 'y'), or,
    for a number ('2'), that columns are named, not counted (from 0 or 1? not guessed)."""
    alike = [column for column in header if column.casefold() == name.casefold()]
    if alike and name in ("True", "False"):  # Hydra read data.target=true as a boolean
        return f"; Hydra reads {alike[0]} as a boolean: quote it, \"{key}='{alike[0]}'\""
    if alike:
        return f"; did you mean {alike[0]!r}? (names are case-sensitive)"
    if name.isdigit():
        return f"; {key} takes names from the header, not positions"
    return ""


def _headerless_hint(header: list[str]) -> str:
    """When every name of the header is a number: the file has no header row, and its first
    row of data was read as the columns' names."""
    try:
        [float(name) for name in header]
    except ValueError:
        return ""
    return "; its first line is numbers, not names: the file needs a header row of column names"


def _refuse_repeated_columns(header: list[str], used: list[str], path: str) -> None:
    """Two columns of one name (after trimming: 'x' and 'x '), one of them used: which one is
    meant cannot be known (pyarrow raised a KeyError traceback). Unused repeats are left be."""
    repeated = sorted({name for name in used if header.count(name) > 1})
    if repeated:
        named = ", ".join(f"{header.count(name)} columns named '{name}'" for name in repeated)
        raise ConfigError(f"data.path={path}: the header has {named} (columns: "
                          f"{', '.join(header)}); give each column its own name")


# Separators a csv file is often written with instead of commas (Excel in many locales, tsv
# files): as written in the hint's Python, and as said.
OTHER_SEPARATORS = {";": ("';'", "';'"), "\t": ("'\\t'", "tabs")}


def _separator_hint(header: list[str], path: str, decimal_commas: bool = False) -> str:
    """When the header is one column holding ';' or a tab: the file is separated by them (read
    with commas, its header is one column named 'x1;x2;y'). Says how to convert it: pandas
    comes with MLflow, and reads quoted cells and decimal commas right, where replacing the
    separator by hand would not. `decimal_commas`: its rows hold commas (1,5), as a ';' file
    written where the decimal mark is a comma does. A first line `sep=;` (Excel's) is the
    header read: the conversion skips it (pandas would read `sep=` as the header too)."""
    excel = _excel_separator(",".join(header))
    if excel is not None:
        decimal = ", decimal=','" if decimal_commas and excel != "," else ""
        written = OTHER_SEPARATORS.get(excel, (repr(excel),))[0]
        return (f"; its first line 'sep={excel}' is Excel's note of the separator, read as the "
                f"header: convert it, e.g. pandas.read_csv({path!r}, sep={written}, skiprows=1"
                f"{decimal}).to_csv('{Path(path).stem}_commas.csv', index=False)")
    if len(header) != 1:
        return ""
    decimal = ", decimal=','" if decimal_commas else ""
    for separator, (written, said) in OTHER_SEPARATORS.items():
        if separator in header[0]:
            return (f"; the file seems separated by {said}, and gradexp reads commas: convert "
                    f"it, e.g. pandas.read_csv({path!r}, sep={written}{decimal}).to_csv("
                    f"'{Path(path).stem}_commas.csv', index=False)")
    return ""


def _excel_separator(first_line: str) -> str | None:
    """X of a first line `sep=X`, which Excel writes above the header to name the separator
    (`sep=,` is read as two columns, 'sep=' and ''); None for any other line."""
    excel = re.fullmatch(r"sep=(.)", first_line.lstrip("\ufeff").strip())
    return None if excel is None else excel.group(1)


def _read_table(file: Path, where: str, lines: FileLines):
    """The file as a pyarrow Table: only empty cells are missing ("nan" is a number, refused
    later by name; "NA" is text, refused later as a missing value), and a row with the wrong
    number of fields names its line."""
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
            raise ConfigError(f"{where}: {_ragged(ragged[0], lines)}") from None
        if "Empty CSV file" in str(error):
            table = None
        else:
            raise ConfigError(f"{where}: cannot read it ({error})") from None
    if table is None or table.num_rows == 0:
        raise ConfigError(f"{where}: the file is empty (want a header row and a data row at least)")
    if any(pa.types.is_binary(field.type) for field in table.schema):
        raise ConfigError(f"{where}: {NOT_UTF8}")
    return table


def _ragged(row, lines: FileLines) -> str:
    """A row of more or fewer fields than the header (pyarrow's InvalidRow): its line, and, when
    the header is one field, whether the file is separated by something else than commas."""
    # pyarrow numbers records (the header is 1, blank lines skipped), not the file's lines.
    line = (f"line {lines.of_record(row.number)}" if row.number is not None
            else f"the row {row.text!r}")
    hint = ""
    if lines.header().lstrip().startswith("#"):  # a comment line above the header
        hint = ("; the first line, a comment, is read as the header: remove the comment lines "
                "above it")
    elif row.expected_columns == 1 or _excel_separator(lines.header()) is not None:
        # and its rows have commas: numbers written 1,5? (not so in a file of `sep=,`)
        hint = _separator_hint([lines.header()], str(lines.file), decimal_commas=True)
    return (f"{line} has {row.actual_columns} fields, the header has {row.expected_columns}"
            f"{hint}")


class FileLines:
    """Where a csv's records start in its file, as an editor numbers lines (1 = the first).
    pyarrow counts records: it skips blank lines, and a quoted cell may hold line breaks, so
    neither a table's row nor pyarrow's row number is a line of the file. The file is scanned
    only when an error names a line, and only up to that line."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def of_row(self, row: int) -> int:
        """The line of the table's data row `row` (0 = the first after the header)."""
        return self.of_record(row + 2)

    def of_record(self, number: int) -> int:
        """The line on which pyarrow's record `number` (1 = the header) starts."""
        for counted, (line, _) in enumerate(self._records(), start=1):
            if counted == number:
                return line
        return number  # past the end (cannot happen for a record pyarrow read): its count

    def header(self) -> str:
        """The header row's first line, as written."""
        return next((text for _, text in self._records()), "").rstrip("\n")

    def _records(self) -> Iterator[tuple[int, str]]:
        """(line, text) of each line a record starts on. Quotes are read as pyarrow reads them:
        a field that starts with '"' runs to the next lone '"', line breaks included."""
        import io

        import pyarrow as pa

        # As pyarrow.csv.read_csv: a .gz (.bz2, ...) file is read decompressed; universal
        # newlines count \r\n, \r and \n as one line break each, as pyarrow does.
        with pa.input_stream(str(self.file), compression="detect") as raw, io.TextIOWrapper(
                raw, encoding="utf-8", errors="replace", newline=None) as text:
            quoted = False
            for line, content in enumerate(text, start=1):
                if not quoted and content != "\n":  # a blank line is no record
                    yield line, content
                if '"' in content:
                    quoted = _still_quoted(content, quoted)


def _still_quoted(content: str, quoted: bool) -> bool:
    """Whether a quoted field is still open at the end of this line (`quoted`: open at its
    start). '""' inside a quoted field is a quote; a '"' inside an unquoted field is text."""
    at_field_start, i = not quoted, 0
    while i < len(content):
        char = content[i]
        if quoted and char == '"':
            if content.startswith('"', i + 1):
                i += 1  # an escaped quote: the field goes on
            else:
                quoted = False
        elif not quoted and char == '"' and at_field_start:
            quoted = True
        at_field_start = not quoted and char == ","
        i += 1
    return quoted


NOT_UTF8 = ("cannot read it (not UTF-8 text: save it as UTF-8, e.g. pandas.read_csv(path, "
            "encoding='latin-1').to_csv('out.csv', index=False) for a Latin-1 file)")
# Files that are not a table but hold one, by their first bytes: the hint says what to do.
PACKED = {b"\x1f\x8b": "gzip-compressed: gunzip it first",
          b"PAR1": "a parquet file: convert it, e.g. pandas.read_parquet(path).to_csv("
                   "'out.csv', index=False)",
          b"PK\x03\x04": "a zip archive: unzip it first"}
# Zip archives that are not a folder of files to unzip, by their name.
ZIPPED_FORMATS = {".npz": "a numpy .npz archive: return its arrays from a loader "
                          "(data=custom, numpy.load(path))",
                  ".xlsx": "an Excel workbook: convert it, e.g. pandas.read_excel(path).to_csv("
                           "'out.csv', index=False)"}
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
            if magic == b"PK\x03\x04":
                hint = ZIPPED_FORMATS.get(file.suffix.lower(), hint)
            raise ConfigError(f"{where}: cannot read it ({hint})")
    try:  # incremental: a character cut at the 64 KiB boundary is not an error
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: {NOT_UTF8}") from None
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"[", b"{"):  # read as csv: "the file is empty"
        raise ConfigError(f"{where}: cannot read it (JSON, not csv: convert it, e.g. "
                          "pandas.read_json(path).to_csv('out.csv', index=False))")


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


def _numbers(table, name: str, where: str, lines: FileLines, hint: str = "") -> np.ndarray:
    """The table's column `name` as float64; the first empty, missing (NA), non-numeric, NaN or
    infinite cell is one line (a number written with commas is judged by the whole table)."""
    import pyarrow as pa

    column = table.column(name)
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        cells = column.to_pylist()
    elif _spaced_booleans(column):  # ', True' cells: pyarrow reads them as text (QA)
        cells = [None if cell is None else BOOLEANS.get(cell.strip(), cell)
                 for cell in column.to_pylist()]
    else:  # text (pyarrow found a cell that is not a number) or dates: say which cell
        cells = [None if cell is None else str(cell) for cell in column.to_pylist()]
    values = np.empty(len(cells), dtype=np.float64)
    for row, cell in enumerate(cells):
        try:
            values[row] = float(cell.strip() if isinstance(cell, str) else cell)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: column '{name}' line {lines.of_row(row)} is "
                              f"{_not_a_number(cell, hint, table)}") from None
    refuse_non_finite(values, where, lambda index: f"column '{name}' line {lines.of_row(index[0])}")
    return values


# pyarrow's spellings of a boolean cell; a column of them written after ', ' is text to it
BOOLEANS = {"true": 1.0, "True": 1.0, "TRUE": 1.0, "false": 0.0, "False": 0.0, "FALSE": 0.0}


def _spaced_booleans(column) -> bool:
    """A text column whose cells, trimmed, are all true or false (`x, True, 3`): a boolean
    column as the docs read cells (trimmed), which pyarrow reads as text."""
    import pyarrow as pa

    if not pa.types.is_string(column.type):
        return False
    cells = [cell.strip() for cell in column.to_pylist() if cell is not None]
    # an empty or missing cell among them is said as such by _numbers, not as ' True' (review)
    cells = [cell for cell in cells if cell and cell not in MISSING_MARKERS]
    return bool(cells) and all(cell in BOOLEANS for cell in cells)


# The cells pandas.read_csv (and so most tools that wrote or read the file) takes for a missing
# value, but those that also name things: 'None' may well be a class. Case matters: 'Na' is
# sodium. pyarrow reads them as text, so without this a missing grade became a class "NA".
MISSING_MARKERS = frozenset({"NA", "N/A", "n/a", "NaN", "nan", "-NaN", "-nan", "null", "NULL",
                             "#N/A", "#NA", "<NA>"})
NOT_IMPUTED = "gradexp does not impute: fill or drop those rows"


def _not_a_number(cell: str | None, hint: str, table) -> str:
    """What a cell that float() refused is: empty, a missing value (NA), a number written with
    commas (read as `table`, the whole file, says), or text."""
    if cell is None or not cell.strip():
        return "empty"
    if cell.strip() in MISSING_MARKERS:  # a gap in the data, not a text column to leave out
        return f"{cell.strip()!r}, which reads as a missing value ({NOT_IMPUTED})"
    if thousands_hint(cell):  # not "class labels?": that trained a price as hundreds of classes
        hint = comma_hint(_text_cells(table))
    return f"not a number: {cell!r}{hint}"


def _text_cells(table) -> Iterator[object]:
    """The cells of the table's text columns (those pyarrow could not read as numbers)."""
    import pyarrow as pa

    for column in table.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            yield from column.to_pylist()


# Numbers written with commas: pandas.read_csv reads them with thousands=',' or decimal=',', and
# either applied to the other's numbers is silently wrong (thousands=',' reads '0,126' as 126).
# A first group of 1-3 digits not starting with 0 then groups of 3 can be thousands separators
# ('12,345.6', '1,234,567'); one comma between digits can be a decimal comma ('0,126', '1,5',
# '3,14159'); '1,234' can be either.
THOUSANDS = re.compile(r"[-+]?[1-9]\d{0,2}(,\d{3})+(\.\d*)?")
DECIMAL_COMMA = re.compile(r"[-+]?\d+,\d+")
THOUSANDS_HINT = (" (a number with thousands separators: write it without them, e.g. "
                  "pandas.read_csv(path, thousands=',').to_csv(path, index=False))")
DECIMAL_HINT = (" (a number with a decimal comma: write it with a decimal point, e.g. "
                "pandas.read_csv(path, decimal=',').to_csv(path, index=False))")
EITHER_HINT = (" (a thousands separator, or a decimal comma? the file's numbers read both ways: "
               "as meant, e.g. pandas.read_csv(path, thousands=',') or decimal=',', then "
               ".to_csv(path, index=False))")


def comma_hint(cells: Iterable[object]) -> str:
    """How to read the numbers written with commas among `cells`, judged by all of them, since
    the one conversion said applies to the whole file: thousands separators only when every
    such number can be one, a decimal comma when any cannot, both readings when every one reads
    both ways ('1,234'), and no conversion when some can only be each; "" without any."""
    thousands = decimal = None  # the first number that can only be read so
    either = False
    for cell in cells:
        if not isinstance(cell, str) or "," not in cell:
            continue
        text = cell.strip()
        as_thousands, as_decimal = THOUSANDS.fullmatch(text), DECIMAL_COMMA.fullmatch(text)
        if as_thousands and as_decimal:
            either = True
        elif as_thousands:
            thousands = thousands or text
        elif as_decimal:
            decimal = decimal or text
    if thousands and decimal:
        return (f" (commas as thousands separators ({thousands!r}) and as decimal commas "
                f"({decimal!r}) in one file: no one reading fits, write its numbers without "
                "thousands separators and with a decimal point)")
    if decimal:
        return DECIMAL_HINT
    if thousands:
        return THOUSANDS_HINT
    return EITHER_HINT if either else ""


def thousands_hint(cell: object) -> str:
    """For a cell that is a number written with commas, judged alone ('209,014.08': thousands
    separators, '0,126': a decimal comma, '1,234': either): how to read it (a loader's value,
    gradexp.user_data); "" for any other cell."""
    return comma_hint([cell])


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


def _labels_of(column, name: str, where: str, lines: FileLines) -> list:
    """A classification target's cells as labels: numbers, text (class names), true/false.
    Text is trimmed as the header and numbers are (' cat' is the class 'cat', not a second
    one); an empty cell, NaN or a missing-value marker (NA) is refused, not made a class."""
    cells = [cell.strip() if isinstance(cell, str) else cell for cell in column.to_pylist()]
    for row, cell in enumerate(cells):
        missing = _missing_label(cell)
        if missing:
            raise ConfigError(f"{where}: column '{name}' line {lines.of_row(row)} is {missing} "
                              "(every row needs a class label)")
    if not all(isinstance(cell, str | int | float | bool) for cell in cells):
        cells = [str(cell) for cell in cells]  # dates, say: their text is the label
    return cells


def _missing_label(cell) -> str | None:
    """How a (trimmed) label cell that holds no label reads, or None for a label."""
    if cell is None or cell == "":
        return "empty"
    if isinstance(cell, float) and not math.isfinite(cell):
        return str(cell)
    if isinstance(cell, str) and cell in MISSING_MARKERS:
        return f"{cell!r}, which reads as a missing value"
    return None
