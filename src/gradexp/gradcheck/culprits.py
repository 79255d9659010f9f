"""Which layer is wrong: each layer of a Keras model checked alone, at the inputs it saw.

A model's check fails for every variable a wrong backward flows into: a layer whose backward
is 5% off makes the variables of every layer before it fail too. To name the layer itself, one
forward pass of the model is observed (each layer's ``call`` wrapped for its duration, so
functional, sequential, subclassed and nested models, custom layers and layers called more than
once are all seen) and every recorded call is checked on its own: the layer as a function of
(its floating-point inputs, its own trainable variables' values), called in a Keras
``StatelessScope`` as ``stateless_call`` does, with :func:`gradexp.gradcheck.check_gradients`
(probe method).

A layer is a *culprit* when its own check fails and no layer inside it fails (a container whose
sublayers all pass can still be wrong in its own code: ops in a functional graph, a subclassed
model's ``call``). Containers are checked only when nothing inside them failed, so a culprit
found in a leaf costs no check of the model around it; when every layer and the model alone
pass, no layer is at fault (e.g. the loss is wrong) and the list of culprits is empty.

Each layer is checked in float64 where it can be rebuilt and run in float64 (its config with
``dtype="float64"``), else in its own dtype, with that dtype's tolerances, as the run's check
does. The model's state is untouched: the forward pass runs in a ``StatelessScope``, and
each layer's checks use the non-trainable state it had when called (dropout masks and batch
statistics held fixed across the perturbed evaluations). A layer that draws random numbers
outside Keras' seed generators gives two different outputs at the same point; it is reported
as not checked rather than blamed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradexp.gradcheck.rebuilt import dense, difference
from gradexp.gradcheck.report import GradCheckEntry, GradCheckReport

# A layer called more often than this in one forward pass (a shared layer in a loop, an RNN's
# cell at every step) is checked at its first calls only, each call its own check. A later call's
# inputs may reach a branch the first ones did not (QA: a bug for negative inputs only, reached
# at a shared layer's third call, was blamed on the model at 2): 4 covers such sharing, and
# bounds the search's cost on a cell called at every step.
MAX_CALLS_PER_LAYER = 4
# A layer whose outputs pass alone but whose own losses (add_loss, regularizers) do not.
OWN_LOSSES_WRONG = "its own losses (add_loss, regularizers) are wrong"


@dataclass
class LayerVerdict:
    """One recorded call of one layer, checked alone.

    ``name`` is the layer's path in the model ("encoder", "block/softplus" for a layer inside
    the nested model "block"); ``call`` which of its calls in the forward pass (0: the first);
    ``variables`` the names of its own trainable variables, as the run's check names them;
    ``report`` the check (None when it could not be checked: ``note`` says why); ``model``
    whether it is a keras.Model (a container may be a layer: SpectralNormalization,
    Bidirectional, a custom block, which the console called "model" (QA)).
    """

    name: str
    call: int
    passed: bool
    container: bool
    dtype: str
    variables: list[str] = field(default_factory=list)
    report: GradCheckReport | None = None
    note: str = ""
    model: bool = False

    @property
    def worst(self) -> GradCheckEntry | None:
        """The entry (an input or a variable of the layer) furthest beyond its tolerance."""
        failed = self.report.failed_entries if self.report else []
        return max(failed, key=lambda e: e.error_to_tolerance, default=None)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "call": self.call, "passed": self.passed,
                "container": self.container, "dtype": self.dtype, "variables": self.variables,
                "model": self.model, "note": self.note,
                "report": self.report.to_dict() if self.report else None}


def find_culprits(network: Any, x: Any, training: bool = True, *, dtype: str = "float64",
                  probes: int = 4, seed: int = 0, names: Sequence[str] | None = None,
                  order: int = 1) -> list[LayerVerdict]:
    """The layers of `network` whose own backward is wrong at input `x` (see the module doc).

    training: the mode the model is called in (the run's check's mode). names: the names of
    network.trainable_variables as the caller reports them (default: their Keras paths without
    the model's name), so a culprit's variables match the failing entries of the model's check.
    order=2: each layer's second derivatives are checked too (where its first order passes).
    """
    # A failing verdict is a culprit: a container is checked only when nothing inside failed.
    return [v for v in check_layers(network, x, training, dtype=dtype, probes=probes,
                                    seed=seed, names=names, order=order) if not v.passed]


def check_layers(network: Any, x: Any, training: bool = True, *, dtype: str = "float64",
                 probes: int = 4, seed: int = 0, names: Sequence[str] | None = None,
                 order: int = 1) -> list[LayerVerdict]:
    """Every checked call, leaves first, then each container with nothing failing inside it."""
    paths, children = _tree(network)
    calls = _record(network, x, training, list(paths))
    variable_names = _variable_names(network, names)
    verdicts: list[LayerVerdict] = []
    failed: set[int] = set()  # ids of layers failing alone or with a failing descendant
    # Deepest first, so a container is reached after everything inside it.
    for layer in sorted(paths, key=lambda layer: -_depth(paths[layer])):
        inside = children[id(layer)]
        if any(id(c) in failed for c in inside):
            failed.add(id(layer))
            continue
        for index, (args, kwargs, state) in enumerate(calls.get(id(layer), [])):
            try:
                verdict = _check_call(layer, paths[layer], index, args, kwargs, state, dtype,
                                      probes, seed, bool(inside), variable_names, order)
            except Exception as error:  # noqa: BLE001 - a layer that cannot run alone
                verdict = LayerVerdict(paths[layer] or layer.name, index, True, bool(inside),
                                       _dtype_of(layer), note=f"not checked: it raised "
                                       f"{type(error).__name__} when called alone",
                                       model=_is_model(layer))
            verdicts.append(verdict)
            if not verdict.passed:
                failed.add(id(layer))
                break
    return verdicts


def _depth(path: str) -> int:
    """0 for the model itself, 1 for its layers, 2 for the layers of a nested model..."""
    return path.count("/") + 1 if path else 0


# ---------------------------------------------------------------- observing one forward pass
def _tree(network: Any) -> tuple[dict, dict[int, list]]:
    """Every layer's path ("" for the model itself) and, per layer id, all layers inside it."""
    paths: dict = {network: ""}
    children: dict[int, list] = {}

    def walk(layer: Any, prefix: str) -> list:
        inside = []
        for sub in layer._flatten_layers(include_self=False, recursive=False):
            if sub in paths or type(sub).__name__ == "InputLayer":
                continue
            paths[sub] = f"{prefix}{sub.name}"
            inside += [sub, *walk(sub, f"{paths[sub]}/")]
        children[id(layer)] = inside
        return inside

    walk(network, "")
    return paths, children


def _record(network: Any, x: Any, training: bool, layers: list) -> dict[int, list]:
    """Per layer id: (args, kwargs, non-trainable state) of its calls in one forward pass.

    The pass runs in a StatelessScope, so batch-norm statistics and seed generators are read,
    never advanced; each layer's state is taken as it was at its call."""
    import keras
    import tensorflow as tf

    calls: dict[int, list] = {}
    kept: dict[int, Any] = {}

    def wrap(layer: Any) -> None:
        original = layer.call
        if "call" in layer.__dict__:
            kept[id(layer)] = original

        accepts = _accepted(original)

        def call(*args: Any, **kwargs: Any) -> Any:
            # What the layer's own call takes: Keras hands a model `training` whether its call
            # has it or not, and sorts it out only for calls it sees the signature of.
            kwargs = kwargs if accepts is None else {k: v for k, v in kwargs.items()
                                                     if k in accepts}
            seen = calls.setdefault(id(layer), [])
            if len(seen) < MAX_CALLS_PER_LAYER:
                state = [tf.convert_to_tensor(v) for v in layer.non_trainable_variables]
                seen.append((_frozen(args), _frozen(kwargs), state))
            return original(*args, **kwargs)

        layer.call = call

    x = tf.cast(x, network.dtype) if tf.as_dtype(x.dtype).is_floating else x
    for layer in layers:
        wrap(layer)
    try:
        # Called as Keras calls it (so `training` reaches every layer), its assignments kept
        # in the scope: the model's variables are as before.
        with keras.StatelessScope():
            network(x, training=training)
    finally:
        for layer in layers:
            if id(layer) in kept:
                layer.call = kept[id(layer)]
            else:
                del layer.call
    return calls


def _accepted(function: Any) -> set[str] | None:
    """The keyword arguments `function` takes (None: any)."""
    import inspect

    parameters = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters}


