"""tf.py_function in a checked function: its gradient takes, once, the tape its forward kept.

TensorFlow's EagerPyFunc keeps its forward's tape under the op's token for its gradient and pops
it at the first one (script_ops.tape_cache): a second VJP from the same forward raises
"UnknownError ... KeyError: b'pyfunc_27'". The checker took all its VJPs from one recorded
forward (a persistent tape, or a compiled call of several cotangents), so every check of a
differentiable py_function crashed through ~65 frames, where tf.test.compute_gradient, one
forward per gradient, checked it (QA). Such a function is found before its VJPs where that is
cheap (the tapes a recorded forward left; a tf.function's graph, walked once per function), else
by that error, and each of its VJPs then records a forward of its own (checked_function.py).
"""

from __future__ import annotations

from typing import Any

from gradexp.gradcheck.compiled import _concrete

# Kept on a tf.function: True if its VJPs need a forward each (False: asked, they do not)
ONCE_PER_FORWARD = "_gradexp_once_per_forward"


def kept_tapes() -> int:
    """How many forward tapes tf.py_functions keep for their gradient (TensorFlow's private
    script_ops.tape_cache; 0 where it is gone, and once_per_forward() finds out by the error)."""
    from tensorflow.python.ops import script_ops

    return len(getattr(script_ops, "tape_cache", ()))


def calls_py_function(f: Any, tensors: list[Any]) -> bool:
    """Whether tf.function ``f``'s trace for ``tensors`` runs a tf.py_function (nested functions
    included). Asked once per f (a walk of its graph), kept on it."""
    known = f.__dict__.get(ONCE_PER_FORWARD)
    if known is None:
        try:
            found = _concrete(f, tensors, f.__dict__.setdefault("_gradexp_traces", {}))
            graph = (found[0] if found else f.get_concrete_function(*tensors)).graph
            definition = graph.as_graph_def()
            ops = {node.op for node in definition.node}
            ops.update(node.op for function in definition.library.function
                       for node in function.node_def)
            known = "EagerPyFunc" in ops
        except Exception:  # noqa: BLE001 - f's own error: raised again by evaluating it
            known = False
        f.__dict__[ONCE_PER_FORWARD] = known
    return known


def known(f: Any) -> bool:
    """Whether ``f`` is a tf.function already found to need a forward per VJP."""
    return bool(getattr(f, "__dict__", {}).get(ONCE_PER_FORWARD))


def remember(f: Any) -> None:
    """Keep on a tf.function ``f`` that it needs a forward per VJP: its next checks do not fail
    first (TensorFlow prints each such failure's traceback on stderr)."""
    import tensorflow as tf

    if isinstance(f, tf.types.experimental.PolymorphicFunction):
        f.__dict__[ONCE_PER_FORWARD] = True


def once_per_forward(error: BaseException) -> bool:
    """Whether ``error`` is a tf.py_function's gradient finding its forward's tape gone."""
    import tensorflow as tf

    return isinstance(error, tf.errors.OpError) and "KeyError: b'pyfunc_" in str(error)


def fresh_vjp(target: Any, sources: list[Any], cotangent: Any) -> list[Any]:
    """The VJP of ``cotangent`` from a forward of ``target`` recorded for it alone."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(sources)
        y = target._call()
    return tape.gradient(y, sources, output_gradients=tf.constant(cotangent, y.dtype),
                         unconnected_gradients=tf.UnconnectedGradients.ZERO)
