"""Python-side mistakes said in one line (QA of the Python API): gradexp.run / gradexp.sweep
given a list, a dict or a non-string, a shell-typed string of several overrides or -m; a data
loader returning a scalar y or None for x; check_model given Keras arguments as compile takes
them, a loss class, a loss without y, or a function for the model."""

from __future__ import annotations

import re

import numpy as np
import pytest

import gradexp
from conftest import user_modules


# ---------------------------------------------------------------- gradexp.run / gradexp.sweep
@pytest.mark.parametrize(("call", "overrides", "got"), [
    ("run", [["optimizer=adam", "trainer.epochs=1"]],
     "a list ['optimizer=adam', 'trainer.epochs=1']: unpack it, gradexp.run(*overrides)"),
    ("run", [{"optimizer": "adam"}],
     "a dict {'optimizer': 'adam'}: give key=value strings, "
     "gradexp.run(*[f'{k}={v}' for k, v in overrides.items()])"),
    ("run", [3], "3 (int): give 'key=value' strings, e.g. "
                 "gradexp.run('optimizer=adam', 'trainer.epochs=1')"),
    ("run", [None], "None: give 'key=value' strings, e.g. "
                    "gradexp.run('optimizer=adam', 'trainer.epochs=1')"),
    ("sweep", [["optimizer=sgd,adam"]],
     "a list ['optimizer=sgd,adam']: unpack it, gradexp.sweep(*overrides)"),
])
def test_overrides_that_are_not_strings_are_a_type_error_in_one_line(tmp_path, call, overrides,
                                                                      got):
    with pytest.raises(TypeError) as refused:
        getattr(gradexp, call)(*overrides, launch_dir=tmp_path)
    assert str(refused.value) == (f"gradexp.{call}: overrides are strings, one per argument; "
                                  f"got {got}")
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(("call", "overrides", "line"), [
    ("run", ["optimizer=adam loss=mae"],
     "cannot read the override 'optimizer=adam loss=mae': it holds 2 overrides; pass each as "
     "its own argument: gradexp.run('optimizer=adam', 'loss=mae')"),
    ("sweep", ["optimizer=sgd,adam loss=mae"],
     "cannot read the override 'optimizer=sgd,adam loss=mae': it holds 2 overrides; pass each "
     "as its own argument: gradexp.sweep('optimizer=sgd,adam', 'loss=mae')"),
    ("run", ["data.path=~/x.csv"],
     "cannot read the override data.path=~/x.csv: LexerNoViableAltException: data.path=~/x.csv; "
     "to give it as text, quote it for Hydra inside the Python string: \"data.path='~/x.csv'\""),
    ("run", ["-m", "optimizer=sgd,adam"],
     "-m: the command line's multirun flag; from Python, call gradexp.sweep(...) with the "
     "overrides"),
    ("sweep", ["--multirun", "optimizer=sgd,adam"],
     "--multirun: gradexp.sweep runs a multirun already; pass the overrides only"),
    ("run", ["--cfg", "job"],
     "--cfg: gradexp.run takes overrides (key=value), not the command line's options; for "
     "--cfg, run python -m gradexp"),
])
def test_shell_words_get_advice_for_python(tmp_path, call, overrides, line):
    with pytest.raises(gradexp.GradexpError) as refused:
        getattr(gradexp, call)(*overrides, launch_dir=tmp_path)
    assert str(refused.value) == line
    assert refused.value.exit_code == 2
    assert not (tmp_path / "mlflow.db").exists()  # refused before any run opened


# ---------------------------------------------------------------- data loaders
LOADERS = """
import numpy as np

def scalar_y():
    return np.random.rand(20, 1).astype("float32"), np.float32(1.0)
"""


def test_a_loader_returning_a_scalar_y_is_one_line(tmp_path, monkeypatch):
    with user_modules(tmp_path, monkeypatch, scal=LOADERS):
        with pytest.raises(gradexp.GradexpError) as refused:
            gradexp.run("data=custom", "data._target_=scal.scalar_y", "trainer.epochs=1",
                        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", launch_dir=tmp_path)
    assert str(refused.value) == (
        "data._target_=scal.scalar_y: returned y = a single float32 (1.0); a data loader "
        "returns (x, y) as arrays of rows (numpy, lists, pandas), y: one target a row")
    assert refused.value.exit_code == 2


@pytest.mark.parametrize(("loaded", "task", "said"), [
    ((None, np.zeros((20, 1))), "regression",
     "returned x = None; a data loader returns (x, y) as arrays of rows (numpy, lists, "
     "pandas), x: rows x features"),
    ((np.zeros((20, 2)), np.array(3.0)), "regression",
     "returned y = a single 0-d array (3.0); a data loader returns (x, y) as arrays of rows "
     "(numpy, lists, pandas), y: one target a row"),
    (((np.zeros((20, 2)), np.zeros(20)), (np.zeros((5, 2)), "a")), "classification",
     "returned y_val = a single str (a); a data loader returns (x, y) as arrays of rows "
     "(numpy, lists, pandas), y_val: one target a row"),
])
def test_a_loader_returning_none_or_a_single_value_is_one_line(loaded, task, said):
    from gradexp.schema import ConfigError
    from gradexp.user_data import from_user_loader

    with pytest.raises(ConfigError) as refused:
        from_user_loader(lambda: loaded, name="custom", task=task, val_fraction=0.2,
                         test_fraction=0.0, split_seed=0, standardize=True, kwargs={},
                         target="my.load")
    assert str(refused.value) == f"data._target_=my.load: {said}"


# ---------------------------------------------------------------- check_model
def _model():
    import keras

    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="tanh"),
                             keras.layers.Dense(1)])


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 1)).astype("float32")


def test_check_model_takes_a_keras_loss_name_as_compile_does():
    import keras

    from gradexp.gradcheck import check_model

    x, y = _data()
    model = _model()
    with pytest.raises(ValueError, match=r"^loss='msee': not a Keras loss name \(e\.g\. 'mse', "
                                         r"'mae', 'binary_crossentropy', "
                                         r"'sparse_categorical_crossentropy'\)$"):
        check_model(model, x, y, loss="msee")
    # the scalar compile trains: the batch mean of Keras' per-row loss
    by_name = check_model(model, x, y, loss="mse", method="jacobian")
    assert by_name.passed and by_name.dtype_used == "float64"
    by_instance = check_model(model, x, y, loss=keras.losses.MeanSquaredError(),
                              method="jacobian")
    assert [e.name for e in by_name.entries] == [e.name for e in by_instance.entries]
    for named, instance in zip(by_name.entries, by_instance.entries):
        assert named.worst_output_index == instance.worst_output_index
        assert np.isclose(named.worst_analytical, instance.worst_analytical, rtol=1e-10)


def test_check_model_refuses_argument_mistakes_in_one_line():
    import keras

    from gradexp.gradcheck import check_model

    x, y = _data()
    model = _model()
    with pytest.raises(TypeError, match=r"^loss=MeanSquaredError is a class; pass an instance: "
                                        r"loss=MeanSquaredError\(\)$"):
        check_model(model, x, y, loss=keras.losses.MeanSquaredError)
    with pytest.raises(ValueError, match=re.escape(
            "loss= needs the targets y: check_model(model, x, y, loss=...); without a loss the "
            "model's outputs are checked")):
        check_model(model, x, loss=keras.losses.MeanSquaredError())
    with pytest.raises(TypeError, match=re.escape(
            "check_model takes a keras.Model, got a function; for a function of tensors use "
            "check_gradients(f, [x])")):
        check_model(lambda t: t * 2, x, y, loss=keras.losses.MeanSquaredError())
