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
    labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert len(labels) == jobs and all("loss=mae" in label for label in labels)


@pytest.mark.parametrize("classes", [2, 3, 10, 16])
def test_every_label_of_a_confusion_matrix_is_inside_the_picture(classes):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from gradexp.plots import confusion_matrix

    counts = np.random.default_rng(classes).integers(0, 500, (classes, classes))
    figure = confusion_matrix(counts, "val")
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
