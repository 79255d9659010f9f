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
