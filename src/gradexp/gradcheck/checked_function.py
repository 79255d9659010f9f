"""What is being checked: a function of tensors, or a loss of variables.

A target (``_FunctionTarget`` for check_gradients, ``_VariableTarget`` for check_variables)
evaluates the function with one input replaced, records one forward pass and returns VJPs from
it, forms analytical Jacobian columns and full Jacobians, and counts what that costs. The methods
(jacobian.py, probe.py, bisection.py) get numpy arrays from a target and do their own arithmetic in
numpy; they never import TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gradexp.gradcheck import py_functions
from gradexp.gradcheck.compiled import (
    _concrete,
    _perturbed,
    compiled_directionals,
    compiled_vjp,
    light_traces,
)
from gradexp.gradcheck.directions import _direction
from gradexp.gradcheck.options import _EPS


class _Target:
    """The thing under check: evaluate it with one input replaced, and its VJPs.

    Subclasses fill ``names``, ``values`` (numpy, evaluation dtype), ``dtypes`` and
    ``skip`` (a reason per input, or None if it is checked).
    """

    names: list[str]
    values: list[np.ndarray]
    dtypes: list[str]
    skip: list[str | None]

    def __init__(self) -> None:
        self.evaluations = 0
        self.backward_passes = 0
        self._tape: Any = None
        self._y: Any = None
        self.out0: np.ndarray = np.zeros(())
        self.out_dtype = "float64"
        # The precision its values have: float32 for float64 outputs computed in float32
        # (checker._judged_as_float32), else out_dtype's.
        self.out_precision: str | None = None
        self.out_numpy_dtype: Any = np.float64
        self.grad_shape_errors: dict[int, str] = {}
        # Inputs whose first VJP was all zeros: perhaps no gradient at all (connected.py asks).
        self.zero_vjps: list[int] | None = None
        # True for a tf.py_function's backward, which runs once per forward (py_functions.py):
        # every VJP then records a forward pass of its own.
        self.fresh_forwards = False
        # numpy views of tensors (id -> (view, tensor)): as_tensor gives the tensor back instead
        # of copying a million-element array into TensorFlow again.
        self._views: dict[int, tuple[np.ndarray, Any]] = {}

    # -- subclass hooks
    def _forward(self, i: int | None = None, value: np.ndarray | None = None) -> Any:
        raise NotImplementedError

    def _sources(self) -> list[Any]:
        raise NotImplementedError

    # -- shared machinery
    def _call(self, i: int | None = None, value: np.ndarray | None = None) -> Any:
        import tensorflow as tf

        self.evaluations += 1
        y = self._forward(i, value)
        if isinstance(y, (list, tuple, dict)):
            raise TypeError("the checked function must return one tensor, not a list/tuple/dict")
        y = tf.convert_to_tensor(y)
        if not y.dtype.is_floating:
            raise TypeError(f"the checked function returned {y.dtype.name}; expected a float")
        return y

    def evaluate(self, i: int, value: np.ndarray) -> np.ndarray:
        """Output (float64, flat) with input ``i`` replaced by ``value``."""
        return self._call(i, value).numpy().astype(np.float64).reshape(-1)

    def start(self, values: bool = True) -> None:
        """One recorded forward pass; every VJP afterwards is a backward pass on this tape.

        A function already compiled (a tf.function) is not recorded: a persistent tape around
        it makes TensorFlow build its forward and backward graphs for higher-order gradients
        (seconds for a Keras model); its VJPs are one compiled call each instead (_compiled_vjp).
        With ``values=False`` (the probe method, which needs only the output's shape and dtype)
        it is not even evaluated where its trace says what it returns: one call fewer, ~12% of
        a probe check at n = 5,000.
        """
        import tensorflow as tf

        if self._compiled_vjp() is not None:
            y = None if values else self._traced_output()
            if y is None:
                y = self._call()
        else:
            kept = py_functions.kept_tapes()
            with tf.GradientTape(persistent=True) as tape:
                tape.watch([s for s, why in zip(self._sources(), self.skip) if why is None])
                y = self._call()
            self._tape = tape
            # A tf.py_function kept its tape for one gradient: seen here, not by failing
            self.fresh_forwards = self.fresh_forwards or py_functions.kept_tapes() > kept
        self._y = y
        if tf.is_symbolic_tensor(y):  # from the trace: only its shape is used
            self.out0 = np.zeros(y.shape.as_list())
        else:
            self.out0 = y.numpy().astype(np.float64)
        self.out_dtype = y.dtype.name
        self.out_numpy_dtype = y.dtype.as_numpy_dtype
        if self.out_dtype not in _EPS:
            raise TypeError(f"unsupported output dtype {self.out_dtype}")

    def _traced_output(self) -> Any:
        """The symbolic output of a compiled f's trace if it is one float tensor of known shape
        (else None: evaluate f, which also says what is wrong with its output)."""
        return None

    def close(self) -> None:
        self._tape = self._y = None
        self._views.clear()

    def _view(self, tensor: Any) -> np.ndarray:
        """A read-only numpy view of a float64 tensor (no copy), remembered for as_tensor."""
        view = np.asarray(tensor)
        self._views[id(view)] = (view, tensor)
        return view

    def vjps(self, cotangents: list[np.ndarray]) -> list[list[np.ndarray]]:
        """VJPs (float64, flat, one per input) for each cotangent, from the recorded forward (a
        forward each where a tf.py_function's gradient fails the second: py_functions.py)."""
        count = self.evaluations, self.backward_passes
        try:
            return self._vjps(cotangents)
        except Exception as exc:  # noqa: BLE001 - only the py_function's error is retried
            if self.fresh_forwards or not py_functions.once_per_forward(exc):
                raise
        self.fresh_forwards = True
        py_functions.remember(getattr(self, "f", None))
        (self.evaluations, self.backward_passes), self.zero_vjps = count, None
        return self._vjps(cotangents)

    def _vjps(self, cotangents: list[np.ndarray]) -> list[list[np.ndarray]]:
        import tensorflow as tf

        checked = [k for k, why in enumerate(self.skip) if why is None]
        sources = [self._sources()[k] for k in checked]
        out = []
        compiled = None if self.fresh_forwards else self._compiled_vjp()
        if compiled is not None and sources and len(cotangents) <= _VJP_BATCH:
            # The probes' few cotangents in one compiled call: the calls' overhead, not their
            # arithmetic, is what a VJP costs at thousands of elements. (The jacobian method's
            # one cotangent per output goes one at a time: a graph per output count is not.)
            # One constant a cotangent (a scalar loss's are scalars): stacking them into one
            # tensor and unstacking it cost two more eager ops, for the same values.
            batch = compiled(list(self._sources()),
                             [tf.constant(c, dtype=self._y.dtype) for c in cotangents])
        else:
            batch = None
        for j, c in enumerate(cotangents):
            if not sources:
                grads = []
            elif batch is not None:
                grads = batch[j]
            elif compiled is not None:
                grads = compiled(list(self._sources()), [tf.constant(c, dtype=self._y.dtype)])[0]
            elif self.fresh_forwards:
                grads = py_functions.fresh_vjp(self, sources, c)
            else:
                cotangent = tf.constant(c, dtype=self._y.dtype)
                grads = self._tape.gradient(self._y, sources, output_gradients=cotangent,
                                            unconnected_gradients=tf.UnconnectedGradients.ZERO)
            self.backward_passes += 1
            flat = dict(zip(checked, (self._flat_grad(k, g) for k, g in zip(checked, grads))))
            flat = [flat[k] if k in flat else np.zeros(x.size) for k, x in enumerate(self.values)]
            if self.zero_vjps is None:
                self.zero_vjps = [k for k in checked if not np.any(flat[k])]
            out.append(flat)
        return out

    def _compiled_vjp(self) -> Any:
        """A compiled (sources, cotangents) -> VJPs of the checked inputs, or None."""
        return None

    def _flat_grad(self, i: int, g: Any) -> np.ndarray:
        import tensorflow as tf

        shape = self.values[i].shape
        if g is None:
            return np.zeros(self.values[i].size)
        g = tf.convert_to_tensor(g)  # IndexedSlices (gathers, embeddings) -> dense
        if tuple(g.shape) != tuple(shape):
            self.grad_shape_errors[i] = (
                f"the analytical gradient has shape {list(g.shape)} but the input has shape "
                f"{list(shape)} (a transposed or mis-shaped gradient)"
            )
            return np.full(self.values[i].size, np.nan)
        g = tf.cast(g, tf.float64)  # g itself if float64
        return self._view(g if g.shape.rank == 1 else tf.reshape(g, [-1]))  # one eager op less

    def as_tensor(self, values: np.ndarray) -> Any:
        """A float64 tensor of ``values`` (flat), converted once for repeated directional()."""
        import tensorflow as tf

        known = self._views.get(id(values))
        if known is not None and known[0] is values:
            return known[1]
        return tf.constant(values, tf.float64)

    def first_directional(self, i: int, key: tuple, draw: Callable[[], np.ndarray], h: float,
                          g: Any, weights: Any = None
                          ) -> tuple[np.ndarray, float, float, np.ndarray, np.ndarray]:
        """directional() along the direction u = _gaussian_levels()[draw()] named by ``key``.

        Returns (u as a numpy view, remembered for as_tensor; ‖u‖; g·(x⁺ - x⁻); f(x⁺); f(x⁻)).
        A direction is a function of its key (seed, input, probe, size), so it is drawn once
        and kept (directions._DIRECTIONS), with h·u for the last steps: checks repeated with
        the same seed, as in training, skip two of the five passes over the input a probe costs.
        ``weights``: u is the drawn direction times them (directions._direction).
        """
        import tensorflow as tf

        x = tf.reshape(self._value_tensor(i), [-1])
        u, u_norm, hu = _direction(key, draw, h, weights)
        plus, minus, step_dot = _perturbed(x, u, hu, tf.constant(h, tf.float64), g)
        fp, fm = self._evaluate_pair(i, plus, minus)
        return self._view(u), u_norm, float(step_dot), fp, fm

    def first_directionals(self, i: int, keys: list[tuple], draws: list[Callable[[], np.ndarray]],
                           h: float, gs: list[Any], weights: list[Any] | None = None
                           ) -> list[tuple[np.ndarray, float, float, np.ndarray, np.ndarray]]:
        """first_directional() for every probe of input ``i`` (keys[k], draws[k], gs[k],
        weights[k])."""
        weights = weights or [None] * len(keys)
        return [self.first_directional(i, key, draw, h, g, w)
                for key, draw, g, w in zip(keys, draws, gs, weights)]

    def _evaluate_pair(self, i: int, plus: Any, minus: Any) -> tuple[np.ndarray, np.ndarray]:
        import tensorflow as tf

        shape = self.values[i].shape
        return (self.evaluate(i, tf.reshape(plus, shape)),
                self.evaluate(i, tf.reshape(minus, shape)))

    def directional(self, i: int, u: Any, h: float, g: Any
                    ) -> tuple[float, np.ndarray, np.ndarray]:
        """f with input ``i`` moved to x ± h·u, and g·(the step actually realised).

        ``u`` and ``g`` come from as_tensor. Returns (g·(x⁺ - x⁻), f(x⁺), f(x⁻)), outputs flat
        float64. The input-sized arithmetic runs in TensorFlow on tensors kept from call to
        call: done in numpy (with copies into TensorFlow) it cost about as much as the
        evaluations themselves at a million elements.
        """
        import tensorflow as tf

        x = tf.reshape(self._value_tensor(i), [-1])
        h_t = tf.constant(h, tf.float64)
        plus, minus, step_dot = _perturbed(x, u, h_t * u, h_t, g)
        fp, fm = self._evaluate_pair(i, plus, minus)
        return float(step_dot), fp, fm

    def directional_steps(self, i: int, u: Any, h: float, g: Any
                          ) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """directional() at steps h and 2h (what probe._measure needs of one probe)."""
        return [self.directional(i, u, h, g), self.directional(i, u, 2 * h, g)]

    def directional_steps_many(self, i: int, items: list[tuple[Any, float, Any]],
                               twice: bool = True
                               ) -> list[list[tuple[float, np.ndarray, np.ndarray]]]:
        """directional_steps() of each (u, h, g) in ``items``; ``twice=False``: step h only
        (a one-element list each: probe._retry_failing's smaller step)."""
        if not twice:
            return [[self.directional(i, u, h, g)] for u, h, g in items]
        return [self.directional_steps(i, u, h, g) for u, h, g in items]

    def _value_tensor(self, i: int) -> Any:
        raise NotImplementedError

    def vjp_at(self, i: int, value: np.ndarray, cotangent: np.ndarray) -> np.ndarray:
        """VJP for input ``i`` (float64, flat) with that input replaced by ``value``."""
        import tensorflow as tf

        compiled = None if self.fresh_forwards else self._compiled_vjp()
        if compiled is not None:  # no tape around a tf.function: that traces its gradient again
            args = list(self._sources())
            args[i] = self._replaced_source(i, value)
            checked = [k for k, why in enumerate(self.skip) if why is None]
            self.evaluations += 1
            v = [tf.constant(cotangent, self.out_dtype)]
            if light_traces(getattr(self, "f", None)):
                # Twice: the probes' VJPs were traced for two (a scalar output's v and -v/2);
                # one more backward pass costs less than a trace for one.
                v = v * 2
            g = compiled(args, v)[0][checked.index(i)]
            self.backward_passes += 1
            return tf.convert_to_tensor(g).numpy().astype(np.float64).reshape(-1)
        source = self._replaced_source(i, value)
        try:
            with tf.GradientTape() as tape:
                tape.watch(source)
                y = self._call(i, source)
            g = tape.gradient(y, source, output_gradients=tf.constant(cotangent, y.dtype),
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        finally:
            self._restore(i)
        self.backward_passes += 1
        return tf.convert_to_tensor(g).numpy().astype(np.float64).reshape(-1)

    def vjps_at(self, i: int, values: list[np.ndarray], cotangent: np.ndarray
                ) -> list[np.ndarray]:
        """vjp_at() at each of ``values``. For a light-traced compiled f (a run's checks) two
        points are one call of the probes' VJP function (its two tapes, one per point): the
        kink test's x ± h·u cost one call, not two calls of two backward passes each."""
        import tensorflow as tf

        compiled = None if self.fresh_forwards else self._compiled_vjp()
        if compiled is None or len(values) != 2 or not light_traces(getattr(self, "f", None)):
            return [self.vjp_at(i, value, cotangent) for value in values]
        points = []
        for value in values:
            args = list(self._sources())
            args[i] = self._replaced_source(i, value)
            points.append(args)
        checked = [k for k, why in enumerate(self.skip) if why is None]
        v = tf.constant(cotangent, self.out_dtype)
        grads = compiled(points[0], [v, v], at=points)
        self.evaluations += 2
        self.backward_passes += 2
        return [tf.convert_to_tensor(g[checked.index(i)]).numpy().astype(np.float64).reshape(-1)
                for g in grads]

    def _replaced_source(self, i: int, value: np.ndarray) -> Any:
        raise NotImplementedError

    def _restore(self, i: int) -> None:
        """Undo _replaced_source (variables only)."""

    def column(self, i: int, j: int, cotangent: np.ndarray) -> np.ndarray | None:
        """Analytical Jacobian column d out / d input_i[j], by differentiating the VJP in v.

        The VJP is linear in v, so its derivative with respect to v is the column: one forward
        and two backward passes, through any custom gradient. None if that is not possible.
        """
        import tensorflow as tf

        sources = self._sources()
        try:
            v = tf.constant(cotangent, dtype=self.out_dtype)
            with tf.GradientTape() as outer:
                outer.watch(v)
                with tf.GradientTape() as inner:
                    inner.watch(sources[i])
                    y = self._call()
                g = inner.gradient(y, sources[i], output_gradients=v)
                if g is None:
                    return np.zeros(self.out0.size)
                gj = tf.reshape(tf.convert_to_tensor(g), [-1])[j]
            col = outer.gradient(gj, v)
            self.backward_passes += 2
        except Exception:  # noqa: BLE001 - e.g. an op without a second-order gradient
            return None
        if col is None:
            return np.zeros(self.out0.size)
        return tf.convert_to_tensor(col).numpy().astype(np.float64).reshape(-1)

    def jacobians(self, i: int, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(analytical, numerical) Jacobians, output size x input size, by central differences.

        Element j is perturbed by ±steps[j] (one step per element) in the input's dtype.
        """
        m, n = self.out0.size, self.values[i].size
        rows = [np.eye(1, m, r).reshape(self.out0.shape) for r in range(m)]
        analytical = np.stack([g[i] for g in self.vjps(rows)]) if m else np.zeros((0, n))
        numerical = np.zeros((m, n))
        work = self.values[i].copy().reshape(-1)
        for j in range(n):
            numerical[:, j] = self.numerical_column(i, j, float(steps[j]), work)
        return analytical, numerical

    def numerical_column(self, i: int, j: int, step: float, work: np.ndarray | None = None
                         ) -> np.ndarray:
        """Column j of input i's numerical Jacobian, central differences at ±step.

        The difference is divided by the step actually realised after rounding, which matters
        in float32. ``work``: a flat copy of the input to perturb (restored on return)."""
        fp, fm, realised = self.central_pair(i, j, step, work)
        return (fp - fm) / realised if realised else np.zeros(self.out0.size)

    def central_pair(self, i: int, j: int, step: float, work: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, float]:
        """f at element j of input i stepped by +step and by -step, and the distance between
        the two points as rounded in the input's dtype. ``work``: a flat copy of the input to
        perturb (restored on return)."""
        x = self.values[i]
        work = x.copy().reshape(-1) if work is None else work
        orig = work[j]
        plus, minus = x.dtype.type(float(orig) + step), x.dtype.type(float(orig) - step)
        work[j] = plus
        fp = self.evaluate(i, work.reshape(x.shape))
        work[j] = minus
        fm = self.evaluate(i, work.reshape(x.shape))
        work[j] = orig
        return fp, fm, float(plus) - float(minus)


class _FunctionTarget(_Target):
    def __init__(self, f: Callable[..., Any], tensors: list[Any], names: list[str]) -> None:
        super().__init__()
        self.f = f
        self.tensors = tensors
        self.names = names
        self.values = [np.asarray(t) for t in tensors]  # read-only views, no copies
        self.dtypes = [t.dtype.name for t in tensors]
        self.skip = [_skip_reason(t.dtype, t.shape.num_elements()) for t in tensors]
        self._vjp: Any = None
        self.fresh_forwards = py_functions.known(f)

    def _sources(self) -> list[Any]:
        return self.tensors

    def _forward(self, i: int | None = None, value: Any = None) -> Any:
        import tensorflow as tf

        args = list(self.tensors)
        if i is not None:
            args[i] = value if tf.is_tensor(value) else tf.constant(value, self.tensors[i].dtype)
        return self.f(*args)

    def _replaced_source(self, i: int, value: np.ndarray) -> Any:
        import tensorflow as tf

        return tf.constant(value, dtype=self.tensors[i].dtype)

    def _value_tensor(self, i: int) -> Any:
        return self.tensors[i]

    def _compiled_vjp(self) -> Any:
        if self.fresh_forwards:  # VJPs from one compiled forward fail: a tape each
            return None
        if self._vjp is None:
            self._vjp = compiled_vjp(self.f, [k for k, why in enumerate(self.skip) if why is None])
            if self._vjp is not None and py_functions.calls_py_function(self.f, self.tensors):
                self.fresh_forwards = True
                return None
        return self._vjp

    def _traced_output(self) -> Any:
        import tensorflow as tf

        try:  # the trace kept by signature: get_concrete_function matches args as a call does
            traces = self.f.__dict__.setdefault("_gradexp_traces", {})
            found = _concrete(self.f, self.tensors, traces)
            y = (found[0] if found else self.f.get_concrete_function(*self.tensors)
                 ).structured_outputs
        except Exception:  # noqa: BLE001 - f's own error: raised again by evaluating it
            return None
        if tf.is_symbolic_tensor(y) and y.dtype.is_floating and y.shape.is_fully_defined():
            return y
        return None

    def first_directionals(self, i: int, keys: list[tuple], draws: list[Callable[[], np.ndarray]],
                           h: float, gs: list[Any], weights: list[Any] | None = None
                           ) -> list[tuple[np.ndarray, float, float, np.ndarray, np.ndarray]]:
        """For a compiled f, every probe's f(x ± h·u) and g·(x⁺ - x⁻) in one compiled call.

        The same arithmetic as first_directional, probe by probe, but 2k evaluations of f and
        their perturbations cost one call instead of 2k calls and ~5k eager ops: at n = 5,000
        that per-call overhead, not the arithmetic, was most of a check's time.
        """
        import tensorflow as tf

        batch = compiled_directionals(self.f, i, len(keys)) if self._compiled_vjp() else None
        if batch is None:
            return super().first_directionals(i, keys, draws, h, gs, weights)
        weights = weights or [None] * len(keys)
        drawn = [_direction(key, draw, h, w) for key, draw, w in zip(keys, draws, weights)]
        step_dots, fps, fms = batch(list(self.tensors), [d[0] for d in drawn],
                                    [d[2] for d in drawn], tf.constant(h, tf.float64), list(gs))
        self.evaluations += 2 * len(keys)
        step_dots, fps, fms = step_dots.numpy(), fps.numpy(), fms.numpy()
        return [(self._view(u), u_norm, float(step_dots[k]), fps[k], fms[k])
                for k, (u, u_norm, _) in enumerate(drawn)]

    def directional(self, i: int, u: Any, h: float, g: Any
                    ) -> tuple[float, np.ndarray, np.ndarray]:
        """For a light-traced f (a run's checks), one call of the probes' compiled directionals
        (two evaluations, as one probe's), not two calls of f and the perturbation's eager ops."""

        if not (light_traces(self.f) and self._compiled_vjp()):
            return super().directional(i, u, h, g)
        return self._directionals_at(i, [(u, h, g)])[0]

    def directional_steps_many(self, i: int, items: list[tuple[Any, float, Any]],
                               twice: bool = True
                               ) -> list[list[tuple[float, np.ndarray, np.ndarray]]]:
        """For a light-traced f, steps h and 2h (or h alone: ``twice=False``) of every
        (u, h, g) in one call of the probes' directionals (probe._steadier's and the kink's
        retries of a round: two calls a probe before)."""
        if not (light_traces(self.f) and self._compiled_vjp()):
            return super().directional_steps_many(i, items, twice)
        factors = (1, 2) if twice else (1,)
        flat = self._directionals_at(i, [(u, f * h, g) for u, h, g in items for f in factors])
        n = len(factors)
        return [flat[n * k:n * k + n] for k in range(len(items))]

    def _directionals_at(self, i: int, items: list[tuple[Any, float, Any]]
                         ) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """directional() of each (u, h, g) in ``items``, one compiled call (h·u as there)."""

        batch = compiled_directionals(self.f, i, len(items))
        # hus=None: the batch forms every h·u (it was an eager op a probe)
        step_dots, fps, fms = batch(list(self.tensors), [u for u, _, _ in items], None,
                                    [h for _, h, _ in items], [g for _, _, g in items])
        self.evaluations += 2 * len(items)
        step_dots, fps, fms = step_dots.numpy(), fps.numpy(), fms.numpy()
        return [(float(step_dots[k]), fps[k], fms[k]) for k in range(len(items))]

    def jacobians(self, i: int, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """TensorFlow's own full-Jacobian check, on input ``i`` with the others held fixed,
        where one step serves every element (else one step per element, by columns)."""
        import tensorflow as tf

        if steps.size and np.any(steps != steps.flat[0]):
            return super().jacobians(i, steps)
        delta = float(steps.flat[0]) if steps.size else 1.0

        def f_i(x: Any) -> Any:
            self.evaluations += 1
            args = list(self.tensors)
            args[i] = x
            return self.f(*args)

        (analytical,), (numerical,) = tf.test.compute_gradient(f_i, [self.tensors[i]], delta)
        self.backward_passes += self.out0.size
        return np.asarray(analytical, np.float64), np.asarray(numerical, np.float64)


class _VariableTarget(_Target):
    def __init__(self, loss_fn: Callable[[], Any], handles: list[Any], names: list[str]) -> None:
        super().__init__()
        self.loss_fn = loss_fn
        self.handles = handles
        self.names = names
        self.values = [h.numpy() for h in handles]
        self.dtypes = [h.dtype.name for h in handles]
        self.skip = [_skip_reason(h.dtype, h.shape.num_elements()) for h in handles]
        self._constants: dict[int, Any] = {}

    def _sources(self) -> list[Any]:
        return self.handles

    def _forward(self, i: int | None = None, value: Any = None) -> Any:
        if i is None or value is self.handles[i]:
            return self.loss_fn()
        self.handles[i].assign(value)
        try:
            return self.loss_fn()
        finally:
            self.handles[i].assign(self.values[i])

    def _replaced_source(self, i: int, value: np.ndarray) -> Any:
        self.handles[i].assign(value)  # undone by _restore, also on error
        return self.handles[i]

    def _restore(self, i: int) -> None:
        self.handles[i].assign(self.values[i])

    def _value_tensor(self, i: int) -> Any:
        import tensorflow as tf

        if i not in self._constants:
            self._constants[i] = tf.constant(self.values[i])
        return self._constants[i]

    def restore(self) -> None:
        """Put every variable back to the value it had before the check."""
        for h, v in zip(self.handles, self.values):
            h.assign(v)


def _skip_reason(dtype: Any, size: int | None) -> str | None:
    if not dtype.is_floating:
        return f"not checked: {dtype.name} is not a floating-point dtype"
    if dtype.name not in _EPS:
        return f"not checked: dtype {dtype.name} is not supported"
    if size == 0:
        return "not checked: empty"
    return None


# At most this many cotangents share one compiled VJP call (a probe check needs probes + 1).
_VJP_BATCH = 16
