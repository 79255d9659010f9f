"""check_gradients(compile=True): a plain callable checked as a tf.function.

A tf.function's probe check is a few compiled calls (compiled.compiled_vjp and
compiled_directionals: every probe's f(x ± h·u) in one call, every VJP in another); a plain
Python function's is one eager call per evaluation and per VJP, whose per-call overhead is most
of a check's time at thousands of elements. So a plain callable (a function, a lambda, a
functools.partial, a bound method, a Keras layer or model) is wrapped in ``tf.function`` with
autograph, as ``tf.function(f)`` would, and checked through the same compiled path.

A callable's first check runs eagerly: one check of a small function costs a few ms eagerly and
~0.15 s as a trace, so compiling pays only for checks repeated on the same f (training loops,
sweeps of inputs). From its second check on, f is compiled. The wrapper is kept per callable
(weakly: it does not keep the callable alive), so checks repeated on the same f with the same
input shapes and dtypes trace it once; f's Python body then runs at those traces, not at every
evaluation. A callable that cannot be referenced weakly is checked eagerly, as before (a wrapper
per check would trace at every check).

If the compiled check raises (f calls ``.numpy()``, hands tensors to numpy, or otherwise does not
trace), checker.py checks f eagerly instead and forget() makes later checks of that f go straight to
the eager path.

A kept trace is f's code as it was when traced: a notebook cell that redefines a global f reads
(a tf.custom_gradient's backward, a flag) leaves it as it was, and a planted bug passed on the
old trace (QA). So each compiled check first asks the trace and f as it is now for one
vector-Jacobian product at the check's inputs; when they differ, f is traced anew (~0.15 s).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

# id(owner) -> (weak reference to owner, {function or None: tf.function, or None: eager only}).
# The owner is the callable itself, or a bound method's object (a bound method is a new object
# at each attribute access, so it is kept by its object and function instead). Keyed by id, not
# by the object, so that callables that are unhashable (dataclasses with eq) can be kept too.
_KEPT: dict[int, tuple[weakref.ref, dict[Any, Any]]] = {}
_SEEN = object()  # checked once, eagerly: compiled from its next check on


def compiled(f: Callable[..., Any], xs: list[Any]) -> Any:
    """The tf.function to check a plain callable ``f`` at inputs ``xs`` with, computing what f
    computes now; None to check f as it is (f is a tf.function already, or this is its first
    check, or it cannot be kept, or it failed to trace before)."""
    import tensorflow as tf

    if isinstance(f, tf.types.experimental.PolymorphicFunction):
        return None  # compiled already: checked_function.py takes its fast path for it
    owner, function = _owner(f)
    kept = _kept(owner)
    if kept is None:
        return None
    if function not in kept:
        kept[function] = _SEEN
        return None
    if kept[function] is _SEEN or (kept[function] is not None
                                   and not _agree(kept[function], f, xs)):
        kept[function] = tf.function(_calling(weakref.ref(owner), function, f))
    return kept[function]


def _agree(traced: Any, f: Callable[..., Any], xs: list[Any]) -> bool:
    """Whether the kept trace computes what f computes now (_vjps_agree); True when either
    raises: the compiled check then raises too, and checker.py checks f eagerly."""
    try:
        return _vjps_agree(traced, f, xs)
    except Exception:  # noqa: BLE001 - see above
        return True


def _vjps_agree(traced: Any, f: Callable[..., Any], xs: list[Any]) -> bool:
    """Whether the kept trace and f as it is now give one output and one vector-Jacobian
    product at xs alike (a fixed random cotangent; to float rounding: fused ops round apart)."""
    import numpy as np
    import tensorflow as tf

    def vjp(g: Callable[..., Any]) -> list[Any]:
        floats = [x for x in xs if x.dtype.is_floating]
        with tf.GradientTape() as tape:
            tape.watch(floats)
            y = g(*xs)
        cotangent = tf.random.stateless_normal(tf.shape(y), seed=[20, 6], dtype=y.dtype) \
            if y.dtype.is_floating else None
        grads = tape.gradient(y, floats, output_gradients=cotangent) if cotangent is not None \
            else []
        return [y, *grads]

    for now, then in zip(vjp(f), vjp(traced), strict=True):
        if (now is None) != (then is None):
            return False
        if now is not None:
            now, then = np.asarray(now), np.asarray(then)
            rtol = 1e-9 if now.dtype == np.float64 else 1e-4
            if now.shape != then.shape or not np.allclose(now, then, rtol=rtol, atol=rtol * (
                    1.0 + float(np.max(np.abs(now), initial=0.0))), equal_nan=True):
                return False
    return True


def forget(f: Callable[..., Any]) -> None:
    """Check ``f`` eagerly from now on: its compiled check failed where the eager one did not."""
    owner, function = _owner(f)
    kept = _kept(owner)
    if kept is not None:
        kept[function] = None


def _owner(f: Callable[..., Any]) -> tuple[Any, Any]:
    if inspect.ismethod(f):
        return f.__self__, f.__func__
    return f, None


def _kept(owner: Any) -> dict[Any, Any] | None:
    key = id(owner)
    entry = _KEPT.get(key)
    if entry is not None and entry[0]() is owner:
        return entry[1]

    def drop(ref: weakref.ref) -> None:  # owner collected: its wrappers go with it
        if _KEPT.get(key, (None,))[0] is ref:
            del _KEPT[key]

    try:
        ref = weakref.ref(owner, drop)
    except TypeError:  # e.g. a builtin: not kept, checked eagerly
        return None
    _KEPT[key] = (ref, {})
    return _KEPT[key][1]


def _calling(owner: weakref.ref, function: Any, f: Callable[..., Any]) -> Callable[..., Any]:
    """f(*args) through a weak reference: a strong one would keep f and its wrapper alive."""
    if function is None:

        def call(*args: Any) -> Any:
            return owner()(*args)
    else:

        def call(*args: Any) -> Any:
            return function(owner(), *args)

    call.__name__ = getattr(f, "__name__", type(f).__name__)  # graph names: f's, not "call"
    return call
