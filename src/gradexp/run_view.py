"""What a run's callbacks see and hand on, and what a run returns: below both the loop
(gradexp.loop) and the callbacks (gradexp.callbacks), so neither imports the other's module.

    EVENTS      the events the loop emits, in the order a run meets them
    RunView     the run as a callback sees it: the config, the data, the parts (model, trainer),
                the epoch, the stop flag, what was measured so far, and `records`: the metrics,
                tags, artifacts and model handed to the recorder (the only MLflow writer)
    RunResult   what run_experiment returns

Nothing here imports TensorFlow or MLflow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

# on_run_begin(run)                    the parts are not built yet; the recorder opens the run
# on_train_begin(run)                  the parts are built; before the first epoch still to run
# on_stretch_end(run, stretch, logs)   a compiled stretch of epochs ended (gradexp.trainer's
#                                      EpochMetrics); `logs` (a dict) is recorded at run.epoch
# on_check(run, check)                 a gradient check ran (gradexp.run_checks's result)
# on_train_end(run, status)            once, however the run ended: FINISHED, FAILED, KILLED
EVENTS = ("on_run_begin", "on_train_begin", "on_stretch_end", "on_check", "on_train_end")


@dataclass
class RunResult:
    final_loss: float
    epochs: int
    run_id: str | None = None
    experiment_id: str | None = None
    tracking_uri: str | None = None
    gradcheck_passed: bool | None = None
    scalars: dict[str, float] = field(default_factory=dict)  # W, b of a one-feature line
    history: dict[str, np.ndarray] = field(default_factory=dict)  # per-epoch metrics
    metrics: dict[str, float] = field(default_factory=dict)  # last train/, val/, test/ values
    objective: str = "final_loss"  # the metric a sweep ranks this run by (sweep.objective)
    direction: str = "minimize"

    @property
    def objective_value(self) -> float | None:
        """The objective's final value; None when the run has no such metric."""
        if self.objective == "final_loss":
            return self.final_loss
        return self.metrics.get(self.objective)


@dataclass
class Records:
    """What callbacks hand the recorder to write, in the order they handed it; the recorder
    writes and empties it at the end of every event (and when a checkpoint asks: store_now)."""

    metrics: list[tuple[str, float, int]] = field(default_factory=list)  # key, value, step
    series: list[tuple[np.ndarray, dict[str, np.ndarray]]] = field(default_factory=list)
    tags: dict[str, Any] = field(default_factory=dict)
    # (kind, what, artifact path): kind is dict, text, figure, file, tempfile or folder
    artifacts: list[tuple[str, Any, str | None]] = field(default_factory=list)
    # (the served model: gradexp.export.Export, step, what to do if it cannot be written)
    models: list[tuple[Any, int, Callable[[BaseException], None]]] = field(default_factory=list)


