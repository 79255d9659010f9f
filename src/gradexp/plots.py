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


def _top_level_items(label: str) -> list[str]:
    """`optimizer=adam,model.hidden=[8,8]` -> its two overrides: commas inside brackets, braces,
    parentheses or quotes belong to a value (Hydra's override_dirname joins overrides with
    commas, and a job's own value has no bare comma: that would be a sweep)."""
    items, depth, quote, start = [], 0, "", 0
    for index, char in enumerate(label):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(label[start:index])
            start = index + 1
    return [*items, label[start:]]


def factor_keys(labels: Sequence[str]) -> tuple[str | None, list[str]]:
    """Labels that all set the same keys in the same order (`optimizer=adam,trainer.seed=0`) as
    one title naming the keys (`optimizer, trainer.seed`) and each label's values (`adam, 0`):
    a 64-job sweep's legend repeated every key 64 times, wider than its plot and ~0.3 s more to
    draw. Labels of any other form come back as they are, with no title."""
    split = [[item.partition("=") for item in _top_level_items(label)] for label in labels]
    keys = [tuple(key for key, equals, _ in items if equals) for items in split]
    if len(labels) < 2 or any(len(k) != len(items) for k, items in zip(keys, split)) \
            or len(set(keys)) != 1 or not keys[0]:
        return None, list(labels)
    return ", ".join(keys[0]), [", ".join(value for _, _, value in items) for items in split]


def loss_curves(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], title: str = "loss",
                ylabel: str = "loss",
                bands: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None):
    """One line per name: (epochs, values); a name in `bands` gets (low, high) at the same
    epochs shaded in its line's colour. No two lines share both colour and style (matplotlib's
    10 colours repeat from the 11th curve on: a sweep's legend could not tell them apart). Log
    scale when the values span decades. Names that set the same keys (a sweep's jobs) show
    their values in the legend under a title naming the keys (factor_keys)."""
    import textwrap

    from matplotlib.figure import Figure

    title = "\n".join(textwrap.wrap(title, 75)[:3])  # a sweep's overrides can be long
    # Fixed margins: layout="tight" doubles savefig's time (~0.2 s) for the same picture here.
    figure = Figure(figsize=(7, 4.5), dpi=100)
    figure.subplots_adjust(left=0.11, right=0.97, top=0.92 - 0.045 * title.count("\n"),
                           bottom=0.12)
    axes = figure.subplots()
    keys, labels = factor_keys(list(curves))
    for (name, (epochs, losses)), label, (colour, style) in zip(curves.items(), labels,
                                                               _styles(len(curves))):
        # A curve of one point (a run evaluated once) is no line at all: a marker shows it.
        axes.plot(epochs, losses, label=label, linewidth=1.5, color=colour, linestyle=style,
                  marker="o" if len(epochs) == 1 else None)
        if bands and name in bands:
            axes.fill_between(epochs, *bands[name], color=colour, alpha=0.2, linewidth=0)
    values = np.concatenate([losses for _, losses in curves.values()]) if curves else np.ones(1)
    positive = values[np.isfinite(values) & (values > 0)]
    if positive.size and positive.max() / positive.min() > 100:
        _log_scale(axes)
    axes.set_xlabel("epoch")
    axes.set_ylabel(ylabel)
    # y=1.0 places the title where matplotlib's automatic placement puts it on these axes (no
    # tick labels on top), without measuring every tick label at each draw: ~30% of savefig.
    axes.set_title(title, fontsize=12 if "\n" not in title else 10, y=1.0)
    axes.grid(alpha=0.3)
    if len(curves) > 1:
        _legend_outside(figure, axes, keys)
    return figure


