"""Raw tf.random in one layer, a wrong training-only backward in another: the check holds the
random layer in inference mode and still fails the wrong one, however the model is written.

A review found the first way of holding (a layer matched by name) miss a subclassed model's
float64 twin (its layers named anew), hold a layer of the same name in another nested model, and
leave Keras' call context saying inference for the layers after a held one; the culprit search
then blamed the loss. Every case here passed the check before the fix (the wrong layer unseen).
"""

import numpy as np
import pytest
from test_what_trains import USER_MODELS

import conftest

# test_what_trains' models (TrainingSoftplus, RawNoise, ...) and these
MODELS = USER_MODELS + '''


class Sub(keras.Model):
    """subclassed: layers auto-named in __init__"""
    def __init__(self, buggy=True, n_outputs=1, **kwargs):
        super().__init__(**kwargs)
        self.buggy = buggy
        self.n_outputs = n_outputs
        self.enc = keras.layers.Dense(6, activation="tanh",
                                      kernel_initializer=keras.initializers.GlorotUniform(1))
        self.noise = RawNoise()
        self.pre = keras.layers.Dense(6, kernel_initializer=keras.initializers.GlorotUniform(2))
        self.act = TrainingSoftplus(buggy=buggy)
        self.head = keras.layers.Dense(n_outputs,
                                       kernel_initializer=keras.initializers.GlorotUniform(3))

    def call(self, x, training=None):
        h = self.noise(self.enc(x), training=training)
        return self.head(self.act(self.pre(h), training=training))

    def get_config(self):
        return {**super().get_config(), "buggy": self.buggy, "n_outputs": self.n_outputs}


def sub(n_features, n_outputs, buggy=True):
    return Sub(buggy=buggy, n_outputs=n_outputs)


class Block(keras.layers.Layer):
    """a custom block: its sublayers made in __init__ (auto-named)"""
    def __init__(self, buggy=True, **kwargs):
        super().__init__(**kwargs)
        self.buggy = buggy
        self.noise = RawNoise()
        self.pre = keras.layers.Dense(6, kernel_initializer=keras.initializers.GlorotUniform(2))
        self.act = TrainingSoftplus(buggy=buggy)

    def call(self, x, training=None):
        return self.act(self.pre(self.noise(x, training=training)), training=training)

    def get_config(self):
        return {**super().get_config(), "buggy": self.buggy}


def block_model(n_features, n_outputs, buggy=True, noise=True):
    inputs = keras.Input((n_features,))
    h = keras.layers.Dense(6, activation="tanh", name="encoder",
                           kernel_initializer=keras.initializers.GlorotUniform(1))(inputs)
    h = Block(buggy=buggy, name="block")(h)
    out = keras.layers.Dense(n_outputs, name="head",
                             kernel_initializer=keras.initializers.GlorotUniform(3))(h)
    return keras.Model(inputs, out)


class OwnOp(keras.Model):
    """subclassed, layers named; a training-only wrong backward in the model's own call"""
    def __init__(self, noise=True, n_outputs=1, **kwargs):
        super().__init__(**kwargs)
        self.use_noise = noise
        self.n_outputs = n_outputs
        self.enc = keras.layers.Dense(6, activation="tanh", name="enc",
                                      kernel_initializer=keras.initializers.GlorotUniform(1))
        self.noise = RawNoise(name="noise")
        self.head = keras.layers.Dense(n_outputs, name="head",
                                       kernel_initializer=keras.initializers.GlorotUniform(3))

    def call(self, x, training=None):
        h = self.enc(x)
        if self.use_noise:
            h = self.noise(h, training=training)
        h = softplus_wrong_below_zero(h) if training else tf.math.softplus(h)
        return self.head(h)

    def get_config(self):
        return {**super().get_config(), "noise": self.use_noise, "n_outputs": self.n_outputs}


def own_op(n_features, n_outputs, noise=True):
    return OwnOp(noise=noise, n_outputs=n_outputs, name="ownop")


def twin_blocks(n_features, n_outputs, buggy=True):
    """two nested blocks built by one factory: a layer named 'act' in each"""
    def block(name, act):
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(
            6, name="proj", kernel_initializer=keras.initializers.GlorotUniform(2)), act],
            name=name)
    inputs = keras.Input((n_features,))
    h = keras.layers.Dense(6, activation="tanh", name="encoder",
                           kernel_initializer=keras.initializers.GlorotUniform(1))(inputs)
    h = block("b1", RawNoise(name="act"))(h)
    h = block("b2", TrainingSoftplus(buggy=buggy, name="act"))(h)
    out = keras.layers.Dense(n_outputs, name="head",
                             kernel_initializer=keras.initializers.GlorotUniform(3))(h)
    return keras.Model(inputs, out)


class NoisyBlock(keras.layers.Layer):
    """raw noise in its own call, and a sublayer it hands `training` to"""
    def __init__(self, noise=True, **kwargs):
        super().__init__(**kwargs)
        self.noise = noise
        self.inner = keras.layers.Dropout(0.0, name="inner_drop")

    def call(self, x, training=None):
        h = self.inner(x, training=training)
        if training and self.noise:
            h = h + tf.random.normal(tf.shape(h), stddev=0.1, dtype=h.dtype)
        return h

    def get_config(self):
        return {**super().get_config(), "noise": self.noise}


class Outer(keras.layers.Layer):
    """a composite layer: its later sublayer takes `training` from Keras' call context"""
    def __init__(self, buggy=True, noise=True, **kwargs):
        super().__init__(**kwargs)
        self.buggy, self.use_noise = buggy, noise
        self.block = NoisyBlock(noise=noise, name="noisy")
        self.act = TrainingSoftplus(buggy=buggy, name="act2")

    def call(self, x, training=None):
        return self.act(self.block(x, training=training))

    def get_config(self):
        return {**super().get_config(), "buggy": self.buggy, "noise": self.use_noise}


def outer_model(n_features, n_outputs, buggy=True, noise=True):
    inputs = keras.Input((n_features,))
    h = keras.layers.Dense(6, name="encoder",
                           kernel_initializer=keras.initializers.GlorotUniform(1))(inputs)
    h = Outer(buggy=buggy, noise=noise, name="outer")(h)
    out = keras.layers.Dense(n_outputs, name="head",
                             kernel_initializer=keras.initializers.GlorotUniform(3))(h)
    return keras.Model(inputs, out)
'''


