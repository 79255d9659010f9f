"""The overlaid-curves plot (gradexp.plots.loss_curves): a sweep's legend is readable in full."""

from __future__ import annotations

import io

import numpy as np
import pytest


@pytest.mark.parametrize("jobs", [2, 16, 40])
def test_the_legend_sits_beside_the_curves_and_is_never_clipped(jobs):
    from gradexp.plots import loss_curves

    rates = np.geomspace(1e-4, 1.0, jobs)
    curves = {f"optimizer=adam,optimizer.learning_rate={rate:.6g},loss=mae": (
        np.arange(20), np.geomspace(1.0, rate, 20)) for rate in rates}
    figure = loss_curves(curves, "loss of every job")
    figure.savefig(io.BytesIO(), format="png")  # as MLflow's log_figure saves it: no bbox_inches
    renderer = figure.canvas.get_renderer()
    legend = figure.axes[0].get_legend().get_window_extent(renderer)
    axes = figure.axes[0].get_window_extent(renderer)
    page = figure.bbox
    # Inside the saved picture (every label whole) and beside the axes, not over the curves.
    assert page.x0 <= legend.x0 and legend.x1 <= page.x1
    assert page.y0 <= legend.y0 and legend.y1 <= page.y1
    assert legend.x0 >= axes.x1
    # The keys once, as the legend's title; each job's values beside its line
    legend = figure.axes[0].get_legend()
    assert legend.get_title().get_text() == "optimizer, optimizer.learning_rate, loss"
    labels = [text.get_text() for text in legend.get_texts()]
    assert len(labels) == jobs and all(label.startswith("adam, ") and label.endswith(", mae")
                                       for label in labels)


@pytest.mark.parametrize(("names", "title", "labels"), [
    (["optimizer=adam,model.hidden=[8,8]", "optimizer=sgd,model.hidden=[16]"],
     "optimizer, model.hidden", ["adam, [8,8]", "sgd, [16]"]),
    (["data.path='a,b.csv'", "data.path='c.csv'"], "data.path", ["'a,b.csv'", "'c.csv'"]),
    (["optimizer=adam (n=3)", "optimizer=sgd (n=3)"], "optimizer", ["adam (n=3)", "sgd (n=3)"]),
    # not the same keys, not KEY=VALUE, or one name: as they are
    (["optimizer=adam", "loss=mae"], None, ["optimizer=adam", "loss=mae"]),
    (["train/loss", "val/loss"], None, ["train/loss", "val/loss"]),
    (["optimizer=adam"], None, ["optimizer=adam"]),
])
def test_a_sweeps_legend_names_its_keys_once(names, title, labels):
    from gradexp.plots import factor_keys, loss_curves

    assert factor_keys(names) == (title, labels)
    legend = loss_curves({name: (np.arange(3), np.ones(3)) for name in names}).axes[0].get_legend()
    if len(names) > 1:
        assert [text.get_text() for text in legend.get_texts()] == labels
        assert legend.get_title().get_text() == (title or "")


@pytest.mark.parametrize("names", [False, True])
@pytest.mark.parametrize("classes", [2, 3, 10, 16, 200])
def test_every_label_of_a_confusion_matrix_is_inside_the_picture(classes, names):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from gradexp.plots import confusion_matrix

    counts = np.random.default_rng(classes).integers(0, 500, (classes, classes))
    labels = [f"a_rather_long_class_name_{index:02d}" for index in range(classes)] if names \
        else None
    figure = confusion_matrix(counts, "val", labels=labels)
    FigureCanvasAgg(figure).print_png(io.BytesIO())  # what MLflow's log_figure saves
    renderer = figure.canvas.get_renderer()
    page = figure.bbox
    texts = [text for axes in figure.axes for text in axes.findobj(Text)
             if text.get_visible() and text.get_text()]
    assert any("accuracy" in text.get_text() for text in texts)
    for text in texts:  # the title, both axis labels, every tick label (the colorbar's too)
        box = text.get_window_extent(renderer)
        assert page.x0 <= box.x0 and box.x1 <= page.x1 + 0.5, text.get_text()
        assert page.y0 <= box.y0 and box.y1 <= page.y1 + 0.5, text.get_text()


@pytest.mark.parametrize(("labels", "ticks"), [
    (None, ["0", "1", "2"]),
    (["cat", "dog", "hamster_from_the_pet_shop"], ["cat", "dog", "hamster…shop"]),
    ([0, 1, 2], ["0", "1", "2"]),  # numeric labels (a column of 0, 1, 2)
    # alike once cut: the column number keeps them apart
    (["north_region_alpha_total", "north_region_beta_total", "south"],
     ["0 north_r…otal", "1 north_r…otal", "2 south"]),
])
def test_a_confusion_matrix_names_its_classes(labels, ticks):
    from gradexp.plots import confusion_matrix

    axes = confusion_matrix(np.eye(3, dtype=int), "val", labels=labels).axes[0]
    assert [tick.get_text() for tick in axes.get_xticklabels()] == ticks
    assert [tick.get_text() for tick in axes.get_yticklabels()] == ticks


