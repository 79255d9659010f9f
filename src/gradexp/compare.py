"""`gradexp compare`: the runs of an experiment, or of one sweep, side by side in the terminal.

    gradexp compare                          the newest run's experiment, best first
    gradexp compare --sweep latest           the child runs of the newest sweep
    gradexp compare --sweep latest --by val/mae
    gradexp compare --sweep 1a2b3c4d --by grad_norm --desc --plot curves.png
    gradexp compare --sweep latest --aggregate   each configuration's mean over its seeds

Runs are ranked best first by their sweep objective (a sweep's: its parent's `gradexp.objective`
tag; else the one the runs carry, e.g. val/mse, the same yardstick whatever the training loss),
or by --by METRIC (gradexp.compare_ranking). Only the params
that differ between the runs shown become columns; the ones they share are counted, not listed.
Reads the store (sqlite file or MLflow server); its one write marks KILLED the RUNNING runs whose
process died (gradexp.liveness), so the table shows what really happened to them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from gradexp.compare_selection import DEFAULT_SORT, BadInput, Selection
from gradexp.compared_data import different_data
from gradexp.param_differences import differing_params, is_swept
from gradexp.tag_keys import (
    DIRECTION_TAG,
    GRADCHECK_TAG,
    OBJECTIVE_TAG,
    PACKED_DRIFT_TAG,
    PARENT_TAG,
    PRUNED_TAG,
    REUSED_TAG,
    SWEEP_TAG,
    SWEPT_TAG,
)

DEFAULT_EXPERIMENT = "gradexp"
DEFAULT_LIMIT = 50
SHORT = 8  # characters of a run id shown; --sweep accepts such a prefix
PLOT_SUFFIXES = (".png", ".svg", ".pdf")
NEWEST_FIRST = ["attributes.start_time DESC"]


# ---------------------------------------------------------------- command line
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        from gradexp.console import error_line

        error_line(f"{message} (see: gradexp compare --help)")
        raise SystemExit(2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="gradexp compare", formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="The runs of an experiment, or of one sweep, side by side: only "
                                 "the params that differ,\nthe final metrics, sorted by a metric.",
                     epilog="examples:\n" + __doc__.split("\n\n")[1])
    parser.add_argument("--experiment", metavar="NAME",
                        help="MLflow experiment (default: the experiment of the newest run in "
                             "the store, e.g. lr_search after a preset's sweep)")
    parser.add_argument("--sweep", metavar="RUN_ID",
                        help="only the child runs of this sweep: its parent run id, a prefix of "
                             f"it (the tables show {SHORT} characters; looked for in every "
                             "experiment, or in --experiment's), or 'latest'")
    parser.add_argument("--by", "--sort", dest="sort", metavar="METRIC",
                        help="rank by this metric, best first (largest for accuracy, r2 and the "
                             "like, smallest otherwise); default: the runs' sweep objective, "
                             f"else {DEFAULT_SORT}")
    parser.add_argument("--desc", action="store_true", help="largest first, whatever the metric")
    parser.add_argument("--plot", metavar="FILE.png", type=Path,
                        help="also write the loss curves of the runs shown to this file")
    parser.add_argument("--aggregate", metavar="KEYS", nargs="?", const="seed",
                        help="also group the runs that differ only in these params (comma-"
                             "separated; default: seed) and show each group's mean, std and 95%% "
                             "interval of the metric, best mean first")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help="MLflow store (default: $MLFLOW_TRACKING_URI, else "
                             "sqlite:///mlflow.db in this folder)")
    parser.add_argument("--limit", metavar="N", type=int, default=DEFAULT_LIMIT,
                        help=f"show at most N runs, newest first (default: {DEFAULT_LIMIT})")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """`gradexp compare ...`: 0 when the table was shown, 2 when an argument names nothing or
    there is no run to show."""
    from gradexp.console import console, error_line

    try:
        args = parse_args(argv)
    except SystemExit as stop:  # --help (0), or a usage error already reported (2)
        return int(stop.code or 0)
    try:
        check_args(args)
        client, uri = open_store(args.tracking_uri)
        mark_dead(client)
        selection = select(client, args)
        from gradexp.compare_ranking import ranking, sort_runs

        metric, desc, note = ranking(selection, args.sort, args.desc)
        sort_runs(selection.runs, metric, desc, asked=bool(args.sort))
        if args.aggregate:
            from gradexp.compare_groups import check_aggregate, print_groups

            check_aggregate(selection, args.aggregate.split(","))
        if note:
            console().print(note, highlight=False, markup=False)
        print_table(selection, metric, desc, uri)
        if args.aggregate:
            print_groups(selection, metric, desc, args.aggregate.split(","))
        if args.plot:
            write_plot(client, selection, args.plot)
    except BadInput as error:
        error_line(str(error))
        return 2
    return 0


def check_args(args: argparse.Namespace) -> None:
    """What can be checked before the store is opened (that takes seconds)."""
    if args.limit < 1:
        raise BadInput(f"--limit {args.limit}: must be a whole number of runs, 1 or more")
    if args.plot:
        if args.plot.suffix.lower() not in PLOT_SUFFIXES:
            raise BadInput(f"--plot {args.plot}: the file name must end in "
                           f"{', '.join(PLOT_SUFFIXES)}")
        if not args.plot.resolve().parent.is_dir():
            raise BadInput(f"--plot {args.plot}: folder {args.plot.resolve().parent} "
                           "does not exist")


# ---------------------------------------------------------------- reading the store
def open_store(uri_arg: str | None):
    """(client, uri) for --tracking-uri / MLFLOW_TRACKING_URI / ./mlflow.db, without creating
    an empty store where none is (a sqlite URI to a missing file would make one)."""
    from gradexp.mlflow_store import experiments, open_client
    from gradexp.schema import ConfigError
    from gradexp.tracking_uri import redact_uri, resolve_uri, sqlite_file

    uri = resolve_uri(uri_arg, Path.cwd())
    local = sqlite_file(uri) or (None if "://" in uri else Path(uri))
    if local is not None and not local.exists():
        raise BadInput(f"no MLflow store at {redact_uri(uri)}: run gradexp in this folder first, "
                       "or pass --tracking-uri (or set MLFLOW_TRACKING_URI)")
    try:
        client = open_client(uri)
        experiments(client, max_results=1)  # a store it can read, or the reason why not
    except ConfigError as error:
        # the run's key named as compare's option, also in its advice (QA: "omit tracking.uri")
        raise BadInput(str(error).replace("tracking.uri=", "--tracking-uri ", 1)
                       .replace("omit tracking.uri", "omit --tracking-uri")) from None
    except Exception as error:  # not a database, an old schema, not an MLflow server, ...
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BadInput(f"{redact_uri(uri)}: not a readable MLflow store ({reason[:200]})") from None
    return client, uri


def mark_dead(client) -> None:
    """Mark KILLED, each in one line, the store's RUNNING runs whose process is gone or whose
    heartbeat is older than tracking.stale_after's default (10 minutes)."""
    from gradexp.console import note_line
    from gradexp.liveness import mark_dead_runs
    from gradexp.mlflow_store import experiments
    from gradexp.schema import TrackingConfig

    active = [experiment.experiment_id for experiment in experiments(client)]
    mark_dead_runs(client, active, TrackingConfig.stale_after, say=note_line)


