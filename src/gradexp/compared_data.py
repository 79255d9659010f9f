"""Which data the runs `gradexp compare` shows were trained and evaluated on: the MLflow dataset
inputs gradexp logs for each split (mlflow_store.log_datasets), and the one line that says when
runs that look alike in the table did not see the same data."""

from __future__ import annotations

SPLITS = ("train", "val", "test")  # the contexts gradexp logs its data sets under
MAX_IDS = 5  # run ids listed for a data set in the different-data line; the rest are counted


def data_sets(run) -> tuple[tuple[str, str, str], ...]:
    """What a run was trained and evaluated on, as gradexp logs it (mlflow_store.log_datasets):
    (split, data set name, digest) for each split, train first; empty for a run with no
    dataset inputs (recorded without them: nothing is known)."""
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    found = []
    for item in getattr(run.inputs, "dataset_inputs", None) or []:
        split = next((tag.value for tag in item.tags if tag.key == MLFLOW_DATASET_CONTEXT), "")
        found.append((split, item.dataset.name, item.dataset.digest))
    order = {split: rank for rank, split in enumerate(SPLITS)}
    return tuple(sorted(found, key=lambda entry: (order.get(entry[0], len(SPLITS)), entry)))


def different_data(runs: list, id_chars: int = 8) -> str | None:
    """One line when runs whose data.* params are the same did not see the same data (a csv
    file changed between them, a loader drew its own rows): their val/ and test/ metrics are
    measured on other rows, so ranking them says little, and no column of the table shows why.
    Runs whose data differ because a data.* param does (a sweep over data.standardize or
    data.features) show it in their columns: no line. Each data set with its digests and its
    runs (ids cut to `id_chars`), the most used first; None when nothing is hidden. Replicates
    of a master seed (each seed draws its own data, by design) get a shorter line: their means
    compare, not their rows."""
    seen = _by_data(runs)
    if len(seen) < 2:
        return None
    if follows_from_seed(seen):
        return ("note: each master seed drew its own data (data.resample=true), so runs of "
                "different seeds do not compare one to one; their means over seeds do "
                "(--aggregate)")
    same_params: dict[tuple, list] = {}
    for run in runs:
        if data_sets(run):
            same_params.setdefault(_data_params(run), []).append(run)
    hidden = {run.info.run_id for group in same_params.values()
              if len(_by_data(group)) > 1 for run in group}
    seen = _by_data([run for run in runs if run.info.run_id in hidden])  # the table's order
    if len(seen) < 2:
        return None
    parts = []
    for key, group in sorted(seen.items(), key=lambda item: -len(item[1])):
        names = "/".join(dict.fromkeys(name for _, name, _ in key))
        digests = ", ".join(f"{split} {digest}" for split, _, digest in key)
        ids = [run.info.run_id[:id_chars] for run in group]
        listed = ", ".join(ids[:MAX_IDS]) + (f" and {len(ids) - MAX_IDS} more"
                                             if len(ids) > MAX_IDS else "")
        parts.append(f"{names} ({digests}): {len(ids)} run{'s' if len(ids) > 1 else ''} "
                     f"({listed})")
    return (f"note: runs with the same data.* params were trained or evaluated on {len(seen)} "
            "different data sets (their MLflow dataset digests differ: a data file changed "
            "between them, or a loader draws its own data), so their metrics do not compare: "
            + "; ".join(parts))


def _by_data(runs: list) -> dict[tuple, list]:
    """The runs (in their order) by the data sets they saw; runs without dataset inputs left
    out (nothing is known)."""
    seen: dict[tuple, list] = {}
    for run in runs:
        key = data_sets(run)
        if key:
            seen.setdefault(key, []).append(run)
    return seen


def _data_params(run) -> tuple:
    return tuple(sorted((key, value) for key, value in run.data.params.items()
                        if key.startswith("data.")))


def follows_from_seed(seen: dict[tuple, list]) -> bool:
    """Whether the data differ only between master seeds (`seed` set in every run, one data set
    per seed): a replicate sweep's design (gradexp.seeds), not a mistake."""
    seeds: dict[str, tuple] = {}
    for key, group in seen.items():
        for run in group:
            seed = run.data.params.get("seed", "None")
            if seed == "None" or seeds.setdefault(seed, key) != key:
                return False
    return True
