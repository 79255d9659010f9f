"""A run's full-resolution history: every epoch's metrics in one columnar file, `history.parquet`.

MLflow gets each per-epoch series thinned to tracking.max_points points (its UI draws no more,
and sqlite takes ~250 µs a point); this file keeps every epoch. It is an artifact of the run,
written on every ending (FINISHED, FAILED, KILLED), and a copy goes beside each checkpoint so a
resumed run's file covers the epochs before the resume too, even after a kill -9.

Layout: one row per step, sorted; column `step` (int64, the epoch number, from 1) and one column
per metric. Per-epoch series (`loss`, `grad_norm`, `lr`, ...) keep the trainer's dtype and have a
value at every epoch; held-out evaluations (`train/...`, `val/...`, `test/...`) are float64 and
null where nothing was evaluated. Every row holds its epoch's values as measured then: after
early stopping put back its best weights, those are evaluated again at the last step (the run's
final train/ and val/ metrics in MLflow, what the logged model scores), but that re-measure is
the best epoch's (its row, `best_epoch`), not the last epoch's, so the table keeps the first
value of a step evaluated twice. An evaluation before any epoch adds a row at step 0, where the
per-epoch columns are null.

The loss plot, `gradexp compare --plot` and a sweep's overlay curves read this file, and fall back
to MLflow's metric history for runs recorded without it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ARTIFACT = "history.parquet"
STEP = "step"
Curve = tuple[np.ndarray, np.ndarray]  # (steps, values)


def build_table(first_epoch: int, per_epoch: Mapping[str, np.ndarray],
                evaluations: Mapping[str, Sequence[tuple[int, float]]]):
    """The table of a stretch of training: `per_epoch` arrays cover epochs first_epoch + 1 ..,
    `evaluations` are (step, value) points in the order they were measured (of a step given
    twice, the first is kept)."""
    import pyarrow as pa

    length = max((len(values) for values in per_epoch.values()), default=0)
    epochs = np.arange(first_epoch + 1, first_epoch + 1 + length, dtype=np.int64)
    evaluated = np.array(sorted({step for points in evaluations.values() for step, _ in points}),
                         dtype=np.int64)
    steps = np.union1d(epochs, evaluated)
    columns = {STEP: pa.array(steps)}
    for key, values in per_epoch.items():
        values = np.asarray(values)
        filled = np.zeros(len(steps), dtype=values.dtype)
        missing = np.ones(len(steps), dtype=bool)
        # A key that appeared after the first stretch (a shorter array) covers the last epochs.
        rows = np.searchsorted(steps, epochs[length - len(values):])
        filled[rows] = values
        missing[rows] = False
        columns[key] = pa.array(filled, mask=missing)
    for key, points in evaluations.items():
        measured: dict[int, float] = {}  # a step evaluated twice (restored weights): the first
        for step, value in points:
            measured.setdefault(step, value)
        filled = np.zeros(len(steps))
        missing = np.ones(len(steps), dtype=bool)
        rows = np.searchsorted(steps, np.fromiter(measured, dtype=np.int64, count=len(measured)))
        filled[rows] = list(measured.values())
        missing[rows] = False
        columns[key] = pa.array(filled, mask=missing)
    return pa.table(columns)


def merge(earlier, later, upto: int):
    """`earlier`'s rows up to step `upto`, then `later`'s: a resumed run's whole history (the
    epochs after its checkpoint were trained again). Columns missing on one side are null there."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kept = earlier.filter(pc.less_equal(earlier[STEP], upto))
    return pa.concat_tables([kept, later], promote_options="permissive")


def write_table(table, path: Path) -> None:
    """Write `table` to `path` whole or not at all (a kill mid-write leaves the old file)."""
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(handle)
    try:
        pq.write_table(table, temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_table(path: Path):
    """The table at `path`, or None when there is no such file."""
    import pyarrow.parquet as pq

    return pq.read_table(path) if path.is_file() else None


def curves(table, keys: Iterable[str] | None = None) -> dict[str, Curve]:
    """metric -> (steps, values) where the metric has a value, for `keys` (default: all)."""
    names = [name for name in table.column_names if name != STEP]
    found = {}
    for key in names if keys is None else [key for key in keys if key in names]:
        column = table[key]
        present = ~np.asarray(column.is_null())
        found[key] = (np.asarray(table[STEP])[present],
                      np.asarray(column.fill_null(0))[present])
    return found


def run_curves(client, run: Any, keys: Sequence[str]) -> dict[str, Curve]:
    """The series `keys` of `run` (its id, or the Run already fetched) at full resolution from
    its history.parquet artifact; from MLflow's metric history (perhaps thinned) for a run
    without it or a key not in it. Keys the run has nowhere are left out."""
    from gradexp.mlflow_store import download_artifact, metric_history

    run_id = run if isinstance(run, str) else run.info.run_id
    found: dict[str, Curve] = {}
    with tempfile.TemporaryDirectory() as folder:
        try:
            local = download_artifact(client, run, ARTIFACT, folder)
            found = curves(read_table(Path(local)), keys)
        except Exception:  # noqa: BLE001 - no such artifact (an older run): MLflow's history
            found = {}
    for key in keys:
        if key not in found:
            history = metric_history(client, run_id, key)
            if history:
                history.sort(key=lambda m: m.step)
                found[key] = (np.array([m.step for m in history]),
                              np.array([m.value for m in history]))
    return found
