"""Sweeps in MLflow: one parent run per multirun (`-m`), each job a child run under it.

A Hydra callback opens the parent run before the first job (so parallel jobs find the store, the
experiment and the parent already made) and leaves its id in the sweep folder, where each job reads
it. When the sweep ends it writes the summary (every child's overrides, sweep objective (e.g. the
final val/mse), final loss, gradient-check verdict and status; the best child by the objective
tagged, and the best of each `sweep.best_per` group listed; the loss and objective curves overlaid;
the params that differ beyond the swept ones; an Optuna sweep's best parameters and value) and
ends the parent. If the sweep stops before that, the command line ends the parent as it
stops (gradexp.app.main): KILLED for Ctrl-C or SIGTERM, FAILED for a failure; an exit hook is
the last resort (KILLED), so nothing stays RUNNING.

Any Hydra launcher or sweeper works underneath (basic, joblib, ray, submitit; basic, optuna): the
callback only needs the jobs to share the tracking store and the sweep folder.

`sweep.skip_finished=true`: a job whose resolved config already has a FINISHED child run in the
experiment is not run again; it returns that run's objective, and the new parent lists the run as
reused. So re-running a sweep that crashed resumes it where it stopped. A pruned run
(sweep.pruner) is reused only by a sweep with the same sweep.pruner settings: it did not train
to the end, which a sweep without that pruner asks of the job.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import shutil
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from gradexp.metrics import FALLBACK, objective
from gradexp.run_params import masked_dirname, masked_override
from gradexp.sweep_checks import (
    check_every_job,
    check_launcher,
    check_search,
    check_shared_objective,
    check_summary_keys,
    check_sweeper_direction,
    config_keys,
    plugin_name,
    swept_keys,
)
from gradexp.tag_keys import (
    BEST_GROUP_TAG,
    BEST_IN_SWEEP_TAG,
    BEST_RUN_ID_TAG,
    BEST_RUN_NAME_TAG,
    DIRECTION_TAG,
    LAUNCHER_TAG,
    OBJECTIVE_TAG,
    OPTUNA_BEST_TRIAL_TAG,
    OPTUNA_STORAGE_TAG,
    OPTUNA_STUDY_TAG,
    PACKED_DRIFT_TAG,
    PARENT_TAG,
    PRUNED_TAG,
    REASON_TAG,
    REUSED_TAG,
    SWEEP_TAG,
    SWEEPER_TAG,
    SWEPT_TAG,
)

SUMMARY_FILE = "sweep_summary.json"
_STOPPED_BY = ".gradexp_stopped_by"  # the line of the job that stopped the sweep
OPTUNA_RESULTS_FILE = "optimization_results.yaml"  # what hydra/sweeper=optuna writes at the end


_OPENED: list[MlflowSweepCallback] = []  # the sweep callbacks of this process that opened a parent


def parent_left_open() -> bool:
    """Whether a sweep of this process has a parent run not yet ended (an interrupt outside
    any job: its exit hook ends it KILLED)."""
    return any(callback.tracker is not None and not callback.ended for callback in _OPENED)


def end_open_parents(status: str, reason: str | None = None) -> None:
    """End the parent runs of this process's sweeps that are still open, `status` (KILLED,
    FAILED) with `reason`: the command line's way out (gradexp.app.main) says why."""
    for callback in _OPENED:
        callback.end_early(status, reason)


def note_sweep_stop(sweep_dir: str | Path, line: str) -> None:
    """Leave the line of the job that stops the sweep (sweep.continue_on_failure=false) for the
    parent's reason: a job run in another process (joblib, Ray) said it there. The first stays."""
    if not parent_run_file(sweep_dir).exists():
        return  # tracking off: no parent
    with contextlib.suppress(FileExistsError), open(Path(sweep_dir) / _STOPPED_BY, "x") as file:
        file.write(line)


def stopping_line() -> str | None:
    """The line a job left (note_sweep_stop) in the folder of a sweep whose parent is open."""
    for callback in _OPENED:
        note = callback.sweep_dir / _STOPPED_BY if callback.sweep_dir else None
        if not callback.ended and note is not None and note.is_file():
            return note.read_text()
    return None


