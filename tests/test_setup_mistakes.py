"""Every config or builder mistake a person can make is answered before anything is recorded
(issue 21, items 2 and 3): one `error:` line naming the key, exit code 2, and no MLflow run,
no sweep parent, no sweep folder left behind. Legitimate but unusual setups run with one warning.

The single-run cases go through the command line's own job function (gradexp.app.task) in this
process, on a config Hydra composed; the sweep cases through `python -m gradexp -m`.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from conftest import CONF, compose_config, run_cli

MY_MODELS = '''
import keras
import numpy as np

def forgot_return(y_true, y_pred):
    keras.ops.mean((y_true - y_pred) ** 2)

def no_input(n_features, n_outputs):  # built at its first call, as fit builds it
    return keras.Sequential([keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(n_outputs)])

def ids_model(n_features, n_outputs):
    inputs = keras.Input((n_features,), dtype="int32")  # token ids
    hidden = keras.layers.Flatten()(keras.layers.Embedding(20, 4)(inputs))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(hidden))

def masked_model(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    hidden = keras.layers.Masking(0.0)(keras.layers.Reshape((n_features, 1))(inputs))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(keras.layers.LSTM(2)(hidden)))

class TrainingReshape(keras.layers.Layer):
    def call(self, x, training=None):
        return keras.ops.reshape(x, (-1, 3)) if training else x  # wrong in training only

def training_shape_bug(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(TrainingReshape()(inputs)))

def frozen(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, keras.layers.Dense(n_outputs, trainable=False)(inputs))

def build(n_features, n_outputs, width=8):
    inputs = keras.Input((n_features,))
    hidden = keras.layers.Dense(width, activation="tanh")(inputs)
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(hidden))

def not_a_model(n_features, n_outputs):
    return "a string"

def three_features(n_features, n_outputs):
    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(inputs))

def image_cnn(n_features, n_outputs):
    inputs = keras.Input((4, 4, 1))
    flat = keras.layers.Flatten()(keras.layers.Conv2D(2, 3)(inputs))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(flat))

def stateful_rnn(n_features, n_outputs):
    inputs = keras.Input((n_features,), batch_size=4)  # a stateful RNN needs a fixed batch
    hidden = keras.layers.LSTM(2, stateful=True)(keras.layers.Reshape((n_features, 1))(inputs))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(hidden))

def three_outputs(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, keras.layers.Dense(3)(inputs))

def ends_in_softmax(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, keras.layers.Dense(n_outputs, activation="softmax")(inputs))

class NumpyTanh(keras.layers.Layer):
    def call(self, x):
        import tensorflow as tf
        return tf.numpy_function(np.tanh, [x], x.dtype)

def numpy_function(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(NumpyTanh()(inputs)))

class FixedThree(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(3, 1))

    def call(self, x):
        import tensorflow as tf
        return tf.matmul(x, self.w)

def fixed_three(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, FixedThree()(inputs))

def too_wide(n_features, n_outputs, width=8):
    if width > 4:
        raise ValueError(f"width {width} is too wide for this study")
    return keras.Sequential([keras.Input((n_features,)), keras.layers.Dense(n_outputs)])

def one_argument_loss(y_true):
    return y_true


import tensorflow as tf


class Scale(keras.layers.Layer):
    """x * w with a hand-written gradient whose grad_fn forgets the `variables` keyword."""

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones", name="w")

    def call(self, x):
        @tf.custom_gradient
        def scale(x):
            return x * self.w, lambda upstream: upstream * self.w
        return scale(x)


class ScaleWithShape(Scale):  # Keras then builds the model without calling it
    def compute_output_shape(self, shape):
        return shape


class Net(keras.Model):  # a subclassed model: its variables are made at its first call
    def __init__(self, n_outputs):
        super().__init__(name="net")
        self.scale, self.head = Scale(name="scale"), keras.layers.Dense(n_outputs)

    def call(self, x):
        return self.head(self.scale(x))


def forgets_variables(n_features, n_outputs, layer=Scale):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(layer(name="scale")(inputs)))


def forgets_variables_shaped(n_features, n_outputs):
    return forgets_variables(n_features, n_outputs, ScaleWithShape)


def forgets_variables_subclassed(n_features, n_outputs):
    return Net(n_outputs)


class ScaleWhenTraining(Scale):  # the hand-written gradient only on the training branch
    def call(self, x, training=None):
        return super().call(x) if training else x * self.w


def forgets_variables_training(n_features, n_outputs):
    return forgets_variables(n_features, n_outputs, ScaleWhenTraining)


class ScaleWithVariablesKeyword(Scale):  # as TensorFlow's docs write it for a variable read
    def call(self, x):
        @tf.custom_gradient
        def scale(x):
            w = tf.convert_to_tensor(self.w)

            def grad(upstream, variables=None):
                return upstream * w, [tf.reduce_sum(upstream * x, axis=0)]
            return x * w, grad
        return scale(x)


def two_inputs(n_features, n_outputs):
    left, right = keras.Input((1,), name="left"), keras.Input((1,), name="right")
    joined = keras.layers.Concatenate()([left, right])
    return keras.Model([left, right], keras.layers.Dense(n_outputs)(joined))


def dict_outputs(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, {"y": keras.layers.Dense(n_outputs)(inputs)})


def tuple_outputs(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    return keras.Model(inputs, (keras.layers.Dense(n_outputs)(inputs), inputs))


def variables_keyword(n_features, n_outputs):
    return forgets_variables(n_features, n_outputs, ScaleWithVariablesKeyword)


class EagerL2(keras.regularizers.Regularizer):
    """Reads the weights with .numpy(): runs only eagerly."""

    def __call__(self, w):
        return 0.01 * float(np.sum(w.numpy() ** 2))

def eager_regularizer(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    dense = keras.layers.Dense(n_outputs, kernel_regularizer=EagerL2())
    return keras.Model(inputs, dense(inputs))

class EagerScaled(keras.Model):
    """Scales its outputs by its weights read with .numpy(): runs only eagerly."""

    def __init__(self, n_outputs):
        super().__init__()
        self.dense = keras.layers.Dense(n_outputs)

    def call(self, x):
        return self.dense(x) * float(np.abs(self.dense.kernel.numpy()).max() + 1)

def eager_call(n_features, n_outputs):
    return EagerScaled(n_outputs)


@tf.custom_gradient
def half_square_sum(w):
    def grad(upstream):
        return upstream * w
    return 0.5 * tf.reduce_sum(w * w), grad


def custom_gradient_regularizer(n_features, n_outputs):
    # traces (the variable reaches the function as a tensor) and trains; eagerly, as the run's
    # final loss reads it after the last epoch, TensorFlow refuses it
    inputs = keras.Input((n_features,))
    dense = keras.layers.Dense(n_outputs, name="dense",
                               kernel_regularizer=lambda w: 0.01 * half_square_sum(w))
    return keras.Model(inputs, dense(inputs))'''
MY_DATA = '''
import numpy as np

def load(n=40):
    x = np.linspace(0, 1, n)[:, None]
    return x, 2 * x + 1

def images(n=30):
    x = np.random.default_rng(0).normal(size=(n, 4, 4, 1))
    return x, x.mean(axis=(1, 2, 3))

def ids(n=60):
    x = np.random.default_rng(0).integers(0, 20, size=(n, 3))
    return x, x.sum(axis=1, keepdims=True).astype(float)
'''
BROKEN = "raise RuntimeError('my module is broken')\n"
BROKEN_LAYERS = "import not_installed_xyz\n"  # a module of layers whose own import fails

# (overrides, the error line's words). Each a mistake of the config, the command line or the
# person's code that gradexp can know before it opens a run.
MISTAKES = [
    # token ids standardized into fractions, which the Embedding cast back to ~3 ids: a worse
    # fit, no word (QA)
    (["model=custom", "model._target_=wrong_models.ids_model", "data=custom",
      "data._target_=wrong_data.ids"],
     "model._target_=wrong_models.ids_model: the model's Input takes int32 (ids, not "
     "quantities), but data.standardize=true rescales the features, which turns ids into "
     "fractions: set data.standardize=false"),
    # zero padding standardized away: Masking(0.0) masked nothing, no word (QA, 2026-12-05)
    (["model=custom", "model._target_=wrong_models.masked_model", "data=sklearn",
      "data.name=diabetes"],
     "model._target_=wrong_models.masked_model: its Masking layer masking skips steps equal "
     "to 0.0, but data.standardize=true rescales the features, so padding no longer equals it: "
     "set data.standardize=false"),
    # a shape wrong in training mode only: "cannot run in the compiled training step", and
    # trainer.compile=false as advised ended a run FAILED in a traceback (QA)
    (["model=custom", "model._target_=wrong_models.training_shape_bug"],
     "model._target_=wrong_models.training_shape_bug: its call fails in training mode"),
    (["model=custom", "model._target_=wrong_models.training_shape_bug", "trainer.compile=false"],
     "model._target_=wrong_models.training_shape_bug: its call fails in training mode"),
    # every layer frozen: Keras' optimizer ended the run in a traceback (QA)
    (["model=custom", "model._target_=wrong_models.frozen"],
     "model._target_=wrong_models.frozen: the model has no trainable weights (every layer "
     "frozen, trainable=False?): there is nothing to train or check"),
    # a loss that returns nothing: a 99-line traceback from the first step, a run FAILED (QA)
    (["loss._target_=wrong_models.forgot_return"],
     "loss._target_=wrong_models.forgot_return: returned None; a loss returns its value (the "
     "rows' losses or their mean, a tensor): a missing `return`?"),
    # a `_target_` for a group option that does not read it
    (["model._target_=wrong_models.build"],
     "model._target_=wrong_models.build: model=linear builds with its own code "
     "(gradexp.models.linear) and would not read model.init_scale, model.seed; for your code "
     "use model=custom model._target_=wrong_models.build"),
    (["data._target_=wrong_data.load"],
     "data._target_=wrong_data.load: data=linear builds with its own code (gradexp.data.linear) "
     "and would not read data.n_samples"),
    # another option's name: the run was named adam and trained SGD; checks ran under a
    # recorded gradcheck.name (QA, 2026-12-06)
    (["optimizer.name=adam"],
     "optimizer.name=adam only renames the run's optimizer, and optimizer=sgd would run: "
     "choose the option with optimizer=adam"),
    (["gradcheck.name=probe"],
     "gradcheck.name=probe only renames the run's gradcheck, and gradcheck=off would run: "
     "choose the option with gradcheck=probe"),
    (["data.name=sine"],
     "data.name=sine only renames the run's data, and data=linear would run: choose the "
     "option with data=sine"),
    # another option's code with this option's keys: a TypeError's traceback, and the process
    # spun forever on the exception chain it left (QA, 2026-12-06)
    (["model._target_=gradexp.models.mlp"],
     "model._target_=gradexp.models.mlp is the code of model=mlp, which takes that option's "
     "keys, not model=linear's: choose model=mlp"),
    (["model=custom", "model._target_=gradexp.models.sequential"],
     "model._target_=gradexp.models.sequential is the code of model=digits_cnn and model=keras, "
     "which take those options' keys, not model=custom's: choose model=digits_cnn or "
     "model=keras"),
    # a layer module that is there but cannot import what it needs: its own reason, not "no
    # such module"
    (["model=keras", "model.layers=[{_target_:broken_layers.Mine,units:4}]"],
     "model.layers[0]._target_=broken_layers.Mine: ModuleNotFoundError: No module named "
     "'not_installed_xyz'"),
    # a layer written in YAML whose class is misspelt: the name it meant
    (["model=keras", "model.layers=[{_target_:keras.layers.Densee,units:4}]"],
     "model.layers[0]._target_=keras.layers.Densee: keras.layers has no Densee; did you mean "
     "keras.layers.Dense?"),
    # the person's builder
    (["model=custom", "model._target_=wrong_models.not_a_model"],
     "model._target_=wrong_models.not_a_model: returned a str, not a keras.Model"),
    (["model=custom", "model._target_=wrong_models.build", "+model.kwargs.widht=8"],
     "model._target_=wrong_models.build: cannot be called with n_features=1, n_outputs=1, "
     "widht=8"),
    (["model=custom", "model._target_=wrong_models.three_features"],
     "model._target_=wrong_models.three_features: its input takes rows of 3 features, but "
     "data=linear has 1 feature"),
    # a CNN on a loader's images: "its input takes rows of 1 features" (the channels) (QA)
    (["model=custom", "model._target_=wrong_models.image_cnn", "data=custom",
      "data._target_=wrong_data.images"],
     "model._target_=wrong_models.image_cnn: its input takes rows of shape (4, 4, 1), but "
     "gradexp gives a model flat rows: data=wrong_data.images has 16 features (its rows of "
     "shape (4, 4, 1), flattened); build keras.Input((n_features,)), then "
     "keras.layers.Reshape((4, 4, 1)) first"),
    # probabilities read as logits: a softmax of a softmax, trained and served (QA: its logged
    # model never gave a class more than e/(e+2) = 0.58)
    (["data=blobs", "loss=categorical_crossentropy", "model=custom",
      "model._target_=wrong_models.ends_in_softmax"],
     "model._target_=wrong_models.ends_in_softmax: its output comes out of a softmax or sigmoid "
     "(probabilities), but loss.from_logits=true reads it as logits and applies another: set "
     "loss.from_logits=false"),
    # a fixed batch (a stateful RNN): "does not take ...'s rows of 64 features", though they fit
    (["model=custom", "model._target_=wrong_models.stateful_rnn"],
     "model._target_=wrong_models.stateful_rnn: its input has a fixed batch size of 4 "
     "(batch_size= or batch_shape=, as a stateful RNN needs), but gradexp calls a model on "
     "batches of trainer.batch_size rows and checks it on other row counts: build "
     "keras.Input((n_features,)) with no batch size (stateful RNNs are not supported)"),
    (["model=custom", "model._target_=wrong_models.three_outputs"],
     "model._target_=wrong_models.three_outputs: returns outputs of shape (2, 3) for 2 rows, but "
     "data=linear has 1 target column"),
    # Keras' shape inference failed on a tf.numpy_function: "do not take data=linear's rows
    # (... Error encountered:)", the cause cut off
    (["model=custom", "model._target_=wrong_models.numpy_function"],
     "model._target_=wrong_models.numpy_function: NumpyTanh: Keras could not infer its output "
     "shape: as_list() is not defined on an unknown TensorShape; give the layer a "
     "compute_output_shape(input_shape) method"),
    # any other error in a layer's call while building is not an unknown shape
    (["model=custom", "model._target_=wrong_models.fixed_three"],
     "model._target_=wrong_models.fixed_three: its layers do not take data=linear's rows of 1 "
     "feature (FixedThree: Keras could not infer its output shape: Dimensions must be equal"),
    # the builder's own check of its arguments was said as the data's shape (QA)
    (["model=custom", "model._target_=wrong_models.too_wide"],
     "model._target_=wrong_models.too_wide: the builder raised ValueError: width 8 is too wide "
     "for this study"),
    (["model=custom", "model._target_=wrong_models.nope"],
     "model._target_=wrong_models.nope: module wrong_models has no attribute 'nope'"),
    (["model=custom", "model._target_=nowhere.build"],
     "model._target_=nowhere.build: no module named 'nowhere'"),
    (["model=custom", "model._target_=broken_module.build"],
     "model._target_=broken_module.build: importing broken_module raised RuntimeError: my "
     "module is broken"),
    (["model=custom"], "model._target_ is required here"),
    # code of the person's that runs only eagerly: before, a traceback from the first
    # compiled step, inside an opened run
    (["model=custom", "model._target_=wrong_models.eager_regularizer"],
     "model._target_=wrong_models.eager_regularizer: its own losses (model.losses: a "
     "regularizer, add_loss) cannot run in the compiled training step (NotImplementedError: "
     "numpy() is only available when eager execution is enabled.); write them with keras.ops "
     "or TensorFlow ops"),
    (["model=custom", "model._target_=wrong_models.eager_call"],
     "model._target_=wrong_models.eager_call: its call cannot run in the compiled training "
     "step (NotImplementedError: EagerScaled: numpy() is only available when eager execution "
     "is enabled.); write it with keras.ops or TensorFlow ops"),
    # a value the builder's Keras layer refuses (build does Dense(width)): named as model=keras
    # names its layers' values, not a Keras traceback
    (["model=custom", "model._target_=wrong_models.build", "+model.kwargs.width=abc"],
     "model.kwargs.width=abc: wrong_models.build raised ValueError: Received an invalid value "
     "for `units`, expected a positive integer. Received: units=abc"),
    (["model=custom", "model._target_=wrong_models.build", "+model.kwargs.width=-4"],
     "model.kwargs.width=-4: wrong_models.build raised ValueError: Received an invalid value "
     "for `units`"),
    # a tf.custom_gradient reading a variable, whose grad_fn takes no `variables` keyword:
    # TensorFlow's rule, not the builder's arguments or the data's shapes, whether Keras meets
    # it while building (functional), at the first call (compute_output_shape, subclassed) or
    # while a YAML Sequential is made
    *[(["model=custom", f"model._target_=wrong_models.{builder}"],
       f"model._target_=wrong_models.{builder}: a tf.custom_gradient function reads variables "
       f"it is not given as inputs ({variable}): pass each of them to the function as an "
       "input (f(x, tf.convert_to_tensor(self.w)); in a regularizer f(tf.convert_to_tensor(w)), "
       "since Keras hands it the variable itself; its grad_fn returning one gradient per "
       "input), which both training and the gradient check differentiate")
      for builder, variable in (("forgets_variables", "scale/w"),
                                ("forgets_variables_shaped", "scale/w"),
                                ("forgets_variables_subclassed", "net/w"),
                                # met only where the training step traces training=True:
                                # TensorFlow's rule too, eagerly as compiled (not "write it
                                # with keras.ops or set trainer.compile=false")
                                ("forgets_variables_training", "scale/w"))],
    # the same rule met only eagerly, by the final loss after the last epoch: the run trained,
    # then ended FAILED with a traceback
    # (QA: a regularizer calling it on its weight w, which Keras hands over as the variable
    # itself, was told to pass what it passed: the line says how)
    (["model=custom", "model._target_=wrong_models.custom_gradient_regularizer"],
     "model._target_=wrong_models.custom_gradient_regularizer: a tf.custom_gradient function "
     "reads variables it is not given as inputs (dense/kernel): pass each of them to the "
     "function as an input (f(x, tf.convert_to_tensor(self.w)); in a regularizer "
     "f(tf.convert_to_tensor(w))"),
    (["model=custom", "model._target_=wrong_models.forgets_variables_training",
      "trainer.compile=false"],  # the eager step meets it as well: said before the run too
     "model._target_=wrong_models.forgets_variables_training: a tf.custom_gradient function "
     "reads variables it is not given as inputs (scale/w)"),
    (["model=keras", "model.layers=[{_target_:wrong_models.Scale,name:scale}]"],
     "model=keras: a tf.custom_gradient function reads variables it is not given as inputs "
     "(keras/scale/w): pass each of them to the function as an input"),
    # several outputs: said as "outputs of shape ()" with "build the last layer with n_outputs
    # units", which it had
    (["model=custom", "model._target_=wrong_models.dict_outputs"],
     "model._target_=wrong_models.dict_outputs: returns a dict of 1 output (y), but gradexp "
     "trains a model of one output, a tensor of (rows, 1): return that tensor alone"),
    # several Inputs: Keras' "expects 2 input(s)" said nothing of what to build instead
    (["model=custom", "model._target_=wrong_models.two_inputs"],
     "model._target_=wrong_models.two_inputs: takes 2 inputs (left, right), but gradexp feeds a "
     "model one tensor of (rows, 1) (a dict of named features joined into its columns): build "
     "one keras.Input((n_features,)) and slice it inside where layers take parts apart"),
    (["model=custom", "model._target_=wrong_models.tuple_outputs"],
     "model._target_=wrong_models.tuple_outputs: returns a tuple of 2 outputs, but gradexp"),
    # an optimizer that refuses the option's arguments in its constructor: the opened run
    # ended FAILED with Hydra's traceback (a sweep: its whole batch, after the last job)
    (["optimizer._target_=keras.optimizers.Lion"],
     "optimizer=sgd: keras.optimizers.Lion refused its arguments (ValueError: Argument(s) not "
     "recognized: {'momentum': 0.0, 'nesterov': False})"),
    # a built-in model whose layers are written for other data (64 pixels, not 1 feature)
    (["model=digits_cnn"],
     "model=digits_cnn: its layers do not take data=linear's rows of 1 feature (Reshape: The "
     "total size of the tensor must be unchanged. Received: input_shape=(1,), "
     "target_shape=(8, 8, 1))"),
    # a piecewise schedule needs one factor per stretch (Keras would say so inside a run)
    (["optimizer.schedule.name=piecewise", "optimizer.schedule.boundaries=[50,80]",
      "optimizer.schedule.factors=[1,0.1]"],
     "optimizer.schedule.factors=[1.0, 0.1] has 2 values for optimizer.schedule.boundaries="
     "[50.0, 80.0] (2): piecewise needs one factor more than boundaries, 3 here"),
    # early stopping on a metric the run does not evaluate would never stop it
    (["trainer.early_stopping.enabled=true", "trainer.early_stopping.monitor=val/msee"],
     "trainer.early_stopping.monitor=val/msee: not a metric this run evaluates; early stopping "
     "can monitor train/mse, train/mae, train/r2, val/mse, val/mae, val/r2"),
    (["trainer.early_stopping.enabled=true", "trainer.early_stopping.monitor=loss"],
     "trainer.early_stopping.monitor=loss: not a metric this run evaluates; early stopping "
     "can monitor train/mse, train/mae, train/r2, val/mse, val/mae, val/r2"),
    (["trainer.early_stopping.monitor=val/msee"],  # set, though not enabled: still a typo
     "trainer.early_stopping.monitor=val/msee: not a metric this run evaluates"),
    (["trainer.early_stopping.enabled=true", "data.n_val=0"],
     "trainer.early_stopping.monitor=auto (sweep.objective=val/mse): not a metric this run "
     "evaluates (the data has no validation rows); early stopping can monitor train/mse, "
     "train/mae, train/r2"),
    # the loss against the task, and the person's loss
    (["loss=categorical_crossentropy"],
     "loss=categorical_crossentropy (keras.losses.CategoricalCrossentropy) is a classification "
     "loss, but data=linear is a regression"),
    (["loss=binary_crossentropy", "data=sine"],
     "loss=binary_crossentropy (keras.losses.BinaryCrossentropy) is a classification loss, but "
     "data=sine is a regression"),
    # gradexp's models output logits: read as probabilities they train on nonsense, silently
    (["data=blobs", "model=mlp", "loss=categorical_crossentropy", "loss.from_logits=false"],
     "loss.from_logits=false: model=mlp outputs logits (its last layer is a Dense with no "
     "softmax or sigmoid)"),
    # ... and so would a loss whose own from_logits defaults to false, not set in the config
    (["data=blobs", "model=mlp", "loss._target_=keras.losses.BinaryFocalCrossentropy"],
     "(keras.losses.BinaryFocalCrossentropy) reads probabilities (its from_logits defaults to "
     "false): model=mlp outputs logits"),
    (["data=blobs", "loss._target_=keras.losses.SparseCategoricalCrossentropy"],
     "takes class indices, but gradexp gives one-hot targets (data=blobs, 3 columns)"),
    (["loss._target_=wrong_models.one_argument_loss"],
     "loss._target_=wrong_models.one_argument_loss: cannot be called as one_argument_loss(y_true, "
     "y_pred)"),
    # the person's loader, data files, values, resuming
    (["data=custom", "data._target_=wrong_data.load", "+data.kwargs.rows=5"],
     "data._target_=wrong_data.load: cannot be called with data.kwargs={'rows': 5}"),
    (["data=csv", "data.path=missing.csv", "data.target=y"], "missing.csv"),
    (["trainer.epochs=0"], "trainer.epochs=0: must be an integer >= 1"),
    (["optimizer.learning_rate=-1"], "optimizer.learning_rate=-1"),
    (["trainer.resume=0123456789abcdef"], "trainer.resume=0123456789abcdef"),
]


MODULES = ("wrong_models", "wrong_data", "broken_module", "tf_models", "styled_loss",
           "broken_layers")


@pytest.fixture
def launch(tmp_path: Path, monkeypatch) -> Path:
    """A launch folder with the person's modules beside it, and nothing recorded yet; the
    modules imported from it are forgotten afterwards (another test's folder has its own)."""
    (tmp_path / "wrong_models.py").write_text(MY_MODELS)
    (tmp_path / "wrong_data.py").write_text(MY_DATA)
    (tmp_path / "broken_module.py").write_text(BROKEN)
    (tmp_path / "broken_layers.py").write_text(BROKEN_LAYERS)
    monkeypatch.setattr(sys, "path", list(sys.path))  # gradexp puts the launch folder first
    for name in MODULES:
        sys.modules.pop(name, None)
    yield tmp_path
    for name in MODULES:
        sys.modules.pop(name, None)


def run_as_command_line(launch: Path, overrides: list[str]) -> None:
    """What `python -m gradexp OVERRIDES` does in `launch`, in this process: Hydra composes the
    config (its hydra node too), then gradexp's job function runs it."""
    from gradexp.app import task

    store = f"sqlite:///{launch / 'mlflow.db'}"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=[f"tracking.uri={store}", "gradcheck=off", "trainer.epochs=2",
                                 *overrides])
    with open_dict(cfg):  # what Hydra's run sets before it calls the job
        cfg.hydra.runtime.cwd = str(launch)
        cfg.hydra.runtime.output_dir = str(launch / "outputs")
    before = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    try:
        task(cfg)
    finally:  # as Hydra's run_job leaves it: a later test (test_api) checks nothing is left
        HydraConfig.instance().cfg = before


