"""Plots (matplotlib figures, drawn off-screen): loss curves and gradient-check heat maps.

Figures are made with matplotlib.figure.Figure directly, not pyplot: no GUI backend, no global
figure registry to close, and a faster import (this runs at the end of every run).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

# A decimal number inside a label (0.06460685963831937, 1.5e-05, 3e+20): a point or a signed
# exponent, so integers (epochs=100, hidden=[32]) and hex run ids stay as they are.
_DECIMAL = re.compile(r"(?<![\w.])-?(?:\d+\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]\d+)(?![\w.])")


def round_numbers(text: str, digits: int = 4) -> str:
    """`optimizer.learning_rate=0.06460685963831937` -> `optimizer.learning_rate=0.06461`."""
    def short(match: re.Match) -> str:
        rounded = f"{float(match.group()):.{digits}g}"
        return rounded if len(rounded) < len(match.group()) else match.group()

    return _DECIMAL.sub(short, text)


def short_labels(names: Sequence[str], digits: int = 4) -> list[str]:
    """Legend labels from run names or params: numbers rounded to `digits` significant digits,
    or to as many more as keep different names apart."""
    for places in range(digits, 18):
        labels = [round_numbers(name, places) for name in names]
        if len(set(labels)) == len(set(names)):
            return labels
    return list(names)


def loss_curves(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], title: str = "loss",
                ylabel: str = "loss"):
    """One line per name: (epochs, values). Log scale when the values span decades."""
    import textwrap

    from matplotlib.figure import Figure

    title = "\n".join(textwrap.wrap(title, 75)[:3])  # a sweep's overrides can be long
    # Fixed margins: layout="tight" doubles savefig's time (~0.2 s) for the same picture here.
    figure = Figure(figsize=(7, 4.5), dpi=100)
    figure.subplots_adjust(left=0.11, right=0.97, top=0.92 - 0.045 * title.count("\n"),
                           bottom=0.12)
    axes = figure.subplots()
    for name, (epochs, losses) in curves.items():
        axes.plot(epochs, losses, label=name, linewidth=1.5)
    values = np.concatenate([losses for _, losses in curves.values()]) if curves else np.ones(1)
    positive = values[np.isfinite(values) & (values > 0)]
    if positive.size and positive.max() / positive.min() > 100:
        axes.set_yscale("log")
    axes.set_xlabel("epoch")
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=12 if "\n" not in title else 10)
    axes.grid(alpha=0.3)
    if len(curves) > 1:
        axes.legend(fontsize=8)
    return figure


def jacobian_heatmaps(name: str, analytical: np.ndarray, numerical: np.ndarray):
    """Analytical, numerical and their difference side by side, for one checked variable."""
    from matplotlib.figure import Figure

    analytical = np.atleast_2d(analytical)
    numerical = np.atleast_2d(numerical)
    panels = {"analytical": analytical, "numerical": numerical,
              "analytical - numerical": analytical - numerical}
    figure = Figure(figsize=(12, 3.8), dpi=100, layout="tight")
    axes = figure.subplots(1, 3)
    for axis, (title, values) in zip(axes, panels.items()):
        image = axis.imshow(values, aspect="auto", cmap="coolwarm", interpolation="nearest")
        axis.set_title(title)
        axis.set_xlabel("input element")
        axis.set_ylabel("output element")
        figure.colorbar(image, ax=axis)
    figure.suptitle(f"Jacobian of the loss w.r.t. {name}")
    return figure


def confusion_matrix(counts: np.ndarray, title: str):
    """Rows: the true class; columns: the predicted class; each cell its count."""
    from matplotlib.figure import Figure

    n = counts.shape[0]
    size = min(9.0, 3.0 + 0.45 * n)
    figure = Figure(figsize=(size, size * 0.85), dpi=100, layout="tight")
    axes = figure.subplots()
    image = axes.imshow(counts, cmap="Blues")
    for (row, column), count in np.ndenumerate(counts):
        light = count > counts.max() / 2
        axes.text(column, row, str(count), ha="center", va="center", fontsize=9,
                  color="white" if light else "black")
    axes.set_xticks(range(n))
    axes.set_yticks(range(n))
    axes.set_xlabel("predicted class")
    axes.set_ylabel("true class")
    accuracy = np.trace(counts) / max(counts.sum(), 1)
    axes.set_title(f"confusion matrix, {title} (accuracy {accuracy:.3f})")
    figure.colorbar(image, ax=axes)
    return figure
