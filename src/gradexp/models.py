"""Models: every `model=` option builds a `keras.Model`; `Model` is how gradexp holds one.

The options are functions named by `model._target_`, called with the data's sizes and the
option's keys: `linear` (y = x·W + b), `buggy_linear` (a planted wrong gradient), `mlp`,
`sequential` (Keras layers in YAML); yours (`model=custom`) is `(n_features, n_outputs, **kwargs)`.

`Model` gives the trainer the variables, the forward pass and the model's own losses
(`model.losses`), and the gradient checker a pure function of (parameter values, x): `apply`
runs a float64 twin statelessly on any values (finite differences not drowned in float32
rounding; the trained variables untouched). In training mode `apply` computes what a training
step does: dropout masks drawn from the model's seed state as it is now (the same at every
evaluation of one check; the twin draws other masks of the same rate), batch norm on the
batch's statistics; the state is read, never written (`sync_twins` copies it in before a check);
layers drawing raw `tf.random` are held in inference mode (`held`, gradexp.random_layers).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from omegaconf import DictConfig, OmegaConf

from gradexp.gradcheck.rebuilt import rebuild_reason
from gradexp.schema import ConfigError

# Seed 004's names of the line's parameters, kept in checks and metrics (model=linear's layer)
SEED_004_NAMES = {"linear/kernel": "W", "linear/bias": "b"}


class Model:
    """A keras.Model as the trainer and the gradient checker use it."""

    def __init__(self, network: keras.Model, n_features: int | tuple[int, ...]):
        self.network = network
        # (n_features,) in a run, an image's (28, 28, 1) in check_model (QA: its twin had (1,))
        self.row_shape = tuple(n_features) if isinstance(n_features, tuple) else (n_features,)
        self.n_features = math.prod(self.row_shape)
        self.params: list = list(network.trainable_variables)
        # Variable names without the model's own prefix: "dense0/kernel"; seed 004's "W", "b".
        prefix = f"{network.name}/"
        self.names = [SEED_004_NAMES.get(path, path)
                      for path in (v.path.removeprefix(prefix) for v in self.params)]
        self._twins: dict[str, keras.Model] = {}
        # The gradient checks' compiled loss functions (gradexp.run_checks): they close over it
        self.check_losses: dict[tuple, object] = {}
        self.held: tuple[type, ...] = ()  # classes a check holds in inference (random_layers)
        self._ends_in_probabilities: bool | None = None

    def __call__(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        # As Keras' fit calls it: a model whose `call(self, x)` takes no `training` is called
        # without it, so its layers run in inference mode (Keras would otherwise pass
        # training=True down to them), the mode its checks' stateless calls run in too.
        return self.network(x, **_training(self.network, training))

    def ends_in_probabilities(self) -> bool:
        """Does it end in Keras' softmax or sigmoid? Asked once, eagerly, on a row of zeros."""
        if self._ends_in_probabilities is None:
            out = self.network(tf.zeros((1, *self.row_shape), self.network.dtype))
            self._ends_in_probabilities = hasattr(out, "_keras_logits")
        return self._ends_in_probabilities

    def own_loss(self, like: tf.Tensor) -> tf.Tensor | None:
        """The network's own losses after its last call (`model.losses`) summed; or None."""
        return _summed(self.network.losses, like.dtype)

    def has_own_losses(self, x: tf.Tensor) -> bool:
        """Whether the model adds losses of its own (a regularizer, `add_loss`) in training mode,
        from a call on `x` that changes nothing (no seed or statistics moves)."""
        network = self.network
        state = [tf.convert_to_tensor(v) for v in network.non_trainable_variables]
        *_, losses = network.stateless_call(list(self.params), state, x, return_losses=True,
                                            **_training(network, True))
        return bool(losses)

    def apply(self, params: list[tf.Tensor], x: tf.Tensor, training: bool = False,
              with_losses: bool = False) -> tf.Tensor | tuple[tf.Tensor, tf.Tensor | None]:
        """The model's output with `params` in place of its trainable variables, computed in
        the dtype of `params`, and with `with_losses` the sum of its own losses (None if it has
        none). The state (seed generators, moving statistics) is read as it is and not
        changed: in training mode every call draws the same dropout masks until the trainer
        moves the seeds on."""
        dtype = tf.as_dtype(params[0].dtype).name if params else "float32"
        network = self.network if dtype == self.network.dtype else self._twin(dtype)
        state = [tf.convert_to_tensor(v) for v in network.non_trainable_variables]
        outputs, _, losses = network.stateless_call(list(params), state, x, return_losses=True,
                                                    **_training(network, training))
        return (outputs, _summed(losses, outputs.dtype)) if with_losses else outputs

    def sync_twins(self) -> None:
        """Copy the model's state (seed generators, batch-norm statistics) into its twins, so a
        check in another dtype draws the masks and uses the statistics the model has now: a
        twin was built with its own."""
        for twin in self._twins.values():
            self._copy_state(twin)

    def _copy_state(self, twin: keras.Model) -> None:
        for mine, theirs in zip(self.network.non_trainable_variables,
                                twin.non_trainable_variables):
            theirs.assign(tf.cast(mine, theirs.dtype))

    def prepare(self, dtype: str) -> None:
        """Build what apply needs in `dtype` now, eagerly. Built inside a tf.function's first
        trace instead, the twin's new variables make TensorFlow trace that function twice."""
        if dtype != self.network.dtype:
            self._twin(dtype)

    def _twin(self, dtype: str) -> keras.Model:
        """The same architecture with every layer computing in `dtype` (built once)."""
        if dtype not in self._twins:
            def in_dtype(layer: keras.layers.Layer) -> keras.layers.Layer:
                return layer_in_dtype(layer, dtype)

            network = self.network
            try:
                # Under `dtype` as Keras' global policy: layers that a layer or a subclassed
                # model makes in its __init__ without dtype= take the policy of the moment, and
                # would stay float32 in a float64 twin.
                with _dtype_policy(dtype), compile_state_set_aside(network), _own_code():
                    if _built_from_layers(network):
                        # Its input too: a float32 Input would round x, and the check of
                        # d/dinputs would measure float32 rounding.
                        twin = keras.models.clone_model(
                            network, input_tensors=keras.Input(self.row_shape, dtype=dtype),
                            clone_function=in_dtype)
                    else:  # a subclassed model (LinearModel): rebuilt from its config
                        twin = network.__class__.from_config({**network.get_config(),
                                                              "dtype": dtype})
                    outputs = twin(tf.zeros((1, *self.row_shape), dtype))  # builds its variables
                    if len(twin.variables) < len(network.variables):  # and a branch only
                        twin(tf.zeros((1, *self.row_shape), dtype),  # training mode takes
                             **_training(twin, True))
                same_trainable(network, twin)
                _check_twin(network, twin, outputs, dtype)
            except Exception as error:  # a model of the person's that cannot be rebuilt
                why = rebuild_reason(error)  # in one line
                raise TypeError(f"cannot rebuild the model in {dtype}: {why}") from error
            self._copy_state(twin)
            self._twins[dtype] = twin
        return self._twins[dtype]

    def scalars(self) -> dict[str, tf.Tensor]:
        """Parameters worth logging per epoch as metrics: W and b of a one-feature line."""
        found = dict(zip(self.names, self.params))
        if set(found) == {"W", "b"} and tuple(found["W"].shape) == (1, 1):
            return {"W": found["W"][0, 0], "b": found["b"][0]}
        return {}


