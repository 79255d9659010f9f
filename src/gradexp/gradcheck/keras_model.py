"""check_model: a Keras model's training loss checked as its training step differentiates it.

    report = check_model(model, x, y, loss=keras.losses.MeanSquaredError())
    report = check_model(model, x, mode="inference")      # the outputs themselves, no loss

The checked function of the model's trainable variables' values is `loss(y, model(x,
training=...)) + sum(model.losses)` (or, without a loss, the outputs plus nothing), computed
through Keras 3's `stateless_call` on a float64 twin of the model (the runner's
gradexp.models.Model), so the finite differences are not drowned in float32 rounding and the
model is never changed: in training mode every evaluation draws the dropout masks the model's
seed state gives now, and batch norm uses the batch's statistics without moving its own. A
model whose training-mode output is random at a fixed point (raw `tf.random` in a layer) has the
layers drawing it held in inference mode (gradexp.random_layers), or, if that does not make it
repeat, is checked in inference mode as a whole; a layer assigning its own trainable variables
in training mode (Keras' SpectralNormalization) is held in inference mode, the computation whose
gradient training applies (gradexp.assigning_layers); the report's notes say which. When the check
fails, the layers whose own backward is wrong are searched for as a run does (culprits.py, each
layer checked alone on at most CULPRIT_ROWS of x) and named in ``report.culprits``. The same
rules as a run's checks (src/gradexp/run_checks.py), for a notebook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MODES = ("train", "inference")
CULPRIT_ROWS = 256  # as a run's search (verification.CULPRIT_ROWS)


def check_model(model: Any, x: Any, y: Any = None, *, loss: Callable[[Any, Any], Any] | None = None,
                mode: str = "train", dtype: str = "float64", **options: Any):
    """Check the gradient of `model`'s training loss (or of its outputs, without `loss`) with
    respect to its trainable variables; `options` are check_gradients' keywords (method,
    probes, seed, order, ...). Returns a GradCheckReport whose entries are named by the
    variables' paths without the model's prefix (`dense0/kernel`). Raises ValueError when the
    loss is random at a fixed point in the mode checked, whatever layers are held (no verdict
    is possible: finite differences would measure noise), and, before any work, for a model
    of several inputs or outputs (a dict or list of them). The tf.random.Generator states the
    model's layers hold are as before (random_layers.generator_states_kept)."""
    from gradexp.random_layers import generator_states_kept

    loss = _checked_arguments(model, y, loss)
    with generator_states_kept(model):
        return _check_model(model, x, y, loss=loss, mode=mode, dtype=dtype, **options)


def _checked_arguments(model: Any, y: Any, loss: Any) -> Any:
    """The loss to check (a Keras name resolved as compile resolves it), after a one-line
    refusal of the arguments' common mistakes. QA: loss="mse" met "'str' object is not
    callable", the class MeanSquaredError "truth value of an array is ambiguous", a loss
    without y a 40-line traceback, a function for the model "'function' object has no
    attribute 'trainable_variables'\"."""
    import keras

    if not isinstance(model, keras.layers.Layer):
        raise TypeError(f"check_model takes a keras.Model, got a {type(model).__name__}; for a "
                        "function of tensors use check_gradients(f, [x])")
    if loss is None:
        return None
    if isinstance(loss, type):
        raise TypeError(f"loss={loss.__name__} is a class; pass an instance: "
                        f"loss={loss.__name__}()")
    if y is None:
        raise ValueError("loss= needs the targets y: check_model(model, x, y, loss=...); "
                         "without a loss the model's outputs are checked")
    if isinstance(loss, str):
        return _named_loss(loss)
    if not callable(loss):
        raise TypeError(f"loss={loss!r}: expected a Keras loss (an instance such as "
                        "MeanSquaredError(), a function of (y_true, y_pred), or a name: 'mse')")
    return loss


def _named_loss(name: str) -> Any:
    """A loss named as in model.compile(loss="mse"): Keras' function reduced by its mean over
    the batch, the scalar compile trains (its default reduction), or Keras' Loss instance."""
    import keras
    import tensorflow as tf

    try:
        found = keras.losses.get(name)
    except ValueError:
        raise ValueError(f"loss={name!r}: not a Keras loss name (e.g. 'mse', 'mae', "
                         "'binary_crossentropy', 'sparse_categorical_crossentropy')") from None
    if isinstance(found, keras.losses.Loss):
        return found

    def mean_loss(y_true: Any, y_pred: Any) -> Any:
        return tf.reduce_mean(found(y_true, y_pred))
    return mean_loss