def _frozen(structure: Any) -> Any:
    """The call's arguments with every tensor taken as a constant (no symbolic leftovers)."""
    import tensorflow as tf

    return tf.nest.map_structure(
        lambda t: tf.identity(t) if isinstance(t, (tf.Tensor, tf.Variable)) else t, structure)


def _variable_names(network: Any, names: Sequence[str] | None) -> dict[int, str]:
    variables = list(network.trainable_variables)
    if names is None:
        prefix = f"{network.name}/"
        names = [v.path.removeprefix(prefix) for v in variables]
    return {id(v): n for v, n in zip(variables, names)}


# ---------------------------------------------------------------- checking one call alone
def _check_call(layer: Any, path: str, index: int, args: Any, kwargs: Any, state: list,
                dtype: str, probes: int, seed: int, container: bool,
                variable_names: dict[int, str], order: int = 1) -> LayerVerdict:
    import keras
    import tensorflow as tf

    from gradexp.gradcheck import check_gradients

    name = path or layer.name
    own = list(layer.trainable_variables)
    verdict = LayerVerdict(name, index, True, container, _dtype_of(layer),
                           [variable_names.get(id(v), v.path) for v in own],
                           model=_is_model(layer))
    flat = tf.nest.flatten((args, kwargs))
    checked = [k for k in _inputs_checked(args, kwargs) if _is_float_tensor(flat[k])]
    if not checked and not own:
        verdict.note = "no floating-point inputs or trainable variables: nothing to check"
        return verdict
    if isinstance(layer, keras.layers.Masking):
        # x where a timestep differs from mask_value: a step of a padded entry unmasks it, a
        # jump, not a derivative (QA: Keras' own Masking named beside the real culprit)
        verdict.note = "not checked: it compares its inputs with its mask_value (a jump)"
        return verdict
    target, used = _in_dtype(layer, dtype, flat, checked, args, kwargs, state)
    verdict.dtype = used
    inputs = [tf.cast(flat[k], used) for k in checked]
    weights = [tf.cast(v, used) for v in own]
    input_names = ["inputs"] if len(checked) == 1 else [f"inputs[{j}]" for j in
                                                       range(len(checked))]
    f = _as_function(target, flat, checked, args, kwargs, _cast_state(state, used))
    values = [*inputs, *weights]
    first, second = f(*values), f(*values)
    if not np.array_equal(first.numpy(), second.numpy()):
        verdict.note = ("not checked: two calls at the same point differ (random numbers "
                        "drawn outside Keras' seed generators cannot be held fixed)")
        return verdict
    # Its variables by the names the model's check gives them (W, encoder/kernel, ...).
    options = {"method": "probe", "probes": probes, "seed": seed,
               "names": [*input_names, *verdict.variables], "compile": False}
    verdict.report = check_gradients(f, values, **options)
    if verdict.report.passed:  # its own losses, apart: beside its outputs one number of many
        losses = _as_function(target, flat, checked, args, kwargs, _cast_state(state, used),
                              losses=True)
        if losses(*values) is not None:
            report = check_gradients(losses, values, **options)
            if not report.passed:
                verdict.report, verdict.note = report, OWN_LOSSES_WRONG
    if order == 2 and verdict.report.passed:  # its backward's own derivative
        second = check_gradients(f, values, order=2, **options)
        if not second.passed:
            verdict.report, verdict.note = second, "its second derivatives are wrong"
    verdict.passed = verdict.report.passed
    return verdict