LEAN = ("gradcheck.plots=false", "tracking.log_model=false", "data=sine", "trainer.epochs=1",
        "gradcheck.at_end=false")


@pytest.fixture
def held_models(tmp_path, request):
    import re

    # a module name per test (a module is imported once per process)
    name = "held_models_" + re.sub(r"\W", "_", request.node.name)
    (tmp_path / f"{name}.py").write_text(MODELS)
    return name


@pytest.mark.heavy  # ~4 s each
@pytest.mark.parametrize(("builder", "culprit"), [
    ("sub", None),  # subclassed, layers named by Keras (the twin names them anew)
    ("block_model", "block/training_softplus"),  # the random layer inside a custom block
    ("twin_blocks", "b2/act"),  # a layer named `act` in two nested models
    ("outer_model", "outer/act2"),  # the layer after a held one takes `training` from Keras
    ("own_op", "ownop"),  # the wrong op in the model's own call
])
def test_a_wrong_training_path_fails_beside_a_raw_random_layer(store, client, tmp_path,
                                                               held_models, builder, culprit):
    result = conftest.run(store, *LEAN, "model=custom",
                          f"model._target_={held_models}.{builder}", launch_dir=tmp_path)
    report = conftest.read_report(client, result.run_id, 0)
    assert result.gradcheck_passed is False, report["notes"]
    assert report["mode"] == "train"
    assert "draw" in report["notes"][0] and "every other layer in training mode" in \
        report["notes"][0], report["notes"]
    assert report["culprits"], "the loss was blamed"
    if culprit is not None:
        # (Keras numbers a layer named in __init__ without name=: training_softplus_2)
        assert any(name.startswith(culprit) for name in report["culprits"]), report["culprits"]