def find_experiment(client, name: str):
    from gradexp.mlflow_store import experiment_named, experiments

    found = experiment_named(client, name)
    if found is None or found.lifecycle_stage != "active":
        names = sorted(e.name for e in experiments(client))
        raise BadInput(f"--experiment {name}: no such experiment; existing: "
                       f"{', '.join(names) or '(none)'}")
    return found


def newest_runs_experiment(client):
    """The experiment the newest run in the store belongs to (presets such as lr_search record
    into their own); experiment "gradexp" when the store has no run yet."""
    from gradexp.mlflow_store import experiment_named, experiments, find_runs

    active = {e.experiment_id: e for e in experiments(client)}
    newest = find_runs(client, list(active), order_by=NEWEST_FIRST, max_results=1) if active \
        else []
    if newest:
        return active[newest[0].info.experiment_id]
    found = experiment_named(client, DEFAULT_EXPERIMENT)
    if found is None or found.lifecycle_stage != "active":
        raise BadInput("the store has no runs yet: record one with python -m gradexp first")
    return found


def select(client, args: argparse.Namespace) -> Selection:
    """The runs asked for: one sweep's children, or the experiment's runs without sweep parents."""
    from gradexp.mlflow_store import find_runs

    experiment = None
    # a full id names its own experiment; a prefix is looked for in every experiment
    if args.experiment or not args.sweep or args.sweep == "latest":
        experiment = (find_experiment(client, args.experiment) if args.experiment
                      else newest_runs_experiment(client))
    if args.sweep:
        parent = find_sweep(client, args.sweep, experiment, args.experiment)
        runs = find_runs(client, [parent.info.experiment_id],
                         f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'",
                         order_by=NEWEST_FIRST, max_results=args.limit + 1)
        reused = reused_runs(client, parent, {run.info.run_id for run in runs})
        runs = [*runs, *reused]
        if not runs:
            raise BadInput(f"--sweep {args.sweep}: sweep {parent.info.run_id[:SHORT]} "
                           f"({sweep_label(parent)}) has no runs yet: none of its jobs has "
                           "opened one")
        swept = parent.data.tags.get(SWEPT_TAG)
        objective = parent.data.tags.get(OBJECTIVE_TAG)
        return Selection(f"sweep {parent.info.run_id[:SHORT]}: {sweep_label(parent)}",
                         parent.info.experiment_id, runs[:args.limit], in_sweep=True,
                         more=len(runs) > args.limit,
                         swept=None if swept is None else [k for k in swept.split(",") if k],
                         objective=None if objective is None else (
                             objective, parent.data.tags.get(DIRECTION_TAG, "")),
                         reused={run.info.run_id for run in reused})
    runs, token = [], None
    while len(runs) <= args.limit:  # sweep parents only hold the summary: skip them
        page = find_runs(client, [experiment.experiment_id], order_by=NEWEST_FIRST,
                         max_results=min(1000, 2 * args.limit), page_token=token)
        runs += [run for run in page if run.data.tags.get(SWEEP_TAG) != "true"]
        token = page.token
        if not token:
            break
    if not runs:  # no table to show: exit 2, as for a store without runs (QA: this was 0)
        raise BadInput(f"--experiment {experiment.name}: no runs yet in that experiment: record "
                       f"one with python -m gradexp tracking.experiment={experiment.name}"
                       if args.experiment else "the store has no runs yet: record one with "
                       "python -m gradexp first")
    latest = newest_sweeps(client, experiment.experiment_id, 1)
    named = f" --experiment {experiment.name}" if args.experiment else ""
    hint = (f"one sweep's runs only: gradexp compare{named} --sweep "
            f"{latest[0].info.run_id[:SHORT]}  (newest: {sweep_label(latest[0])})"
            if latest else None)
    which = "" if args.experiment else " (the newest run's; --experiment NAME for another)"
    return Selection(f"experiment {experiment.name}{which}", experiment.experiment_id,
                     runs[:args.limit], more=len(runs) > args.limit, hint=hint)


