"""A sweep's table in the terminal when it ends (gradexp.sweeps): its children best first by the
objective, each `sweep.best_per` value at its best, the replicates' groups and the notes, then
where to compare the runs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradexp.sweeps import SweepSummary


def cell(value: float) -> str:
    """A value of the table: "-" for none (NaN: a FAILED job that logged none), as gradexp
    compare shows it and sweep_summary.json holds null (QA: the table showed `nan`)."""
    return "-" if math.isnan(value) else f"{value:.6g}"


def print_sweep(summary: SweepSummary, tracker) -> None:
    """The sweep's table in the terminal, best first by the objective, and where to compare."""
    from rich.markup import escape
    from rich.table import Table

    from gradexp.compare import status_text
    from gradexp.console import console, print_table
    from gradexp.metrics import FALLBACK
    from gradexp.mlflow_store import runs_view_link
    from gradexp.sweeps import tracker_objective
    from gradexp.tracking_uri import redact_uri

    out = console()
    if summary.fell_back:
        out.print("note: no run has the sweep objective "
                  f"({tracker_objective(tracker)}; held-out data off?): ranked by final_loss, "
                  "the training loss, which differs in meaning between losses", highlight=False,
                  markup=False)
    # As gradexp compare: ↑ smallest first (values grow down the table), ↓ largest first.
    arrow = "↑" if summary.direction == "minimize" else "↓"
    # Escaped: run names are the swept overrides (`data.features=[x1]`), which rich would read
    # as markup and drop; the objective is the person's config too.
    table = Table(title=escape(f"sweep {tracker.run_id} · best first by {summary.metric} "
                               f"{arrow}"), title_justify="left")
    # ranked by final_loss (data.n_val=0), its column once (QA: `final_loss ↑` and `final loss`)
    loss_column = summary.metric != FALLBACK
    for column in ("run", "status", f"{summary.metric} {arrow}",
                   *(["final loss"] if loss_column else []), "gradient check"):
        table.add_column(escape(column), overflow="fold")
    for row in summary.rows:  # the status as gradexp compare shows it (pruned@N, drift)
        status = status_text(row["status"], reused=row["reused"], pruned_at=row["pruned_at_epoch"],
                             drift=row["packed_drift"] is not None)
        table.add_row(escape(row["run_name"]), status, cell(row["objective"]),
                      *([cell(row["final_loss"])] if loss_column else []),
                      row["gradcheck"] or "-")
    print_table(table)  # wraps, never cuts: run names stay apart in an 80-column log
    for key, best_of in summary.best_per.items():
        print_table(_best_per_table(key, best_of, summary.metric, arrow, bool(summary.groups)))
    if summary.groups:
        from gradexp.replicates import groups_table

        print_table(groups_table(summary.groups, summary.metric, arrow,
                                 "replicates: each configuration's mean, best first"))
    for note in [*summary.group_notes, summary.overlap]:
        if note:  # names the groups or keys by their override text: not markup
            out.print(note, highlight=False, markup=False)
    if summary.also_differ:
        out.print(f"besides the swept keys, these differ between the runs: "
                  f"{', '.join(summary.also_differ)}", highlight=False, markup=False)
    # a store's address is the person's text: `[x]` in a path is no markup tag
    out.print(f"compare the runs: {runs_view_link(tracker.uri, tracker.experiment_id)}",
              highlight=False, markup=False)
    where = "" if tracker.uri.startswith("sqlite") else f" --tracking-uri {redact_uri(tracker.uri)}"
    out.print(f"or in the terminal: gradexp compare --sweep {tracker.run_id}{where}",
              highlight=False, markup=False)


def _best_per_table(key: str, best_of: dict[str, Any], metric: str, arrow: str,
                    replicated: bool):
    """Each value of `key` at its best: its best configuration's mean and interval over the
    replicates, or (one run a configuration) its best run."""
    from rich.markup import escape
    from rich.table import Table

    from gradexp.replicates import interval, number

    # Keys, values and run names are override text: `data.features=[x1]` must not read as
    # rich markup (the brackets and what they hold vanished).
    table = Table(title=escape(f"each {key} at its best" + (" (by the mean)" if replicated
                                                              else "")), title_justify="left")
    columns = ("best configuration", "n", f"mean {metric} {arrow}", "95% interval") \
        if replicated else ("best run", f"{metric} {arrow}")
    for column in (key, *columns):
        table.add_column(escape(column), overflow="fold")
    for value, best in best_of.items():
        if replicated:
            table.add_row(escape(str(value)), escape(best.label), str(best.n),
                          number(best.mean), interval(best))
        else:
            table.add_row(escape(str(value)), escape(best["run_name"]),
                          f"{best['objective']:.6g}")
    return table
