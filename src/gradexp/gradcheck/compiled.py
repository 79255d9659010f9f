"""The compiled calls a probe check makes of a tf.function: all the VJPs in one call
(compiled_vjp), every probe's f(x ± h·u) in another (compiled_directionals), each kept on f so
checks repeated on the same f trace once, and called through the ConcreteFunction of the
arguments' signature (_by_signature). Light-traced variants serve the runner's checks in training
(light_traces), where tracing, not calling, is what a check costs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def light_traces(f: Any) -> bool:
    """Whether f is marked (attribute _gradexp_light_traces) as checked only a few times per
    trace, as the runner's checks in training are (gradcheck/joint.py): its compiled VJPs and
    evaluations are then built to trace cheaply rather than to run fastest, since tracing and
    first calls, ~0.2 s, are most of what such checks cost."""
    return bool(getattr(f, "__dict__", {}).get("_gradexp_light_traces"))


def compiled_vjp(f: Any, checked: list[int]) -> Any:
    """(args, cotangents) -> for each cotangent, the VJPs of args[k] for k in checked (one forward
    pass, then one backward pass per cotangent), compiled, if f is a tf.function (else None).
    Kept on f, so checks repeated on the same f (as in training) trace it once.

    For a light-traced f, ``at=`` (one args list per cotangent) differentiates each cotangent's
    VJP at its own point: the same trace, as each cotangent has a tape of its own anyway."""
    import tensorflow as tf

    if not isinstance(f, tf.types.experimental.PolymorphicFunction):
        return None
    kept = f.__dict__.setdefault("_gradexp_vjps", {})
    if tuple(checked) not in kept:

        def vjp(args: list[Any], cotangents: list[Any]) -> list[list[Any]]:
            with tf.GradientTape(persistent=len(cotangents) > 1) as tape:
                tape.watch([args[k] for k in checked])
                y = f(*args)
            return [tape.gradient(y, [args[k] for k in checked], output_gradients=cotangent,
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
                    for cotangent in cotangents]

        def vjp_per_point(points: list[list[Any]], cotangents: list[Any]) -> list[list[Any]]:
            # A tape per cotangent: around a call of f (a function call op) a persistent tape
            # makes TensorFlow build f's forward and backward graphs for higher-order
            # gradients, which tripled this trace (digits MLP: ~250 -> ~70 ms); recording the
            # forward again costs one more forward pass a call.
            grads = []
            for args, cotangent in zip(points, cotangents):
                with tf.GradientTape() as tape:
                    tape.watch([args[k] for k in checked])
                    y = f(*args)
                grads.append(tape.gradient(y, [args[k] for k in checked],
                                           output_gradients=cotangent,
                                           unconnected_gradients=tf.UnconnectedGradients.ZERO))
            return grads

        if not light_traces(f):
            kept[tuple(checked)] = _by_signature(tf.function(vjp, autograph=False))
        else:
            per_point = tf.function(vjp_per_point, autograph=False)
            traces: dict[tuple, Any] = {}  # by (points, cotangents) signature: _flat_call
            last: list[Any] = []  # [points, cotangent values, VJPs] of the last call

            def light(args: list[Any], cotangents: list[Any],
                      at: list[list[Any]] | None = None) -> list[list[Any]]:
                # The last call's VJPs again for the same tensors and cotangent values:
                # joint.check_jointly takes its shares from the probes' VJPs, asking first
                # (VJPs are deterministic: the same call gives the same values).
                points = at or [args] * len(cotangents)
                values = [np.asarray(c) for c in cotangents]
                if (last and len(last[0]) == len(points)
                        and all(a is b for p, q in zip(last[0], points) for a, b in zip(p, q))
                        and all(np.array_equal(a, b) for a, b in zip(last[1], values))):
                    return last[2]
                last[:] = [points, values, _flat_call(per_point, traces, points, cotangents)]
                return last[2]

            kept[tuple(checked)] = light
    return kept[tuple(checked)]


def compiled_directionals(f: Any, i: int, probes: int) -> Any:
    """(args, us, hus, h, gs) -> (g_k·(x⁺ - x⁻), f(x⁺_k), f(x⁻_k)) for k < probes, stacked, with
    x = args[i] and x± = x ± hus[k] (outputs flat float64), compiled, if f is a tf.function (else
    None). Kept on f, as compiled_vjp. For a light-traced f, hus may be None: its graph forms
    h_k·us[k] itself.

    For a light-traced f one trace serves any number of probes (the probes' steps h and 2h, and
    a kink's retry of one probe at a smaller step, which was eager: ~2 ms a step), and ``h``
    may be one step per probe (a sequence; a number serves them all)."""
    import tensorflow as tf

    if not isinstance(f, tf.types.experimental.PolymorphicFunction):
        return None
    kept = f.__dict__.setdefault("_gradexp_directionals", {})
    key = i if light_traces(f) else (i, probes)
    if key in kept:
        return kept[key]

    def at(args: list[Any], value: Any) -> Any:
        moved_args = list(args)
        moved_args[i] = tf.reshape(value, tf.shape(args[i]))
        return tf.reshape(tf.cast(f(*moved_args), tf.float64), [-1])

    def directionals(args: list[Any], us: list[Any], hus: list[Any], h: Any, gs: list[Any]
                     ) -> tuple[Any, Any, Any]:
        x = tf.reshape(args[i], [-1])
        dots, moved = [], []
        for u, hu, g in zip(us, hus, gs):
            plus, minus, step_dot = _perturbed(x, u, hu, h, g)
            dots.append(step_dot)
            moved += [plus, minus]
        outs = tf.stack([at(args, value) for value in moved])
        return tf.stack(dots), outs[0::2], outs[1::2]

    if not light_traces(f):
        kept[key] = _by_signature(tf.function(directionals, autograph=False))
        return kept[key]

    def stacked(args: list[Any], us: Any, h: Any, gs: Any) -> tuple[Any, Any, Any]:
        # Loops over the probes (tf.map_fn), not the probes unrolled: the trace and first call
        # are a fraction (digits MLP, 8 probes: ~200 -> ~85 ms) and any number of probes runs
        # on it; each probe's ops are the ones directionals() has, on one probe's vectors.
        # h: each probe's step (a kink's retry measures steps h and 2h in one call).
        # h·u and the probes' shared VJP are formed here, not by eager ops before the call
        # (~0.3 ms of a later check): h_k·u_k is an element-wise product, the same value in
        # or out of the graph, and a VJP given once (a scalar loss's) is broadcast, a copy.
        x = tf.reshape(args[i], [-1])
        hus = us * h[:, None]
        gs = tf.broadcast_to(tf.reshape(gs, [-1, tf.shape(us)[1]]), tf.shape(us))

        def probe(p: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any]:
            plus, minus, step_dot = _perturbed(x, p[0], p[1], p[3], p[2])
            return step_dot, at(args, plus), at(args, minus)

        # One loop over the probes, each iteration a probe's perturbation and its two
        # evaluations (the ops directionals() has, on one probe's vectors): two loops, one of
        # k perturbations and one of 2k evaluations, spent 3k iterations' loop overhead, ~15%
        # of the call for the digits MLP.
        return tf.map_fn(probe, (us, hus, gs, h),
                         fn_output_signature=(tf.float64, tf.float64, tf.float64))

    function: list[Any] = []
    # Stacks of the last few lists of tensors, by the tensors' identity: a later check draws the
    # same directions, and a check with a failing probe alternates two lists (every probe's
    # first step, the failing probes' retry), which a single kept stack re-made at each call.
    stacks: dict[tuple[int, ...], tuple[list[Any], Any]] = {}

    def stacked_once(tensors: list[Any]) -> Any:
        key = tuple(id(t) for t in tensors)
        if key not in stacks:
            if len(stacks) >= 4:
                del stacks[next(iter(stacks))]
            stacks[key] = (list(tensors), tf.stack(tensors))  # the list keeps the ids valid
        return stacks[key][1]

    def light(args: list[Any], us: list[Any], hus: list[Any] | None, h: Any, gs: list[Any]
              ) -> tuple[Any, Any, Any]:
        if not function:  # the probes' count left open: one trace for any
            n = int(us[0].shape[0])
            vectors = tf.TensorSpec([None, n], tf.float64)
            flat = tf.TensorSpec([None], tf.float64)  # steps; VJPs, one or every probe's
            signature = [[tf.TensorSpec(a.shape, a.dtype) for a in args], vectors, flat, flat]
            compiled = tf.function(stacked, input_signature=signature, autograph=False)
            function[:] = [compiled, compiled.get_concrete_function()]
        # A later check of a run draws the same directions (directions._direction keeps them):
        # their stacks are made once, not at every check (~1 ms). ``hus`` (h·u as the caller
        # kept it) is not needed: the graph forms h_k·u_k, the same products.
        us_stack = stacked_once(us)
        steps = np.broadcast_to(np.asarray(h, np.float64), [len(us)])
        # A scalar loss's probes share one VJP (probe._probe_entries): passed once, as it is.
        g_stack = gs[0] if _same(gs, [gs[0]] * len(gs)) else tf.concat(gs, 0)
        call = (list(args), us_stack, tf.constant(steps), g_stack)
        return _call_concrete(function[0], function[1], call, [*args, *call[1:]])

    kept[key] = light
    return kept[key]


def _same(a: list[Any], b: list[Any]) -> bool:
    """Whether two lists hold the same objects (identity, not values)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _call_concrete(function: Any, concrete: Any, args: tuple, flat: list[Any]) -> Any:
    """tf.function ``function``'s ConcreteFunction ``concrete`` for ``args`` (``flat``: their
    tensors, flattened), run without matching them to its signature in Python again: ~0.7 ms
    a call of a run's later check (see _by_signature). Without ConcreteFunction._call_flat (a
    TensorFlow that renamed it), the public call."""
    call_flat = getattr(concrete, "_call_flat", None)
    if call_flat is None:
        return function(*args)
    return call_flat(flat, concrete.captured_inputs)


def _signature(value: Any) -> Any:
    """Nested lists of tensors -> the same nesting of (shape, dtype), hashable."""
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v) for v in value)
    return (tuple(value.shape), value.dtype)