def reused_runs(client, parent, children: set[str]) -> list:
    """The earlier runs the sweep's jobs reused (sweep.skip_finished, sweep.resume_killed: the
    parent's gradexp.reused.<job> tags), which are children of another sweep: the sweep's own
    table lists them, so compare does too. A reused run since deleted is left out."""
    from mlflow.exceptions import MlflowException

    from gradexp.mlflow_store import read_run

    found = []
    for run_id in sorted({value for key, value in parent.data.tags.items()
                          if key.startswith(REUSED_TAG)} - children):
        try:
            found.append(read_run(client, run_id))
        except MlflowException:
            continue
    return found


def newest_sweeps(client, experiment_id: str, count: int) -> list:
    from gradexp.mlflow_store import find_runs

    return list(find_runs(client, [experiment_id], f"tags.`{SWEEP_TAG}` = 'true'",
                          order_by=NEWEST_FIRST, max_results=count))


def sweep_label(parent) -> str:
    """A sweep parent's name without the "sweep: " gradexp puts before its overrides."""
    return (parent.info.run_name or "").removeprefix("sweep: ")


def find_sweep(client, ref: str, experiment, experiment_arg: str | None):
    """The parent run `ref` names: a full run id, a prefix of one, or 'latest'."""
    from mlflow.exceptions import MlflowException

    from gradexp.mlflow_store import find_runs, read_run

    if len(ref) == 32:
        try:
            parent = read_run(client, ref)
        except MlflowException:
            parent = None
        if parent is not None and experiment_arg:
            experiment = find_experiment(client, experiment_arg)
            if parent.info.experiment_id != experiment.experiment_id:
                parent = None
        if parent is not None:
            if parent.data.tags.get(SWEEP_TAG) != "true" and not find_runs(
                    client, [parent.info.experiment_id], f"tags.`{PARENT_TAG}` = '{ref}'",
                    max_results=1):
                own = parent.data.tags.get(PARENT_TAG)
                raise BadInput(f"--sweep {ref}: that run is not a sweep (no child runs)"
                               + (f"; it is a job of sweep {own}" if own else ""))
            return parent
    if ref != "latest" and not experiment_arg:
        return sweep_in_store(client, ref)
    experiment = experiment or (find_experiment(client, experiment_arg) if experiment_arg
                                else newest_runs_experiment(client))
    sweeps = newest_sweeps(client, experiment.experiment_id, 1000)
    if ref == "latest" and sweeps:
        return sweeps[0]
    matches = [run for run in sweeps if run.info.run_id.startswith(ref.lower())]
    if len(ref) >= 4 and len(matches) == 1:
        return matches[0]
    known = ", ".join(f"{run.info.run_id[:SHORT]} ({sweep_label(run)})" for run in sweeps[:5])
    problem = "matches several sweeps, give more characters" if len(matches) > 1 else (
        "no sweep with that id")
    raise BadInput(f"--sweep {ref}: {problem} in experiment {experiment.name}; "
                   f"its sweeps, newest first: {known or '(none)'}")