def _is_model(layer: Any) -> bool:
    """A keras.Model (Sequential, functional, subclassed), not a layer holding layers."""
    import keras

    return isinstance(layer, keras.Model)


def _inputs_checked(args: Any, kwargs: dict) -> list[int]:
    """The positions in tf.nest.flatten((args, kwargs)) of a call's inputs: every positional
    one, and the keyword ones but masks (`mask`, `attention_mask`: which entries count, held
    fixed). A keyword tensor (`Gate()(a, context=c)`) is an input like any: held fixed, a wrong
    gradient by it was blamed on the whole model (QA)."""
    import tensorflow as tf

    positions = list(range(len(tf.nest.flatten(args))))
    offset = len(positions)
    for key in sorted(kwargs):  # tf.nest flattens a dict in its keys' order
        size = len(tf.nest.flatten(kwargs[key]))
        if "mask" not in key:
            positions += range(offset, offset + size)
        offset += size
    return positions


def _is_float_tensor(value: Any) -> bool:
    import tensorflow as tf

    return isinstance(value, tf.Tensor) and value.dtype.is_floating


def _dtype_of(layer: Any) -> str:
    compute = getattr(layer, "compute_dtype", None) or "float32"
    return str(compute)


def _cast_state(state: list, dtype: str) -> list:
    import tensorflow as tf

    return [tf.cast(s, dtype) if s.dtype.is_floating else s for s in state]


