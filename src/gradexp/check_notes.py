"""What a run's gradient check says about the model beside its verdict: where it checked
another computation than the one asked for (inference mode, for randomness Keras' seeds do not
hold: of the layers drawing it, or of the whole model), what it does not verify (half
precision), and inputs it leaves out (token ids, what a Masking layer compares)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from gradexp.models import Model

RANDOM_NOTE = ("the training-mode loss differs between two evaluations at the same point (a "
               "layer draws random numbers outside Keras' seed generators, e.g. raw tf.random "
               "ops), so it cannot be differentiated numerically; checked in inference mode")

UNCHECKED_NOTE = ("not checked: the loss differs between two evaluations at the same point in "
                  "inference mode too (a layer draws random numbers outside Keras' seed "
                  "generators whatever the mode, e.g. raw tf.random or tf.nn.dropout ops in a "
                  "call without training), so finite differences of it would measure noise: "
                  "draw from a keras.random.SeedGenerator (as keras.layers.Dropout does) to have "
                  "it checked")


def half_precision_note(layers: list[str], dtype: str) -> str:
    """What a check of a mixed-precision model verifies, and what it does not."""
    named = ", ".join(layers[:4]) + (f" and {len(layers) - 4} more" if len(layers) > 4 else "")
    named = f"layer {named} computes" if len(layers) == 1 else f"layers {named} compute"
    return (f"{named} in float16/bfloat16 (a mixed-precision policy): the check "
            f"verifies their math in {dtype}, not half precision's rounding or overflow")


def token_inputs(model: Model) -> str | None:
    """Why the model's inputs are ids, not quantities, if they are: its declared Input takes
    integers, or an Embedding takes it as it comes (a float Input: Keras casts the ids). The
    data reach the model as floats, so a finite difference would step an id by 1e-6 and a
    check of d/dinputs compare the Embedding's zero gradient with a jump (a false alarm)."""
    import keras

    network = model.network
    inputs = list(getattr(network, "inputs", None) or [])
    for tensor in inputs:
        dtype = tf.as_dtype(getattr(tensor, "dtype", "float32"))
        if dtype.is_integer:
            return f"the model's Input takes {dtype.name}"
    for layer in network._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.Embedding) and any(
                tensor is given for node in layer._inbound_nodes
                for tensor in node.input_tensors for given in inputs):
            return f"the Embedding {layer.name} takes them"
    return None


def masking_layer(model: Model) -> Any:
    """The model's first Keras Masking layer, or None: its mask_value is compared with the
    inputs, which neither a finite step nor a standardization leaves alone."""
    import keras

    return next((layer for layer in model.network._flatten_layers(include_self=False)
                 if isinstance(layer, keras.layers.Masking)), None)


def unchecked_inputs(model: Model) -> str | None:
    """Why the check of d loss / d inputs is not made, if it is not: the inputs are ids
    (token_inputs), or a Keras Masking layer compares them with its mask_value: stepping an
    entry of a padded timestep unmasks the step, a jump the loss makes, not a derivative (QA: a
    correct Masking + LSTM failed gradcheck=strict at 70,364x, "wrong layer: masking")."""
    tokens = token_inputs(model)
    if tokens:
        return f"{tokens} (ids, not quantities: no derivative by them)"
    layer = masking_layer(model)
    if layer is not None:
        return (f"the Masking layer {layer.name} compares them with its mask_value "
                f"{layer.mask_value!s} (a step of a padded entry unmasks its timestep: a jump, "
                "not a derivative)")
    return None


def held_note(layers: tuple[str, ...]) -> str:
    """What a training-mode check did with layers drawing randomness it cannot hold fixed."""
    named = f"layer {layers[0]} draws" if len(layers) == 1 else f"layers {', '.join(layers)} draw"
    return (f"{named} random numbers outside Keras' seed generators (e.g. raw tf.random ops), "
            f"which a numerical derivative cannot hold fixed: checked with "
            f"{'it' if len(layers) == 1 else 'them'} in inference mode, every other layer in "
            "training mode")



def assigning_note(layers: tuple[str, ...], variables: tuple[str, ...],
                   classes: tuple[type, ...]) -> str:
    """What a training-mode check did with layers that assign their own trainable variables
    while they compute (gradexp.assigning_layers): what training differentiates there is
    their inference-mode computation, at the value assigned."""
    def listed(names: tuple[str, ...]) -> str:
        return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")

    one = len(layers) == 1
    whose = " or ".join(("Keras' " if c.__module__.split(".")[0] == "keras" else "your ")
                        + c.__name__ for c in classes)
    named = f"layer {layers[0]} assigns its" if one else f"layers {listed(layers)} assign their"
    return (f"{named} own trainable variable{'s' * (len(variables) > 1)} {listed(variables)} "
            f"while {'it computes' if one else 'they compute'} in training mode (as {whose} "
            f"does), so training applies the gradient of {'its' if one else 'their'} "
            f"inference-mode computation: checked with {'it' if one else 'them'} in inference "
            "mode, every other layer in training mode")