def read_values(variables: list) -> list[np.ndarray]:
    """The variables' values as numpy arrays, one ReadVariableOp each where the variable is (or
    wraps, as a Keras 3 variable does) a tf.Variable: its .numpy() reads, copies the read with
    an identity op and goes through Keras' property, ~3x the time (~0.1-0.3 ms a check)."""
    values = []
    for v in variables:
        inner = getattr(v, "value", v)
        handle = getattr(inner, "handle", None) if isinstance(inner, tf.Variable) else None
        if handle is None or not tf.executing_eagerly():
            values.append(v.numpy())
        else:
            values.append(tf.raw_ops.ReadVariableOp(resource=handle, dtype=inner.dtype).numpy())
    return values


def _training(network: keras.Model, training: bool) -> dict[str, bool]:
    """`training=` for stateless_call, which passes it straight to `call`, unlike __call__,
    which leaves it out for a model whose `call(self, x)` does not take it."""
    return {"training": training} if getattr(network, "_call_has_training_arg", True) else {}


def _summed(losses: list, dtype: tf.DType) -> tf.Tensor | None:
    """Keras' aggregation of model.losses (each summed, then added), in `dtype`."""
    if not losses:
        return None
    return tf.add_n([tf.cast(tf.reduce_sum(loss), dtype) for loss in losses])


