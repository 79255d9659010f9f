"""The checker's options and the numbers they imply.

The keyword options of check_gradients / check_variables, validated once (``_Options``); the
methods and the dtypes a check may be evaluated in; machine epsilon and (atol, rtol) per dtype;
the finite-difference step per input (``_defaults``); the a-priori rounding error of outputs;
random output cotangents. Imports nothing else of the checker.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

METHODS = ("jacobian", "probe")

# What ``dtype=`` may ask to evaluate in. Inputs already in float16/bfloat16 are still checked
# in their own dtype (with the wide tolerances below); asking for it is refused.
EVALUATION_DTYPES = ("float64", "float32")

# Machine epsilon of each floating dtype the checker evaluates in.
_EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}

# (atol, rtol) per evaluation dtype. rtol is where finite differences stop being trustworthy
# with some margin: float64 central differences are good to ~1e-10, float32 to ~1e-4 at best.
_TOLERANCES = {
    "float64": (1e-8, 1e-5),
    "float32": (1e-5, 3e-3),
    "float16": (1e-3, 5e-2),
    "bfloat16": (1e-2, 1e-1),
}

# The probe method's default rtol where it differs from the above. A probe compares one number,
# vᵀJu, whose size is the whole gradient's: an error on elements with small gradients (a 5%
# error on part of the domain) is a small part of it, so rtol must be small for it to show.
# The probe measures its own finite-difference error (rounding, and the gap between steps h and
# 2h) and adds it to the tolerance, so rtol only covers what that estimate misses.
_PROBE_RTOL = {"float32": 3e-4}


@dataclass
class _Options:
    method: str
    probes: int
    delta: float | None
    atol: float | None
    rtol: float | None
    seed: int
    dtype: str | None
    max_jacobian_size: int
    compile: bool = True  # check_gradients: check a plain callable as a tf.function

    @classmethod
    def make(cls, method, probes, delta, atol, rtol, seed, dtype, max_jacobian_size,
             compile=True) -> _Options:
        """Validate the keyword options once, with messages that say what would be accepted."""
        if method not in METHODS:
            raise ValueError(f"method={method!r}: expected one of {', '.join(METHODS)}")
        if not isinstance(probes, (int, np.integer)) or probes < 1:
            raise ValueError(f"probes={probes!r}: expected an integer >= 1")
        for key, value in (("delta", delta), ("atol", atol), ("rtol", rtol)):
            if value is not None and not (float(value) >= 0 and math.isfinite(float(value))):
                raise ValueError(f"{key}={value!r}: expected None or a finite number >= 0")
        if delta is not None and float(delta) == 0:
            raise ValueError("delta=0: the finite-difference step must be > 0 (or None)")
        if dtype is not None:
            import tensorflow as tf

            name = tf.as_dtype(dtype).name
            if name not in EVALUATION_DTYPES:
                raise ValueError(
                    f"dtype={dtype!r}: expected None, 'float64' or 'float32' (float16 and "
                    "bfloat16 finite differences are too coarse to judge a gradient by)")
            dtype = name
        if max_jacobian_size < 1:
            raise ValueError(f"max_jacobian_size={max_jacobian_size!r}: expected an integer >= 1")
        if not isinstance(compile, (bool, np.bool_)):
            raise ValueError(f"compile={compile!r}: expected True or False")
        return cls(method, int(probes), _opt_float(delta), _opt_float(atol), _opt_float(rtol),
                   int(seed), dtype, int(max_jacobian_size), bool(compile))


def _opt_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _defaults(dtype_name: str, opts: _Options, scale: float) -> tuple[float, float, float]:
    """Step, atol and rtol for one input: the user's values, else chosen from the dtype.

    The step cbrt(eps) balances truncation error (~h²) against rounding error (~eps/h); it is
    scaled by max(1, rms(x)) so large inputs get proportionally large steps.
    """
    eps = _EPS[dtype_name]
    atol0, rtol0 = _TOLERANCES[dtype_name]
    delta = opts.delta if opts.delta is not None else eps ** (1 / 3) * max(1.0, scale)
    atol = opts.atol if opts.atol is not None else atol0
    rtol = opts.rtol if opts.rtol is not None else rtol0
    if opts.rtol is None and opts.method == "probe":
        rtol = _PROBE_RTOL.get(dtype_name, rtol)
    return delta, atol, rtol


def _element_steps(x: np.ndarray, dtype_name: str, opts: _Options) -> np.ndarray:
    """The jacobian method's step for each element: cbrt(eps) x max(1, |x_j|), flat.

    Sized by the element itself, not by the input's RMS: next to elements of 5, an element of
    0.1 was stepped by a third of its own size and its finite difference was wrong. The user's
    ``delta``, if given, is every element's step.
    """
    if opts.delta is not None:
        return np.full(x.size, opts.delta)
    mag = np.abs(x.astype(np.float64, copy=False).reshape(-1))
    return _EPS[dtype_name] ** (1 / 3) * np.maximum(1.0, mag)


def _rounding(values: np.ndarray, eps: float) -> np.ndarray:
    """A-priori rounding error of computed outputs: 4 eps x max(|f|, median |f|).

    A function rounds at every operation, not only at its output (measured on float32 MLPs,
    losses and linear algebra: up to ~2 eps x |f|, so 4 leaves a margin); the median floor keeps
    an output that cancels to ~0 from claiming no rounding at all.
    """
    mag = np.abs(values)
    # A scalar output (a loss) is its own median: np.median's ~30 us, 16 times a check, spared.
    median = mag.reshape(-1)[0] if mag.size == 1 else np.median(mag) if mag.size else 0.0
    return 4.0 * eps * np.maximum(mag, median)


def _coarsest(names: list[str]) -> str:
    return max(names, key=lambda n: _EPS[n]) if names else "float64"


def _cotangent(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A random output cotangent, rounded to the output dtype, as float64.

    Gaussian for non-scalar outputs; for one-element outputs a random sign times 1.5 to 2.5, so
    a backward that ignores its upstream gradient (i.e. assumes it is 1) cannot pass.
    """
    size = int(np.prod(shape, dtype=np.int64))
    if size == 1:
        raw = np.full(shape, rng.choice([-1.0, 1.0]) * rng.uniform(1.5, 2.5))
    else:
        raw = rng.standard_normal(shape)
    return raw.astype(dtype).astype(np.float64)


# Probe directions are drawn by inverse CDF from 16 random bits: the Gaussian quantised to 2^16
# equally likely levels (|u| <= 4.3). Its CDF is within 2^-16 of the Gaussian's, so
# miss_probability holds as before, and it is ~3x cheaper to draw than numpy's ziggurat
# (a million directions cost about a third of a forward+backward pass instead of one).
_LEVELS = 1 << 16


@functools.lru_cache(maxsize=1)
def _gaussian_levels() -> np.ndarray:
    """The 2^16 levels a direction's elements take, equally likely: N(0, 1)'s quantiles.

    TensorFlow's vectorized inverse CDF (within 2e-15 of statistics.NormalDist's): 65,536 calls
    of the latter were ~17 ms of every run's first check."""
    import tensorflow as tf

    middles = (np.arange(_LEVELS) + 0.5) / _LEVELS
    levels = tf.math.ndtri(tf.constant(middles, tf.float64)).numpy()
    return levels / np.sqrt(np.mean(levels**2))  # unit variance exactly, as N(0, 1)


def _direction_bits(rng: np.random.Generator, size: int) -> np.ndarray:
    """16 random bits per element of a probe direction: _gaussian_levels()[bits] is ~N(0, I)."""
    return np.frombuffer(rng.bytes(2 * size), dtype=np.uint16)
