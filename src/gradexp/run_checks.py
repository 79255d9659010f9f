"""Gradient checks during a run: the runner's use of gradexp.gradcheck.

Checks the training loss's gradient with respect to the model's variables (and/or the inputs,
as seed 000 does), on a float64 copy of the parameters and data (`gradcheck.dtype`), so finite
differences are not drowned in float32 rounding; the variables are not touched. What is checked
is what trains (`gradcheck.mode=train`, the default): the data loss plus the model's own losses
(regularizers, `add_loss`), the model in training mode, with the dropout masks its seed state
gives (held fixed across the check's evaluations) and batch norm on the checked rows'
statistics; the model's state is the same after the check as before.
Randomness a layer draws outside Keras' seed generators (raw `tf.random` ops) cannot be held
fixed: the loss then differs between two evaluations at one point, and the layers drawing it
are held in inference mode, the others checked in training mode (gradexp.random_layers), or the
whole check is made in inference mode if no layer's inference mode removes it; a note says so.
A layer that assigns its own trainable variables while it computes in training mode (Keras'
SpectralNormalization) is held in inference mode too: a training step differentiates its
inference-mode computation at the value assigned (gradexp.assigning_layers); a note says so.
`gradcheck.mode=inference` checks the inference computation (no dropout, batch norm on its
moving statistics); `both` checks both.
Probes of the variables are one joint probe set over all of them (gradcheck/joint.py), on all
training rows or a fixed subset of them (`gradcheck.max_rows`, see checked_rows).

User code is usually written for float32 (`tf.constant(0.5)` inside a `tf.custom_gradient`
cannot meet a float64 tensor). When the loss or the model cannot run forward and backward in the
requested dtype, the check runs in the dtype they train in, with that dtype's steps and
tolerances, and its result says so (`CheckResult.notes`) instead of crashing the run.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
from omegaconf import DictConfig
from tensorflow.python.eager import context  # per-thread options of function calls

from gradexp import shared_programs
from gradexp.assigning_layers import assigning_layers, assigning_names
from gradexp.check_notes import (
    RANDOM_NOTE,
    UNCHECKED_NOTE,
    assigning_note,
    half_precision_note,
    held_note,
    unchecked_inputs,
)
from gradexp.check_result import CheckResult
from gradexp.checked_loss import (
    evaluation_dtype,
    first_line,
    own_dtype,
    training_loss,
    twin_note,
)
from gradexp.data import Dataset
from gradexp.gradcheck import check_gradients
from gradexp.gradcheck.connected import unconnected_names
from gradexp.gradcheck.culprits import find_culprits
from gradexp.gradcheck.joint import JointFunction, check_jointly, direction_scales
from gradexp.gradcheck.second_order import second_order_reports
from gradexp.losses import build_loss
from gradexp.models import Model, half_precision_layers, read_values
from gradexp.random_layers import (
    generator_states_kept,
    held_in_inference,
    held_names,
    random_layers,
)


def check_training_gradients(cfg: DictConfig, model: Model, loss_cfg: DictConfig,
                             data: Dataset, epoch: int, eager: bool = False) -> CheckResult:
    """Run the checks `gradcheck` asks for (see _checks); if they fail, name the wrong layers."""
    from gradexp.endings import RunFailed
    from gradexp.models import variables_keyword_refusal

    with generator_states_kept(model.network):  # training draws on as if never checked
        try:
            result = _checks(cfg, model, loss_cfg, data, epoch, eager)
        except Exception as error:
            refused = variables_keyword_refusal(error)
            if refused is not None:  # met in the run: it ends FAILED, exit 1 (as a failed check)
                raise RunFailed(str(refused)) from None
            raise
        if not result.passed:  # which layer is wrong, each checked alone
            _name_culprits(result, cfg, model, data)
    return result


def _checks(cfg: DictConfig, model: Model, loss_cfg: DictConfig, data: Dataset, epoch: int,
            eager: bool = False) -> CheckResult:
    """Run the checks `gradcheck` asks for on the current parameters, in the model's mode(s)
    `gradcheck.mode` names.

    eager: run the float64 loss and its gradient as they are (tests compare the two paths).
    A run's checks are compiled (GradientChecks): traced once per process and shape, since a
    sweep's later jobs of one shape reuse the model and its traces (gradexp.shared_programs),
    and a job must record what it records alone, which the eager ops' rounding would not."""
    mode = cfg.get("mode", "train")  # each read of a DictConfig key costs ~10 us
    mode = str(getattr(mode, "value", mode))
    model.sync_twins()  # the masks and statistics the model has now
    with _without_graph_optimizer():
        if mode != "both":
            return _check(cfg, model, loss_cfg, data, epoch, eager, mode == "train")
        result = _check(cfg, model, loss_cfg, data, epoch, eager, True)
        inference = _check(cfg, model, loss_cfg, data, epoch, eager, False)
    result.mode = "both"
    result.reports.update({f"inference/{key}": report
                           for key, report in inference.reports.items()})
    result.notes += [note for note in inference.notes if note not in result.notes]
    return result


