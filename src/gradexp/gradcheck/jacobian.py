"""The jacobian method: the full numerical Jacobian of each input against the analytical one.

Every (output, input) element is compared, then the VJP with a random cotangent c against
cᵀ·J_numerical, which catches a backward that mishandles its upstream gradient. Exact, and it
names the wrong element, but it costs 2·n function evaluations for an input of n elements.
"""

from __future__ import annotations

import numpy as np

from gradexp.gradcheck.entries import _errors, _index, _linearity, _new_entry, _shape_error
from gradexp.gradcheck.options import _EPS, _cotangent, _Options, _rounding
from gradexp.gradcheck.report import GradCheckEntry
from gradexp.gradcheck.targets import _Target


def _jacobian_entries(target: _Target, opts: _Options, rng: np.random.Generator
                      ) -> list[GradCheckEntry]:
    c = _cotangent(rng, target.out0.shape, target.out_numpy_dtype)
    g, g_half = target.vjps([c, -0.5 * c])
    entries = []
    for i in range(len(target.values)):
        entry = _new_entry(target, i, opts)
        entries.append(entry)
        if not entry.checked or target.out0.size == 0 or _shape_error(target, i, entry):
            continue
        _linearity(entry, g[i], g_half[i])
        analytical, numerical = target.jacobians(i, entry.delta)
        entry.analytical, entry.numerical = analytical, numerical
        _compare_jacobian(entry, target, i, analytical, numerical, c.reshape(-1), g[i])
    return entries


def _compare_jacobian(entry: GradCheckEntry, target: _Target, i: int, analytical: np.ndarray,
                      numerical: np.ndarray, c: np.ndarray, g: np.ndarray) -> None:
    """Every Jacobian element, then the VJP with the random cotangent c against cᵀ·J_numerical.

    The second comparison is what catches a backward that mishandles its upstream gradient:
    the Jacobian rows are built with one-hot cotangents, which such a backward can get right.
    """
    eps = _EPS[entry.precision]
    # Rounding noise of each output, turned into a derivative error by the step.
    row_noise = _rounding(target.out0.reshape(-1), eps) / entry.delta
    j_abs, j_rel, j_ratio = _errors(analytical, numerical, row_noise[:, None], entry)
    c_norm = float(np.linalg.norm(c)) or 1.0
    row_n = c @ numerical
    r_abs, r_rel, r_ratio = _errors(g / c_norm, row_n / c_norm,
                                    float(np.linalg.norm(c * row_noise)) / c_norm, entry)
    entry.error_to_tolerance = max(float(np.max(j_ratio)), float(np.max(r_ratio)))
    entry.max_abs_error = max(float(np.max(j_abs)), float(np.max(r_abs)))
    entry.max_rel_error = max(float(np.max(j_rel)), float(np.max(r_rel)))
    if not (np.all(j_ratio <= 1) and np.all(r_ratio <= 1)):
        entry.passed = False
    out_shape, in_shape = target.out0.shape, target.values[i].shape
    if np.max(j_ratio) > 1 or np.max(r_ratio) <= 1:
        o, j = np.unravel_index(int(np.argmax(j_ratio)), j_ratio.shape)
        entry.worst_output_index = _index(o, out_shape)
        entry.worst_input_index = _index(j, in_shape)
        entry.worst_analytical = float(analytical[o, j])
        entry.worst_numerical = float(numerical[o, j])
        entry.worst_kind = "jacobian element"
    else:
        j = int(np.argmax(r_ratio))
        entry.worst_input_index = _index(j, in_shape)
        entry.worst_analytical = float(g[j])
        entry.worst_numerical = float(row_n[j])
        entry.worst_kind = "cotangent-weighted gradient (v^T J) with random v"
        entry.notes.append("the Jacobian built from one-hot cotangents matches, but the VJP "
                           "with a random cotangent does not: check how the backward uses its "
                           "upstream gradient.")
