"""A csv file as people write it (gradexp.csv_files): class labels written ' cat', missing values
written NA, blank lines and quoted line breaks before a bad cell, a column name used twice, a
file separated by ';' or tabs. Each is read right or refused in one line naming the file's own
line; read_csv in-process (no TensorFlow), and a run where what it records is the point."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

import gradexp
from conftest import run
from gradexp.csv_files import read_csv
from gradexp.schema import ConfigError


def refusal(path, target: str, task: str = "regression", **kwargs) -> str:
    """read_csv's one line for the file at `path`, without its `data.path=...: ` prefix."""
    with pytest.raises(ConfigError) as refused:
        read_csv(str(path), target, task, **kwargs)
    message = str(refused.value)
    return message.removeprefix(f"data.path={path}: ")


def refused_run(tmp_path, *overrides: str) -> gradexp.GradexpError:
    """What `python -m gradexp OVERRIDES` says in tmp_path (in-process): no store is made."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp.run(f"tracking.uri={store}", *overrides, launch_dir=tmp_path)
    assert not (tmp_path / "mlflow.db").exists()
    return refused.value


# ---------------------------------------------------------------- class labels
LABELS = ("x,label\n0.1,cat\n0.2, cat\n0.9,dog\n1.0, dog\n0.15,cat\n0.95,dog\n0.12, cat\n"
          "0.85, dog \n0.11,cat\n0.91,dog\n")


def test_class_labels_are_trimmed_as_the_header_and_numbers_are(tmp_path):
    # Before: ' cat' and 'cat' were two classes, silently (4 classes for 2).
    (tmp_path / "labels.csv").write_text(LABELS)
    table = read_csv(str(tmp_path / "labels.csv"), "label", "classification")
    assert sorted(set(table.y[:, 0])) == ["cat", "dog"]
    (tmp_path / "blank.csv").write_text("x,label\n1,cat\n2,   \n")
    assert refusal(tmp_path / "blank.csv", "label", "classification") == (
        "column 'label' line 3 is empty (every row needs a class label)")


def test_true_false_cells_written_after_a_comma_and_space_are_a_boolean_column(tmp_path):
    # QA: "x, flag, y" files: ' False' was refused ("column 'flag' line 2 is not a number"),
    # though cells are read trimmed (' 5' is 5) and True/False columns train as 1 and 0
    rows = "".join(f"{i}, {'True' if i % 2 else 'False'}, {i / 2}\n" for i in range(6))
    (tmp_path / "flags.csv").write_text("x, flag, y\n" + rows)
    table = read_csv(str(tmp_path / "flags.csv"), "y")
    assert table.x[:, 1].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert table.boolean_features == ["flag"]
    (tmp_path / "mixed.csv").write_text("x, flag, y\n1, True, 1\n2, maybe, 2\n")
    assert refusal(tmp_path / "mixed.csv", "y").startswith("column 'flag' line 2 is not a number")


@pytest.mark.heavy  # a run, for what it records: 11.6 s under load, TensorFlow's import included
def test_a_run_on_labels_written_with_spaces_records_their_classes_once(tmp_path, store, client):
    (tmp_path / "labels.csv").write_text(LABELS)
    result = run(store, "data=csv", "data.path=labels.csv", "data.target=label",
                 "data.task=classification", "loss=categorical_crossentropy", "gradcheck=off",
                 "trainer.epochs=3", launch_dir=tmp_path)
    assert client.get_run(result.run_id).data.tags["gradexp.data.classes"] == "2"
    with open(client.download_artifacts(result.run_id, "data/labels.json")) as handle:
        assert json.load(handle)["labels"] == ["cat", "dog"]


PETS = "".join(f"{x},{label}\n" for x, label in [
    (0.1, "cat"), (0.5, "hamster_from_the_pet_shop"), (0.9, "dog"), (0.12, "cat"),
    (0.52, "hamster_from_the_pet_shop"), (0.93, "dog"), (0.15, "cat"),
    (0.48, "hamster_from_the_pet_shop"), (0.88, "dog"), (0.11, "cat"),
    (0.55, "hamster_from_the_pet_shop"), (0.95, "dog")])


def test_the_confusion_matrix_names_the_classes_of_the_file(tmp_path, store, client,
                                                            monkeypatch):
    # Before: its ticks said 0, 1, 2, and which was which was in data/labels.json only.
    import gradexp.plots

    drawn = []
    draw = gradexp.plots.confusion_matrix
    monkeypatch.setattr(gradexp.plots, "confusion_matrix",
                        lambda *args, **kwargs: drawn.append(draw(*args, **kwargs)) or drawn[-1])
    (tmp_path / "pets.csv").write_text("x,label\n" + PETS)
    result = run(store, "data=csv", "data.path=pets.csv", "data.target=label",
                 "data.task=classification", "loss=categorical_crossentropy", "gradcheck=off",
                 "trainer.epochs=3", "tracking.log_model=false", launch_dir=tmp_path)
    assert "plots/confusion_matrix_val.png" in {
        artifact.path for artifact in client.list_artifacts(result.run_id, "plots")}
    (figure,) = drawn
    axes = figure.axes[0]
    # The classes in column order (sorted), a long one cut in the middle, on both axes.
    classes = ["cat", "dog", "hamster…shop"]
    assert [tick.get_text() for tick in axes.get_xticklabels()] == classes
    assert [tick.get_text() for tick in axes.get_yticklabels()] == classes


# ---------------------------------------------------------------- missing values (NA)
GRADES = "x,grade\n1,1\n2,2\n10,10\n1.1,1\n2.1,{}\n10.1,10\n1.2,1\n"


@pytest.mark.parametrize("marker", ["NA", "N/A", "NaN", "nan", "null", "NULL", "#N/A", "<NA>",
                                    " NA"])
def test_a_missing_value_marker_is_refused_as_a_class_label(tmp_path, marker):
    # Before: NA became a class of its own (labels ["1", "10", "2", "NA"]).
    (tmp_path / "grades.csv").write_text(GRADES.format(marker))
    said = refusal(tmp_path / "grades.csv", "grade", "classification")
    value = "nan" if marker in ("NaN", "nan") else repr(marker.strip())  # a float to pyarrow
    reads = "" if marker in ("NaN", "nan") else ", which reads as a missing value"
    assert said == f"column 'grade' line 6 is {value}{reads} (every row needs a class label)"


def test_a_missing_class_label_ends_the_command_with_exit_2_and_no_run(tmp_path):
    (tmp_path / "grades.csv").write_text(GRADES.format("NA"))
    refused = refused_run(tmp_path, "data=csv", "data.path=grades.csv", "data.target=grade",
                          "data.task=classification", "loss=categorical_crossentropy")
    assert str(refused) == ("data.path=grades.csv: column 'grade' line 6 is 'NA', which reads as "
                            "a missing value (every row needs a class label)")
    assert refused.exit_code == 2


def test_a_missing_feature_or_target_value_says_gradexp_does_not_impute(tmp_path):
    # Before: a feature's NA was "not a number: 'NA' (features must be numbers: choose them
    # with data.features=[...])", as if the column were text to leave out.
    (tmp_path / "na.csv").write_text("x,y\n1,2\n2,4\n N/A ,6\n4,null\n")
    missing = "which reads as a missing value (gradexp does not impute: fill or drop those rows)"
    assert refusal(tmp_path / "na.csv", "y") == f"column 'x' line 4 is 'N/A', {missing}"
    (tmp_path / "na_y.csv").write_text("x,y\n1,2\n2,NA\n")
    assert refusal(tmp_path / "na_y.csv", "y") == f"column 'y' line 3 is 'NA', {missing}"
    (tmp_path / "sodium.csv").write_text("x,element\n1,Na\n2,K\n")  # case matters: a label
    assert sorted(read_csv(str(tmp_path / "sodium.csv"), "element", "classification").y[:, 0]) == [
        "K", "Na"]


# ---------------------------------------------------------------- the file's own line
LINES = [  # (file's text, target, task, what is said): each bad cell is on line 6
    ("x,y\n\n1,2\n\n3,4\n5,oops\n6,7\n", "y", "regression",
     "column 'y' line 6 is not a number: 'oops' (class labels? data.task=classification)"),
    ("x,y\n\n1,2\n\n3,4\n5,6,7\n6,7\n", "y", "regression", "line 6 has 3 fields, the header has 2"),
    ("x,y\n1,\"two\nlines\"\n3,4\n\nNA,6\n", "y", "classification",
     "column 'x' line 6 is 'NA', which reads as a missing value (gradexp does not impute: fill "
     "or drop those rows)"),
    ("x,y\n1,\"two\nlines\"\n3,4\n\n5,\n", "y", "classification",
     "column 'y' line 6 is empty (every row needs a class label)"),
    ("x,y\r\n\r\n1,2\r\n\r\n3,4\r\n5,inf\r\n", "y", "regression",
     "column 'y' line 6 is inf (NaN or infinite values cannot be trained on)"),
    ("\n\nx,y\n1,\"a \"\"quoted\"\" word\"\n3,4\n5,6,7\n", "x", "regression",
     "line 6 has 3 fields, the header has 2"),
    ("x,y\n1,ab\"c\n2,3\n4,5\n\nNA,6\n", "y", "regression",  # a '"' inside a field is text
     "column 'x' line 6 is 'NA', which reads as a missing value (gradexp does not impute: fill "
     "or drop those rows)"),
]


LINES.append(  # a price written with thousands separators: it was pointed at classification,
    # which then trained it as hundreds of classes
    ("x,price\n\n1,2\n\n3,4\n5,\"209,014.08\"\n", "price", "regression",
     "column 'price' line 6 is not a number: '209,014.08' (a number with thousands separators: "
     "write it without them, e.g. pandas.read_csv(path, thousands=',').to_csv(path, "
     "index=False))"))


@pytest.mark.parametrize(("text", "target", "task", "said"), LINES,
                         ids=["blank", "ragged", "quoted", "label", "crlf", "top", "inner",
                              "thousands"])
def test_errors_name_the_files_line_past_blank_lines_and_quoted_line_breaks(tmp_path, text,
                                                                           target, task, said):
    # Before: the line was the row's count plus 2 (pyarrow skips blank lines, and a quoted cell
    # may span lines), so "line 4" for a cell on line 6.
    (tmp_path / "t.csv").write_bytes(text.encode())
    assert refusal(tmp_path / "t.csv", target, task) == said


def test_a_compressed_files_line_is_counted_in_its_text(tmp_path):
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(b"x,y\n\n1,2\n\n3,4\n5,oops\n"))
    assert refusal(tmp_path / "t.csv.gz", "x").startswith("column 'y' line 6 is not a number")


# ---------------------------------------------------------------- the header
@pytest.mark.parametrize("header", ["x,x,y", "x,x ,y"])
def test_a_column_name_used_twice_is_one_line_and_exit_2(tmp_path, header):
    # Before: KeyError: 'Field "x" exists 2 times in schema', a traceback and exit 1.
    (tmp_path / "dup.csv").write_text(f"{header}\n1,2,3\n4,5,6\n7,8,9\n")
    refused = refused_run(tmp_path, "data=csv", "data.path=dup.csv", "data.target=y")
    assert str(refused) == ("data.path=dup.csv: the header has 2 columns named 'x' (columns: "
                            "x, x, y); give each column its own name")
    assert refused.exit_code == 2
    (tmp_path / "unused.csv").write_text(f"{header},z\n1,2,3,4\n4,5,6,7\n")
    assert read_csv(str(tmp_path / "unused.csv"), "y", features=["z"]).features == ["z"]


@pytest.mark.parametrize(("text", "said", "sep"), [
    ("x1;x2;y\n1;2;3\n4;5;6\n", "';'", "';'"),
    ("x1\tx2\ty\n1\t2\t3\n4\t5\t6\n", "tabs", "'\\t'"),
], ids=["semicolons", "tabs"])
def test_a_file_separated_by_semicolons_or_tabs_says_how_to_convert_it(tmp_path, monkeypatch,
                                                                       text, said, sep):
    # Before: "no such column in semi.csv (columns: x1;x2;y)", and nothing more.
    (tmp_path / "semi.csv").write_text(text)
    with pytest.raises(ConfigError) as refused:
        read_csv(str(tmp_path / "semi.csv"), "y")
    hint = (f"; the file seems separated by {said}, and gradexp reads commas: convert it, e.g. "
            f"pandas.read_csv('{tmp_path / 'semi.csv'}', sep={sep}).to_csv('semi_commas.csv', "
            "index=False)")
    assert str(refused.value).endswith(hint)
    assert convert_as_said(str(refused.value), tmp_path, monkeypatch).x.tolist() == [[1, 2],
                                                                                     [4, 5]]


def test_a_semicolon_file_with_decimal_commas_says_decimal_too(tmp_path, monkeypatch):
    # Its rows split at the decimal commas: a ragged row first, before any column is looked up.
    (tmp_path / "semi.csv").write_text("x1;x2;y\n1,5;2;3\n4;5,25;6\n")
    said = refusal(tmp_path / "semi.csv", "y")
    assert said.startswith("line 2 has 2 fields, the header has 1; the file seems separated by "
                           "';', and gradexp reads commas")
    assert "sep=';', decimal=','" in said
    assert convert_as_said(said, tmp_path, monkeypatch).x.tolist() == [[1.5, 2], [4, 5.25]]


def convert_as_said(message: str, folder, monkeypatch):
    """Run the conversion the hint says, in `folder`, and read what it wrote."""
    import pandas

    command = re.search(r"e\.g\. (pandas\..*)$", message).group(1)
    monkeypatch.chdir(folder)
    eval(command, {"pandas": pandas})  # the person's copy and paste
    return read_csv("semi_commas.csv", "y")


# ---------------------------------------------------------------- pandas' index column
def houses(n: int = 40):
    """A DataFrame as a person has one before `to_csv`: decimal and integer columns."""
    import pandas as pd

    rng = np.random.default_rng(1)
    area, rooms = rng.uniform(40, 200, n).round(1), rng.integers(1, 6, n)
    return pd.DataFrame({"area": area, "rooms": rooms,
                         "price": (0.02 * area + 0.3 * rooms).round(3)})


def test_the_unnamed_index_pandas_writes_is_the_rows_index_not_a_feature(tmp_path):
    # Before: to_csv's default index (an empty header over 0..n-1) was a feature named '':
    # the row number leaked into the model.
    import pandas as pd

    houses().to_csv(tmp_path / "houses.csv")  # pandas' default: index=True
    assert (tmp_path / "houses.csv").read_text().startswith(",area,rooms,price\n")
    table = read_csv(str(tmp_path / "houses.csv"), "price")
    as_pandas = pd.read_csv(tmp_path / "houses.csv", index_col=0)
    assert table.features == ["area", "rooms"] and table.integer_features == ["rooms"]
    np.testing.assert_array_equal(table.x, as_pandas[["area", "rooms"]].to_numpy(float))
    # An index with a name is a column the person named: kept, as pandas keeps it.
    houses().rename_axis("house").to_csv(tmp_path / "named.csv")
    assert read_csv(str(tmp_path / "named.csv"), "price").features == ["house", "area", "rooms"]


def test_a_run_on_a_file_with_pandas_index_says_so_and_its_model_takes_the_features(
        tmp_path, store, capsys, monkeypatch):
    import mlflow
    import pandas as pd

    houses().to_csv(tmp_path / "houses.csv")
    result = run(store, "data=csv", "data.path=houses.csv", "data.target=price",
                 "gradcheck=off", "trainer.epochs=3", launch_dir=tmp_path, quiet=False)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: data.path=houses.csv: its first column has no name, as the index "
        "DataFrame.to_csv writes: left out as the rows' index, not a feature (as "
        "pandas.read_csv(..., index_col=0) reads it)"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    model = mlflow.pyfunc.load_model(f"runs:/{result.run_id}/model")
    assert model.metadata.signature.inputs.input_names() == ["area", "rooms"]
    rows = pd.read_csv(tmp_path / "houses.csv", index_col=0).drop(columns="price")
    assert model.predict(rows).shape == (len(rows), 1)


def test_parquet_npz_and_excel_files_get_their_own_advice_and_a_tilde_is_home(tmp_path,
                                                                              monkeypatch):
    # Before: parquet "not UTF-8 text", .npz and .xlsx "a zip archive: unzip it first", and
    # data.path='~/x.csv' "no such file".
    import pandas as pd

    rows = pd.DataFrame({"x": [1.0, 2.0], "y": [2.0, 4.0]})
    rows.to_parquet(tmp_path / "reg.parquet")
    np.savez(tmp_path / "reg.npz", x=rows.x.to_numpy())
    (tmp_path / "reg.xlsx").write_bytes(b"PK\x03\x04" + b"\0" * 40)
    assert refusal(tmp_path / "reg.parquet", "y").startswith("cannot read it (a parquet file")
    assert refusal(tmp_path / "reg.npz", "y").startswith("cannot read it (a numpy .npz archive")
    assert refusal(tmp_path / "reg.xlsx", "y").startswith("cannot read it (an Excel workbook")
    rows.to_json(tmp_path / "reg.json", orient="records")  # one line: "the file is empty"
    assert refusal(tmp_path / "reg.json", "y").startswith("cannot read it (JSON, not csv")
    rows.to_csv(tmp_path / "home.csv", index=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert read_csv("~/home.csv", "y").x[:, 0].tolist() == [1.0, 2.0]


def test_a_file_without_a_header_or_with_trailing_commas_or_a_comment_says_so(tmp_path):
    # "no such column (columns: 0.12, 43.3, 9.01)", "column '' line 2 is empty" and "line 2
    # has 2 fields, the header has 1" said what, not why
    (tmp_path / "bare.csv").write_text("0.12,43.3,9.01\n0.5,40.1,8.2\n")
    assert refusal(tmp_path / "bare.csv", "y").endswith(
        "; its first line is numbers, not names: the file needs a header row of column names")
    (tmp_path / "trailing.csv").write_text("x,y,\n1,2,\n3,4,\n")
    assert refusal(tmp_path / "trailing.csv", "y") == (
        "a column has no name (columns: x, y, ); lines that end with a comma make one: remove "
        "the trailing commas, or choose the features with data.features=[...]")
    (tmp_path / "comment.csv").write_text("# prices of 2025\nx,y\n1,2\n")
    assert refusal(tmp_path / "comment.csv", "y") == (
        "line 2 has 2 fields, the header has 1; the first line, a comment, is read as the "
        "header: remove the comment lines above it")


# ---------------------------------------------------------------- numbers written with commas
DECIMAL = ("(a number with a decimal comma: write it with a decimal point, e.g. "
           "pandas.read_csv(path, decimal=',').to_csv(path, index=False))")
THOUSANDS = ("(a number with thousands separators: write it without them, e.g. "
             "pandas.read_csv(path, thousands=',').to_csv(path, index=False))")


def follow(message: str, path) -> None:
    """Run the pandas line the hint says on the file at `path`, as a person would."""
    import pandas

    command = re.search(r"e\.g\. (pandas\..*?index=False\))", message).group(1)
    eval(command, {"pandas": pandas, "path": str(path)})


@pytest.mark.parametrize(("text", "said", "x", "y"), [
    # Before: "(a number with thousands separators ... thousands=',')", which read 0,126 as 126.
    ('"x1","x2","y"\n"0,126","0,788","-0,982"\n"-0,132","0,844","-1,831"\n',
     "column 'x1' line 2 is not a number: '0,126'", [[0.126, 0.788], [-0.132, 0.844]],
     [-0.982, -1.831]),
    # Before: "(features must be numbers: choose them with data.features=[...])"
    ('x1,x2,y\n"1,5","2,25","12,5"\n"0,5","1,75","3,5"\n',
     "column 'x1' line 2 is not a number: '1,5'", [[1.5, 2.25], [0.5, 1.75]], [12.5, 3.5]),
    # A target: before, "(class labels? data.task=classification)", which trained a price as
    # one class per row at accuracy 0.
    ('x1,x2,y\n0.5,1,"-0,98"\n1.5,2,"2,14"\n',
     "column 'y' line 2 is not a number: '-0,98'", [[0.5, 1], [1.5, 2]], [-0.98, 2.14]),
    # '1,234' reads both ways; '2,5' in its column, or '0,5' elsewhere in the file, only one.
    ('x,y\n"1,234",1\n"2,5",2\n', "column 'x' line 2 is not a number: '1,234'",
     [[1.234], [2.5]], [1, 2]),
    ('x,z,y\n"1,234","0,5",1\n"2,500","1,5",2\n', "column 'x' line 2 is not a number: '1,234'",
     [[1.234, 0.5], [2.5, 1.5]], [1, 2]),
], ids=["quoted", "one-five", "target", "column", "file"])
def test_a_decimal_comma_is_said_and_its_conversion_reads_the_numbers_written(tmp_path, text,
                                                                             said, x, y):
    (tmp_path / "t.csv").write_text(text)
    message = refusal(tmp_path / "t.csv", "y")
    assert message == f"{said} {DECIMAL}"
    follow(message, tmp_path / "t.csv")
    table = read_csv(str(tmp_path / "t.csv"), "y")
    np.testing.assert_allclose(table.x, x)
    np.testing.assert_allclose(table.y[:, 0], y)


def test_thousands_separators_only_when_every_number_with_commas_can_have_them(tmp_path):
    (tmp_path / "prices.csv").write_text('x,y\n1,"1,234"\n2,"12,345.6"\n3,"-1,000,000"\n')
    message = refusal(tmp_path / "prices.csv", "y")
    assert message == f"column 'y' line 2 is not a number: '1,234' {THOUSANDS}"
    follow(message, tmp_path / "prices.csv")
    assert read_csv(str(tmp_path / "prices.csv"), "y").y[:, 0].tolist() == [1234, 12345.6,
                                                                             -1000000]
    # Every one read both ways: both readings, neither picked.
    (tmp_path / "either.csv").write_text('x,y\n1,"1,234"\n2,"2,500"\n')
    assert refusal(tmp_path / "either.csv", "y") == (
        "column 'y' line 2 is not a number: '1,234' (a thousands separator, or a decimal comma? "
        "the file's numbers read both ways: as meant, e.g. pandas.read_csv(path, "
        "thousands=',') or decimal=',', then .to_csv(path, index=False))")
    # Some only one way, some only the other: no conversion reads them all right.
    (tmp_path / "mixed.csv").write_text('x,y\n"0,5","12,345.6"\n"1,5",2\n')
    assert refusal(tmp_path / "mixed.csv", "y") == (
        "column 'x' line 2 is not a number: '0,5' (commas as thousands separators "
        "('12,345.6') and as decimal commas ('0,5') in one file: no one reading fits, write its "
        "numbers without thousands separators and with a decimal point)")


def test_excels_sep_line_is_skipped_by_the_conversion_said(tmp_path, monkeypatch):
    # Before: pandas.read_csv('excel.csv', sep=';', decimal=','), which read 'sep=' as the header.
    (tmp_path / "excel.csv").write_text("sep=;\nx1;x2;y\n0,5;1;-0,25\n1,5;2;2,75\n")
    message = refusal(tmp_path / "excel.csv", "y")
    assert message == (
        f"line 3 has 3 fields, the header has 1; its first line 'sep=;' is Excel's note of the "
        f"separator, read as the header: convert it, e.g. pandas.read_csv("
        f"'{tmp_path / 'excel.csv'}', sep=';', skiprows=1, decimal=',').to_csv("
        "'excel_commas.csv', index=False)")
    monkeypatch.chdir(tmp_path)
    follow(message, tmp_path / "excel.csv")
    table = read_csv("excel_commas.csv", "y")
    assert table.x.tolist() == [[0.5, 1], [1.5, 2]] and table.y[:, 0].tolist() == [-0.25, 2.75]
    (tmp_path / "plain.csv").write_text("sep=;\nx1;y\n1;2\n")  # no commas: the header is asked
    assert refusal(tmp_path / "plain.csv", "y").endswith(
        "(columns: sep=;); its first line 'sep=;' is Excel's note of the separator, read as the "
        f"header: convert it, e.g. pandas.read_csv('{tmp_path / 'plain.csv'}', sep=';', "
        "skiprows=1).to_csv('plain_commas.csv', index=False)")


# ---------------------------------------------------------------- data.target, data.features
def test_a_column_named_in_another_case_by_number_or_twice_is_one_line(tmp_path):
    (tmp_path / "reg.csv").write_text("x1,x2,y\n1,2,3\n4,5,6\n")
    path = tmp_path / "reg.csv"
    # Before: no hint past the columns' list.
    assert refusal(path, "Y") == (f"data.target=Y: no such column in {path} (columns: x1, x2, y)"
                                  "; did you mean 'y'? (names are case-sensitive)")
    assert refusal(path, "2") == (f"data.target=2: no such column in {path} (columns: x1, x2, y)"
                                  "; data.target takes names from the header, not positions")
    assert refusal(path, "y", features=["X1"]) == (
        f"data.features: no such column 'X1' in {path} (columns: x1, x2, y); did you mean 'x1'? "
        "(names are case-sensitive)")
    # QA: data.target=true is Hydra's boolean True: "did you mean 'true'?", what was typed
    (tmp_path / "flags.csv").write_text("x1,true\n1,2\n4,5\n")
    assert refusal(tmp_path / "flags.csv", "True").endswith(
        "; Hydra reads true as a boolean: quote it, \"data.target='true'\"")
    # Before: trained on x1 twice, and logged the signature "x1, x1".
    assert refusal(path, "y", features=["x1", " x1"]) == (
        "data.features: x1 is named twice; name each column once")
