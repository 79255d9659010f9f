"""How `gradexp compare` ranks the runs it shows: by --by METRIC, else a sweep's objective (its
parent's gradexp.objective tag, as the sweep's own table ranks them), else the objective the runs
share, else final_loss with a note saying so; the runs that trained to the end first.
"""

from __future__ import annotations

import math

from gradexp.compare_selection import DEFAULT_SORT, BadInput, Selection
from gradexp.metrics import direction_of
from gradexp.tag_keys import DIRECTION_TAG, OBJECTIVE_TAG, PRUNED_TAG


def ranking(selection: Selection, sort: str | None, desc: bool) -> tuple[str, bool, str | None]:
    """(the metric the runs are ranked by, largest first, a note when that is the training
    loss by default). A sweep's runs rank by its objective, as the sweep's own table does (QA:
    on `-m data=linear,blobs` the table ranked by val/mse, compare by final_loss the other way
    round); other runs by the objective they share; else by final_loss, said as the sweep says
    it (QA: it mixed mse, mae and cross-entropy values in silence)."""
    if sort:
        return sort, desc or ranks_largest_first(selection.runs, sort), None
    recorded = {run.data.tags.get(OBJECTIVE_TAG) for run in selection.runs}
    if selection.objective is not None:
        metric, direction = selection.objective
        if any(metric in run.data.metrics for run in selection.runs):
            return metric, desc or (direction == "maximize" if direction
                                    else ranks_largest_first(selection.runs, metric)), None
        recorded = {metric}
    elif metric := shared_objective(selection.runs):
        return metric, desc or ranks_largest_first(selection.runs, metric), None
    names = sorted(name or "none" for name in recorded)
    why = (f"the runs shown were recorded with different sweep objectives ({', '.join(names)})"
           if len(names) > 1 else "the runs shown record no sweep objective" if recorded == {None}
           else f"no run shown has the sweep objective ({names[0]}; held-out data off?)")
    return DEFAULT_SORT, desc, (f"note: {why}: ranked by {DEFAULT_SORT}, the training loss, which "
                                "differs in meaning between losses (--by METRIC for another)")


def shared_objective(runs: list) -> str | None:
    """The sweep objective the runs were recorded with (tag gradexp.objective), if they share
    one and any run has it."""
    objectives = {run.data.tags.get(OBJECTIVE_TAG) for run in runs}
    if len(objectives) == 1:
        name = objectives.pop()
        if name and any(name in run.data.metrics for run in runs):
            return name
    return None


def ranks_largest_first(runs: list, metric: str) -> bool:
    """Whether `metric` is best when largest: the direction the runs recorded for it (tag
    gradexp.direction beside gradexp.objective; sweep.direction=maximize on val/fit) when they
    agree, else a guess from its name (accuracy, r2: largest; errors, losses: smallest)."""
    if metric == DEFAULT_SORT:
        return False
    recorded = {run.data.tags.get(DIRECTION_TAG) for run in runs
                if run.data.tags.get(OBJECTIVE_TAG) == metric}
    if len(recorded) == 1 and (direction := recorded.pop()) in ("minimize", "maximize"):
        return direction == "maximize"
    return direction_of(metric) == "maximize"


def sort_runs(runs: list, name: str, desc: bool, asked: bool = True) -> None:
    """In place, by metric `name` (runs without it last, ties stay newest first), the runs that
    trained to the end first, as the sweep's own table ranks them: a pruned run's value is an
    early epoch's, and a FAILED (diverged), KILLED or RUNNING run's the last one it logged, so
    they rank after the FINISHED ones. A metric that was asked for (--by) and that no run has is
    an error; a default one keeps newest first."""
    available = sorted({key for run in runs for key in run.data.metrics})
    if name not in available:
        if asked and runs:
            raise BadInput(f"--by {name}: no run shown has that metric; available: "
                           f"{', '.join(available) or '(none)'}")
        return

    def key(run) -> tuple[int, int, float]:
        value = run.data.metrics.get(name, math.nan)
        if math.isnan(value):
            return (1, 0, 0.0)
        ended = (0 if run.info.status == "FINISHED" else 2) + (PRUNED_TAG in run.data.tags)
        return (0, ended, -value if desc else value)

    runs.sort(key=key)