def sweep_in_store(client, ref: str):
    """The sweep whose parent run id starts with `ref`, in any experiment of the store: the
    tables show 8 characters of an id, and `--sweep` took them from the newest run's experiment
    only (QA: after a run in another experiment, an id the sweep's own table had just shown was
    "no sweep with that id")."""
    from gradexp.mlflow_store import experiments, find_runs

    names = {e.experiment_id: e.name for e in experiments(client)}
    sweeps, token = [], None
    while names:  # sweep parents, newest first, a page at a time
        page = find_runs(client, list(names), f"tags.`{SWEEP_TAG}` = 'true'",
                         order_by=NEWEST_FIRST, page_token=token)
        sweeps += page
        token = page.token
        if not token:
            break
    matches = [run for run in sweeps if run.info.run_id.startswith(ref.lower())]
    if len(ref) >= 4 and len(matches) == 1:
        return matches[0]

    def named(run, width: int) -> str:
        return (f"{run.info.run_id[:width]} ({sweep_label(run)}) in experiment "
                f"{names[run.info.experiment_id]}")

    if matches:  # several, or one by fewer than 4 characters
        raise BadInput(f"--sweep {ref}: matches {len(matches)} sweep"
                       f"{'s' if len(matches) > 1 else ''}, give more characters"
                       f"{' (4 or more)' if len(ref) < 4 else ''}: "
                       + ", ".join(named(run, 12) for run in matches[:5]))
    raise BadInput(f"--sweep {ref}: no sweep with that id in any experiment; the store's "
                   "sweeps, newest first: "
                   f"{', '.join(named(run, SHORT) for run in sweeps[:5]) or '(none)'}")


# ---------------------------------------------------------------- what is shown
def verdict(run) -> str:
    return check_verdict(run) or "-"