def _as_function(layer: Any, flat: list, checked: list[int], args: Any, kwargs: Any,
                 state: list, losses: bool = False):
    """(*checked inputs, *trainable values) -> the layer's floating outputs, flattened; with
    `losses`, the sum of its own losses (add_loss, activity and weight regularizers: part of
    the loss that trains), None when it has none."""
    import keras
    import tensorflow as tf

    n = len(checked)
    trainable, non_trainable = list(layer.trainable_variables), list(layer.non_trainable_variables)

    def f(*values: Any) -> Any:
        full = list(flat)
        for k, value in zip(checked, values[:n]):
            full[k] = value
        call_args, call_kwargs = tf.nest.pack_sequence_as((args, kwargs), full)
        # As stateless_call does, but through the layer's __call__, so a container hands
        # `training` on to its sublayers as in the model's own pass.
        mapping = [*zip(trainable, values[n:]), *zip(non_trainable, state)]
        with keras.StatelessScope(state_mapping=mapping, collect_losses=losses):
            outputs = layer(*call_args, **call_kwargs)
            own = list(layer.losses) if losses else []
        if losses:
            dtype = values[0].dtype if values else None
            return tf.add_n([tf.cast(loss, dtype) for loss in own]) if own else None
        parts = [tf.reshape(o, [-1]) for o in tf.nest.flatten(outputs)
                 if isinstance(o, tf.Tensor) and o.dtype.is_floating]
        return parts[0] if len(parts) == 1 else tf.concat(parts, 0)

    return f


