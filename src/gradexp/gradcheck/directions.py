"""Probe directions, drawn once and kept: u from 16 random bits per element (options.py's
quantised Gaussian), its norm, and h·u at the last steps used, so checks repeated with the same
seed and step (as in training) reuse them instead of drawing a million-element vector again.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np

from gradexp.gradcheck.options import _gaussian_levels

_LEVELS_TENSOR: Any = None  # _gaussian_levels() as a tensor, made on first use

# Directions drawn so far: key -> [u, ‖u‖, {h: h·u}], least recently used first, at most
# _DIRECTIONS_BYTES in all (4 probes of a million float64 elements, with h·u at two steps,
# take 96 MB).
_DIRECTIONS: collections.OrderedDict = collections.OrderedDict()
_DIRECTIONS_BYTES = 160 * 2**20
# h·u is kept for this many steps per direction: h and 2h, so a check that needs step 2h
# (a kink at one probe) does not recompute both at every check (~1 ms of such a check).
_STEPS_KEPT = 2


def _direction(key: tuple, draw: Callable[[], np.ndarray], h: float, weights: Any = None
               ) -> tuple[Any, float, Any]:
    """(u, ‖u‖, h·u) for the direction named by key; drawn by draw() on first use.

    ``weights`` (a float64 tensor, or None): u is the drawn direction times them, element by
    element (probe.py's _direction_weights); such a u changes with every gradient, so only the
    drawn direction is kept, not h·u."""
    import tensorflow as tf

    global _LEVELS_TENSOR
    kept = _DIRECTIONS.pop(key, None)
    grown = kept is None  # only a new direction or step can take the total over the limit
    if kept is None:
        if _LEVELS_TENSOR is None:
            _LEVELS_TENSOR = tf.constant(_gaussian_levels())
        u = tf.gather(_LEVELS_TENSOR, tf.cast(tf.constant(draw()), tf.int32))
        kept = [u, float(tf.norm(u)), {}]
    steps = kept[2]
    if weights is None:
        hu = steps.pop(h, None)
        if hu is None:
            hu = tf.constant(h, tf.float64) * kept[0]
            grown = True
            while len(steps) >= _STEPS_KEPT:  # the least recently used step goes
                del steps[next(iter(steps))]
        steps[h] = hu
    _DIRECTIONS[key] = kept
    # Summed over every kept direction only when one was added (a later check of a run, 8
    # probes, summed 8 x 8 shapes for nothing).
    while grown and sum(8 * (1 + len(k[2])) * int(k[0].shape[0])
                        for k in _DIRECTIONS.values()) > _DIRECTIONS_BYTES:
        _DIRECTIONS.popitem(last=False)
    if weights is None:
        return kept[0], kept[1], hu
    u = kept[0] * weights
    return u, float(tf.norm(u)), tf.constant(h, tf.float64) * u