def check_verdict(run) -> str | None:
    """A run's gradient check as the tables show it, the same here and in the sweep's:
    passed, failed, unchecked (a loss random at a point in every mode: no gradcheck/* metric,
    but not gradcheck=off either), or None (no check)."""
    passed = run.data.metrics.get("gradcheck/passed")
    if passed is None:
        return "unchecked" if run.data.tags.get(GRADCHECK_TAG) == "unchecked" else None
    return "passed" if passed == 1.0 else "failed"


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


CELL_STYLE = {"FINISHED": "green", "FAILED": "red", "KILLED": "yellow", "RUNNING": "cyan",
              "failed": "red"}
MAX_PARAM_WIDTH = 32  # longer param values are cut (…) when the table fits; folded otherwise
TEXT_COLUMNS = ("run id", "sweep", "gradcheck", "status")
STYLED = ("gradcheck", "status")
MAX_HELD_OUT = 4  # val/ and test/ metric columns shown beside the one ranked by
MIN_NAME_WIDTH = 12  # below this the run name column is left out (the params say the same)


def columns(selection: Selection, params: list[str], sort: str, desc: bool) -> dict[str, list]:
    """Header -> plain cell texts, left to right: id, name, [sweep], params, metrics, status."""
    runs = selection.runs
    arrow = " ↓" if desc else " ↑"
    table = {"run id": [run.info.run_id[:SHORT] for run in runs],
             "run": [run.info.run_name or "" for run in runs]}
    if not selection.in_sweep and any(PARENT_TAG in run.data.tags for run in runs):
        table["sweep"] = [run.data.tags.get(PARENT_TAG, "-")[:SHORT] for run in runs]
    table.update({key: [run.data.params.get(key, "-") for run in runs] for key in params})
    held_out = sorted({key for run in runs for key in run.data.metrics
                       if key.startswith(("val/", "test/"))} - {sort})
    for key in [sort, *held_out[:MAX_HELD_OUT], "final_loss"]:
        if key == sort or any(key in run.data.metrics for run in runs):
            table[key + (arrow if key == sort else "")] = [
                number(run.data.metrics.get(key)) for run in runs]
    table["gradcheck"] = [verdict(run) for run in runs]
    table["status"] = [status_text(run.info.status, reused=run.info.run_id in selection.reused,
                                   pruned_at=run.data.tags.get(PRUNED_TAG),
                                   drift=PACKED_DRIFT_TAG in run.data.tags) for run in runs]
    return table


def status_text(status: str, *, reused: bool = False, pruned_at: int | str | None = None,
                drift: bool = False) -> str:
    """A run's status cell, the same in the sweep's own table (gradexp.sweeps) and here:
    `FINISHED pruned@12` says its values are epoch 12's (sweep.pruner stopped it), which is
    why it ranks after the runs that trained to the end; `(reused)`, a run an earlier sweep
    made; `drift`, a packed run whose records may drift from a sequential one's."""
    text = f"{status} (reused)" if reused else status
    if pruned_at is not None:
        text = f"{text} pruned@{pruned_at}"
    return f"{text} drift" if drift else text


