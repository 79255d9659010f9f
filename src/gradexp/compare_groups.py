"""`gradexp compare --aggregate`: the runs shown grouped into configurations, each group's
replicates averaged, as a sweep's parent groups its own (gradexp.replicates).

What the runs are grouped by: a sweep's swept keys (`--sweep`), else every param the runs differ
in; a master seed's derived seeds (model.seed, ... that `seed=N` sets) aside. `--aggregate` may
name a config group or its option's key alike (`optimizer` or `optimizer.name`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gradexp.compare_selection import BadInput, Selection
from gradexp.param_differences import differing_params
from gradexp.seeds import PURPOSES, derived_seed
from gradexp.tag_keys import PRUNED_TAG


def print_groups(selection: Selection, metric: str, desc: bool, over: list[str]) -> None:
    """--aggregate: the runs grouped by what they differ in besides `over` (a sweep's swept
    keys, else every differing param; a master seed's derived seeds aside), as the sweep's parent
    groups its replicates (gradexp.replicates): pruned and failed replicates counted, not
    averaged; a job run more than once counted once (its newest run)."""
    from gradexp import replicates
    from gradexp.console import console

    out = console()
    ended = [run for run in selection.runs if run.info.status != "RUNNING"]  # still training
    runs, duplicates = replicates.distinct_runs(ended)
    swept = selection.swept if selection.swept is not None else (
        differing_params(runs)[0] if len(runs) > 1 else [])
    derived = derived_seed_keys([run.data.params for run in runs])
    # said of the keys a sweep swept only (review: compare's differing seeds were not swept)
    replaced = replicates.derived_note(selection.swept or [], derived)
    swept = [key for key in swept if key not in derived]
    # QA: `--aggregate optimizer.name` on a sweep of the group `optimizer` (and `--aggregate
    # optimizer` outside --sweep, where the params differ in optimizer.name) said the runs "do
    # not differ" in a key that was a column of the same table
    grouped_over = keys_named(over, swept)
    if not any(key in grouped_over for key in swept):
        for line in (f"--aggregate: the runs shown do not differ in {', '.join(over)}; no "
                     "replicates to group", replaced):
            if line:
                out.print(line, highlight=False, markup=False)
        return
    groups = replicates.group_runs(
        [(run.info.run_id, run.data.params, run.data.metrics.get(metric, math.nan))
         for run in runs], swept, grouped_over, "maximize" if desc else "minimize",
        pruned={run.info.run_id for run in runs if PRUNED_TAG in run.data.tags},
        failed={run.info.run_id for run in runs if run.info.status != "FINISHED"})
    out.print(replicates.groups_table(groups, metric, "↓" if desc else "↑",
                                      f"groups over {', '.join(over)}: mean, "
                                      f"{'highest' if desc else 'lowest'} first"))
    losses = {run.info.run_id: run.data.metrics.get("final_loss") for run in runs}
    for line in (replicates.duplicates_note(duplicates),
                 replicates.identical_note(groups, over, losses),
                 replicates.overlap_note(groups), replaced):
        if line:
            out.print(line, highlight=False, markup=False)
    if selection.more:
        out.print(f"grouped the newest {len(selection.runs)} runs only: --limit N for every "
                  "replicate", highlight=False, markup=False)


def keys_named(over: Sequence[str], keys: Sequence[str]) -> list[str]:
    """The grouping keys `over` names: each one itself, and a config group and its option's key
    for each other (`optimizer` names optimizer.name and optimizer._target_; `optimizer.name`
    names the swept group `optimizer`)."""
    named = list(over)
    for name in over:
        group = name.removesuffix(".name")
        named += [key for key in keys if key in (f"{name}.name", f"{name}._target_")
                  or (name.endswith(".name") and key == group)]
    return named


def derived_seed_keys(params: Sequence[Mapping[str, str]]) -> set[str]:
    """The seed keys (model.seed, trainer.seed, data.seed, data.split_seed) that are no
    difference of their own between these runs: in each run with a master `seed` the key holds
    the value derived from it, and the runs without one share one value of it, so `seed` says
    all it does. replicates.derived_keys asks the first of every run, which one run without a
    master seed (model.seed=0) broke: outside --sweep, on an experiment of such runs and seeded
    ones, every derived seed became a grouping key (QA: group labels listed data.seed,
    model.seed and trainer.seed, and a seed's replicates were each a group of their own)."""
    derived = set()
    for purpose, key in PURPOSES.items():
        having = [values for values in params if key in values]
        seeded = [values for values in having if _master(values) is not None]
        unseeded = {values[key] for values in having if _master(values) is None}
        if seeded and len(unseeded) <= 1 and all(
                _is_derived(values[key], _master(values), purpose) for values in seeded):
            derived.add(key)
    return derived


def _master(params: Mapping[str, str]) -> int | None:
    try:
        return int(params["seed"])
    except (KeyError, TypeError, ValueError):  # no master seed (None), or not a number
        return None


def _is_derived(value: str, master: int | None, purpose: str) -> bool:
    try:
        return master is not None and int(value) == derived_seed(master, purpose)
    except (TypeError, ValueError):
        return False


def check_aggregate(selection: Selection, over: list[str]) -> None:
    """--aggregate names params of the runs shown, or a swept group of them (optimizer): a key
    no run has (a typo, `--aggregate sed`) would group nothing, and the table would stand as if
    no grouping had been asked for. A key the runs have but do not differ in is no mistake
    (the default, seed, on runs of one seed): print_groups says there is nothing to group."""
    from gradexp.config_checks import closest_key

    params = {key for run in selection.runs for key in run.data.params}
    named = sorted(params | set(selection.swept or ()))
    for key in over:
        if not selection.runs or key in named or any(p.startswith(f"{key}.") for p in params):
            continue
        differ = selection.swept if selection.swept is not None else (
            differing_params(selection.runs)[0] if len(selection.runs) > 1 else [])
        hint = closest_key(key, named)
        raise BadInput(f"--aggregate {key}: no run shown has that param; the runs shown differ "
                       f"in {', '.join(differ) or '(no param)'} (any param of theirs may be "
                       "named)" + (f"; did you mean {hint}?" if hint else ""))
