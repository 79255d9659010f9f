"""Layers that draw random numbers outside Keras' seed generators, found so that a training-mode
gradient check holds only them in inference mode.

A numerical derivative needs the loss to give one value at one point. Keras' own random layers
(`Dropout`, `GaussianNoise`) draw from seed state the check holds fixed; a layer of yours that
calls `tf.random.normal` in training mode draws anew at every evaluation. The check used to move
the whole model to inference mode then, and a bug in any other layer's training path (a batch
norm ignoring its batch statistics, a custom backward only training takes) passed. Now the
layer classes drawing it are found by bisection over your layer classes whose `call` takes
`training` (each test: two forward passes of the checked rows) and only they run in inference
mode during the check.

What is held is a class, not a layer by name: the check runs a float64 twin whose layers a
subclassed model names anew (`dense_3` for `dense`), the culprit search checks float64 clones
of each layer, and two nested models may each have a layer of one name. Every instance of a held
class, in the model, its twin and those clones, runs in inference mode while the check runs;
Keras' own classes are never held (they draw from seed generators), nor the model's own class.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

if TYPE_CHECKING:
    from gradexp.models import Model


@contextlib.contextmanager
def held_in_inference(model: Model, classes: Sequence[type]) -> Iterator[None]:
    """Every layer of the `classes` called with training=False for the block, whatever mode
    the model is called in, and the layers it calls with it (Keras' call context says False
    inside it, and what it said after it returns, so its later siblings keep their mode);
    `model.held` names the classes meanwhile, so that functions traced in the block are kept
    apart from the others. Nested, the blocks add up: layers that assign their own variables
    (gradexp.assigning_layers) stay held while the random ones are searched for inside."""
    held = model.held
    patched = []
    for cls in dict.fromkeys(classes):
        if cls in held:  # held by an enclosing block already
            continue
        own = cls.__dict__.get("call")
        cls.call = _in_inference(cls.call)
        patched.append((cls, own))
    model.held = tuple(dict.fromkeys((*held, *classes)))
    try:
        yield
    finally:
        model.held = held
        for cls, own in reversed(patched):
            if own is None:
                del cls.call  # inherited: the parent's again
            else:
                cls.call = own


def _in_inference(call: Any) -> Any:
    from keras.src.backend.common import global_state  # Keras' current call context

    def call_in_inference(self, *args: Any, **kwargs: Any) -> Any:
        # Layer.__call__ stores the resolved `training` in the call context it shares with
        # every layer of this forward pass, and does not restore it: set it for the layers
        # this one calls, and put it back for the ones after it.
        context = global_state.get_global_attribute("current_call_ctx")
        saved = context.get_value("training") if context is not None else None
        if context is not None:
            context.set_value("training", False)
        try:
            return call(self, *args, **{**kwargs, "training": False})
        finally:
            if context is not None:
                context.set_value("training", saved)

    return call_in_inference


def held_names(model: Model, classes: Sequence[type]) -> tuple[str, ...]:
    """The model's layers of the held classes, by name, for the note that names them."""
    return tuple(layer.name for layer in model.network._flatten_layers(include_self=False)
                 if isinstance(layer, tuple(classes)))


def random_layers(model: Model, params: list[tf.Tensor], x: tf.Tensor) -> list[type] | None:
    """The fewest layer classes (as bisection finds them; a layer without sublayers before the
    container holding it) that, held in inference mode, make the model's training-mode outputs
    the same at two evaluations of `params`; None if holding every candidate does not (the
    randomness is elsewhere: the model's own losses or call, a layer random in both modes)."""
    layers = [layer for layer in model.network._flatten_layers(include_self=False)
              if getattr(layer, "_call_has_training_arg", False)
              and type(layer).__module__.split(".")[0] != "keras"  # Keras' own, not keras_qa
              and type(layer) is not type(model.network)]
    # bisection below keeps what it finds in the later half: containers first, leaves last
    layers.sort(key=lambda layer: not layer._flatten_layers(include_self=False, recursive=False))
    candidates = list(dict.fromkeys(type(layer) for layer in layers))

    def random_with(held: list[type]) -> bool:
        with held_in_inference(model, held):
            first, second = (model.apply(params, x, training=True).numpy() for _ in range(2))
        return not np.array_equal(first, second, equal_nan=True)

    def fewest(classes: list[type], held: list[type]) -> list[type]:
        """The fewest of `classes` that, held besides `held`, make the outputs repeat."""
        if not random_with(held):
            return []
        if len(classes) == 1:
            return classes
        first, second = classes[:len(classes) // 2], classes[len(classes) // 2:]
        needed = fewest(first, held + second)
        return needed + fewest(second, held + needed)

    if not candidates or random_with(candidates):
        return None
    return fewest(candidates, []) or None


@contextlib.contextmanager
def generator_states_kept(network: Any) -> Iterator[None]:
    """The state of every tf.random.Generator a layer of `network` holds, put back after the
    block. A check's forward passes in training mode (finding the layers that draw: two a test)
    drew from such a generator, TensorFlow's recommended one, and moved the stream training then
    drew from (QA: final loss 0.0502 with the start check, 0.0458 with gradcheck=off); Keras'
    own seed generators are read, not advanced, by the check's stateless calls."""
    generators, seen = [], set()
    flatten = getattr(network, "_flatten_layers", None)
    for layer in flatten(include_self=True, recursive=True) if flatten else [network]:
        for value in vars(layer).values():
            if isinstance(value, tf.random.Generator) and id(value) not in seen:
                seen.add(id(value))
                generators.append(value)
    saved = [generator.state.read_value() for generator in generators]
    try:
        yield
    finally:
        for generator, state in zip(generators, saved):
            generator.state.assign(state)