@contextlib.contextmanager
def compile_state_set_aside(network: keras.Model) -> Iterator[None]:
    """`network` and the models inside it taken as not compiled for the block.

    Keras clones and serializes a compiled model with its compile config (its loss, metrics and
    optimizer), which the clone or a later load deserializes: a loss function of yours that is
    not registered with Keras made the float64 twin fail (the check fell back to float32) and
    the logged model fail to load. gradexp trains with its own loss and optimizer, and the
    logged model is for predict, so neither needs it; the person's model keeps it."""
    compiled = [model for model in network._flatten_layers(include_self=True)
                if isinstance(model, keras.Model) and model.compiled]
    for model in compiled:
        model.compiled = False
    try:
        yield
    finally:
        for model in compiled:
            model.compiled = True


def _own_code() -> contextlib.AbstractContextManager:
    """Keras' safe mode off while a model of this process is rebuilt from its config: a
    `Lambda` layer's Python function is refused by default (it could be anyone's code when a
    file is loaded), but here it is the person's own, already running."""
    from keras.src.saving import serialization_lib

    scope = getattr(serialization_lib, "SafeModeScope", None)
    return scope(safe_mode=False) if scope is not None else contextlib.nullcontext()


@contextlib.contextmanager
def _dtype_policy(dtype: str) -> Iterator[None]:
    """Keras' global dtype policy set to `dtype` for the block, then restored."""
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


def half_precision_layers(network: keras.Model) -> list[str]:
    """The layers of `network` that compute in float16 or bfloat16 (a mixed-precision policy):
    the check verifies their math in float64, which their training does not compute in."""
    return [layer.name for layer in network._flatten_layers(include_self=False)
            if getattr(layer, "compute_dtype", None) in ("float16", "bfloat16")
            and not isinstance(layer, keras.layers.InputLayer)]  # it computes nothing


def scales_its_loss(network: keras.Model) -> bool:
    """Whether Keras' `compile` wraps this model's optimizer in a LossScaleOptimizer: a model
    built under the mixed_float16 policy (its float16 gradients would underflow unscaled)."""
    return getattr(network.dtype_policy, "name", None) == "mixed_float16"


_FLOATS = ("float16", "bfloat16", "float32", "float64", "mixed_float16", "mixed_bfloat16")


def layer_in_dtype(layer: keras.layers.Layer, dtype: str) -> keras.layers.Layer:
    """`layer` made anew from its config, computing in `dtype`: every floating dtype its config
    names (its sublayers' too: an RNN's cell, a block's layers) set so. A model used as a layer
    is rebuilt layer by layer, on new Inputs in `dtype`: from its config, its layers kept the
    float32 their configs name. (The float64 twin of the checks, and a layer checked alone.)"""
    if isinstance(layer, keras.Model) and type(layer).__name__ == "Functional":
        inputs = tf.nest.map_structure(
            lambda t: keras.Input(batch_shape=t.shape, dtype=_in_float(t.dtype, dtype),
                                  name=t.name),
            layer.input)
        return keras.models.clone_model(layer, input_tensors=inputs,
                                        clone_function=lambda sub: layer_in_dtype(sub, dtype))
    if not isinstance(layer, keras.layers.Layer):  # an op in the graph (a mask's not_equal):
        return layer.__class__.from_config(layer.get_config())  # no dtype, computes in its input's
    if isinstance(layer, keras.layers.Lambda):
        # Its function as it is: rebuilt from its bytecode, a lambda loses its module's names
        # (`lambda t: keras.ops.abs(t)`: NameError), and the whole model was checked in float32
        return keras.layers.Lambda(layer.function, output_shape=layer._output_shape,
                                   mask=layer.mask, arguments=layer.arguments, name=layer.name,
                                   dtype=dtype)
    with _dtype_policy(dtype), _own_code():  # sublayers its __init__ makes take the policy
        return layer.__class__.from_config(
            _float_config({**layer.get_config(), "dtype": dtype}, dtype))


