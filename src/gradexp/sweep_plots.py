"""A sweep parent's overlaid curves: every job's training loss and its objective's validation
curve, or with replicates one line a configuration (its replicates' mean and range). Drawn by
gradexp.sweeps.summarize_sweep when the sweep ends."""

from __future__ import annotations

from typing import Any

from gradexp.metrics import FALLBACK


def overlay_figures(client, rows: list[dict[str, Any]], metric: str,
                    groups: list | None = None,
                    runs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parent's plots, by artifact path (gradexp.sweeps logs them: one writer): every job's
    training loss, and its objective's validation curve, read from the store through `client`.
    With replicates (`groups`), one line a configuration instead: its replicates' mean at each
    epoch they all reached, shaded from their lowest to their highest value (64 seed-level
    curves in one legend can be told apart by no one). `runs`: the rows' Runs as fetched."""
    from gradexp.history import run_curves
    from gradexp.plots import loss_curves, short_labels

    wanted = {"loss": ("plots/sweep_loss_curves.png", "loss of every job")}
    if metric != FALLBACK:
        safe = metric.replace("/", "_")
        wanted[metric] = (f"plots/sweep_{safe}_curves.png", f"{metric} of every job")
    rows = [row for row in rows if row["run_id"] is not None]  # a job that never opened a run
    runs = runs or {}  # the Runs the summary fetched, by id: no lookup each
    found = {row["run_id"]: run_curves(client, runs.get(row["run_id"], row["run_id"]),
                                       list(wanted))
             for row in rows}
    shown = [group for group in groups or [] if group.n]
    figures = {}
    for key, (path, title) in wanted.items():
        bands = None
        if shown:
            curves, bands = group_curves(shown, found, key)
            title = title.replace("every job", "every configuration") + " (mean, band: min-max)"
        else:
            labels = short_labels([row["run_name"] or row["run_id"] for row in rows])  # 0.06461
            curves = {label: found[row["run_id"]][key] for label, row in zip(labels, rows)
                      if key in found[row["run_id"]]}
        if curves:
            figures[path] = loss_curves(curves, title, ylabel=key, bands=bands)
    return figures


def group_curves(groups: list, found: dict[str, dict], key: str) -> tuple[dict, dict]:
    """Each group's mean curve of `key` over its replicates, at the epochs every one of them
    reached (an early-stopped replicate shortens its group's curve), and their (min, max)."""
    import numpy as np

    from gradexp.plots import short_labels

    curves, bands = {}, {}
    for label, group in zip(short_labels([group.label for group in groups]), groups):
        # epoch -> value a replicate (a resumed run may repeat an epoch: its last value)
        series = [dict(zip(np.asarray(found[run_id][key][0]).tolist(),
                           np.asarray(found[run_id][key][1]).tolist()))
                  for run_id in group.run_ids if key in found[run_id]]
        epochs = sorted(set.intersection(*map(set, series))) if series else []
        if epochs:
            values = np.array([[replicate[epoch] for epoch in epochs] for replicate in series])
            name = f"{label} (n={len(series)})"
            curves[name] = (np.array(epochs), values.mean(axis=0))
            bands[name] = (values.min(axis=0), values.max(axis=0))
    return curves, bands