# The culprit search checks each layer on this many of the check's rows first (each layer's
# check costs little whatever the model's size), then on all of them if no layer is wrong there.
CULPRIT_ROWS = 256


def _name_culprits(result: CheckResult, cfg: DictConfig, model: Model, data: Dataset) -> None:
    """Fill result.culprits (gradcheck/culprits.py), in the run's mode, at the checked rows."""
    checked = checked_rows(len(data.x), row_limit(cfg, model))
    # In the mode whose check failed (training, unless only the inference check did).
    training = result.mode == "train" or (result.mode == "both" and not all(
        report.passed for key, report in result.reports.items()
        if not key.startswith("inference/")))
    # Second order only if only the second-order check failed (a wrong first order shows there).
    order = 2 if result.only_second_order_failed else 1
    try:
        with held_in_inference(model, result.held):  # random layers held, as in the check
            _search_culprits(result, cfg, model, data, checked, training, order)
        result.culprits_searched = True
    except Exception as error:  # noqa: BLE001 - the search is a diagnosis, never the run's end
        result.notes.append(f"the wrong layer could not be searched for: {first_line(error)}")


def _search_culprits(result: CheckResult, cfg: DictConfig, model: Model, data: Dataset,
                     checked: np.ndarray, training: bool, order: int) -> None:
    for rows in (checked[:CULPRIT_ROWS], checked):
        result.culprits = find_culprits(model.network, data.x[rows], training, dtype=cfg.dtype,
                                        probes=cfg.probes, names=model.names, order=order)
        # none on the first rows: a branch only later rows take (an outlier's) is searched
        if result.culprits or len(rows) == len(checked):
            break


def disconnected_variables(cfg: DictConfig, model: Model, loss_cfg: DictConfig,
                           data: Dataset) -> list[str]:
    """The variables the checked loss gives no gradient at all (gradcheck/connected.py): one
    more forward and backward pass, which a run spends at its first check only, and a sweep's
    jobs that share the checked loss (gradexp.shared_programs) once: which variables reach the
    loss is the model's and loss's structure, not its weights' values."""
    # the training-mode loss as the check holds it (a layer assigning its own variables)
    with held_in_inference(model, assigning_layers(model, data.x)):
        losses = _losses(cfg.dtype, model, loss_cfg, data, row_limit(cfg, model))
        if losses.disconnected is None:
            params = [tf.constant(v.numpy(), losses.dtype) for v in model.params]
            positions = [str(index) for index in range(len(params))]
            with generator_states_kept(model.network):  # a training-mode pass (review)
                losses.disconnected = [int(index) for index in unconnected_names(
                    losses.of_params.function, params, positions)]
    return [model.names[index] for index in losses.disconnected]