def build_table(title: str, cols: dict[str, list], params: list[str], width: int):
    """A rich table that fits `width`: the run name gives way first, then params fold."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    def natural(header: str) -> int:
        widest = max(len(text) for text in [header, *cols[header]])
        return 3 + (min(widest, max(MAX_PARAM_WIDTH, len(header))) if header in params else widest)

    others = 1 + sum(natural(header) for header in cols if header != "run")
    show_name = others + 3 + MIN_NAME_WIDTH <= width
    whole = others <= width
    # A title or header is override text (`sweep.best_per=[optimizer.name]`): rich would read
    # the brackets as markup and drop them.
    table = Table(title=escape(title), title_justify="left")
    for header in cols:
        if header == "run":
            if show_name:
                table.add_column(header, overflow="ellipsis", max_width=48)
        elif header in params:
            table.add_column(escape(header), style="bold cyan", no_wrap=whole,
                             overflow="ellipsis" if whole else "fold",
                             max_width=max(MAX_PARAM_WIDTH, len(header)) if whole else None)
        else:  # metrics (numbers) right-aligned
            table.add_column(escape(header), no_wrap=True, justify="left" if header in TEXT_COLUMNS
                             else "right")
    shown = [header for header in cols if header != "run" or show_name]
    for row in zip(*(cols[header] for header in shown)):
        table.add_row(*(Text(text, style=CELL_STYLE.get(text.split(" ")[0], "")
                             if header in STYLED else "") for header, text in zip(shown, row)))
    return table


def print_table(selection: Selection, sort: str, desc: bool, uri: str) -> None:
    """The table, what it leaves out, and where the same runs are in the MLflow UI."""
    from gradexp.console import console
    from gradexp.mlflow_store import runs_view_link
    from gradexp.tracking_uri import redact_uri

    out = console()
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = 200  # into a file or pipe: no terminal to fit, so keep rows whole
    params, implied, same = differing_params(selection.runs)
    cols = columns(selection, params, sort, desc)
    count = f"newest {len(selection.runs)} runs (--limit N for more)" if selection.more else (
        f"{len(selection.runs)} run{'s' if len(selection.runs) > 1 else ''}")
    out.print(build_table(f"{selection.title} · {count}", cols, params, out.width))
    groups = sorted({key.partition(".")[0] + ".name" for key in implied})
    out.print(f"not listed: {same} params the same in every run"
              + (f", {len(implied)} that follow from {' and '.join(groups)} "
                 f"({', '.join(implied[:3])}{', ...' if len(implied) > 3 else ''})"
                 if implied else "")
              + ("" if params else "; no param differs"), highlight=False, markup=False)
    if selection.swept is not None:
        from gradexp.replicates import derived_keys  # model.seed, ... from a swept master seed

        derived = derived_keys(run.data.params for run in selection.runs)
        others = [key for key in params if not is_swept(key, selection.swept)
                  and key not in derived]
        out.print(f"besides the swept keys ({', '.join(selection.swept) or 'none'}), "
                  + (f"these differ: {', '.join(others)}" if others else "no param differs"),
                  highlight=False, markup=False)
    note = different_data(selection.runs, SHORT)
    if note:
        out.print(note, highlight=False, markup=False)
    if selection.hint:
        out.print(selection.hint, highlight=False, markup=False)
    where = ("" if uri.startswith("http") else
             f"mlflow ui --backend-store-uri {redact_uri(uri)}, then ")
    out.print(f"in the MLflow UI: {where}{runs_view_link(uri, selection.experiment_id)}",
              highlight=False, markup=False)


def write_plot(client, selection: Selection, path: Path) -> None:
    """The per-epoch `loss` of the runs shown, overlaid (gradexp.plots.loss_curves)."""
    from gradexp.console import console, error_line
    from gradexp.history import run_curves
    from gradexp.plots import loss_curves, round_numbers, short_labels

    params = differing_params(selection.runs)[0]  # a line's label: what sets it apart
    names = short_labels([" ".join(f"{key.removesuffix('.name')}={run.data.params.get(key, '-')}"
                                   for key in params) or run.info.run_name
                          or run.info.run_id[:SHORT] for run in selection.runs])  # 0.06461
    curves: dict[str, tuple[Any, Any]] = {}
    for run, name in zip(selection.runs, names):
        # Every epoch, from the run's history.parquet (MLflow's own history may be thinned).
        found = run_curves(client, run, ["loss"])
        if "loss" in found:
            label = name if names.count(name) == 1 else f"{name} ({run.info.run_id[:SHORT]})"
            curves[label] = found["loss"]
    if not curves:
        error_line(f"--plot {path}: no run shown has a per-epoch loss; nothing written")
        return
    figure = loss_curves(curves, round_numbers(f"loss · {selection.title}"))
    figure.savefig(path)
    import matplotlib.pyplot as plt

    plt.close(figure)
    console().print(f"wrote the loss curves of {len(curves)} runs: {path}", highlight=False,
                    markup=False)


if __name__ == "__main__":
    sys.exit(main())
