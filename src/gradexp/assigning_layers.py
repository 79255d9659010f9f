"""Layers that assign their own trainable variables while they compute in training mode, found
so that a training-mode gradient check holds them in inference mode.

Keras' `SpectralNormalization` does: in training mode its call assigns its kernel W/sigma(W)
(the power iteration under stop_gradient) and then reads it back. The check differentiates the
loss through `stateless_call` (gradexp.models.Model.apply), where that read is W/sigma(W, u)
with u, v held by stop_gradient: the tape's gradient is not the derivative finite differences
measure, and a correct model failed at 34,000-546,000x its tolerance, "wrong model: sn" (QA).
A training step differentiates the loss by the variable as assigned: the gradient of the
layer's inference-mode computation (which uses the kernel as it is) at the assigned value. So
such a layer is checked in inference mode, every other layer in training mode, as a layer
drawing raw randomness is (gradexp.random_layers, whose holding this shares).

Found once per Model, by calls on one row that change nothing (a `keras.StatelessScope` records
the assignments instead of making them): the variables assigned in training mode, and for each
the innermost layer holding it whose class, held in inference mode, stops the assignment (never
the model's own class). A model assigning none costs one such call, at its first check.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from gradexp.random_layers import generator_states_kept, held_in_inference

if TYPE_CHECKING:
    from gradexp.models import Model

# Per Model: (classes to hold, the layers of them found assigning, the variables they assign)
_FOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def assigning_layers(model: Model, x: Any) -> tuple[type, ...]:
    """The fewest layer classes that, held in inference mode, stop the model assigning its
    trainable variables in a training-mode call on the first row of `x` (as above); () if it
    assigns none, or if the model cannot be called so (the check itself will say)."""
    if model not in _FOUND:
        _FOUND[model] = _found(model, x)
    return _FOUND[model][0]


def assigning_names(model: Model) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The layers found assigning and the variables they assign, by name, for the note."""
    found = _FOUND.get(model)
    return (found[1], found[2]) if found else ((), ())


def _found(model: Model, x: Any) -> tuple[tuple[type, ...], tuple[str, ...], tuple[str, ...]]:
    network = model.network
    try:
        row = np.asarray(x)[:1]
        row = tf.constant(row, network.dtype) if np.issubdtype(row.dtype, np.floating) \
            else tf.constant(row)
        with generator_states_kept(network):  # training-mode calls: a tf.random.Generator drawn
            return _holding(model, row)
    except Exception:  # noqa: BLE001 - a model that cannot run on one row: checked as it is
        return (), (), ()


def _holding(model: Model, row: tf.Tensor) -> tuple[tuple[type, ...], tuple[str, ...],
                                                     tuple[str, ...]]:
    network = model.network
    assigned = _assigned(model, row, [])
    if not assigned:
        return (), (), ()
    names = dict(zip((id(v) for v in model.params), model.names))
    layers = [layer for layer in network._flatten_layers(include_self=False)
              if type(layer) is not type(network)]
    # innermost first: a layer inside another has fewer layers inside it
    layers.sort(key=lambda layer: len(list(layer._flatten_layers(include_self=False))))
    first = assigned
    held: list[type] = []
    unstoppable: set[int] = set()
    while True:
        left = [v for v in assigned if id(v) not in unstoppable]
        if not left:
            break
        variable = left[0]
        for layer in (layer for layer in layers if type(layer) not in held
                      and any(v is variable for v in layer.trainable_variables)):
            after = _assigned(model, row, [*held, type(layer)])
            if all(v is not variable for v in after):
                held.append(type(layer))
                assigned = after
                break
        else:  # assigned in the model's own call, or in inference mode too: checked as it is
            unstoppable.add(id(variable))
    still = {id(v) for v in assigned}
    stopped = [v for v in first if id(v) not in still]
    holders = [layer.name for layer in network._flatten_layers(include_self=False)
               if type(layer) in held
               and any(v is s for v in layer.trainable_variables for s in stopped)]
    return (tuple(held), tuple(dict.fromkeys(holders)),
            tuple(names.get(id(v), v.path) for v in stopped))


def _assigned(model: Model, row: tf.Tensor, held: Sequence[type]) -> list:
    """The model's trainable variables a training-mode call on `row` assigns, `held` held in
    inference mode; nothing is changed (the scope keeps the assignments)."""
    import keras

    with held_in_inference(model, held), keras.StatelessScope() as scope:
        model(row, training=True)
    return [v for v in model.params if scope.get_current_value(v) is not None]