def _check(cfg: DictConfig, model: Model, loss_cfg: DictConfig, data: Dataset, epoch: int,
           eager: bool, training: bool) -> CheckResult:
    """The checks in one mode. In training mode, if the loss is random at a fixed point
    (randomness Keras' seeds do not hold), the layers drawing it are held in inference mode,
    or, if no layer's inference mode makes it repeat, the whole model (with a note); random in
    inference mode too, nothing is checked (CheckResult.unchecked says why). Layers that assign
    their own trainable variables in training mode are held in inference mode first
    (gradexp.assigning_layers: what training differentiates there), with a note of their own."""
    assigning = [c for c in assigning_layers(model, data.x) if c not in model.held] \
        if training else []
    if assigning:  # the held random layers, if any, found inside with them held
        with held_in_inference(model, assigning):
            result = _check(cfg, model, loss_cfg, data, epoch, eager, True)
        if not result.unchecked:
            result.notes.insert(0, assigning_note(*assigning_names(model), tuple(assigning)))
        result.held = tuple(dict.fromkeys((*assigning, *result.held)))  # the culprit search's
        return result
    args = (cfg.dtype, model, loss_cfg, data, row_limit(cfg, model), None)
    losses = _losses(*args, trial=eager, training=training)
    if losses.random is None:
        losses.random = _random_at_a_point(losses, model)
    if losses.random is None:  # not in the requested dtype: asked in the one it runs in
        model.check_losses.pop(_losses_key(*args[:5], training), None)
        losses = _losses(*args, trial=True, training=training)
        losses.random = bool(_random_at_a_point(losses, model))
    if losses.random and training and losses.held is None:
        losses.held = _held_layers(losses, model, args)
    if losses.random and training and losses.held:
        with held_in_inference(model, losses.held):
            result = _check(cfg, model, loss_cfg, data, epoch, eager, True)
        result.notes.insert(0, held_note(held_names(model, losses.held)))
        result.held = losses.held  # the culprit search holds them too
        return result
    if losses.random and training:
        result = _check(cfg, model, loss_cfg, data, epoch, eager, False)
        if not result.unchecked:
            result.notes.insert(0, RANDOM_NOTE)
        return result
    if losses.random:  # random in inference mode too: finite differences would measure noise
        return CheckResult(epoch, mode="inference", notes=[UNCHECKED_NOTE],
                           unchecked=UNCHECKED_NOTE, rows=int(losses.x.shape[0]),
                           rows_total=len(data.x))
    result = _check_dtype(cfg, model, loss_cfg, data, epoch, eager, training)
    result.mode = "train" if training else "inference"
    half = half_precision_layers(model.network)
    if half:
        result.notes.append(half_precision_note(half, result.dtype))
    return result


def _held_layers(losses: _Losses, model: Model, args: tuple) -> tuple[type, ...]:
    """The layers whose inference mode makes the training-mode loss repeat at one point
    (gradexp.random_layers), if that loss then repeats, own losses included; () if none do."""
    params = [tf.constant(v.numpy(), losses.dtype) for v in model.params]
    names = random_layers(model, params, losses.x)
    if names is None:
        return ()
    with held_in_inference(model, names):
        held = _losses(*args, trial=True, training=True)
        held.random = _random_at_a_point(held, model)
    return tuple(names) if held.random is False else ()


def _random_at_a_point(losses: _Losses, model: Model) -> bool | None:
    """Whether the loss, evaluated twice at the current parameters, gives two values (None if
    it cannot run in its dtype)."""
    params = [tf.constant(v.numpy(), losses.dtype) for v in model.params]
    try:
        # Compiled, as the checks call it: eagerly, Keras' stateless_call can count a nested
        # model's own losses (activity regularizers, add_loss) differently from call to call,
        # which read as randomness and sent a deterministic model's check to inference mode.
        loss = losses.of_params(params)
        first, second = (loss(*params).numpy() for _ in range(2))
    except Exception:  # noqa: BLE001 - not this dtype's: asked again in the one it runs in
        return None
    # NaN twice is no randomness (NaN != NaN sent such a check to inference mode, with a warning)
    return not np.array_equal(first, second, equal_nan=True)