def _flat_call(function: Any, kept: dict, *args: Any) -> Any:
    """tf.function ``function`` of nested lists of tensors, called through the ConcreteFunction
    kept (in ``kept``) for the lists' lengths and the tensors' shapes and dtypes."""
    import tensorflow as tf

    flat = tf.nest.flatten(args)
    if tf.config.functions_run_eagerly() or not all(isinstance(t, tf.Tensor) for t in flat):
        return function(*args)
    key = _signature(args)
    concrete = kept.get(key)
    if concrete is None:
        concrete = kept[key] = function.get_concrete_function(*args)
    return _call_concrete(function, concrete, args, flat)


def _concrete(function: Any, args: tuple | list, kept: dict) -> tuple[Any, list[Any]] | None:
    """(the ConcreteFunction of tf.function ``function`` for ``args``, args' tensors flat), kept
    in ``kept`` by the arguments' signature (list lengths, shapes, dtypes); None if args are not
    all tensors or flat lists of tensors (numpy, variables, nesting: for TensorFlow to match).

    A tf.function's own call (and get_concrete_function) matches its arguments against its
    traces in Python (canonicalizing them, hashing each tensor's trace type) before it runs
    anything: for a probe check's lists of tensors, most of what its compiled calls cost at
    n = 5,000 (a warm check of tanh -> dense: 2.1-2.5 ms before, 1.4-1.5 ms with this and
    _by_signature). For arguments that are only tensors, their shapes and dtypes are all that
    selects a trace (unless functions run eagerly: then TensorFlow's call).
    """
    import tensorflow as tf

    flat, key = [], []
    for a in args:
        items = a if isinstance(a, list) else [a]
        key.append(len(items) if isinstance(a, list) else None)
        flat += items
    if tf.config.functions_run_eagerly() or not all(isinstance(t, tf.Tensor) for t in flat):
        return None
    key += [(tuple(t.shape), t.dtype) for t in flat]
    concrete = kept.get(tuple(key))
    if concrete is None:
        concrete = kept[tuple(key)] = function.get_concrete_function(*args)
    return concrete, flat


