"""Heat maps of a check: each small Jacobian-checked variable's gradient, analytical and
numerical, in the variable's own shape, with the failing element marked (drawn by
gradexp.plots.jacobian_heatmaps)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradexp.run_checks import CheckResult

HEATMAP_SIZES = range(2, 401)  # a 1-element map says nothing; beyond ~400 cells it is a blur


@dataclass
class Heatmap:
    """One checked variable's gradient, analytical and numerical, drawn in the variable's own
    shape: a kernel as its rows and columns, a bias as one row, more dimensions folded into rows
    (all but the last). `worst` is the (row, column) of the element that failed the check, or
    None when the variable passed; `shape` is the variable's own."""

    analytical: np.ndarray
    numerical: np.ndarray
    worst: tuple[int, int] | None = None
    shape: tuple[int, ...] | None = None


def heatmaps(result: CheckResult) -> dict[str, Heatmap]:
    """A Heatmap per small variable (or input) checked by the Jacobian method."""
    maps = {}
    for key, report in result.reports.items():
        if not key.endswith("/jacobian") or "/order2/" in key:  # first derivatives only
            continue
        for entry in report.entries:
            if entry.analytical is None or np.size(entry.analytical) not in HEATMAP_SIZES:
                continue
            maps[entry.name] = _heatmap(entry)
    return maps


def _heatmap(entry) -> Heatmap:
    analytical, numerical = np.asarray(entry.analytical), np.asarray(entry.numerical)
    shape = tuple(entry.shape)
    if analytical.shape[0] != 1 or not shape:  # several outputs: (output, input) elements
        return Heatmap(analytical, numerical)  # (the losses checked here are scalars)
    drawn = (int(np.prod(shape[:-1])), shape[-1])  # (8,) -> (1, 8); (3, 3, 2, 4) -> (18, 4)
    worst = None
    if not entry.passed and entry.worst_input_index is not None:
        flat = int(np.ravel_multi_index(tuple(entry.worst_input_index), shape))
        worst = tuple(int(i) for i in np.unravel_index(flat, drawn))
    return Heatmap(analytical.reshape(drawn), numerical.reshape(drawn), worst, shape)