def _check_dtype(cfg: DictConfig, model: Model, loss_cfg: DictConfig, data: Dataset,
                 epoch: int, eager: bool, training: bool) -> CheckResult:
    """The checks, in the dtype the loss and model run in.

    Compiled checks skip evaluation_dtype's eager trial (~50 ms of the digits MLP's first
    check): tracing the loss and its gradient in the requested dtype is that trial, since a
    dtype clash raises while tracing. Only if the first check then raises, or comes back in
    another dtype, does the trial run, to say which dtype and why; the check is done again in
    that one (or the error raised, if the requested dtype was not the cause)."""
    values = read_values(model.params)
    args = (cfg.dtype, model, loss_cfg, data, row_limit(cfg, model), values)
    losses = _losses(*args, trial=eager, training=training)
    if losses.verified:
        return _check_in(losses, cfg, model, data, epoch, eager, values)
    failure: Exception | None = None
    try:
        result = _check_in(losses, cfg, model, data, epoch, eager, values)
        if all(r.dtype_used == losses.dtype for r in result.reports.values()):
            losses.verified = True
            return result
    except Exception as error:  # noqa: BLE001 - perhaps the dtype's doing: the trial says
        failure = error
    model.check_losses.pop(_losses_key(*args[:5], training))
    losses = _losses(*args, trial=True, training=training)
    if losses.dtype != cfg.dtype:
        return _check_in(losses, cfg, model, data, epoch, eager, values)
    if failure is not None:
        raise failure  # not the dtype: the loss's or the model's own error
    return result


def _check_in(losses: _Losses, cfg: DictConfig, model: Model, data: Dataset, epoch: int,
              eager: bool, values: list[np.ndarray]) -> CheckResult:
    method, wrt, probes, max_size = cfg.method, cfg.wrt, cfg.probes, cfg.max_jacobian_size
    method, wrt = getattr(method, "value", method), getattr(wrt, "value", wrt)
    dtype = losses.dtype
    # Converted in numpy, then copied (TensorFlow's own float32 -> float64 conversion took
    # twice as long; both are exact).
    params = [tf.constant(np.asarray(v, tf.as_dtype(dtype).as_numpy_dtype)) for v in values]
    names = model.names
    # compile=False: what is compiled here is decided here (traced once per run, no autograph).
    options = {"probes": probes, "dtype": dtype, "max_jacobian_size": max_size,
               "compile": False}

    if method == "jacobian":  # what is checked: the variables, the inputs (ids are not)
        _refuse_large_jacobians(
            [*(zip(names, values) if wrt in ("variables", "both") else ()),
             *([("the inputs", losses.x)] if wrt in ("inputs", "both")
               and not unchecked_inputs(model) else [])], max_size)
    targets: list[tuple[str, Callable, list[tf.Tensor], list[str]]] = []
    notes = [losses.note] if losses.note else []
    if wrt in ("variables", "both"):
        # Resolved (compiled) below only if a check asks for it: probe checks of the
        # variables use losses.joint, compiled on its own.
        targets.append(("variables", losses.of_params, params, names))
    unchecked = unchecked_inputs(model)
    if wrt in ("inputs", "both") and unchecked:
        notes.append(f"inputs: not checked, {unchecked}")
    elif wrt in ("inputs", "both"):
        of_inputs = (losses.of_inputs.function if eager
                     else losses.of_inputs([losses.x, *params]))
        targets.append(("inputs", lambda xs: of_inputs(xs, *params), [losses.x], ["inputs"]))

    result = CheckResult(epoch, dtype=dtype, notes=notes,
                         rows=int(losses.x.shape[0]), rows_total=len(data.x))
    for target, function, xs, xs_names in targets:
        joint = target == "variables" and len(xs) > 1
        exact = _jacobian_positions(method, xs, max_size, result.rows,
                                    result.rows_total)
        if isinstance(function, _Compiled) and (method == "jacobian" or exact or not joint):
            function = function.function if eager else function(xs)
        if method != "jacobian" and joint:
            # One probe set over all the variables instead of one per variable (a quarter of
            # the evaluations for an MLP of two layers); gradcheck/joint.py says why a wrong
            # bias still shows.
            shapes = [tuple(p.shape) for p in params]
            scales = direction_scales([v.size for v in values])
            raw = losses.of_params.function
            if eager:
                joint_function = JointFunction(raw, shapes, scales, compile=False)
            else:  # compiled on its own: of_params is then never traced
                losses.joint = losses.joint or JointFunction(raw, shapes, scales)
                joint_function = losses.joint
            result.reports[f"{target}/probe"] = check_jointly(
                joint_function.f, xs, names=xs_names, probes=probes, dtype=dtype,
                joint=joint_function)
        elif method != "jacobian":
            result.reports[f"{target}/probe"] = check_gradients(
                function, xs, method="probe", names=xs_names, **options)
        if method == "jacobian":
            result.reports[f"{target}/jacobian"] = check_gradients(
                function, xs, method="jacobian", names=xs_names, **options)
        elif exact:
            result.reports[f"{target}/jacobian"] = check_gradients(
                _only(function, xs, exact), [xs[i] for i in exact], method="jacobian",
                names=[xs_names[i] for i in exact], **options)
    if cfg.get("order", 1) == 2:  # second derivatives too (gradcheck/second_order.py)
        result.order = 2
        result.reports.update(second_order_reports(
            [(key, f.function if isinstance(f, _Compiled) else f, xs, n)
             for key, f, xs, n in targets], method, cfg.probes, dtype, cfg.max_jacobian_size))
    return result