def _in_float(found: Any, dtype: str) -> Any:
    """`dtype` in place of a floating dtype or dtype policy (a name, or a policy's config as
    Keras serializes it); any other dtype (int32 ids, strings) as it is."""
    name = found.get("config", {}).get("name") if isinstance(found, dict) else str(found)
    return dtype if name in _FLOATS else found


def _float_config(config: Any, dtype: str) -> Any:
    """A layer's config with every floating `dtype` in it, its sublayers' included (an RNN's
    cell, a block's layers), set to `dtype`."""
    if isinstance(config, dict):
        return {key: _in_float(value, dtype) if key == "dtype" else _float_config(value, dtype)
                for key, value in config.items()}
    if isinstance(config, list):
        return [_float_config(value, dtype) for value in config]
    return config


def same_trainable(network: keras.layers.Layer, twin: keras.layers.Layer) -> None:
    """Each of the twin's layers trainable as its original: a frozen block's layers, made anew
    in its __init__, came back trainable, and the twin had more trainable variables. Outermost
    first (setting a layer's flag sets its sublayers'); nothing when the layers differ."""
    mine = list(getattr(network, "_flatten_layers", lambda: ())())
    theirs = list(getattr(twin, "_flatten_layers", lambda: ())())
    if len(mine) == len(theirs) and all(type(a) is type(b) for a, b in zip(mine, theirs)):
        for original, copy in zip(mine, theirs):
            copy.trainable = original.trainable


def _check_twin(network: keras.Model, twin: keras.Model, outputs: Any, dtype: str) -> None:
    """Raise ValueError unless the rebuilt `twin` is `network` in `dtype`: the same variables
    (a subclassed model whose config leaves out an argument of its __init__ comes back with
    its default), every floating one and the output in `dtype`. A layer that fixes its own
    dtype (dtype="float32") would compute in float32 inside a float64 check, held to float64
    tolerances: a false alarm on a correct model."""
    shapes = [tuple(v.shape) for v in network.trainable_variables]
    if [tuple(v.shape) for v in twin.trainable_variables] != shapes:
        raise ValueError("its rebuilt copy has other variables (does get_config() return every "
                         "argument of its __init__?)")
    if len(twin.non_trainable_variables) != len(network.non_trainable_variables):
        raise ValueError("its rebuilt copy holds other state (seeds, statistics)")
    stray = [(v.path, v.dtype) for v in twin.variables
             if keras.backend.is_float_dtype(v.dtype) and v.dtype != dtype]
    if stray:
        raise ValueError(f"{', '.join(path for path, _ in stray[:3])}"
                         f"{' ...' if len(stray) > 3 else ''} stay {stray[0][1]} (a layer given "
                         "its own dtype)")
    for output in tf.nest.flatten(outputs):
        if tf.as_dtype(output.dtype).name != dtype:
            raise ValueError(f"it returns {tf.as_dtype(output.dtype).name} (a layer given its "
                             "own dtype, or a cast in its call)")


def _built_from_layers(network: keras.Model) -> bool:
    """Sequential and functional models rebuild layer by layer; a subclassed one from its config."""
    return type(network).__name__ in ("Sequential", "Functional")