def test_check_model_refuses_a_verdict_on_a_loss_random_in_every_mode(tmp_path, held_models):
    import importlib
    import sys

    import keras
    import tensorflow as tf

    from gradexp.gradcheck import check_model

    sys.path.insert(0, str(tmp_path))
    module = importlib.import_module(held_models)

    class AlwaysNoise(keras.layers.Layer):
        def call(self, x):
            return x + tf.random.normal(tf.shape(x), stddev=0.1, dtype=x.dtype)

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), AlwaysNoise(),
                              keras.layers.Dense(1)])
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 3)), rng.normal(size=(16, 1))
    for mode in ("train", "inference"):
        with pytest.raises(ValueError, match="^not checked: the loss differs"):
            check_model(model, x, y, loss=keras.losses.MeanSquaredError(), mode=mode)
    # and a model of the file above, noise held, fails on its wrong layer
    report = check_model(module.outer_model(3, 1), x, y, loss=keras.losses.MeanSquaredError())
    assert not report.passed and report.culprits == ["outer/act2"]


def test_your_layers_in_a_module_named_keras_something_are_held_too(store, client, tmp_path):
    # QA: layers were taken for Keras' own by their module's name starting with "keras", and a
    # module keras_qa.py sent the whole model to inference mode: the wrong layer passed
    (tmp_path / "keras_layers_of_mine.py").write_text(MODELS)
    result = conftest.run(store, *LEAN, "model=custom",
                          "model._target_=keras_layers_of_mine.block_model", launch_dir=tmp_path)
    report = conftest.read_report(client, result.run_id, 0)
    assert result.gradcheck_passed is False and report["mode"] == "train", report["notes"]


GENERATOR_MODEL = '''
import keras
import tensorflow as tf


class GeneratorNoise(keras.layers.Layer):
    """noise from a tf.random.Generator of its own (TensorFlow's recommended RNG)"""
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.generator = tf.random.Generator.from_seed(7)

    def call(self, x, training=None):
        if training:
            return x + 0.1 * tf.cast(self.generator.normal(tf.shape(x)), x.dtype)
        return x


def build(n_features, n_outputs):
    x = keras.Input((n_features,))
    h = GeneratorNoise()(keras.layers.Dense(8, activation="tanh")(x))
    return keras.Model(x, keras.layers.Dense(n_outputs)(h))
'''


@pytest.mark.heavy  # ~7 s
def test_a_check_leaves_a_layers_tf_random_generator_where_training_left_it(store, tmp_path):
    # QA: the start check's forward passes in training mode drew from the layer's generator,
    # and training went on from another point of its stream: final loss 0.0502 checked,
    # 0.0458 with gradcheck=off
    (tmp_path / "generator_model.py").write_text(GENERATOR_MODEL)
    common = ("tracking.log_model=false", "gradcheck.plots=false", "data=sine", "model=custom",
              "model._target_=generator_model.build", "trainer.epochs=3", "trainer.batch_size=32",
              "seed=1")
    unchecked = conftest.run(store, *common, "gradcheck=off", launch_dir=tmp_path)
    # (review: in float32 the check's passes run on the model itself, the first one outside)
    for dtype in ("float64", "float32"):
        checked = conftest.run(store, *common, "gradcheck.every_n_epochs=1",
                               f"gradcheck.dtype={dtype}", launch_dir=tmp_path)
        assert checked.gradcheck_passed is True
        np.testing.assert_array_equal(checked.history["loss"], unchecked.history["loss"])
        assert checked.final_loss == unchecked.final_loss
