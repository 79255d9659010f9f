"""Layers that draw random numbers outside Keras' seed generators, found so that a training-mode
gradient check holds only them in inference mode.

A numerical derivative needs the loss to give one value at one point. Keras' own random layers
(`Dropout`, `GaussianNoise`) draw from seed state the check holds fixed; a layer of yours that
calls `tf.random.normal` in training mode draws anew at every evaluation. The check used to move
the whole model to inference mode then, and a bug in any other layer's training path (a batch
norm ignoring its batch statistics, a custom backward only training takes) passed. Now the
random layers are found by bisection over the layers whose `call` takes `training` (each test:
two forward passes of the checked rows) and only they run in inference mode during the check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

if TYPE_CHECKING:
    from gradexp.models import Model


@contextlib.contextmanager
def held_in_inference(model: Model, names: Sequence[str]) -> Iterator[None]:
    """The layers named `names` (in the model and its float64 twins) called with
    training=False for the block, whatever mode the model is called in; `model.held` names them
    meanwhile, so that functions traced in the block are kept apart from the others."""
    patched = []
    for network in (model.network, *model._twins.values()):
        for layer in network._flatten_layers(include_self=False):
            if layer.name in names and "call" not in layer.__dict__:
                def call(*args, _call=layer.call, **kwargs):  # noqa: ANN001, ANN202
                    return _call(*args, **{**kwargs, "training": False})

                layer.call = call  # an instance attribute: Keras' __call__ calls self.call
                patched.append(layer)
    held, model.held = model.held, tuple(names)
    try:
        yield
    finally:
        model.held = held
        for layer in patched:
            del layer.call


def random_layers(model: Model, params: list[tf.Tensor], x: tf.Tensor) -> list[str] | None:
    """The fewest layers (as bisection finds them) that, held in inference mode, make the
    model's training-mode outputs the same at two evaluations of `params`; None if holding every
    layer that takes `training` does not (the randomness is elsewhere: its own losses, a layer
    random in both modes)."""
    candidates = [layer.name for layer in model.network._flatten_layers(include_self=False)
                  if getattr(layer, "_call_has_training_arg", False)]

    def random_with(held: list[str]) -> bool:
        with held_in_inference(model, held):
            first, second = (model.apply(params, x, training=True).numpy() for _ in range(2))
        return not np.array_equal(first, second, equal_nan=True)

    def fewest(names: list[str], held: list[str]) -> list[str]:
        """The fewest of `names` that, held besides `held`, make the outputs repeat."""
        if not random_with(held):
            return []
        if len(names) == 1:
            return names
        first, second = names[:len(names) // 2], names[len(names) // 2:]
        needed = fewest(first, held + second)
        return needed + fewest(second, held + needed)

    if not candidates or random_with(candidates):
        return None
    return fewest(candidates, []) or None
