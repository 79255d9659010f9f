"""The loss a gradient check differentiates, and the dtype it can run in: the loss a training
step minimizes (the data loss plus the model's own losses), and whether the model and the loss
run forward and backward in the requested dtype (gradcheck.dtype) or only in their own."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf
from omegaconf import DictConfig

from gradexp.data import Dataset
from gradexp.gradcheck.rebuilt import dense, difference
from gradexp.losses import build_loss
from gradexp.models import Model, half_precision_layers
from gradexp.random_layers import held_in_inference


def training_loss(model: Model, loss: Callable, params: list[tf.Tensor], x: tf.Tensor,
                  y: tf.Tensor, training: bool) -> tf.Tensor:
    """The loss a training step minimizes (the data loss plus the model's own losses), of the
    parameter values `params`, the model in training mode or not; nothing of it changes."""
    outputs, own = model.apply(params, x, training=training, with_losses=True)
    data_loss = loss(y, outputs)
    return data_loss if own is None else data_loss + own


def evaluation_dtype(requested: str, model: Model, loss_cfg: DictConfig, data: Dataset,
                     values: list[np.ndarray] | None = None, training: bool = False
                     ) -> tuple[str, str | None]:
    """The dtype to check in, and a note if it is not the requested one.

    The requested dtype if the model and the loss run there, forward and backward (a float32
    constant in a custom backward only fails in the backward); otherwise the dtype the model's
    variables train in, with a note naming the part that failed (the model alone is tried only
    then) and how. Tried eagerly on a few rows: whether code runs in a dtype does not depend on
    how many rows it is given, and all of them cost ~0.1 s once per run in float64.
    """
    own = own_dtype(model)
    if requested == own:
        return requested, None
    x = tf.constant(data.x[:_DTYPE_ROWS], requested)
    y = tf.constant(data.y[:_DTYPE_ROWS], requested)
    values = [v.numpy() for v in model.params] if values is None else values
    params = [tf.constant(v, requested) for v in values]
    try:
        loss = build_loss(loss_cfg, dtype=requested)
        _forward_backward(lambda: training_loss(model, loss, params, x, y, training), params,
                          requested)
    except Exception as loss_error:  # noqa: BLE001 - whatever it raises means: not in dtype
        part, why = f"the loss (loss._target_={loss_cfg['_target_']})", first_line(loss_error)
        try:
            _forward_backward(lambda: model.apply(params, x, training=training), params,
                              requested)
        except Exception as model_error:  # noqa: BLE001 - the model's own failure, then
            part, why = "the model", first_line(model_error)
        return own, (f"gradcheck.dtype={requested} requested, but {part} cannot run in "
                     f"{requested} ({why}); checked in {own}, the dtype it trains "
                     f"in, with {own} steps and tolerances")
    return requested, None


def twin_note(model: Model, data: Dataset, values: list[np.ndarray], dtype: str,
              training: bool = False) -> str | None:
    """None when the model rebuilt in `dtype` (the checks' twin, gradexp.models) computes what
    the model does; else the note of a check made in the model's own dtype instead, naming what
    differs.

    The twin is made anew from its layers' configs: a layer whose computation hangs on an
    attribute set after it was made (`layer.factor = 1.5`, not in its get_config) comes back
    without it, and a check of the twin judges another model (QA: a custom backward scaled by
    such an attribute trained 1.5x too steep, and passed in float64). Compared on a few rows,
    eagerly, once per run and shape: the outputs, and the gradient of the outputs against a
    fixed random cotangent plus the model's own losses (not the loss's gradient: near a minimum
    it is a cancellation float32 does not carry). In inference mode, and for a check in
    training mode in training mode too (QA: an attribute only the training path reads passed),
    with the layers that draw from Keras' seeds held in inference (a twin's masks are drawn in
    its dtype, not the model's); a model whose training-mode outputs do not repeat is compared
    there once its random layers are held (gradexp.run_checks). Tolerances hold float32
    rounding with a wide margin; a model that computes in float16, or has a layer that does, is
    not compared."""
    own = own_dtype(model)
    if dtype == own or model.network.dtype_policy.compute_dtype != own \
            or half_precision_layers(model.network):  # half precision: far from float64
        return None
    x = data.x[:_DTYPE_ROWS]
    seeded = [type(layer) for layer in model.network._flatten_layers(include_self=False)
              if getattr(layer, "_seed_generators", None)  # Keras' own: yours are compared
              and type(layer).__module__.split(".")[0] == "keras"]
    for mode in (False, True) if training else (False,):
        try:
            with held_in_inference(model, seeded if mode else []):
                # in training mode the model twice: do its outputs repeat, the seeds held?
                found = [_outputs_and_gradients(model, values, x, each, mode)
                         for each in ((own, own, dtype) if mode else (own, dtype))]
        except Exception:  # noqa: BLE001 - not in dtype in training mode: the check's trial says
            if not mode:
                raise
            continue
        if mode and not _same(*found[:2]):  # random beyond Keras' seeds: judged when held
            continue
        what = difference(*found[-2], *found[-1], model.names)
        if what is not None:
            where = " in training mode" if mode else ""
            return (f"gradcheck.dtype={dtype} requested, but the model rebuilt in {dtype} "
                    f"does not compute what the model does{where} ({what} on the same weights "
                    f"and rows: a layer setting that its get_config() leaves out, or a "
                    f"computation float32 rounds coarsely?); checked in "
                    f"{own}, the dtype it trains in, with {own} steps and tolerances")
    return None


def _outputs_and_gradients(model: Model, values: list[np.ndarray], x: np.ndarray, dtype: str,
                           training: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    """twin_note's evaluation: the outputs (before Keras' softmax or sigmoid) and the gradient
    of a fixed random projection of them plus the model's own losses, in `dtype`."""
    params = [tf.constant(v, dtype) for v in values]
    with tf.GradientTape() as tape:
        tape.watch(params)
        outputs, own_losses = model.apply(params, tf.constant(x, dtype), training=training,
                                          with_losses=True)
        # Before Keras' softmax or sigmoid: saturated, its float32 derivative is a
        # cancellation (1 - p), and a correct model's gradients "differed" by 1-370% (review)
        outputs = getattr(outputs, "_keras_logits", outputs)
        cotangent = np.random.default_rng(0).standard_normal(outputs.shape)
        total = tf.reduce_sum(outputs * tf.constant(cotangent, outputs.dtype))
        if own_losses is not None:
            total += own_losses
    gradients = tape.gradient(total, params, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return np.asarray(outputs), dense(gradients)


def _same(first: tuple, second: tuple) -> bool:
    """Two of twin_note's evaluations, to the bit."""
    return all(np.array_equal(a, b, equal_nan=True)
               for a, b in zip([first[0], *first[1]], [second[0], *second[1]]))


def own_dtype(model: Model) -> str:
    """The dtype the model's variables train in."""
    return tf.as_dtype(model.params[0].dtype).name if model.params else "float32"


# Rows evaluation_dtype tries the model and loss on.
_DTYPE_ROWS = 16


def _forward_backward(function: Callable[[], tf.Tensor], params: list[tf.Tensor], dtype: str
                      ) -> None:
    """Evaluate `function` and its gradient; raise TypeError if either leaves `dtype`."""
    with tf.GradientTape() as tape:
        tape.watch(params)
        out = function()
    gradients = tape.gradient(out, params, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    for value in [out, *gradients]:
        if tf.convert_to_tensor(value).dtype != dtype:
            raise TypeError(f"it returned {tf.convert_to_tensor(value).dtype.name} for "
                            f"{dtype} inputs")


def first_line(error: BaseException) -> str:
    from gradexp.console import reason

    return reason(error)