# method=auto adds the exact Jacobian where its 2 evaluations per element cost at most about
# this many training epochs: a training epoch runs the model forward and backward (about 3
# forward passes' worth) over every training row, the Jacobian 2n forward passes over the
# checked rows. In practice: seed 004's line (W and b) gets it, a model of hundreds of
# parameters does not (its Jacobian would be hundreds of epochs' worth, seconds a check).
JACOBIAN_EPOCHS = 2.0


def _refuse_large_jacobians(checked: list[tuple[str, Any]], limit: int) -> None:
    """gradcheck.method=jacobian on a variable past max_jacobian_size: the run ends FAILED, exit
    1, in one line naming it and what to use (the checker's own refusal was a traceback)."""
    from gradexp.endings import RunFailed

    for name, value in checked:
        size = int(np.prod(value.shape))
        if size > limit:
            raise RunFailed(
                f"gradcheck.method=jacobian: {name} {'have' if name == 'the inputs' else 'has'} "
                f"{size:,} elements, more than gradcheck.max_jacobian_size={limit:,} (the exact "
                "Jacobian takes 2 evaluations of the loss an element); use gradcheck=probe "
                "(randomized, any size), or raise gradcheck.max_jacobian_size")


def _jacobian_positions(method: str, xs: list[tf.Tensor], max_size: int, rows: int,
                        rows_total: int) -> list[int]:
    """The inputs (variables) given the exact Jacobian beside the probes: under `both` each of
    at most max_jacobian_size elements; under `auto` all of them if their Jacobian costs at
    most JACOBIAN_EPOCHS training epochs (see above), else none; under probe or jacobian none
    (jacobian checks every input its own way)."""
    # The static shapes (an eager tf.size a tensor cost ~0.1 ms of a later check).
    sizes = [int(tf.size(x)) if x.shape.num_elements() is None else x.shape.num_elements()
             for x in xs]
    if method == "both":
        return [i for i, size in enumerate(sizes) if size <= max_size]
    if method == "auto":
        epochs = 2 * sum(sizes) * rows / (3 * max(rows_total, 1))
        return list(range(len(xs))) if epochs <= JACOBIAN_EPOCHS else []
    return []