def test_a_matrix_of_many_classes_names_every_kth_and_leaves_counts_to_the_colours():
    """200 classes (a real-valued target read as labels): 40,000 count texts and 200 overlapping
    ticks took ~30 s to draw, unreadable; now the colours say the counts, and every 7th class
    (at most 30 an axis) is named at its own column."""
    from matplotlib.text import Text

    from gradexp.plots import confusion_matrix

    labels = [f"c{index}" for index in range(200)]
    axes = confusion_matrix(np.eye(200, dtype=int), "val", labels=labels).axes[0]
    named = [(tick, text.get_text()) for tick, text in zip(axes.get_xticks(),
                                                             axes.get_xticklabels())]
    assert named == [(i, f"c{i}") for i in range(0, 200, 7)]
    assert [t.get_text() for t in axes.get_yticklabels()] == [f"c{i}" for i in range(0, 200, 7)]
    assert not [text for text in axes.findobj(Text) if text.get_text() in ("0", "1")]


def test_a_class_label_with_dollar_signs_is_drawn_as_written():
    """`$10-$20` is a class label, not math text (matplotlib reads text between two `$` as
    TeX: `10-` in italics, the signs gone): each tick is as wide as its text drawn plainly."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from gradexp.plots import confusion_matrix

    labels = ["$10-$20", "$20-$50", "over $50"]
    figure = confusion_matrix(np.eye(3, dtype=int), "val", labels=labels)
    FigureCanvasAgg(figure).print_png(io.BytesIO())
    renderer = figure.canvas.get_renderer()
    axes = figure.axes[0]
    for tick, label in zip(axes.get_yticklabels(), labels):
        plain = Text(text=label, fontproperties=tick.get_fontproperties(), parse_math=False,
                     figure=figure)
        assert tick.get_window_extent(renderer).width == pytest.approx(
            plain.get_window_extent(renderer).width), label


@pytest.mark.parametrize("jobs", [3, 11, 64])
def test_no_two_curves_of_a_sweep_look_alike(jobs):
    # matplotlib's 10 colours repeat from the 11th line on: two jobs' curves, one colour
    from gradexp.plots import loss_curves

    curves = {f"optimizer.learning_rate={rate:.6g}": (np.arange(5), np.full(5, rate))
              for rate in np.geomspace(1e-4, 1.0, jobs)}
    lines = loss_curves(curves).axes[0].get_lines()
    looks = {(tuple(np.atleast_1d(line.get_color())), line.get_linestyle()) for line in lines}
    assert len(lines) == jobs and len(looks) == jobs


def test_a_band_is_shaded_around_its_line_in_its_colour():
    from matplotlib.colors import to_rgba

    from gradexp.plots import loss_curves

    epochs = np.arange(4)
    curves = {"adam (n=3)": (epochs, np.full(4, 2.0)), "sgd (n=3)": (epochs, np.full(4, 5.0))}
    bands = {"adam (n=3)": (np.full(4, 1.0), np.full(4, 3.0))}
    axes = loss_curves(curves, bands=bands).axes[0]
    [shade] = axes.collections  # only the name with a band is shaded
    box = shade.get_paths()[0].get_extents()
    assert (box.y0, box.y1) == (1.0, 3.0) and (box.x0, box.x1) == (0.0, 3.0)
    adam = next(line for line in axes.get_lines() if line.get_label() == "adam (n=3)")
    assert to_rgba(shade.get_facecolor()[0], 1.0) == to_rgba(adam.get_color(), 1.0)


def test_a_curve_of_one_point_is_drawn_as_a_marker():
    # a sweep of runs evaluated once (10 epochs or fewer): its objective's curves are points
    from gradexp.plots import loss_curves

    curves = {"sgd": (np.array([8]), np.array([0.5])), "adam": (np.array([8]), np.array([0.2]))}
    lines = loss_curves(curves, "val/mse of every job").axes[0].get_lines()
    assert [line.get_marker() for line in lines] == ["o", "o"]


def test_a_loss_falling_over_decades_is_read_on_a_log_axis_in_plain_numbers():
    # Plain labels (0.01, not mathtext's 10^-2) and two minor ticks a decade: the picture reads
    # the same, at about half the drawing time a run (benchmarks/bench_figures.py).
    from gradexp.plots import loss_curves

    epochs = np.arange(1, 101)
    figure = loss_curves({"train/loss": (epochs, 10 * np.exp(-epochs / 10) + 1e-3),
                          "val/loss": (epochs, 12 * np.exp(-epochs / 10) + 2e-3)})
    figure.savefig(io.BytesIO(), format="png")
    axes = figure.axes[0]
    assert axes.get_yscale() == "log"
    low, high = axes.get_ylim()
    shown = [label.get_text() for label, tick in zip(axes.get_yticklabels(), axes.get_yticks())
             if low <= tick <= high]
    assert shown == ["0.001", "0.01", "0.1", "1", "10"]
    minor = [tick for tick in axes.yaxis.get_minorticklocs() if 0.01 <= tick < 0.1]
    assert np.allclose(minor, [0.02, 0.05])
