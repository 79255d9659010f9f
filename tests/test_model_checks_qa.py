"""QA findings on check_model and the culprit search with Keras models: a wrong layer under a
mixed-precision policy named (not the whole model), several inputs or outputs refused in one
line before any work, the float64 twin's warning and failure notes readable."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run

MIXED_BAD = '''
import keras
import tensorflow as tf

G = keras.initializers.GlorotUniform


@tf.custom_gradient
def scale_op(x, w):
    def grad(up):
        return up * w, 1.1 * tf.reduce_sum(up * x, axis=0)  # dL/dw 10% off
    return x * w, grad


class BadScale(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones", name="w")

    def call(self, x):
        return scale_op(x, tf.convert_to_tensor(self.w))


def build(n_features, n_outputs, policy="mixed_float16"):
    inp = keras.Input((n_features,))
    h = keras.layers.Dense(6, activation="tanh", name="d1", kernel_initializer=G(1),
                           dtype=policy)(inp)
    h = BadScale(name="bad_half", dtype=policy)(h)
    return keras.Model(inp, keras.layers.Dense(n_outputs, name="head",
                                               kernel_initializer=G(2))(h))
'''


def _rows(n: int = 96, d: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype("float32")
    return x, np.tanh(x @ rng.normal(size=(d, 1))).astype("float32")


def _module(tmp_path, monkeypatch, name: str, source: str):
    import importlib

    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


@pytest.mark.heavy  # ~6 s
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_a_wrong_layer_under_a_mixed_precision_policy_is_named(tmp_path, monkeypatch, policy):
    """QA: a layer whose dL/dw is 1.1x under mixed_float16 was blamed on the model
    (culprits=['functional_1']): its float64 copy was compared with the float16 layer at 1e-3,
    float16 rounding "differed", and the layer was checked in float16 where finite differences
    are 0 or noise. The check names the layer, in float64, and says the model computes in half
    precision, as a run's check does."""
    import keras

    from gradexp.gradcheck import check_model

    module = _module(tmp_path, monkeypatch, f"mixed_bad_{policy}", MIXED_BAD)
    x, y = _rows()
    keras.utils.set_random_seed(1)
    report = check_model(module.build(5, 1, policy), x, y, loss=keras.losses.MeanSquaredError())
    assert report.passed is False
    assert report.culprits == ["bad_half"]
    (verdict,) = report.culprit_checks
    assert verdict.dtype == "float64" and verdict.variables == ["bad_half/w"]
    assert ("layers d1, bad_half compute in float16/bfloat16 (a mixed-precision policy): the "
            "check verifies their math in float64, not half precision's rounding or overflow"
            ) in report.notes


REGRESSION = """
import numpy as np


def load(n=96, d=5):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype("float32")
    y = (np.tanh(x @ rng.normal(size=(d, 1))) + 0.1 * rng.normal(size=(n, 1))).astype("float32")
    return x, y
"""


@pytest.mark.heavy  # ~8 s
def test_a_run_tags_the_wrong_mixed_precision_layer(tmp_path, store, client):
    """QA: in a run the tag gradexp.gradcheck.culprits said functional for the same model."""
    (tmp_path / "mixed_bad_run.py").write_text(MIXED_BAD)
    (tmp_path / "regression_rows.py").write_text(REGRESSION)
    result = run(store, "model=custom", "model._target_=mixed_bad_run.build", "data=custom",
                 "data._target_=regression_rows.load", "data.standardize=false",
                 "trainer.epochs=2", "seed=1", launch_dir=tmp_path)
    assert result.gradcheck_passed is False
    assert client.get_run(result.run_id).data.tags["gradexp.gradcheck.culprits"] == "bad_half"


def _two_inputs(as_dict: bool):
    import keras

    a, b = keras.Input((2,), name="a"), keras.Input((3,), name="b")
    h = keras.layers.Concatenate()([keras.layers.Dense(4)(a), keras.layers.Dense(4)(b)])
    return keras.Model({"a": a, "b": b} if as_dict else [a, b], keras.layers.Dense(1)(h))


def _two_outputs():
    import keras

    i = keras.Input((5,))
    h = keras.layers.Dense(8, activation="tanh")(i)
    return keras.Model(i, [keras.layers.Dense(1)(h), keras.layers.Dense(1)(h)])