@contextlib.contextmanager
def _without_graph_optimizer() -> Iterator[None]:
    """Functions first called inside run without Grappler (this thread only).

    TensorFlow optimizes a compiled function at its first call; for the check's functions
    (the float64 loss, its VJPs, the probes' evaluations: small graphs, each called a few
    times a run) that cost more than it saved: ~100 ms of the digits MLP's first check, no
    measurable change to the calls after it. The trainer's functions are not called here."""
    ctx = context.context()
    kept = ctx.function_call_options
    config = copy.deepcopy(ctx.config)
    config.allow_soft_placement = True  # as TensorFlow's own default for function calls
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    ctx.function_call_options = context.FunctionCallOptions(config_proto=config)
    try:
        yield
    finally:
        ctx.function_call_options = kept


@dataclass
class _Losses:
    """The checked loss of one run, built once and reused by every check of it: the dtype it
    is checked in (and why, if not the requested one), the data in that dtype, and the loss as
    a function of the parameters and of the inputs, compiled when it traces. Checking every
    10 epochs used to rebuild and re-run all of this eagerly each time, which cost more than
    the training between checks."""

    dtype: str
    note: str | None
    x: tf.Tensor
    of_params: _Compiled  # (*params) -> loss
    of_inputs: _Compiled  # (x, *params) -> loss
    data: Dataset | None = None  # the first run's, of the rows its key names
    joint: JointFunction | None = None  # of_params of one flat vector (gradcheck/joint.py)
    verified: bool = True  # False: the requested dtype, not yet tried (_check)
    random: bool | None = None  # the loss differs at one point (training mode); None: untried
    held: tuple[type, ...] | None = None  # random: the layer classes that make it so; None: unasked
    disconnected: list[int] | None = None  # the params no gradient reaches; None: unasked
    owner: Model | None = None  # the model the functions are traced on (_of_another_model)


def _losses_key(requested: str, model: Model, loss_cfg: DictConfig, data: Dataset,
                max_rows: int | None, training: bool) -> tuple:
    """Which of a model's _Losses (model.check_losses) a check uses. The
    data by its contents: a later job sharing this model (gradexp.shared_programs) loads its own
    Dataset of the same rows, and must find the compiled functions, not add another."""
    return (requested, shared_programs.data_fingerprint(data), repr(loss_cfg), max_rows, training,
            model.held)


def _losses(requested: str, model: Model, loss_cfg: DictConfig, data: Dataset,
            max_rows: int | None = None, values: list[np.ndarray] | None = None,
            trial: bool = True, training: bool = True) -> _Losses:
    """The run's _Losses in one mode; trial=False: in the requested dtype, untried (_check)."""
    key = _losses_key(requested, model, loss_cfg, data, max_rows, training)
    kept = model.check_losses  # on the model: they close over it, and go with it
    if key not in kept:
        found = shared_programs.check_functions(model, key)
        if found is not None:
            kept[key] = found
    if key not in kept:
        if trial:
            dtype, note = evaluation_dtype(requested, model, loss_cfg, data, values, training)
        else:
            dtype, note = requested, None
            try:
                model.prepare(dtype)
            except TypeError:  # a model that cannot be rebuilt: the check's failure says so
                pass
        if dtype in model._twins:  # rebuilt: does it compute what the model does?
            try:
                differs = twin_note(model, data, values or read_values(model.params), dtype,
                                    training)
            except Exception:  # noqa: BLE001 - an untried dtype the twin cannot run in
                if trial:
                    raise
                # (QA: tf.image.resize(antialias=True) has a float32-only gradient kernel:
                # the run ended in a traceback) the trial says which part and checks in the
                # dtype the model trains in
                dtype, note = evaluation_dtype(requested, model, loss_cfg, data, values,
                                               training)
                differs = None
            if differs is not None:
                dtype, note = own_dtype(model), differs
        rows = checked_rows(len(data.x), max_rows)
        x = tf.constant(data.x[rows], dtype)
        y = tf.constant(data.y[rows], dtype)
        loss = build_loss(loss_cfg, dtype=dtype)

        def of_params(*params: tf.Tensor) -> tf.Tensor:
            return training_loss(model, loss, list(params), x, y, training)

        def of_inputs(xs: tf.Tensor, *params: tf.Tensor) -> tf.Tensor:
            return training_loss(model, loss, list(params), xs, y, training)

        kept[key] = _Losses(dtype, note, x, _Compiled(of_params), _Compiled(of_inputs), data,
                            verified=trial or dtype == own_dtype(model), owner=model)
        shared_programs.keep_check_functions(model, key, kept[key])
    losses = kept[key]
    if losses.owner is not model:  # another job's functions: this model's masks, statistics
        twin = losses.owner._twins.get(losses.dtype)
        if twin is not None:
            model._copy_state(twin)
    return losses