@dataclass
class RunView:
    """One run as its callbacks see it. The loop fills in the parts; callbacks read them, set
    `stop_training`, add what they measured, and hand what is to be recorded to `records`
    through log_metric / set_tags / log_artifact / log_model."""

    cfg: DictConfig
    data: Any  # gradexp.data.Data: the splits, the task, the sizes
    objective: str  # the metric a sweep ranks by (sweep.objective), e.g. val/mse
    direction: str  # minimize | maximize
    quiet: bool = False  # no console output besides errors
    launch_dir: Path = field(default_factory=Path.cwd)
    hydra_dir: Path | None = None  # the job's Hydra output folder (its .hydra/ is recorded)
    resume: Any = None  # gradexp.resume.Resume: continuing a killed run from its checkpoint
    run_name: str = "defaults"
    parent_run_id: str | None = None  # the sweep's parent run
    restart_of: str | None = None  # a run killed before its first checkpoint, started again
    data_record: Any = None  # gradexp.data.DataRecord: rows per split, standardized, labels
    # The parts, built by the loop before on_train_begin
    model: Any = None  # gradexp.models' model: .network (a keras.Model), .scalars()
    trainer: Any = None  # gradexp.trainer.Trainer
    evaluator: Any = None  # gradexp.evaluation.Evaluator: held-out metrics of whole splits
    # Where the run is recorded: set by the recorder when it opens the run (None: tracking=none)
    run_id: str | None = None
    experiment_id: str | None = None
    tracking_uri: str | None = None
    # What the run has measured so far
    history: dict[str, list[np.ndarray]] = field(default_factory=dict)  # per-epoch, by stretch
    first_epochs: list[int] = field(default_factory=list)  # each kept stretch's first epoch
    evaluations: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # (step, value)
    checks: list = field(default_factory=list)  # gradient checks (gradexp.run_checks)
    earlier_checks: int = 0  # a resumed run's checks before its checkpoint
    stop_training: bool = False  # set by a callback (early stopping): training ends cleanly
    untrained_said: bool = False  # "no gradient reaches ..." printed (say_untrained)
    restored_epoch: int | None = None  # early stopping put back this epoch's weights
    last_weights: list | None = None  # ...and these, the last epoch's, were set aside
    # Callbacks' own state a checkpoint keeps and a resumed run gets back (name -> arrays, as
    # early stopping's best epoch, value and weights): a resumed run goes on as if never stopped
    resumable: dict[str, dict[str, Any]] = field(default_factory=dict)
    resumed: dict[str, dict[str, Any]] = field(default_factory=dict)
    final_loss: float | None = None  # the training loss after the last step (FINISHED)
    scalars: dict[str, float] = field(default_factory=dict)  # final W, b of a one-feature line
    # How it ended, for on_train_end: the reason and traceback of a failure
    status_reason: str | None = None
    traceback: str | None = None
    # The status the recorder ended the run with, or handed to its end in the background
    ended_as: str | None = None
    records: Records = field(default_factory=Records)
    # Set by the recorder: write everything in `records` now and wait for it (a checkpoint
    # calls it before saving, so a resumed run has no gap in its metrics).
    store_now: Callable[[], None] = lambda: None

    @property
    def epoch(self) -> int:
        """Epochs done so far."""
        return self.trainer.epoch if self.trainer is not None else 0

    def say_untrained(self, names: Sequence[str]) -> None:
        """Warn once that variables get no gradient from the loss, whichever finds them first:
        the first gradient check or the traced training step (gradcheck=off too)."""
        if not names or self.untrained_said:
            return
        self.untrained_said = True
        if not self.quiet:
            from gradexp import console

            console.console().print(f"[yellow]warning:[/yellow] no gradient reaches "
                                    f"{', '.join(names)} (not connected to the loss, or a "
                                    "custom gradient returns None for it): it does not train",
                                    highlight=False)

    # ------------------------------------------------------------ handed to the recorder
    def log_metric(self, key: str, value: float, step: int | None = None) -> None:
        self.records.metrics.append((key, float(value), self.epoch if step is None else step))

    def log_series(self, epochs: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        """Per-epoch values, one series a key, at `epochs`."""
        self.records.series.append((epochs, dict(values)))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Tags of the run; a None value is not written."""
        self.records.tags.update(tags)

    def log_artifact(self, kind: str, what: Any, path: str | None = None) -> None:
        """kind: dict (json), text, figure (matplotlib), file (a local path, into folder
        `path`), tempfile (the same, in a folder of its own that is deleted once written) or
        folder (a local folder, as `path`)."""
        self.records.artifacts.append((kind, what, path))

    def log_model(self, served: Any, step: int,
                  on_error: Callable[[BaseException], None]) -> None:
        """The served model (gradexp.export.Export) as the run's LoggedModel `model`."""
        self.records.models.append((served, step, on_error))

    # ------------------------------------------------------------ what the run measured
    def record_evaluation(self, step: int, metrics: Mapping[str, float],
                          log: bool = True) -> None:
        """Keep held-out metrics for the history and the callbacks; hand them to the recorder
        unless `log` is False (thinned out)."""
        for key, value in metrics.items():
            self.evaluations.setdefault(key, []).append((step, value))
            if log:
                self.log_metric(key, value, step)

    def latest_evaluation(self) -> dict[str, float]:
        return {key: values[-1][1] for key, values in self.evaluations.items()}

    def merged_history(self) -> dict[str, np.ndarray]:
        return {key: np.concatenate(parts) for key, parts in self.history.items()}

    def result(self) -> RunResult:
        return RunResult(self.final_loss, self.epoch, self.run_id, self.experiment_id,
                         self.tracking_uri, self.checks[-1].verdict if self.checks else None,
                         self.scalars, self.merged_history(), self.latest_evaluation(),
                         self.objective, self.direction)