def _check_model(model: Any, x: Any, y: Any, *, loss: Callable[[Any, Any], Any] | None,
                 mode: str, dtype: str, **options: Any):
    import numpy as np
    import tensorflow as tf

    from gradexp.assigning_layers import assigning_layers, assigning_names
    from gradexp.check_notes import (
        RANDOM_NOTE,
        UNCHECKED_NOTE,
        assigning_note,
        half_precision_note,
        held_note,
    )
    from gradexp.gradcheck.checker import check_gradients
    from gradexp.models import Model, half_precision_layers
    from gradexp.random_layers import held_in_inference, held_names, random_layers

    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
    _one_input_one_output(model, x, y)
    x = np.asarray(x)
    wrapped = Model(model, tuple(int(size) for size in x.shape[1:]))  # a row's shape
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
    def repeats(held: list[type], training: bool) -> bool:
        with held_in_inference(wrapped, held):
            first, second = (of_params(training)(*params).numpy() for _ in range(2))
        return np.array_equal(first, second, equal_nan=True)

    # Layers assigning their own trainable variables (Keras' SpectralNormalization) held in
    # inference mode, what training differentiates there (gradexp.assigning_layers), with the
    # random layers, if any, found and held besides them.
    assigning = assigning_layers(wrapped, x) if training else ()
    if assigning:
        notes.append(assigning_note(*assigning_names(wrapped), assigning))
    held: list[type] = list(assigning)
    with held_in_inference(wrapped, assigning):
        if training and not repeats([], True):
            random = random_layers(wrapped, params, inputs) or []
            if random and repeats(random, True):
                notes.append(held_note(held_names(wrapped, random)))
                held += random
            else:
                training = False
                notes.append(RANDOM_NOTE)
        if not training and not repeats([], False):  # a run says "not checked" (no verdict)
            raise ValueError(UNCHECKED_NOTE)
    with held_in_inference(wrapped, held):  # the evaluations are eager: held while they run
        report = check_gradients(of_params(training), params, names=wrapped.names,
                                 **{"compile": False, **options})
        report.notes[:0] = notes
        half = half_precision_layers(model)  # as a run's check says (run_checks)
        if half:
            report.notes.append(half_precision_note(half, report.dtype_used))
        if not report.passed:  # the random layers held in the layers' own checks too
            _name_culprits(report, model, x[:CULPRIT_ROWS], training, dtype, wrapped.names,
                           options)
    return report


def _one_input_one_output(model: Any, x: Any, y: Any) -> None:
    """Raise ValueError, before any work, for several inputs or outputs (a dict or list of
    arrays, a functional model of several Inputs or outputs): the float64 twin takes one
    keras.Input of rows x features, and they met IndexError, numpy's "inhomogeneous shape" or
    "'list' object has no attribute 'dtype'" inside (QA)."""
    def parts(value: Any) -> int:  # Keras' multi-input convention: a dict or list of arrays
        if isinstance(value, dict):
            return len(value)
        if isinstance(value, (list, tuple)) and value and all(
                len(getattr(v, "shape", ())) >= 2 for v in value):
            return len(value)
        return 1

    try:
        n_inputs, n_outputs = len(model.inputs or []), len(model.outputs or [])
    except (AttributeError, ValueError):
        n_inputs = n_outputs = 0
    if not n_outputs and parts(x) == 1:  # a subclassed model: what its call returns, on a row
        import keras
        import numpy as np
        import tensorflow as tf

        try:
            with keras.StatelessScope():  # changes nothing
                n_outputs = len(tf.nest.flatten(model(np.asarray(x)[:1])))
        except Exception:  # noqa: BLE001 - not on one row: the check itself will say
            return
    found = [f"x as a {type(x).__name__} of {parts(x)} arrays" if parts(x) > 1 else "",
             f"a model of {n_inputs} inputs" if n_inputs > 1 else "",
             f"y as a {type(y).__name__} of {parts(y)} arrays" if parts(y) > 1 else "",
             f"a model of {n_outputs} outputs" if n_outputs > 1 else ""]
    if any(found):
        raise ValueError(_one_only(" and ".join(f for f in found if f)))


def _one_only(found: str) -> str:
    """The one-line refusal of several inputs or outputs, with how to check such a model."""
    return (f"check_model takes a model of one input and one output tensor (x: one array of "
            f"rows x features, y: one array), got {found}; wrap it: one Input of the "
            f"concatenated features, split inside (i = keras.Input((n_a + n_b,)); "
            f"keras.Model(i, model([i[:, :n_a], i[:, n_a:]]))), and check each output's loss "
            f"with keras.Model(model.input, model.outputs[k])")


def _name_culprits(report: Any, model: Any, x: Any, training: bool, dtype: str,
                   names: list[str], options: dict[str, Any]) -> None:
    """report.culprits and report.culprit_checks from culprits.find_culprits, in the mode
    checked; a search that raises leaves culprits None, with a note (a diagnosis, not the
    verdict)."""
    from gradexp.gradcheck.culprits import find_culprits

    failed = [e for e in report.entries if not e.passed]
    try:
        verdicts = find_culprits(model, x, training, dtype=dtype,
                                 probes=options.get("probes", 4), seed=options.get("seed", 0),
                                 names=names, order=report.order)
    except Exception as error:  # noqa: BLE001 - the search is a diagnosis, never the check's end
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        report.notes.append(f"the wrong layer could not be searched for: "
                            f"{type(error).__name__}: {first}")
        return
    report.culprits = [v.name for v in verdicts]
    report.culprit_checks = verdicts
    own = {name for v in verdicts for name in v.variables}
    affected = [e.name for e in failed if e.name not in own]
    if verdicts and affected:
        report.notes.append("failing only because the error flows through them (affected, not "
                            "wrong): " + ", ".join(affected))


def _in_dtype(loss: Any, dtype: str) -> Any:
    """A Keras loss rebuilt to compute in `dtype` (they cast their inputs to their own dtype,
    float32 unless told); anything else as it is."""
    import keras

    if isinstance(loss, keras.losses.Loss):
        return loss.__class__.from_config({**loss.get_config(), "dtype": dtype})
    return loss