# A check evaluates the float64 loss ~14 times (4 probes at +-h, two VJPs); each evaluation costs
# about (parameters x rows) multiply-adds, so on a large model the rows are capped at
# ROW_WORK / parameters, never below MIN_ROWS: on the 1.1M-parameter MLP of
# benchmarks/bench_default_checks.py, 512 rows made a check ~1.3 s (float64 matmuls), 64 rows
# ~0.3 s. Models under ROW_WORK / 512 = 131,072 parameters keep gradcheck.max_rows as set.
ROW_WORK = 2**26
MIN_ROWS = 64


def row_limit(cfg: DictConfig, model: Model) -> int | None:
    """The rows a run's checks use at most: gradcheck.max_rows (None: all), capped for a large
    model (ROW_WORK above)."""
    limit = cfg.get("max_rows")
    params = sum(math.prod(v.shape) for v in model.params)  # ints: numpy's prod cost ~30 us
    cap = max(MIN_ROWS, ROW_WORK // max(params, 1))
    return cap if limit is None else min(int(limit), cap)


def row_cap_line(cfg: DictConfig, model: Model, n: int) -> str | None:
    """What a run says once when ROW_WORK caps its checks' rows below what gradcheck.max_rows
    lets the data give (the param records the value asked; the metric gradcheck/rows the
    rows checked); None when it does not."""
    asked = n if cfg.get("max_rows") is None else min(int(cfg.max_rows), n)
    limit = row_limit(cfg, model)
    if limit is None or limit >= asked:
        return None
    params = sum(math.prod(v.shape) for v in model.params)
    return (f"gradcheck.max_rows={cfg.get('max_rows')}: the checks use {limit} of the {n} "
            f"training rows on this model of {params:,} parameters (at most 2**26/parameters "
            f"rows above 131,072, never fewer than {MIN_ROWS}: the same gradient, at a "
            "fraction of the check's cost)")


def checked_rows(n: int, max_rows: int | None) -> np.ndarray:
    """The training rows a run's checks use: all, or max_rows of them drawn with a fixed seed
    (the same for every check of a run, in their original order).

    Sound because the loss on any rows has a gradient that must be right: the rows only have to
    take the code through its branches (every class, both sides of a relu), which a few hundred
    rows of a shuffled data set do."""
    if max_rows is None or max_rows >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(0).choice(n, size=max_rows, replace=False))


COMPILED = 0  # check functions compiled in this process (gradexp.shared_programs' test)


class _Compiled:
    """A function, compiled with tf.function when first asked for if it traces, else as it
    is (user code that only runs eagerly is still checked). Asked for once per run: retracing
    a Keras model each check cost more than the check."""

    def __init__(self, function: Callable[..., tf.Tensor]):
        self.function = function
        self.resolved: Callable[..., tf.Tensor] | None = None

    def __call__(self, args: list[tf.Tensor]) -> Callable[..., tf.Tensor]:
        """The function to call, tried once on `args`."""
        if self.resolved is None:
            global COMPILED
            COMPILED += 1
            compiled = tf.function(self.function, autograph=False)  # autograph: ~1.5 s
            try:
                compiled(*args)
                self.resolved = compiled
            except Exception:  # noqa: BLE001 - whatever fails to trace is checked eagerly
                self.resolved = self.function
        return self.resolved


def _only(function: Callable, xs: list[tf.Tensor], varying: list[int]) -> Callable:
    """`function` of the inputs at positions `varying` only, the others held at their values."""
    def partial(*values):
        full = list(xs)
        for position, value in zip(varying, values):
            full[position] = value
        return function(*full)

    return partial