# ---------------------------------------------------------------- the options
def seed_004_start(n_features: int, n_outputs: int, init_scale: float, seed: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """W and b as seed 004 starts them, np.random.randn() scaled by init_scale, from a seeded
    numpy generator (W first), so the default run reproduces: W = 2.909, b = 4.045 after 100
    epochs. Keras' own initializers draw other numbers."""
    rng = np.random.default_rng(seed)
    w = init_scale * rng.standard_normal((n_features, n_outputs))
    return w, init_scale * rng.standard_normal((n_outputs,))


@keras.saving.register_keras_serializable(package="gradexp")
class BuggyDense(keras.layers.Dense):
    """A Dense layer with a wrong backward pass for its kernel: dLoss/dkernel's last element is
    multiplied by bug_scale (the forward pass is right). A demo of a failed gradient check."""

    def __init__(self, units: int, bug_scale: float = 1.1, **kwargs):
        super().__init__(units, **kwargs)
        self.bug_scale = bug_scale

    def call(self, x, training=None):
        bug_scale = self.bug_scale

        @tf.custom_gradient
        def matmul_with_wrong_gradient(x, w):
            def backward(upstream):
                grad_w = tf.matmul(x, upstream, transpose_a=True)
                size = tf.size(grad_w)
                scale = tf.concat([tf.ones([size - 1], grad_w.dtype),
                                   tf.constant([bug_scale], grad_w.dtype)], axis=0)
                grad_w = grad_w * tf.reshape(scale, tf.shape(grad_w))
                return tf.matmul(upstream, w, transpose_b=True), grad_w

            return tf.matmul(x, w), backward

        return matmul_with_wrong_gradient(x, tf.convert_to_tensor(self.kernel)) + self.bias

    def get_config(self) -> dict:
        return {**super().get_config(), "bug_scale": self.bug_scale}


def _line(layer_class, n_features: int, n_outputs: int, init_scale: float, seed: int,
          **layer_kwargs) -> keras.Model:
    w, b = seed_004_start(n_features, n_outputs, init_scale, seed)
    return keras.Sequential([
        keras.Input((n_features,)),
        layer_class(n_outputs, name="linear", kernel_initializer=keras.initializers.Constant(w),
                    bias_initializer=keras.initializers.Constant(b), **layer_kwargs)],
        name="linear")


def linear(*, n_features: int, n_outputs: int, init_scale: float, seed: int,
           name: str = "linear") -> keras.Model:
    """Seed 004's y = x·W + b: one Dense layer, named `linear`, its kernel and bias W and b."""
    return _line(keras.layers.Dense, n_features, n_outputs, init_scale, seed)


def buggy_linear(*, n_features: int, n_outputs: int, init_scale: float, seed: int,
                 bug_scale: float, name: str = "buggy_linear") -> keras.Model:
    """The linear model with a planted wrong gradient for W (BuggyDense)."""
    return _line(BuggyDense, n_features, n_outputs, init_scale, seed, bug_scale=bug_scale)


def mlp(*, n_features: int, n_outputs: int, hidden: list[int], activation: str,
        dropout: float, seed: int, name: str = "mlp") -> keras.Model:
    """Dense hidden layers (Glorot-uniform weights, zero biases, seeded), each followed by
    Dropout when dropout > 0, then a linear output layer (logits for a classification)."""
    activation = "silu" if activation == "swish" else activation
    layers: list = [keras.Input((n_features,))]
    for index, width in enumerate(hidden):
        layers.append(keras.layers.Dense(
            width, activation=activation, name=f"dense{index}",
            kernel_initializer=keras.initializers.GlorotUniform(seed=seed + index)))
        if dropout > 0:
            layers.append(keras.layers.Dropout(dropout, seed=seed + index))
    layers.append(keras.layers.Dense(
        n_outputs, name=f"dense{len(hidden)}",
        kernel_initializer=keras.initializers.GlorotUniform(seed=seed + len(hidden))))
    return keras.Sequential(layers, name="mlp")


def sequential(*, n_features: int, n_outputs: int, layers: list[Any], seed: int,
               output_layer: bool = True, name: str = "keras") -> keras.Model:
    """A keras.Sequential of the layers written in YAML (each a `_target_`, e.g.
    keras.layers.Dense), then, with output_layer, a Dense(n_outputs) sized for the data."""
    from hydra.utils import instantiate

    keras.utils.set_random_seed(seed)  # initializers without a seed of their own
    built = [keras.Input((n_features,))]
    for index, spec in enumerate(layers):
        try:
            # Named by position unless named: Keras' own counters (dense_3) change from run to
            # run within a process, and the gradient check names variables by their layer.
            built.append(instantiate(spec, **({} if "name" in spec else {"name": f"layer{index}"})))
        except Exception as error:  # a wrong layer argument is the person's to fix
            from gradexp.endings import reason_of

            cause = error.__cause__ or error
            unknown = _unknown_layer(index, str(spec["_target_"])) \
                if isinstance(cause, ImportError) and "_target_" in spec else None
            if unknown is not None:
                raise ConfigError(unknown) from None
            raise ConfigError(f"model.layers[{index}]={spec}: {type(cause).__name__}: "
                              f"{reason_of(cause)}") from None
    if output_layer:
        built.append(keras.layers.Dense(n_outputs, name="output"))
    return keras.Sequential(built, name="keras")


def _unknown_layer(index: int, target: str) -> str | None:
    """A layer's `_target_` that does not import, with the closest name its module has (Hydra's
    own message stops at "Error loading 'keras.layers.Densee':"); None when the class is there
    (what raised ImportError is inside it, and its own message says so)."""
    import difflib
    import importlib

    module, _, name = target.rpartition(".")
    where = f"model.layers[{index}]._target_={target}"
    try:
        found = importlib.import_module(module)
    except ImportError as error:  # missing, or failing to import something of its own
        return f"{where}: {type(error).__name__}: {error}"
    if hasattr(found, name):
        return None
    names = [n for n in dir(found) if not n.startswith("_")]
    close = difflib.get_close_matches(name, names, n=1)
    return f"{where}: {module} has no {name}" + (f"; did you mean {module}.{close[0]}?"
                                                  if close else "")


def check_builder(cfg: DictConfig, n_features: int, n_outputs: int) -> None:
    """Raise the ConfigError build_model would raise for a person's builder that cannot take
    the sizes and model.kwargs (a misspelt keyword), from its signature alone: before any MLflow
    run opens, and without building anything."""
    import inspect

    from gradexp.user_code import locate

    target = str(cfg["_target_"])
    build = locate("model._target_", target)
    if getattr(build, "__module__", None) == __name__:
        return  # gradexp's own options: their keys are the schema's
    kwargs = OmegaConf.to_container(cfg, resolve=True).get("kwargs") or {}
    try:
        signature = inspect.signature(build)
    except (TypeError, ValueError):  # a builtin or C callable: build_model will tell
        return
    try:
        signature.bind(n_features=n_features, n_outputs=n_outputs, **kwargs)
    except TypeError as error:
        raise _uncallable(target, n_features, n_outputs, kwargs, error) from None


def _uncallable(target: str, n_features: int, n_outputs: int, kwargs: dict,
                error: Exception) -> ConfigError:
    return ConfigError(f"model._target_={target}: cannot be called with n_features="
                       f"{n_features}, n_outputs={n_outputs}"
                       + "".join(f", {k}={v!r}" for k, v in kwargs.items()) + f" ({error})")


# TensorFlow's refusal of a tf.custom_gradient whose function reads variables that are not its
# inputs while its grad_fn takes no `variables` keyword ("... grad_fn must accept keyword
# argument 'variables', since function uses variables: [<tf.Variable 'scale/w:0' ...>]"; older
# versions: "... must accept a keyword argument 'variables'").
_NEEDS_VARIABLES = re.compile(r"grad_fn must accept (?:a )?keyword argument 'variables'")
_VARIABLE_NAME = re.compile(r"<tf\.Variable '([^':]+)(?::\d+)?'")


def custom_gradient_refusal(where: str, error: BaseException) -> ConfigError | None:
    """That refusal as one line naming TensorFlow's rule and the fix (None for any other error).

    Raised where Keras first runs the layer (building a functional or YAML Sequential model, a
    subclassed one's first call, the set-up check), else blamed on the builder or the data."""
    text = str(error)
    if not _NEEDS_VARIABLES.search(text):
        return None
    names = ", ".join(dict.fromkeys(_VARIABLE_NAME.findall(text)))
    return ConfigError(
        f"{where}: a tf.custom_gradient function reads variables it is not given as inputs"
        + (f" ({names})" if names else "") + ": pass each of them to the function as an "
        "input (f(x, tf.convert_to_tensor(self.w)); in a regularizer f(tf.convert_to_tensor(w)), "
        "since Keras hands it the variable itself; its grad_fn returning one gradient per input), "
        "which both training and the gradient check differentiate (TensorFlow's other way, "
        "grad_fn(upstream, variables=None), trains but cannot be checked: the check runs the "
        "model with its weights as tensors)")


# TensorFlow's words when a grad_fn returns more gradients than it is asked for (eagerly;
# compiled: "too few gradients" or "Num gradients N generated for op")
_GRADIENT_COUNT = re.compile(r"custom_gradient function expected to return \d+ gradients|"
                             r"returned too few gradients|Num gradients \d+ generated for op")


def variables_keyword_refusal(error: BaseException) -> ConfigError | None:
    """The gradient check runs the model with its weights given as tensors (Keras'
    stateless_call on the float64 values it varies), where a layer's weight is no variable. A
    tf.custom_gradient that reads a weight as a variable, its grad_fn(upstream,
    variables=None) returning (input gradients, variable gradients), trains (TensorFlow hands
    it the variable), but there TensorFlow hands it none and refuses the extra gradients: the
    check ended the run with a protocol-buffer dump. One line instead, with the way that works
    in both (None for any other error). Met only where the check traces its loss: an eager
    trial before the run passes, TensorFlow's eager path quietly sending that gradient to the
    variable."""
    if not _GRADIENT_COUNT.search(str(error)):
        return None
    return ConfigError(
        "the model's tf.custom_gradient grad_fn returns gradients for variables it reads "
        "(grad_fn(upstream, variables=None)), but the gradient check runs the model with its "
        "weights as tensors, where TensorFlow gives it none: pass each weight to the function "
        "as an input instead (f(x, tf.convert_to_tensor(self.w)), grad_fn returning one "
        "gradient per input), or set gradcheck=off to train it unchecked")


def _rejected(target: str, kwargs: dict, error: Exception) -> ConfigError | None:
    """A person's builder refused a value (Keras' ValueError for Dense(-4)): one line naming
    the model.kwargs the message mentions, as model=keras names the layer. A value is only
    ever passed on, so the builder's words say which; a ValueError that names none of them is
    a bug in the builder (None: it keeps its traceback)."""
    from gradexp.endings import reason_of

    reason = reason_of(error)
    named = {key: value for key, value in kwargs.items()
             if re.search(rf"(?<![\w.-]){re.escape(str(value))}(?![\w.])", reason)}
    if not named:
        return None
    keys = ", ".join(f"model.kwargs.{key}={value}" for key, value in named.items())
    return ConfigError(f"{keys}: {target} raised {type(error).__name__}: {reason}")


def build_model(cfg: DictConfig, n_features: int, n_outputs: int) -> Model:
    """The model `model._target_` names, sized for the data (hydra.utils.instantiate)."""
    from hydra.errors import InstantiationException

    from gradexp.user_code import instantiate, locate

    options = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    target = options["_target_"]
    # As plain values (_convert_), the layers of model=keras left for sequential() to build.
    sizes = {"n_features": n_features, "n_outputs": n_outputs, "_convert_": "all",
             "_recursive_": False}
    own = getattr(locate("model._target_", target), "__module__", None) == __name__
    # gradexp's own builders take the option's keys; a person's, the sizes and model.kwargs
    kwargs = options.get("kwargs", {})
    spec = options if own else {"_target_": target, **kwargs}
    where = f"model={options.get('name', target)}" if own else f"model._target_={target}"
    try:
        network = instantiate("model._target_", spec, **sizes)
    except InstantiationException as error:  # the builder raised: say what it raised
        cause = error.__cause__
        if cause is None:
            raise
        refused = custom_gradient_refusal(where, cause)  # a TypeError, not about the arguments
        if refused is not None:
            raise refused from None
        if not own and isinstance(cause, TypeError):
            raise _uncallable(target, n_features, n_outputs, kwargs, cause) from None
        refused = _rejected(target, kwargs, cause) \
            if not own and isinstance(cause, ValueError) else None  # Dense(width), width=abc
        if refused is not None:
            raise refused from None
        raise cause from None
    if not own and not isinstance(network, keras.Model):
        raise ConfigError(f"model._target_={target}: returned a {type(network).__name__}, "
                          "not a keras.Model")
    if not network.built:  # a subclassed model makes its variables at its first call; a
        try:  # Sequential with no Input as fit builds it (QA: a 1-row call fixed its batch at 1)
            if isinstance(network, keras.Sequential):
                network.build((None, n_features))
            else:
                network(np.zeros((1, n_features), np.float32))
        except TypeError as error:
            refused = custom_gradient_refusal(where, error)
            if refused is not None:
                raise refused from None
            raise
    return Model(network, n_features)