def _log_scale(axes) -> None:
    """A log y axis labelled 10, 1, 0.1, 0.01, ... (`:g`), with unlabelled minor ticks at 2 and 5.
    Matplotlib's default (10^k in mathtext, eight minor ticks a decade) made each run's loss-curve
    PNG cost about twice as much, mostly parsing mathtext and laying out ticks, and a sweep draws
    one a job (benchmarks/bench_figures.py)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axes.set_yscale("log")
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    axes.yaxis.set_minor_formatter(NullFormatter())


def _styles(count: int) -> list[tuple[str, str]]:
    """(colour, line style) for `count` curves: matplotlib's own 10 colours up to 10 curves; then
    tab20's 20, with a new line style each further 20 (solid, dashed, dotted, dash-dot)."""
    from matplotlib import colormaps

    if count <= 10:
        return [(f"C{index}", "-") for index in range(count)]
    colours = [colormaps["tab20"](index) for index in range(20)]
    styles = ["-", "--", ":", "-."]
    return [(colours[index % 20], styles[index // 20 % len(styles)]) for index in range(count)]


def _legend_outside(figure, axes, title: str | None = None) -> None:
    """The legend to the right of the axes, never over the curves, the figure widened by what
    the legend takes so nothing is clipped (a sweep's labels are long; fixed margins, not
    bbox_inches="tight": MLflow's log_figure saves with its own arguments)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figure).get_renderer()  # to measure the legend's text
    columns = 1
    while True:
        legend = axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                             borderaxespad=0.0, ncols=columns, title=title, title_fontsize=8,
                             alignment="left")
        box = legend.get_window_extent(renderer)
        height = box.height / figure.dpi
        if height <= figure.get_figheight() * 0.9 or columns >= 8:
            break
        columns += 1  # too many jobs for one column: more columns, not a taller figure
    width, old_width = box.width / figure.dpi + 0.3, figure.get_figwidth()
    left, right = figure.subplotpars.left, figure.subplotpars.right
    # Keep the axes' size in inches; the legend gets the added width on the right.
    figure.set_figwidth(old_width + width)
    figure.subplots_adjust(left=left * old_width / (old_width + width),
                           right=right * old_width / (old_width + width))


def jacobian_heatmaps(name: str, analytical: np.ndarray, numerical: np.ndarray,
                      worst: tuple[int, int] | None = None, shape: tuple[int, ...] | None = None):
    """A variable's gradient, analytical and numerical, and their difference, side by side.

    The arrays are in the variable's own shape (a kernel's rows and columns, a bias as one row;
    gradexp.heatmaps.heatmaps); `shape` is the variable's own, for the title (default: the
    arrays'). The first two panels share one colour scale centred on 0, the difference has its
    own; small maps print each value. `worst`, the (row, column) of the element that failed the
    check, is outlined in every panel and its two values are written below.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    analytical, numerical = np.atleast_2d(analytical), np.atleast_2d(numerical)
    rows, cols = analytical.shape
    shape = tuple(shape) if shape is not None else (rows, cols)
    reach = _symmetric_limit(analytical, numerical)
    panels = [("analytical (autodiff)", analytical, reach),
              ("numerical (finite differences)", numerical, reach),
              ("analytical \N{MINUS SIGN} numerical", analytical - numerical,
               _symmetric_limit(analytical - numerical))]
    wide = cols >= 2 * rows  # a row or a few: colour bars below, the figure as short as the map
    tall = min(rows / cols, 4.0)  # a long column is squeezed: cells at most 4:1 (h:w) as a whole
    height = 1.5 + 3.9 * rows / cols if wide else 4.3
    figure = Figure(figsize=(13, height + (0.3 if worst else 0)), dpi=100, layout="constrained")
    axes = figure.subplots(1, 3)
    number = FuncFormatter(lambda value, _: f"{value:.2g}")  # 8e-12 on each tick: no offset text
    for axis, (title, values, limit) in zip(axes, panels):
        image = axis.imshow(values, cmap="RdBu_r", vmin=-limit, vmax=limit,
                            interpolation="nearest", aspect=tall * cols / rows)
        axis.set_title(title, fontsize=10)
        axis.set_xticks(_ticks(cols))
        axis.set_yticks(_ticks(rows))
        axis.set_xlabel("column" if len(shape) > 1 else "element")
        if len(shape) > 1:
            axis.set_ylabel("row" if len(shape) == 2 else "row (all dims but the last)")
        else:
            axis.set_yticks([])
        if values.size <= 32 and cols <= 10:
            _write_values(axis, values, limit)
        if worst is not None:
            _outline(axis, worst)
        bar = figure.colorbar(image, ax=axis, format=number, shrink=0.9,
                              ticks=MaxNLocator(5, symmetric=True),
                              location="bottom" if wide else "right")
        bar.ax.tick_params(labelsize=8)
    size = " \N{MULTIPLICATION SIGN} ".join(map(str, shape))
    figure.suptitle(f"gradient of the loss w.r.t. {name} (shape {size})")
    if worst is not None:
        at = list(np.unravel_index(int(np.ravel_multi_index(worst, (rows, cols))), shape))
        figure.supxlabel(f"check failed; outlined: the worst element {name}"
                         f"[{', '.join(map(str, at))}]: analytical {analytical[worst]:.6g}, "
                         f"numerical {numerical[worst]:.6g}", color="darkred", fontsize=10)
    return figure


def _write_values(axis, values: np.ndarray, limit: float) -> None:
    for (row, column), value in np.ndenumerate(values):
        axis.text(column, row, f"{value:.2g}", ha="center", va="center", fontsize=7,
                  color="white" if abs(value) > 0.6 * limit else "black")


def _outline(axis, cell: tuple[int, int]) -> None:
    """A box around one cell that shows on dark and light colours alike."""
    from matplotlib.patches import Rectangle

    for colour, width in (("black", 4.0), ("yellow", 1.8)):
        axis.add_patch(Rectangle((cell[1] - 0.5, cell[0] - 0.5), 1, 1, fill=False,
                                 edgecolor=colour, linewidth=width))


def _symmetric_limit(*arrays: np.ndarray) -> float:
    """The largest |value| (NaNs aside), so that 0 sits in the middle of a colour scale."""
    finite = [np.abs(a[np.isfinite(a)]) for a in arrays]
    largest = max((float(a.max()) for a in finite if a.size), default=0.0)
    return largest or 1.0


def _ticks(count: int, most: int = 9) -> list[int]:
    """Whole-number ticks, every one when few, else a round step (2, 5, 10, 20, ...)."""
    step = 1
    while count > most * step:
        step = step * 5 // 2 if str(step).startswith("2") else step * 2
    return list(range(0, count, step))


LABEL_CHARS = 12  # a class label longer than this is cut in the middle on the matrix's ticks


def class_ticks(labels: Sequence | None, n: int) -> list[str]:
    """The tick text of each of `n` classes: its label (gradexp.data's, in column order) when
    the labels are known, a long one cut in the middle so that its start and end both show
    (`hamster…shop`); the column numbers otherwise. Labels that cutting makes alike get their
    column number in front."""
    if labels is None or len(labels) != n:
        return [str(index) for index in range(n)]
    shown = [_cut(str(label)) for label in labels]
    if len(set(shown)) < n:
        shown = [f"{index} {text}" for index, text in enumerate(shown)]
    return shown


def _cut(text: str, most: int = LABEL_CHARS) -> str:
    if len(text) <= most:
        return text
    head = (most - 1) * 2 // 3
    return f"{text[:head]}\N{HORIZONTAL ELLIPSIS}{text[head - most + 1:]}"


READABLE = 30  # classes a confusion matrix names one by one, with each cell's count


def confusion_matrix(counts: np.ndarray, title: str, labels: Sequence | None = None):
    """Rows: the true class; columns: the predicted class; each cell its count. The ticks name
    the classes by `labels` (one per column; None: their column numbers)."""
    from matplotlib.figure import Figure

    n = counts.shape[0]
    ticks = class_ticks(labels, n)
    # Room for labels wider than two digits, in inches (~0.08 a character at the ticks' 10 pt),
    # added to the figure so the matrix keeps its size; the x labels slant past 3 characters.
    wider = 0.08 * max(0, max(map(len, ticks)) - 2)
    slant = max(map(len, ticks)) > 3
    lower = wider * 0.75 if slant else 0.0
    size = min(9.0, 3.0 + 0.45 * n)
    # Fixed margins, in inches (tick labels, axis labels, title, the colorbar's labels):
    # layout="tight" draws the figure twice, ~0.27 s against ~0.15 s of CPU for a 10-class
    # matrix, and every classification job draws one.
    figure = Figure(figsize=(size + wider, size * 0.85 + lower), dpi=100)
    width, height = figure.get_size_inches()
    figure.subplots_adjust(left=(0.75 + wider) / width, right=1 - 0.45 / width,
                           bottom=(0.6 + lower) / height, top=1 - 0.4 / height)
    axes = figure.subplots()
    image = axes.imshow(counts, cmap="Blues")
    # Past READABLE classes a cell is too small for its count and the ticks overlap: the colours
    # say the counts, and every k-th class is named (a 200-class matrix drew 40,000 texts, ~30 s)
    if n <= READABLE:
        for (row, column), count in np.ndenumerate(counts):
            light = count > counts.max() / 2
            axes.text(column, row, str(count), ha="center", va="center", fontsize=9,
                      color="white" if light else "black")
    shown = range(0, n, -(-n // READABLE))
    # `\$`: a label such as `$10-$20` is text; two bare `$` would make it math text (TeX).
    drawn = [ticks[i].replace("$", r"\$") for i in shown]
    axes.set_xticks(shown, drawn, rotation=45 if slant else 0,
                    ha="right" if slant else "center", rotation_mode="anchor")
    axes.set_yticks(shown, drawn)
    axes.set_xlabel("predicted class")
    axes.set_ylabel("true class")
    accuracy = np.trace(counts) / max(counts.sum(), 1)
    axes.set_title(f"confusion matrix, {title} (accuracy {accuracy:.3f})")
    figure.colorbar(image, ax=axes)
    return figure