def recorded_runs(folder: Path) -> list[tuple[str, str]]:
    """(name, status) of every run in the folder's store; none when there is no store."""
    db = folder / "mlflow.db"
    if not db.exists():
        return []
    with sqlite3.connect(db) as connection:
        return connection.execute("select name, status from runs").fetchall()


@pytest.mark.parametrize(("overrides", "says"), MISTAKES,
                         ids=[" ".join(overrides) for overrides, _ in MISTAKES])
def test_a_mistake_is_one_line_exit_2_and_leaves_no_run(launch, capsys, overrides, says):
    with pytest.raises(SystemExit) as exited:
        run_as_command_line(launch, overrides)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert exited.value.code == 2, err
    assert len(errors) == 1, err
    assert says in errors[0]
    assert "Traceback" not in err
    assert recorded_runs(launch) == []


def test_a_grad_fn_with_a_variables_keyword_ends_its_run_failed_in_one_line(launch, capsys):
    # TensorFlow's way for a weight read inside a tf.custom_gradient, grad_fn(upstream,
    # variables=None): it trains, but the check (the weights as tensors) ended the run FAILED
    # with a protocol-buffer dump as its reason. Met where the check traces, inside the run:
    # exit 1, as for a run that fails (it exited 2, which says no run was made).
    with pytest.raises(SystemExit) as exited:
        run_as_command_line(launch, ["model=custom", "gradcheck=default",
                                     "model._target_=wrong_models.variables_keyword"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert exited.value.code == 1, err
    assert errors == ["error: the model's tf.custom_gradient grad_fn returns gradients for "
                      "variables it reads (grad_fn(upstream, variables=None)), but the gradient "
                      "check runs the model with its weights as tensors, where TensorFlow gives "
                      "it none: pass each weight to the function as an input instead "
                      "(f(x, tf.convert_to_tensor(self.w)), grad_fn returning one gradient per "
                      "input), or set gradcheck=off to train it unchecked"], err
    assert "Traceback" not in err
    assert [status for _, status in recorded_runs(launch)] == ["FAILED"]


def test_a_jacobian_past_its_size_ends_the_run_failed_in_one_line(launch, capsys):
    # The docs promised a refusal pointing to probe: it was a traceback ending in the checker's
    # Python-API advice (method="probe"), exit 1 (docs QA)
    with pytest.raises(SystemExit) as exited:
        run_as_command_line(launch, ["gradcheck=jacobian", "model=mlp", "model.hidden=[4]",
                                     "gradcheck.max_jacobian_size=3"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert exited.value.code == 1, err
    assert errors == ["error: gradcheck.method=jacobian: dense0/kernel has 4 elements, more "
                      "than gradcheck.max_jacobian_size=3 (the exact Jacobian takes 2 "
                      "evaluations of the loss an element); use gradcheck=probe (randomized, "
                      "any size), or raise gradcheck.max_jacobian_size"], err
    assert "Traceback" not in err
    assert [status for _, status in recorded_runs(launch)] == ["FAILED"]


def test_model_keras_ending_in_its_own_softmax_trains_with_from_logits_false(launch):
    # model=keras with output_layer=false ends in the layers listed: its softmax was refused
    # with from_logits=false (gradexp's models output logits) and with true (a softmax read as
    # logits): no setting ran (review)
    run_as_command_line(launch, [
        "data=blobs", "model=keras", "model.output_layer=false", "loss=categorical_crossentropy",
        "loss.from_logits=false",
        "model.layers=[{_target_:keras.layers.Dense,units:8,activation:tanh},"
        "{_target_:keras.layers.Dense,units:3,activation:softmax}]"])
    assert [status for _, status in recorded_runs(launch)] == ["FINISHED"]


def test_a_sequential_without_an_input_trains_as_keras_fit_trains_it(launch):
    # QA: gradexp built it by calling it on one row, which fixed its batch size at 1, and then
    # refused it for "a fixed batch size of 1 (batch_size= or batch_shape=...)" never written
    run_as_command_line(launch, ["model=custom", "model._target_=wrong_models.no_input"])
    assert [status for _, status in recorded_runs(launch)] == ["FINISHED"]


def test_a_jacobian_of_the_inputs_alone_is_not_refused_for_a_variables_size(launch):
    # wrt=inputs checks no variable: a large one ended the run FAILED all the same (review)
    run_as_command_line(launch, ["gradcheck=jacobian", "gradcheck.wrt=inputs", "model=mlp",
                                 "model.hidden=[40]", "data.n_samples=30",
                                 "gradcheck.max_jacobian_size=39"])
    assert [status for _, status in recorded_runs(launch)] == ["FINISHED"]


@pytest.mark.heavy  # ~3 s
def test_mse_on_classes_runs_with_one_warning_naming_the_keys(launch, capsys):
    run_as_command_line(launch, ["data=blobs", "loss=mse"])
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: loss=mse (keras.losses.MeanSquaredError) is a regression loss on data=blobs's "
        "one-hot classes (data.task=classification): it trains, but "
        "loss=categorical_crossentropy is the usual choice"]
    assert [status for _, status in recorded_runs(launch)] == ["FINISHED"]


# The warnings are the data's, said before training: a short run without checks says them (a
# default run of 200 classes took 29 s of the fast tier)
BRIEF = ("trainer.epochs=2", "gradcheck=off")


def test_a_real_valued_target_read_as_classes_runs_with_one_warning(launch, capsys):
    """data.task=classification on prices: every price a class of its own, 200 classes in 200
    rows; it trained at chance accuracy and nothing said why."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 2))
    price = 50_000.25 + 10 * np.argsort(x @ [1.5, -2.0])  # no two alike, none whole
    assert len(np.unique(price)) == 200
    rows = "\n".join(f"{a},{b},{p}" for (a, b), p in zip(x, price))
    (launch / "prices.csv").write_text(f"a,b,price\n{rows}\n")
    run_as_command_line(launch, ["data=csv", "data.path=prices.csv", "data.target=price",
                                 "data.task=classification", "model=mlp",
                                 "loss=categorical_crossentropy", "tracking.log_model=false",
                                 *BRIEF])
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: data.task=classification: data.target=price has 200 distinct values in 200 "
        "rows, 200 of them fractional numbers, each a class of its own: a real-valued target "
        "read as class labels? data.task=regression fits it as numbers"]
    assert [status for _, status in recorded_runs(launch)] == ["FINISHED"]
    # Text labels are labels, however few rows each class has: no warning
    (launch / "few.csv").write_text("x,y\n1,a\n2,a\n3,b\n4,b\n5,c\n6,c\n")
    run_as_command_line(launch, ["data=csv", "data.path=few.csv", "data.target=y",
                                 "data.task=classification", "model=mlp",
                                 "loss=categorical_crossentropy", "tracking.log_model=false",
                                 *BRIEF])
    assert "warning:" not in capsys.readouterr().err


def labels_held_out_only(launch: Path, name: str, held: str) -> None:
    """A 30-row csv whose validation rows (split_seed 0, val_fraction 0.2) hold class `held`
    and no other row does; the training rows are 'a' and 'b' ('a' only with held == 'b')."""
    from gradexp.data import _held_out

    val = set(np.random.default_rng(0).permutation(30)[:_held_out(30, 0.2)].tolist())
    label = ["a" if held == "b" else "ab"[i % 2] for i in range(30)]
    rows = "".join(f"{i},{held if i in val else label[i]}\n" for i in range(30))
    (launch / name).write_text(f"x,label\n{rows}")


def test_training_rows_of_one_class_are_refused_like_a_one_class_target(launch, capsys):
    # QA: 'b' only on the validation rows trained to train/accuracy 1, val/accuracy 0, silently
    labels_held_out_only(launch, "held.csv", held="b")
    with pytest.raises(SystemExit) as exited:
        run_as_command_line(launch, ["data=csv", "data.path=held.csv", "data.target=label",
                                     "data.task=classification",
                                     "loss=categorical_crossentropy"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert exited.value.code == 2
    assert errors == ["error: data.target=label: the 24 training rows hold one class only ('a'); "
                      "'b' only in the held-out rows: a classification needs 2 or more classes "
                      "to train on (another data.split_seed, or more rows)"]
    assert recorded_runs(launch) == []


def test_a_class_only_in_the_held_out_rows_trains_with_one_warning(launch, capsys):
    labels_held_out_only(launch, "rare.csv", held="c")
    run_as_command_line(launch, ["data=csv", "data.path=rare.csv", "data.target=label",
                                 "data.task=classification", "loss=categorical_crossentropy",
                                 "tracking.log_model=false"])
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning:")]
    assert warnings == ["warning: data.target=label: class 'c' has no training row, only "
                        "held-out ones: the model cannot learn it (another data.split_seed, or "
                        "more rows)"]
    assert [status for _, status in recorded_runs(launch)] == ["FINISHED"]

def test_class_codes_left_at_regression_run_with_one_warning(launch, capsys):
    """Grades 1, 2, 3 with data.task left at regression: a line through class codes, trained
    with no word."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 2))
    grade = 1 + (x[:, 0] > -0.4).astype(int) + (x[:, 0] > 0.4)
    rows = "\n".join(f"{a},{b},{g}" for (a, b), g in zip(x, grade))
    (launch / "grades.csv").write_text(f"a,b,grade\n{rows}\n")
    run_as_command_line(launch, ["data=csv", "data.path=grades.csv", "data.target=grade",
                                 "tracking.log_model=false"])
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning:")]
    assert warnings == [
        "warning: data.task=regression: data.target=grade holds only 3 distinct integers "
        "(1, 2, 3) in 60 rows: class labels? data.task=classification learns them as classes"]
    assert [status for _, status in recorded_runs(launch)] == ["FINISHED"]


@pytest.mark.heavy  # ~4 s
def test_the_matching_setups_say_nothing(launch, capsys):
    run_as_command_line(launch, ["model=custom", "model._target_=wrong_models.build",
                                 "+model.kwargs.width=4"])
    run_as_command_line(launch, ["data=blobs", "loss=categorical_crossentropy"])
    err = capsys.readouterr().err
    assert "warning:" not in err and "error:" not in err
    assert [status for _, status in recorded_runs(launch)] == ["FINISHED", "FINISHED"]


@pytest.mark.heavy  # ~5 s (a run of eager steps)
def test_code_that_runs_only_eagerly_trains_with_trainer_compile_false(launch, capsys):
    # The refusal above is of the compiled step only: eagerly, this model trains.
    run_as_command_line(launch, ["model=custom", "model._target_=wrong_models.eager_regularizer",
                                 "trainer.compile=false", "tracking.log_model=false"])
    assert "error:" not in capsys.readouterr().err
    assert [status for _, status in recorded_runs(launch)] == ["FINISHED"]


def test_which_modules_load_tensorflow_is_read_from_their_source(launch):
    from gradexp.user_code import loads_tensorflow

    (launch / "tf_models.py").write_text("import numpy as np\nfrom tensorflow import keras\n")
    sys.path.insert(0, str(launch))
    assert loads_tensorflow("tf_models") is True
    assert loads_tensorflow("wrong_data") is False  # numpy only
    assert loads_tensorflow("yaml") is False  # installed: not the person's file
    assert "tf_models" not in sys.modules  # known without importing it


@pytest.mark.slow
def test_a_module_that_loads_tensorflow_says_so_while_it_loads(launch):
    (launch / "tf_data.py").write_text("import tensorflow as tf\n" + MY_DATA)
    done = run_cli("data=custom", "data._target_=tf_data.load", "tracking=none",
                   "gradcheck=off", "trainer.epochs=1", cwd=launch, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    said = "note: importing tf_data (data._target_), which loads TensorFlow: a few seconds"
    assert said in lines
    # TensorFlow's start-up chatter (its C++ log lines) does not follow the line
    assert not [line for line in lines[lines.index(said):] if "cuda" in line.lower()
                or "oneDNN" in line or "absl" in line]


def test_checking_a_model_leaves_keras_layer_names_as_they_were(launch):
    """The model built only to be checked takes no layer names: the trained one's variables (and
    their names in the gradient checks and MLflow) are those a run without the check had."""
    import keras

    from gradexp.data import load_data
    from gradexp.setup_checks import check_model_fits_data
    from gradexp.user_code import importable

    importable(launch)
    cfg = compose_config("model=custom", "model._target_=wrong_models.build")
    data = load_data(cfg.data, launch)
    before = keras.layers.Dense(1).name  # dense, or dense_N after other tests' models
    check_model_fits_data(cfg, data)
    after = keras.layers.Dense(1).name
    count = int(before.rsplit("_", 1)[1]) if "_" in before else 0
    assert after == f"dense_{count + 1}"


SWEEP_MISTAKES = [
    (["optimizer=sgd,adamm", "trainer.epochs=2"],
     "optimizer=adamm: no such option; available: adagrad, adam,"),
    (["trainer.epochs=2,0"], "trainer.epochs=0: must be an integer >= 1"),
    # Keras' SGD refused it only when built, inside the job: the sweep ran every job, then
    # ended on Hydra's error with its parent KILLED
    (["optimizer=momentum", "optimizer.momentum=1.5,0.5", "trainer.epochs=2"],
     "optimizer.momentum=1.5: must be a number in [0, 1]"),
    (["model=linear,mlp", "model._target_=wrong_models.build", "trainer.epochs=2"],
     "model._target_=wrong_models.build: model=linear builds with its own code"),
    (["optimizer=sgd,adam", "trainer.early_stopping.monitor=loss", "trainer.epochs=2"],
     "trainer.early_stopping.monitor=loss: not a metric this run evaluates"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "says"), SWEEP_MISTAKES,
                         ids=[" ".join(overrides) for overrides, _ in SWEEP_MISTAKES])
def test_a_sweep_whose_jobs_do_not_all_compose_opens_no_parent(launch, overrides, says):
    done = run_cli("-m", "gradcheck=off", *overrides, cwd=launch, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr
    assert len(errors) == 1 and says in errors[0], done.stderr
    assert recorded_runs(launch) == []  # no parent, no child: `gradexp compare` offers nothing
    assert not (launch / "multirun").exists()


def test_gradexp_run_raises_the_line_for_a_model_that_does_not_fit_the_data(launch):
    """From Python as on the command line: gradexp.run raises GradexpError with the one line
    and exit code 2 (it raised Keras' bare ValueError), and no store is made."""
    import gradexp

    store = f"sqlite:///{launch / 'mlflow.db'}"
    with pytest.raises(gradexp.GradexpError) as refused:
        gradexp.run(f"tracking.uri={store}", "model=digits_cnn", "gradcheck=off",
                    launch_dir=launch)
    assert refused.value.exit_code == 2
    assert str(refused.value).startswith("model=digits_cnn: its layers do not take "
                                         "data=linear's rows of 1 feature (Reshape: ")
    assert recorded_runs(launch) == []


STYLED_LOSS = '''
class StyledLoss:
    """A loss with a bug whose message is styled for a terminal, as Keras' layer errors are."""

    def __init__(self, name=None):
        self.name = name

    def __call__(self, y_true, y_pred):
        raise ValueError("Exception encountered when calling StyledLoss.call().\\n\\n"
                         "\\x1b[1mthe styled reason\\x1b[0m")
'''


@pytest.mark.heavy  # ~2 s (an MLflow run that fails in its first step)
def test_a_failed_runs_stored_reason_is_plain_text(launch):
    """The reason a FAILED run keeps in MLflow (gradexp.status_reason) is read in the MLflow UI
    and by `gradexp compare`, where no terminal renders Keras' bold escapes: plain text."""
    from mlflow import MlflowClient

    from conftest import run

    (launch / "styled_loss.py").write_text(STYLED_LOSS)
    store = f"sqlite:///{launch / 'mlflow.db'}"
    with pytest.raises(Exception, match="styled reason"):  # a bug: it stays a traceback
        run(store, "loss._target_=styled_loss.StyledLoss", "gradcheck=off", "trainer.epochs=1",
            "tracking.log_model=false", launch_dir=launch)
    client = MlflowClient(store)
    (failed,) = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    reason = failed.data.tags["gradexp.status_reason"]
    assert failed.info.status == "FAILED"
    assert "the styled reason" in reason and "\x1b" not in reason, repr(reason)


def test_a_monitor_left_set_while_early_stopping_is_off_is_only_checked_for_typos():
    from gradexp.metrics import check_monitor
    from gradexp.schema import ConfigError

    off = ("trainer.early_stopping.enabled=false",)
    # no validation rows, and the setting does nothing: not refused
    check_monitor(compose_config(*off, "trainer.early_stopping.monitor=val/mae"), "regression",
                  ("train",))
    with pytest.raises(ConfigError, match="monitor=val/maee: not a metric"):
        check_monitor(compose_config(*off, "trainer.early_stopping.monitor=val/maee"),
                      "regression", ("train",))


def test_a_sweeps_jobs_of_one_shape_trace_the_training_step_check_once(launch, monkeypatch):
    """check_compiles traces a tf.function per job (~15 ms an MLP, ~45 ms the digits CNN): its
    verdict is kept per what decides it, so the next job of that shape (another seed, another
    optimizer) does not trace again, and a job of another shape still does."""
    from types import SimpleNamespace

    from gradexp import setup_checks

    monkeypatch.syspath_prepend(str(launch))
    traced = []
    check = setup_checks.check_compiles
    monkeypatch.setattr(setup_checks, "check_compiles",
                        lambda *args: traced.append(args[0]) or check(*args))
    data = SimpleNamespace(n_features=2, n_outputs=1, task="regression")
    shape = ["model=custom", "model._target_=wrong_models.build", "+model.kwargs.width=3"]
    for overrides in ([*shape, "seed=1"], [*shape, "seed=2", "optimizer=adam"],
                      [*shape[:2], "+model.kwargs.width=5"]):
        setup_checks.check_model_fits_data(compose_config(*overrides), data)
    assert len(traced) == 2  # width=3 once for its two jobs, width=5 once
    setup_checks.check_model_fits_data(compose_config(*shape), SimpleNamespace(
        n_features=3, n_outputs=1, task="regression"))  # the same model on other data
    assert len(traced) == 3
    # the model of a layer list (model=keras): its seed decides its weights, not its trace
    keras_jobs = [["model=keras", f"model.seed={seed}"] for seed in (1, 2)]
    for overrides in keras_jobs:
        setup_checks.check_model_fits_data(compose_config(*overrides), data)
    assert len(traced) == 4


def test_a_target_past_float32_is_refused_and_one_whose_square_is_warned(launch, capsys):
    # QA: both ended "NaN at the starting weights: a log or sqrt of a negative number?"
    rows = "".join(f"{i / 10},{2 * i + 1}\n" for i in range(20))
    (launch / "huge.csv").write_text(f"x,y\n{rows}3.5,1e39\n")
    with pytest.raises(SystemExit) as exited:
        run_as_command_line(launch, ["data=csv", "data.path=huge.csv", "data.target=y"])
    assert exited.value.code == 2
    assert "error: data.target=y: a value past float32's range (~3.4e38), in which gradexp " \
        "trains: rescale the target (divide it by a power of 10)" in capsys.readouterr().err
    (launch / "large.csv").write_text(f"x,y\n{rows}3.5,1e30\n")
    with pytest.raises(SystemExit):  # mse is inf from the start: the run says so and fails
        run_as_command_line(launch, ["data=csv", "data.path=large.csv", "data.target=y"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]
    assert warnings[0] == ("warning: data.target=y: values up to 1e+30, whose squares are past "
                           "float32's range (~3.4e38), in which gradexp trains: mse of them is "
                           "inf; rescale the target (divide it by a power of 10)"), warnings


def test_labels_spelt_two_ways_and_binary_crossentropy_on_exclusive_classes_warn(launch, capsys):
    # Both trained with no word (QA): 'Setosa' and 'setosa' as two classes; three classes one
    # a row fit as three yes/no outputs
    species = ["setosa", "versicolor", "virginica"] * 10 + ["Setosa"] * 4
    rows = "".join(f"{i / 10},{name}\n" for i, name in enumerate(species))
    (launch / "iris.csv").write_text(f"x,species\n{rows}")
    run_as_command_line(launch, ["data=csv", "data.path=iris.csv", "data.target=species",
                                 "data.task=classification", "loss=binary_crossentropy",
                                 "tracking.log_model=false"])
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning:")]
    assert warnings == [
        "warning: loss=binary_crossentropy (keras.losses.BinaryCrossentropy) on data=csv's 4 "
        "classes, one a row: it trains each class as a yes/no of its own (multi-label: "
        "probabilities that need not sum to 1); loss=categorical_crossentropy trains one class "
        "a row",
        "warning: data.target=species: 'Setosa' and 'setosa' differ in case or spaces only, and "
        "are classes of their own: one class spelt two ways?"], warnings