def _in_dtype(layer: Any, dtype: str, flat: list, checked: list[int], args: Any, kwargs: Any,
              state: list) -> tuple[Any, str]:
    """The layer to check and its dtype: a copy of it computing in `dtype` when one can be
    built from its config, holds the same variables and runs forward and backward in `dtype`;
    else the layer itself, in its own dtype (user code with float32 constants, say)."""
    import tensorflow as tf

    from gradexp.models import same_trainable

    own = _dtype_of(layer)
    if own == dtype:
        return layer, own
    try:
        copy = _rebuilt(layer, dtype)
        full = [tf.cast(t, dtype) if k in checked else t for k, t in enumerate(flat)]
        call_args, call_kwargs = tf.nest.pack_sequence_as((args, kwargs), full)
        if not copy.built:
            copy(*call_args, **call_kwargs)
        same_trainable(layer, copy)  # a frozen block's layers come back trainable
        shapes = [tuple(v.shape) for v in layer.trainable_variables]
        if ([tuple(v.shape) for v in copy.trainable_variables] != shapes
                or len(copy.non_trainable_variables) != len(state)):
            return layer, own
        f = _as_function(copy, full, checked, args, kwargs, _cast_state(state, dtype))
        values = [full[k] for k in checked] + [tf.cast(v, dtype)
                                               for v in layer.trainable_variables]
        out, grads = _outputs_and_gradients(f, values)
        if out.dtype != dtype or any(g is not None and g.dtype != dtype for g in grads):
            return layer, own
        # Half precision rounds ~1e-3 (float16) to ~1e-2 (bfloat16), far above RTOL: compared,
        # every such layer "differed" and was checked in float16, where finite differences are
        # 0 or noise, and a wrong layer under mixed_float16 was blamed on the model (QA). The
        # model's own check skips this comparison for them too (checked_loss.twin_note) and
        # judges its float64 twin, whose layers are these copies: the search explains that.
        if _computes_in_half(layer):
            return copy, dtype
        # Its copy must compute what it computes: a setting left out of its config comes back
        # at its default, and the copy, right where the layer is wrong, would pass it. Not
        # where it draws random numbers (dropout): in float64 the copy draws other masks, and
        # every such layer and its containers "differed" (review: a model's own bug, so checked
        # in float32, went unseen and was blamed on the loss)
        if _draws_randomly(layer):
            return copy, dtype
        mine = _as_function(layer, flat, checked, args, kwargs, state)
        out_own, grads_own = _outputs_and_gradients(
            mine, [flat[k] for k in checked] + list(layer.trainable_variables))
        names = [f"inputs[{k}]" for k in checked] + [v.path for v in layer.trainable_variables]
        if difference(out_own, dense(grads_own), out, dense(grads), names) is not None:
            return layer, own
    except Exception:  # noqa: BLE001 - whatever fails in float64 is checked in its own dtype
        return layer, own
    return copy, dtype


def _computes_in_half(layer: Any) -> bool:
    """Does the layer, or a layer inside it, compute in float16 or bfloat16 (a mixed-precision
    policy)? As gradexp.models.half_precision_layers, for one layer."""
    flatten = getattr(layer, "_flatten_layers", None)
    return any(getattr(sub, "compute_dtype", None) in ("float16", "bfloat16")
               for sub in (flatten(include_self=True, recursive=True) if flatten else [layer])
               if type(sub).__name__ != "InputLayer")  # it computes nothing


def _draws_randomly(layer: Any) -> bool:
    """Does the layer, or a layer inside it, hold a Keras seed generator (Dropout, noise)?"""
    flatten = getattr(layer, "_flatten_layers", None)
    return any(getattr(sub, "_seed_generators", None)
               for sub in (flatten(include_self=True, recursive=True) if flatten else [layer]))


def _outputs_and_gradients(f: Any, values: list) -> tuple[Any, list]:
    """f(*values) and its gradients against a fixed random cotangent (the same for any dtype)."""
    import tensorflow as tf

    values = [tf.convert_to_tensor(v) for v in values]
    with tf.GradientTape() as tape:
        tape.watch(values)
        out = f(*values)
    cotangent = np.random.default_rng(0).standard_normal(out.shape)
    return out, tape.gradient(out, values, output_gradients=tf.constant(cotangent, out.dtype))


def _rebuilt(layer: Any, dtype: str) -> Any:
    """The same layer (same config) computing in `dtype`, unbuilt unless it builds itself."""
    import keras

    from gradexp.models import layer_in_dtype

    if type(layer).__name__ == "Sequential":
        inputs = [keras.Input(tuple(t.shape[1:]), dtype=dtype) for t in layer.inputs]
        return keras.models.clone_model(layer, input_tensors=inputs if len(inputs) > 1
                                        else inputs[0],
                                        clone_function=lambda sub: layer_in_dtype(sub, dtype))
    return layer_in_dtype(layer, dtype)