def _by_signature(function: Any) -> Callable[..., Any]:
    """tf.function ``function`` called through its ConcreteFunction for the arguments (_concrete).
    (Not for light-traced functions: joint.py's lists are compared by identity, see light().)"""
    kept: dict[tuple, Any] = {}

    def call(*args: Any) -> Any:
        found = _concrete(function, args, kept)
        if found is None:
            return function(*args)
        concrete, flat = found
        # ConcreteFunction._call_flat (private) runs the trace on the flat tensors, as its
        # public call does after matching the arguments to its signature again: a warm check
        # at n = 5,000 took ~1.9 ms through the public call, ~1.5 ms through this. Without it
        # (a TensorFlow that renamed it), the public call.
        call_flat = getattr(concrete, "_call_flat", None)
        if call_flat is None:
            return concrete(*args)
        return call_flat(flat, concrete.captured_inputs)

    return call


def _perturbed(x: Any, u: Any, hu: Any, h: Any, g: Any) -> tuple[Any, Any, Any]:
    """x ± hu rounded to x's dtype, and g·(x⁺ - x⁻). For float64 x that is 2h·g·u, which
    differs from it by rounding (~1e-11 relative) and saves two passes over the input."""
    import tensorflow as tf

    if x.dtype == tf.float64:
        return x + hu, x - hu, 2.0 * h * tf.reduce_sum(g * u)
    x64 = tf.cast(x, tf.float64)
    plus, minus = tf.cast(x64 + hu, x.dtype), tf.cast(x64 - hu, x.dtype)
    realised = tf.cast(plus, tf.float64) - tf.cast(minus, tf.float64)
    return plus, minus, tf.reduce_sum(g * realised)