class MlflowSweepCallback(Callback):
    """Hydra callback (hydra.callbacks.mlflow_sweep in conf/config.yaml)."""

    def __init__(self) -> None:
        self.tracker = None
        self.ended = False
        self.sweep_dir: Path | None = None
        self.uri = ""  # tracking.uri as a person gave it, for a line
        self.unreachable = False  # the MLflow server stopped answering: the parent stays open
        self.best_per: list[str] = []
        self.aggregate_over: list[str] = ["seed"]
        self.stale_after = 10.0  # tracking.stale_after: when a child on another host is dead

    def __getstate__(self) -> dict[str, Any]:
        """Launchers that run jobs in other processes (joblib, Ray, submitit) pickle Hydra's
        callbacks with every job. The parent run's tracker (a client, a writer thread) stays in
        this process; the jobs' copies have none and do nothing."""
        return {**self.__dict__, "tracker": None}

    # Hydra turns an exception raised in a callback into a warning and goes on, which would run
    # the jobs without their parent run and end the sweep "successfully". So both hooks stop the
    # sweep themselves (SystemExit passes Hydra's guard): one line for what a person can fix,
    # a traceback for a bug.
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from gradexp import app
        from gradexp.config_checks import check_ranges
        from gradexp.packed.replay_processes import start_early
        from gradexp.pruning import start_study

        with _stop_the_sweep_on_error():
            # What every job shares (the overrides that are not swept) is checked once, before
            # anything is recorded: a key gradexp does not read, a value out of its range, a
            # sweeper told to optimize the objective the wrong way.
            check_ranges(config, missing_ok=True)
            check_sweeper_direction(config)
            check_launcher(config)
            check_search(config)
            if plugin_name(config.hydra.sweeper) == "OptunaSweeper":
                # its search space, and each value it may choose as a basic sweep's every job
                from hydra_plugins.gradexp_optuna.checks import check_search_space

                check_search_space(config)
            # hydra.launcher.processes: the helpers start now, and the checks of every job and
            # the parent run's opening overlap their start (gradexp.packed.replay_processes)
            start_early(config, command_line=app.on_the_command_line)
            keys = check_every_job(config)  # a sweep that does not all compose opens no parent
            if not keys:
                check_shared_objective(config)  # Optuna: its jobs are chosen as they run
            check_summary_keys(config, keys or config_keys(config),
                               () if keys else swept_keys(config))
            if not tracking_off(config):
                self._open_parent(config)
            start_study(config)  # sweep.pruner: the Optuna study the jobs report to
        if plugin_name(config.hydra.launcher) == "JoblibLauncher":
            from gradexp.worker_signals import WorkersStoppedFirst

            # joblib kills its workers on an interrupt: their jobs are stopped first
            _STOPS_WORKERS.append(WorkersStoppedFirst(config.hydra.sweep.dir))
            _STOPS_WORKERS[-1].install()

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A single run (no sweep, nothing of this callback's): the folder Hydra makes next,
        hydra.run.dir, can be made, else one line and exit 2."""
        from gradexp.app import Failure, Stop
        from gradexp.endings import EXIT_BAD_INPUT
        from gradexp.launcher_checks import check_run_dir
        from gradexp.schema import ConfigError

        try:
            check_run_dir(config)
        except ConfigError as error:
            raise Stop(Failure(str(error), EXIT_BAD_INPUT, sweep_goes_on=False)) from None

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from gradexp.callbacks.recorder import wait_for_ends
        from gradexp.packed.replay_processes import close_early, reap_ended
        from gradexp.sweep_configs import forget

        forget()  # the job configs check_every_job kept for the launcher
        close_early()  # helpers no launch took
        _restore_signals()
        wait_for_ends()  # the last child's writes, ending in the background: stored first
        try:
            if self.tracker is not None:
                with _stop_the_sweep_on_error(self):
                    self._close_parent(config)
        finally:
            reap_ended()  # the helpers that exit by themselves, meanwhile

    def _open_parent(self, config: DictConfig) -> None:
        from gradexp.mlflow_store import MlflowTracker
        from gradexp.source_tags import git_commit
        from gradexp.tracking_uri import resolve_uri

        launch_dir = Path.cwd()
        overrides = " ".join(map(masked_override, config.hydra.overrides.task)) or "defaults"
        tags = {SWEEP_TAG: "true", "mlflow.source.git.commit": git_commit(launch_dir),
                SWEEPER_TAG: plugin_name(config.hydra.sweeper),
                LAUNCHER_TAG: plugin_name(config.hydra.launcher)}
        def hold(tracker: MlflowTracker) -> None:
            # With signals held from the parent's creation (MlflowTracker's on_open): an
            # interrupt right after it lands once the exit hook that ends it KILLED is in place.
            self.tracker = tracker
            atexit.register(self._end_if_interrupted)
            _OPENED.append(self)

        MlflowTracker(resolve_uri(config.tracking.uri, launch_dir), config.tracking.experiment,
                      f"sweep: {overrides}", tags=tags, on_open=hold)
        metric, direction = objective(config)
        self.tracker.set_tags({OBJECTIVE_TAG: metric, DIRECTION_TAG: direction,
                               SWEPT_TAG: ",".join(swept_keys(config))})
        self.tracker.log_params({"sweep.overrides": overrides})
        self.best_per = list(config.sweep.best_per)
        self.aggregate_over = list(config.sweep.aggregate_over)
        self.stale_after = float(config.tracking.stale_after)
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        self.sweep_dir, self.uri = sweep_dir.resolve(), str(config.tracking.uri)
        # An earlier sweep into this folder (a fixed hydra.sweep.dir, rerun with
        # sweep.skip_finished) left its failed jobs' notes: they are not this sweep's.
        shutil.rmtree(failed_jobs_dir(sweep_dir), ignore_errors=True)
        (sweep_dir / _STOPPED_BY).unlink(missing_ok=True)
        parent_run_file(sweep_dir).write_text(self.tracker.run_id)
        swept_keys_file(sweep_dir).write_text("\n".join(swept_keys(config)))  # the children's names

    def _close_parent(self, config: DictConfig) -> None:
        from gradexp.interrupts import interrupts_deferred

        if plugin_name(config.hydra.sweeper) == "OptunaSweeper":
            record_optimization(self.tracker, Path(config.hydra.sweep.dir) / OPTUNA_RESULTS_FILE)
        from gradexp.console import error_line

        # The jobs that failed before their MLflow run opened are in no child; they left a line.
        not_started = failed_jobs(Path(config.hydra.sweep.dir))
        summary = summarize_sweep(self.tracker, self.best_per, self.aggregate_over, not_started)
        failed = [row for row in summary.rows if row["status"] != "FINISHED"]
        line = (f"{len(failed)} of {len(summary.rows)} jobs failed (each said why above): the "
                f"sweep's parent run {self.tracker.run_id} ended FAILED")
        # The parent's reason is read in MLflow, where no line is "above": each child holds its.
        reason = (f"{len(failed)} of {len(summary.rows)} jobs failed (each child run's "
                  f"{REASON_TAG} tag says why; a job that failed before its run opened, "
                  "sweep_summary.json)")
        # Ended and marked so at once: an interrupt before leaves it for the exit hook to end
        # KILLED; one after, it is ended (the hook would otherwise turn FINISHED into KILLED).
        with interrupts_deferred():
            if failed:
                self.tracker.set_tags({REASON_TAG: reason})
            self.tracker.end("FAILED" if failed else "FINISHED")
            self.ended = True
        from gradexp.sweep_table import print_sweep

        print_sweep(summary, self.tracker)
        if failed:
            error_line(line)
            sys.exit(1)  # every job ran; the sweep as a whole did not succeed

    def _end_if_interrupted(self) -> None:
        self.end_early("KILLED", "the process ended before the sweep's end")

    def end_early(self, status: str, reason: str | None = None) -> None:
        """End the parent, if still open, before the sweep's end: KILLED (interrupted), or
        FAILED (a job stopped the sweep: sweep.continue_on_failure=false; an error)."""
        from gradexp.interrupts import interrupts_deferred

        _restore_signals()
        if self.tracker is None or self.ended or self.unreachable:
            return
        with _stop_the_sweep_on_error(self, exit_code=None):  # a server gone: one line (QA)
            self._end_dead_children()
            with interrupts_deferred():  # marked and ended at once, as _close_parent does
                self.ended = True
                if reason:
                    self.tracker.set_tags({REASON_TAG: reason[:5000]})
                self.tracker.end(status)

    def server_gone(self, error: BaseException) -> str | None:
        """The one line for an MLflow server that stopped answering before the parent ended
        (None for another error): it stays RUNNING, and is not asked again (QA: ~200 lines of
        chained tracebacks, twice)."""
        from gradexp.app import stopped_answering
        from gradexp.tracking_uri import redact_uri

        why = stopped_answering(error)
        if why is None or self.tracker is None:
            return None
        self.unreachable = True
        return (f"tracking.uri={redact_uri(self.uri)}: the MLflow server stopped answering "
                f"before the sweep's end ({why}); the sweep's parent run {self.tracker.run_id} "
                "stays RUNNING until the server answers again, when the next run or `gradexp "
                "compare` on the store marks it KILLED; the jobs that ended keep their runs")

    def _end_dead_children(self) -> None:
        """The last resort for a sweep stopped early: a child still RUNNING whose process is
        gone (a worker process a launcher killed, e.g. joblib's on a failure that stops the
        sweep) ends KILLED now, not when a later run finds it. Said nowhere but its reason tag:
        the line of what stopped the sweep follows."""
        from gradexp.liveness import mark_dead_children

        try:
            mark_dead_children(self.tracker.client, self.tracker.experiment_id,
                               self.tracker.run_id, self.stale_after)
        except Exception:  # noqa: BLE001 - a store that fails here: the next run marks them
            pass


_STOPS_WORKERS: list = []  # gradexp.worker_signals.WorkersStoppedFirst of this process's sweeps


def _restore_signals() -> None:
    """Ctrl-C and SIGTERM as they were before a joblib sweep took them."""
    while _STOPS_WORKERS:
        _STOPS_WORKERS.pop().restore()


@contextmanager
def _stop_the_sweep_on_error(sweep: MlflowSweepCallback | None = None,
                             exit_code: int | None = 1) -> Iterator[None]:
    """A ConfigError's line, an MLflow server gone (the `sweep`'s parent then stays open) in
    one line, else a traceback; then exit with `exit_code` (None: already on the way out)."""
    from gradexp.console import error_line
    from gradexp.endings import EXIT_BAD_INPUT
    from gradexp.schema import ConfigError

    try:
        yield
    except ConfigError as error:  # e.g. no MLflow server answers at tracking.uri
        error_line(str(error))
        sys.exit(EXIT_BAD_INPUT)
    except Exception as error:
        line = sweep.server_gone(error) if sweep is not None else None
        if line is None and exit_code is None:
            raise
        if line is None:
            traceback.print_exc()
        else:
            error_line(line)
        if exit_code is not None:
            sys.exit(exit_code)


def tracking_off(config: DictConfig) -> bool:
    return getattr(config.tracking.name, "value", config.tracking.name) == "none"


def parent_run_file(sweep_dir: str | Path) -> Path:
    """Where a sweep's MLflow parent run id is left for its jobs (they may be other processes)."""
    return Path(sweep_dir) / ".mlflow_parent_run_id"


