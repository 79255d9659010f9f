"""The gradient functions a trace registers in TensorFlow for good, taken out with their owner.

A `tf.custom_gradient` called in a graph registers its gradient function in TensorFlow's
process-wide gradient registry (`ops.gradient_registry`) under a new name,
`CustomGradient-<uid>`, and nothing ever takes it out. That function holds the traced tensors,
so through them the whole traced graph outlives whatever traced it. Keras' optimizer calls one
in every step (`apply_gradients` all-reduces the gradients through the replica context's
`all_reduce`, a custom gradient even with one replica): a sweep over new shapes grew by the
trainer's graph a job (~3.3 MiB a job of `model=mlp` on the line). A person's own
`tf.custom_gradient` (a layer's call) is traced by more than the trainer: the builder's Keras
build (a scratch graph), the float64 twin, the gradient checks' compiled losses, the setup
check's trace, the evaluation: a model with one grew ~1.3 MiB a job more than one without
(docs/performance.md). The registry is frozen with TensorFlow's import
(gradexp.tensorflow_import), so gc.get_referrers and objgraph see no referrer.

So whatever holds a traced function (a trainer, a check's compiled loss, an evaluator, a built
network) keeps a list from `owned_by(self)` and traces inside `recording(that list)`: once it is
collected, nothing can call or differentiate those graphs any more, and their names are taken
out of the registry.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from tensorflow.python.framework import ops as tf_ops  # the graph gradient registry

CUSTOM_GRADIENT = "CustomGradient-"  # tf.custom_gradient's registry names: this, then ops.uid()


def owned_by(owner: object) -> list[str]:
    """A list for `recording` to fill, whose names are taken out of TensorFlow's gradient
    registry once `owner` is collected (not at exit: the process's end frees them anyway)."""
    names: list[str] = []
    weakref.finalize(owner, forget, names).atexit = False
    return names


@contextmanager
def recording(names: list[str]) -> Iterator[None]:
    """Add to `names` the gradient functions TensorFlow registers while the block runs.

    Also when the block starts eagerly: Keras builds a functional model (and a clone) on a
    scratch graph, and a tf.function called eagerly traces inside the call. Names are numbered
    by ops.uid(), which only grows, so those above the block's first uid are the block's."""
    first = tf_ops.uid()
    try:
        yield
    finally:
        registry = _registry()
        if registry is not None:
            for name in list(registry):
                number = name[len(CUSTOM_GRADIENT):]
                if name.startswith(CUSTOM_GRADIENT) and number.isdigit() and int(number) > first:
                    names.append(name)


def forget(names: list[str]) -> None:
    """Take `names` out of TensorFlow's gradient registry (their owner was collected)."""
    registry = _registry()
    if registry is not None:
        for name in names:
            registry.pop(name, None)
    names.clear()


def _registry() -> dict | None:
    """The registry's dict (private in TensorFlow: None if a release renames it, and then
    nothing is taken out, as before)."""
    registry = getattr(tf_ops.gradient_registry, "_registry", None)
    return registry if isinstance(registry, dict) else None