def _subclassed_two_outputs():
    import keras

    class Two(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.a, self.b = keras.layers.Dense(1), keras.layers.Dense(1)

        def call(self, x):
            return {"a": self.a(x), "b": self.b(x)}

    model = Two()
    model(np.zeros((1, 5), "float32"))
    return model


@pytest.mark.parametrize("case, found", [
    ("dict inputs", "got x as a dict of 2 arrays and a model of 2 inputs;"),
    ("list inputs", "got x as a list of 2 arrays and a model of 2 inputs;"),
    ("two outputs", "got y as a list of 2 arrays and a model of 2 outputs;"),
    ("subclassed two outputs", "got a model of 2 outputs;"),
])
def test_several_inputs_or_outputs_are_refused_in_one_line(monkeypatch, case, found):
    """QA: IndexError, numpy's "inhomogeneous shape" and "'list' object has no attribute
    'dtype'" from inside check_model; now one ValueError saying what is supported and how to
    adapt the model, before any check is made."""
    import keras

    import gradexp.gradcheck.checker as checker
    from gradexp.gradcheck import check_model

    monkeypatch.setattr(checker, "check_gradients", lambda *a, **k: pytest.fail("checked"))
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(64, 2)).astype("float32"), rng.normal(size=(64, 3)).astype("float32")
    y = a[:, :1]
    model, x, y = {"dict inputs": (_two_inputs(True), {"a": a, "b": b}, y),
                   "list inputs": (_two_inputs(False), [a, b], y),
                   "two outputs": (_two_outputs(), np.concatenate([a, b], 1), [y, y]),
                   "subclassed two outputs": (_subclassed_two_outputs(),
                                              np.concatenate([a, b], 1), y)}[case]
    with pytest.raises(ValueError) as caught:
        check_model(model, x, y, loss=keras.losses.MeanSquaredError())
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("check_model takes a model of one input and one output tensor "
                              "(x: one array of rows x features, y: one array), " + found)
    assert "keras.Model(model.input, model.outputs[k])" in message


@pytest.mark.parametrize("share, shown", [(0.0014, "0.14%"), (0.0049, "0.49%"),
                                          (0.33, "33%"), (1.5, "150%")])
def test_a_twin_gap_below_one_percent_is_printed_with_its_digits(share, shown):
    """QA: a gap between the 1e-3 threshold and 0.5% printed "d1/kernel's gradient differs by
    0%" in the warning that the model rebuilt in float64 does not compute what it does."""
    from gradexp.gradcheck.rebuilt import difference

    exact = np.linspace(1.0, 2.0, 12).reshape(3, 4)
    outputs = np.ones(5)
    assert (difference(outputs, [exact * (1 + share)], outputs, [exact], ["d1/kernel"])
            == f"d1/kernel's gradient differs by {shown}")


UNREGISTERED = '''
import keras
import tensorflow as tf


class MyL2(keras.regularizers.Regularizer):
    def __init__(self, l2=0.1):
        self.l2 = l2

    def __call__(self, w):
        return self.l2 * tf.reduce_sum(tf.square(w))

    def get_config(self):
        return {"l2": self.l2}


def build(n_features, n_outputs):
    inp = keras.Input((n_features,))
    h = keras.layers.Dense(4, activation="tanh", name="d2", kernel_regularizer=MyL2(0.1))(inp)
    return keras.Model(inp, keras.layers.Dense(n_outputs, name="head")(h))
'''


def test_an_unregistered_custom_regularizer_is_told_how_to_register(tmp_path, monkeypatch):
    """QA: the float64 twin failed with only "Could not interpret regularizer identifier"."""
    import keras

    from gradexp.gradcheck import check_model

    module = _module(tmp_path, monkeypatch, "unregistered_l2", UNREGISTERED)
    x, y = _rows(32, 3)
    report = check_model(module.build(3, 1), x, y, loss=keras.losses.MeanSquaredError())
    assert report.passed is True and report.dtype_used == "float32"
    (note,) = report.notes
    assert ("cannot rebuild the model in float64: Error when deserializing class 'Dense' "
            "(layer d2): Could not interpret regularizer identifier MyL2 (a custom regularizer: "
            "decorate its class with @keras.saving.register_keras_serializable()); checked in "
            "the model's own dtype") in note
    # as told: registered, the model is rebuilt and checked in float64
    registered = _module(tmp_path, monkeypatch, "registered_l2", UNREGISTERED.replace(
        "class MyL2", "@keras.saving.register_keras_serializable('gradexp_qa')\nclass MyL2"))
    report = check_model(registered.build(3, 1), x, y, loss=keras.losses.MeanSquaredError())
    assert report.passed is True and report.dtype_used == "float64" and report.notes == []


def test_an_image_model_is_checked_on_its_float64_twin_of_the_images_shape():
    """QA: the twin was built on keras.Input((x.shape[-1],)), the images' single channel, so
    check_model fell back to float32 ("cannot rebuild the model in float64 ... expected
    min_ndim=4") and a correct CNN could fail there, blamed on the whole model."""
    import keras

    from gradexp.gradcheck import check_model

    keras.utils.set_random_seed(0)
    cnn = keras.Sequential([keras.Input((6, 6, 1)),
                            keras.layers.Conv2D(2, 3, activation="tanh"),
                            keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                            keras.layers.Dense(3)])
    x = np.random.default_rng(0).standard_normal((8, 6, 6, 1)).astype("float32")
    y = np.eye(3)[np.arange(8) % 3]
    report = check_model(cnn, x, y, loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    assert report.passed
    assert {entry.dtype for entry in report.entries} == {"float64"}
    assert not any("cannot rebuild" in note for note in report.notes)