def swept_keys_file(sweep_dir: str | Path) -> Path:
    """Where the parent leaves the swept keys, one a line, for its jobs to name their runs."""
    return Path(sweep_dir) / ".gradexp_swept_keys"


def failed_jobs_dir(sweep_dir: str | Path) -> Path:
    """Where a job that failed before its MLflow run opened (a missing data file, a loader
    that raised) leaves its name and line for the parent's summary: it has no child run."""
    return Path(sweep_dir) / ".gradexp_failed_jobs"


def note_failed_job(sweep_dir: str | Path, job_num: int, run_name: str, reason: str) -> None:
    """Leave a job's failure for the parent (failed_jobs); nothing without a parent run."""
    import json

    if not parent_run_file(sweep_dir).exists():
        return  # tracking off: no parent, no summary
    folder = failed_jobs_dir(sweep_dir)
    folder.mkdir(exist_ok=True)
    (folder / f"{job_num}.json").write_text(json.dumps({"run_name": run_name, "reason": reason}))


def failed_jobs(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """The summary rows (FAILED, no run id) of the jobs note_failed_job left, by job number."""
    import json

    files = sorted(failed_jobs_dir(sweep_dir).glob("*.json"), key=lambda f: int(f.stem))
    return [{"run_id": None, "status": "FAILED", "objective": math.nan, "final_loss": math.nan,
             "gradcheck": None, "reused": False, "pruned_at_epoch": None, "packed_drift": None,
             **json.loads(file.read_text())} for file in files]


def child_run_name(hydra_cfg: DictConfig, sweep_dir: Path) -> str | None:
    """A sweep job's run name: its overrides of the swept keys only, in Hydra's override_dirname
    form (`optimizer=adam,optimizer.learning_rate=0.1`), so the MLflow Run Name column tells the
    children apart instead of repeating what every job shares. None when the parent left no keys
    (tracking off, or nothing swept): the caller keeps override_dirname."""
    keys_file = swept_keys_file(sweep_dir)
    swept = set(keys_file.read_text().split()) if keys_file.exists() else set()
    return masked_dirname(hydra_cfg, swept) or None if swept else None


# ---------------------------------------------------------------- the sweep's end
@dataclass
class SweepSummary:
    """Every child's row, best first by `metric`, and the best of each `best_per` group."""

    rows: list[dict[str, Any]]
    metric: str  # what the rows are ranked by: the objective, or final_loss when no run has it
    direction: str
    fell_back: bool = False  # no run has the objective; ranked by the final loss instead
    # Each best_per key's values, each at its best: a row, or with replicates its best Group.
    best_per: dict[str, dict[str, Any]] = field(default_factory=dict)
    also_differ: list[str] = field(default_factory=list)  # params that differ beyond the swept
    groups: list = field(default_factory=list)  # gradexp.replicates.Group, best mean first
    overlap: str | None = None  # the best group's interval overlaps the next one's
    # Said below the groups: duplicate jobs left out, replicates that gave one value
    group_notes: list[str] = field(default_factory=list)


def summarize_sweep(tracker, best_per: list[str] | None = None,
                    aggregate_over: list[str] | None = None,
                    not_started: list[dict[str, Any]] | None = None) -> SweepSummary:
    """Record the children's table, tag the best by the sweep objective, overlay their loss and
    objective curves; return the summary.

    The table holds this sweep's children, the FINISHED runs its jobs reused
    (sweep.skip_finished), those marked `reused`, and `not_started`: the rows (failed_jobs) of
    jobs that failed before their run opened, FAILED with their reason and no run id.
    """
    from gradexp import replicates
    from gradexp.mlflow_store import retry_locked, tag_run
    from gradexp.param_differences import differing_params, is_swept
    from gradexp.sweep_plots import overlay_figures

    client, parent_id = tracker.client, tracker.run_id
    children = retry_locked(lambda: client.search_runs(
        [tracker.experiment_id], filter_string=f"tags.{PARENT_TAG} = '{parent_id}'",
        max_results=10_000))
    parent_tags = retry_locked(lambda: client.get_run(parent_id)).data.tags
    reused_ids = sorted({value for key, value in parent_tags.items() if key.startswith(REUSED_TAG)}
                        - {child.info.run_id for child in children})
    reused = [retry_locked(lambda run_id=run_id: client.get_run(run_id)) for run_id in reused_ids]
    # Oldest first, so that of runs that tie the first started ranks first, as Optuna's best
    # trial is the first of the best (the store lists the newest first)
    runs = sorted([*children, *reused], key=lambda run: run.info.start_time or 0)
    metric = parent_tags.get(OBJECTIVE_TAG, FALLBACK)
    direction = parent_tags.get(DIRECTION_TAG, "minimize")
    rows = [_row(run, metric, reused=run in reused) for run in runs] + list(not_started or [])
    # Only runs that trained can lack the objective for want of held-out data; when every job
    # failed, there is nothing to fall back on, and the note would blame the wrong thing.
    fell_back = (metric != FALLBACK and any(r["status"] == "FINISHED" for r in rows)
                 and not any(math.isfinite(r["objective"]) for r in rows))
    if fell_back:
        metric, direction = FALLBACK, "minimize"
        for row in rows:
            row["objective"] = row["final_loss"]
    rank = _ranking(direction)
    # A pruned job's objective is an early epoch's: it ranks after the jobs that trained to the
    # end, and is never the best (as Optuna's best trial is a completed one).
    rows.sort(key=lambda row: (row["status"] != "FINISHED", row["pruned_at_epoch"] is not None,
                               rank(row["objective"])))
    summary = SweepSummary(rows, metric, direction, fell_back)
    swept = [key for key in parent_tags.get(SWEPT_TAG, "").split(",") if key]
    differ, _, _ = differing_params(runs) if len(runs) > 1 else ([], [], 0)
    params = {run.info.run_id: run.data.params for run in runs}
    # model.seed, ... that the master seed set in every run: no difference of their own, and a
    # swept one had its values replaced, so it groups nothing
    derived = replicates.derived_keys(params.values())
    summary.also_differ = [key for key in differ if not is_swept(key, swept) and key not in derived]
    grouped = [key for key in swept if key not in derived]
    record = {"parent_run_id": parent_id, "ranked_by": metric, "direction": direction,
              "children": rows}
    over = ["seed"] if aggregate_over is None else list(aggregate_over)
    if replicates.aggregates(grouped, over):
        # Every job with a run is in its group: a pruned one (its objective is an early
        # epoch's) and a failed one are counted there, not averaged, so a configuration whose
        # every replicate failed still shows, n=0. A job that failed before its run opened has
        # no params to place it by.
        # A job run twice (seed=0,0,1) is one replicate: counted twice it narrowed the
        # interval for nothing, and gradexp compare --aggregate said otherwise
        distinct, duplicates = replicates.distinct_runs(runs)
        kept = {run.info.run_id for run in distinct}
        opened = [row for row in rows if row["run_id"] is not None and row["run_id"] in kept]
        summary.groups = replicates.group_runs(
            [(row["run_id"], params[row["run_id"]], row["objective"]) for row in opened],
            grouped, over, direction,
            pruned={row["run_id"] for row in opened if row["pruned_at_epoch"] is not None},
            failed={row["run_id"] for row in opened if row["status"] != "FINISHED"})
        summary.overlap = replicates.overlap_note(summary.groups)
        losses = {row["run_id"]: row["final_loss"] for row in opened}
        summary.group_notes = [note for note in (
            replicates.duplicates_note(duplicates),
            replicates.identical_note(summary.groups, over, losses)) if note]
        record["groups"] = [group.record() for group in summary.groups]
        record["groups_note"] = summary.overlap
        record["groups_notes"] = summary.group_notes
    else:  # aggregate_over set to keys not swept: said, as no table of replicates follows
        summary.group_notes = [note for note in [replicates.unswept_note(grouped, over)]
                               if note]
    summary.group_notes += [note for note in [replicates.inert_keys_note(  # ones that do nothing
        [(params[row["run_id"]], (row["objective"], row["final_loss"])) for row in rows if
         row["status"] == "FINISHED" and row["run_id"] and row["pruned_at_epoch"] is None],
        grouped, over), replicates.derived_note(swept, derived)] if note]
    tracker.log_dict(record, SUMMARY_FILE)
    finished = [row for row in rows if row["status"] == "FINISHED"
                and math.isfinite(row["objective"]) and row["pruned_at_epoch"] is None]
    # With replicates, the best run is the best replicate of the best configuration (by its
    # mean), never a luckier seed of a worse one: gradexp.best_run_id agrees with best_group.
    if summary.groups and summary.groups[0].n:
        best_group = set(summary.groups[0].run_ids)
        finished = [row for row in finished if row["run_id"] in best_group] or finished
    if finished:
        best = finished[0]
        if not best["reused"]:  # a reused run belongs to an earlier sweep: leave its tags alone
            tag_run(client, best["run_id"], {BEST_IN_SWEEP_TAG: "true"})
        tracker.set_tags({BEST_RUN_ID_TAG: best["run_id"],
                          BEST_RUN_NAME_TAG: best["run_name"]})
        tracker.log_metric("best_final_loss", best["final_loss"], 0)
        tracker.log_metric(f"best/{metric}", best["objective"], 0)
    if summary.groups and summary.groups[0].n:
        tracker.set_tags({BEST_GROUP_TAG: summary.groups[0].label})
        tracker.log_figure(replicates.errorbar_figure(summary.groups, metric),
                           replicates.ERRORBAR_PLOT)
    for key in best_per or []:
        best_of: dict[str, Any] = {}
        # With replicates, a value's best is its configuration with the best mean (a Group),
        # not its luckiest seed; else its best run. Both lists are best first.
        for best in ([group for group in summary.groups if group.n] if summary.groups
                     else finished):
            run_id = best.run_ids[0] if summary.groups else best["run_id"]
            best_of.setdefault(params[run_id].get(key, "-"), best)
        summary.best_per[key] = best_of
    for path, figure in overlay_figures(tracker.client, rows, metric, summary.groups,
                                        {run.info.run_id: run for run in runs}).items():
        tracker.log_figure(figure, path)
    tracker.log_metric("children", len(rows), 0)
    tracker.log_metric("children_failed", sum(r["status"] != "FINISHED" for r in rows), 0)
    tracker.log_metric("children_reused", sum(r["reused"] for r in rows), 0)
    if any(row["pruned_at_epoch"] is not None for row in rows):
        tracker.log_metric("children_pruned",
                           sum(row["pruned_at_epoch"] is not None for row in rows), 0)
    return summary


def _row(run, metric: str, *, reused: bool) -> dict[str, Any]:
    from gradexp.compare import check_verdict

    metrics = run.data.metrics
    return {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "status": run.info.status,
        "objective": metrics.get(metric, math.nan),
        "final_loss": metrics.get("final_loss", math.nan),
        "gradcheck": check_verdict(run),
        "reason": run.data.tags.get(REASON_TAG),
        "reused": reused,
        "pruned_at_epoch": _pruned_at(run),
        "packed_drift": run.data.tags.get(PACKED_DRIFT_TAG),  # why its records may drift
    }


def _pruned_at(run) -> int | None:
    """The last epoch a job pruned by sweep.pruner trained (gradexp.pruning); None otherwise."""

    value = run.data.tags.get(PRUNED_TAG)
    return None if value is None else int(value)


def _ranking(direction: str):
    """A sort key putting the best value first and NaN (no value, diverged) last."""
    sign = -1.0 if direction == "maximize" else 1.0
    return lambda value: sign * value if math.isfinite(value) else math.inf


def record_optimization(tracker, results_file: Path) -> None:
    """An Optuna sweep's outcome on the parent: params best.<key>, metric best_value, the file."""
    if not results_file.is_file():
        return  # the sweeper stopped before its end (then Hydra does not reach here either)
    results = OmegaConf.to_container(OmegaConf.load(results_file))
    if "best_params" in results:  # the best trial of the study (this sweep's or earlier ones)
        tracker.log_params({f"best.{key}": value for key, value in results["best_params"].items()})
        tracker.log_metric("best_value", float(results["best_value"]), 0)
        tracker.set_tags({OPTUNA_BEST_TRIAL_TAG: results["best_trial"]})
    if "study_name" in results:
        tracker.set_tags({OPTUNA_STUDY_TAG: results["study_name"],
                          OPTUNA_STORAGE_TAG: results["storage"]})
    tracker.log_text(results_file.read_text(), OPTUNA_RESULTS_FILE)


def tracker_objective(tracker) -> str:
    from gradexp.mlflow_store import retry_locked

    tags = retry_locked(lambda: tracker.client.get_run(tracker.run_id)).data.tags
    return tags.get(OBJECTIVE_TAG, FALLBACK)
