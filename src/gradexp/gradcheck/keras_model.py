"""check_model: a Keras model's training loss checked as its training step differentiates it.

    report = check_model(model, x, y, loss=keras.losses.MeanSquaredError())
    report = check_model(model, x, mode="inference")      # the outputs themselves, no loss

The checked function of the model's trainable variables' values is `loss(y, model(x,
training=...)) + sum(model.losses)` (or, without a loss, the outputs plus nothing), computed
through Keras 3's `stateless_call` on a float64 twin of the model (the runner's
gradexp.models.Model), so the finite differences are not drowned in float32 rounding and the
model is never changed: in training mode every evaluation draws the dropout masks the model's
seed state gives now, and batch norm uses the batch's statistics without moving its own. A
model whose training-mode output is random at a fixed point (raw `tf.random` in a layer) is
checked in inference mode instead, and the report's notes say why. The same rules as a run's
checks (src/gradexp/verification.py), for a notebook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MODES = ("train", "inference")


def check_model(model: Any, x: Any, y: Any = None, *, loss: Callable[[Any, Any], Any] | None = None,
                mode: str = "train", dtype: str = "float64", **options: Any):
    """Check the gradient of `model`'s training loss (or of its outputs, without `loss`) with
    respect to its trainable variables; `options` are check_gradients' keywords (method,
    probes, seed, order, ...). Returns a GradCheckReport whose entries are named by the
    variables' paths without the model's prefix (`dense0/kernel`)."""
    import numpy as np
    import tensorflow as tf

    from gradexp.gradcheck.api import check_gradients
    from gradexp.models import Model

    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
    x = np.asarray(x)
    wrapped = Model(model, int(x.shape[-1]))
    notes: list[str] = []
    try:
        wrapped.prepare(dtype)
        wrapped.sync_twins()
    except TypeError as error:  # a model that cannot be rebuilt in dtype: its own dtype
        notes.append(f"dtype={dtype!r} requested, but {error}; checked in the model's own dtype")
        dtype = tf.as_dtype(wrapped.params[0].dtype).name if wrapped.params else "float32"
    inputs = tf.constant(x, dtype)
    targets = None if y is None else tf.constant(np.asarray(y), dtype)
    loss = _in_dtype(loss, dtype)

    def of_params(training: bool) -> Callable[..., Any]:
        def function(*params: Any) -> Any:
            outputs, own = wrapped.apply(list(params), inputs, training=training,
                                         with_losses=True)
            value = outputs if loss is None else loss(targets, outputs)
            return value if own is None else value + tf.cast(own, value.dtype)
        return function

    params = [tf.constant(v.numpy(), dtype) for v in wrapped.params]
    training = mode == "train"
    if training:
        first, second = (of_params(True)(*params).numpy() for _ in range(2))
        if not np.array_equal(first, second):
            training = False
            notes.append("the training-mode computation differs between two evaluations at the "
                         "same point (randomness outside Keras' seed generators, e.g. raw "
                         "tf.random ops); checked in inference mode")
    report = check_gradients(of_params(training), params, names=wrapped.names,
                             **{"compile": False, **options})
    report.notes[:0] = notes
    return report


def _in_dtype(loss: Any, dtype: str) -> Any:
    """A Keras loss rebuilt to compute in `dtype` (they cast their inputs to their own dtype,
    float32 unless told); anything else as it is."""
    import keras

    if isinstance(loss, keras.losses.Loss):
        return loss.__class__.from_config({**loss.get_config(), "dtype": dtype})
    return loss
