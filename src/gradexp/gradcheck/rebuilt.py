"""Does a copy rebuilt in float64 compute what the original computes?

The checks judge a float64 copy of the model (gradexp.models) or of a layer (culprits), made anew
from its config. A layer whose computation hangs on something its config leaves out (an attribute
set after it was made) comes back without it: its copy may be right where the original is wrong,
and a check of the copy passes a model that trains wrongly. So before a copy is checked, it is
called beside the original on the same values (outputs, and gradients against a cotangent), and
compared within float32 rounding with a wide margin."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

RTOL = 1e-3  # float32 rounding is ~1e-7 a step; a deep model's gradients stay well inside 1e-4


def difference(outputs: np.ndarray, gradients: Sequence[np.ndarray], exact_outputs: np.ndarray,
               exact_gradients: Sequence[np.ndarray], names: Sequence[str]) -> str | None:
    """None when the original's `outputs` and `gradients` (its own dtype) agree with the copy's
    `exact_...` (float64); else what differs, e.g. "enc/kernel's gradient differs by 33%".
    A gradient is judged against its own size and, for one near 0, the largest's."""
    outputs, exact_outputs = np.asarray(outputs, np.float64), np.asarray(exact_outputs, np.float64)
    if np.linalg.norm(outputs - exact_outputs) > (RTOL * np.linalg.norm(exact_outputs)
                                                  + 1e-6 * np.sqrt(exact_outputs.size)):
        return "its outputs differ"
    gradients = [np.asarray(g, np.float64) for g in gradients]
    exact_gradients = [np.asarray(g, np.float64) for g in exact_gradients]
    largest = max((np.linalg.norm(g) for g in exact_gradients), default=0.0)
    differs = []
    for name, gradient, exact in zip(names, gradients, exact_gradients):
        gap, size = np.linalg.norm(gradient - exact), np.linalg.norm(exact)
        if gap > RTOL * size + 0.1 * RTOL * largest + 1e-12:
            differs.append((gap / max(size, 1e-30), name))
    if not differs:
        return None
    share, name = max(differs)
    return f"{name}'s gradient differs by {_percent(share)}"


def _percent(share: float) -> str:
    """A share as a percentage a reader can weigh: whole percents from 1%, two significant
    digits below (QA: a gap of 0.14%, above the 0.1% threshold, printed "differs by 0%")."""
    percent = 100 * share
    return f"{percent:.0f}%" if percent >= 1 else f"{percent:.2g}%"


def dense(gradients: Sequence) -> list[np.ndarray]:
    """Each gradient as a numpy array: an Embedding's IndexedSlices densified; None (no
    gradient reaches it) as 0.0."""
    import tensorflow as tf

    return [np.zeros(()) if g is None else np.asarray(tf.convert_to_tensor(g))
            for g in gradients]


def rebuild_reason(error: BaseException) -> str:
    """Why a twin could not be made, in one line: Keras' "Error when deserializing class ...
    using config={...}" without the config, which held a lambda's bytecode in base64 (QA: a
    note of 900 characters), with the layer's name and the exception it met."""
    text = " ".join(str(error).split())
    head, _, config = text.partition(" using config=")
    if not config:
        return " ".join(str(error).strip().split("\n\n")[0].split())
    name = re.search(r"'name': '([^']+)'", config)
    cause = re.search(r"Exception encountered: (.*?)(?:: \{|$)", config)
    return (head + (f" (layer {name.group(1)})" if name else "")
            + (f": {cause.group(1)}" if cause else "") + _unregistered(config))


def _unregistered(config: str) -> str:
    """The fix for a custom regularizer, initializer, constraint or activation Keras cannot
    find by name (QA: an unregistered Regularizer subclass said only "Could not interpret
    regularizer identifier"), naming its class; "" for any other error, and for a lambda (no
    class: registering it would not help)."""
    found = re.search(r"Could not interpret ([\w ]+?) identifier: .*?'class_name': '([^']+)'",
                      config)
    if not found:
        return ""
    return (f" {found.group(2)} (a custom {found.group(1)}: decorate its class with "
            f"@keras.saving.register_keras_serializable())")
