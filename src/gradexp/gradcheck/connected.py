"""Which inputs get no gradient at all: the tape's None, which the checks' VJPs turn into zeros.

A check compares a zero analytical gradient with finite differences either way (a path through
numpy that breaks the tape still fails, since its finite differences are not zero), but an
input that does not reach the output (a variable no layer uses, a branch never taken) would
pass as "0 = 0" without a word. So the report names it (``GradCheckReport.disconnected``, and a
note on its entry). Asked only for the inputs whose first VJP was all zeros
(checked_function.py records them): one more forward and backward pass, with
UnconnectedGradients.NONE, and none at all for the usual check where every input has a
gradient. A run asks once, at its first check (unconnected_names).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

NOTE = ("no gradient: the tape returned None (it does not reach the output), so its "
        "analytical gradient was taken as 0 and compared with finite differences")


def unconnected(target: Any, indices: Sequence[int]) -> list[int]:
    """The inputs among ``indices`` of a started target whose gradient the tape gives as None."""
    import tensorflow as tf

    if not indices:
        return []
    sources = [target._sources()[k] for k in indices]
    with tf.GradientTape() as tape:
        tape.watch(sources)
        y = target._call()
    grads = tape.gradient(y, sources)  # UnconnectedGradients.NONE, TensorFlow's default
    target.backward_passes += 1
    return [k for k, g in zip(indices, grads) if g is None]


def unconnected_names(f: Callable[..., Any], xs: Sequence[Any], names: Sequence[str]
                      ) -> list[str]:
    """The names of the inputs of ``f(*xs)`` that get no gradient (one forward and backward)."""
    import tensorflow as tf

    xs = [tf.convert_to_tensor(x) for x in xs]
    with tf.GradientTape() as tape:
        tape.watch(xs)
        y = f(*xs)
    grads = tape.gradient(y, xs)
    return [name for name, g in zip(names, grads) if g is None]
