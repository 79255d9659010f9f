"""Benchmark: what a run's loss-curve PNG costs to draw (gradexp.plots.loss_curves, saved as
MLflow's log_figure saves it). A sweep draws one a job, in the recorder's thread, where its
Python work competes with the next job's for the interpreter lock.

    python benchmarks/bench_figures.py

Side by side, alternated in one process: a curve spanning decades (log scale) with gradexp's
labels and ticks, the same figure with matplotlib's default log axis (10^k in mathtext, eight
minor ticks a decade), and a curve on a linear scale, with its title at a fixed height
(gradexp's) and placed by matplotlib at each draw (its default: it measures the tick labels).
"""

from __future__ import annotations

import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from gradexp.plots import loss_curves  # noqa: E402

EPOCHS = np.arange(1, 101)
DECADES = {"train/loss": (EPOCHS, 10 * np.exp(-EPOCHS / 10) + 1e-3),
           "val/loss": (EPOCHS, 12 * np.exp(-EPOCHS / 10) + 2e-3)}
LINEAR = {"train/loss": (EPOCHS, 1 + np.exp(-EPOCHS / 10)),
          "val/loss": (EPOCHS, 1.1 + np.exp(-EPOCHS / 10))}


def draw(curves, matplotlib_default: bool = False, title_placed: bool = False) -> None:
    figure = loss_curves(curves)
    if matplotlib_default:
        figure.axes[0].set_yscale("log")  # resets the axis' locators and formatters
    if title_placed:  # as before gradexp set the title's y: matplotlib places it at each draw
        figure.axes[0]._autotitlepos = True
    figure.savefig(io.BytesIO(), format="png")


def main() -> None:
    cases = {"log scale, gradexp's axis": lambda: draw(DECADES),
             "log scale, matplotlib's default axis": lambda: draw(DECADES, True),
             "linear scale": lambda: draw(LINEAR),
             "linear scale, title placed by matplotlib": lambda: draw(LINEAR, title_placed=True)}
    for case in cases.values():
        case()  # fonts and caches warm
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(15):
        for name, case in cases.items():
            start = time.perf_counter()
            case()
            seconds[name].append(time.perf_counter() - start)
    print(f"{'figure (2 curves, 100 epochs, PNG)':42} {'median s':>9}")
    for name, values in seconds.items():
        print(f"{name:42} {statistics.median(values):9.3f}")


if __name__ == "__main__":
    main()
