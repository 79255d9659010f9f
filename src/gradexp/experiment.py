"""One experiment, start to end: check the config, build, train, record.

    config ─> range check ─> data ─> tracker (fails fast) ─> TensorFlow: device, model, loss,
    optimizer ─> Trainer stretches ─> callbacks (metrics, evaluation, early stopping, progress,
    gradient checks, checkpoints) ─> final metrics, plots, the model ─> RunResult

`run_experiment` takes a composed config and plain values, so tests call it without a process.
Every way a run can end leaves its MLflow run terminated: FINISHED, FAILED (with why) or KILLED.
`trainer.resume=RUN_ID` continues a run from its last checkpoint, as the same MLflow run.
"""

from __future__ import annotations

import signal
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from gradexp import console
from gradexp.callbacks.tracking import MetricLogger
from gradexp.console import note_line
from gradexp.data import data_record, load_data
from gradexp.devices import check_device
from gradexp.endings import Diverged, GradientCheckFailed, RunFailed, Terminated
from gradexp.objective import check_objective, metric_specs, objective
from gradexp.resume import Resume, prepare_resume
from gradexp.schema import ConfigError
from gradexp.setup_checks import check_against_data, check_config
from gradexp.targets import check_modules_exist, importable, label_by_target, locate
from gradexp.tracking import (
    MlflowTracker,
    NullTracker,
    check_server,
    check_store_folder,
    config_params,
    resolve_uri,
    source_tags,
)
from gradexp.validation import check_ranges

__all__ = ["Diverged", "GradientCheckFailed", "RunFailed", "RunResult", "Terminated",
           "run_experiment"]


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


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into an exception so the run can end KILLED and keep what it has."""
    def handler(signum, frame):
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (some launchers): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def open_tracker(cfg: DictConfig, run_name: str, launch_dir: Path,
                 parent_run_id: str | None, resume: Resume | None = None,
                 tags: dict | None = None) -> NullTracker:
    """The MLflow run to record into (tracking=mlflow), or a tracker that records nothing."""
    if getattr(cfg.tracking.name, "value", cfg.tracking.name) == "none":
        return NullTracker()
    uri = resolve_uri(cfg.tracking.uri, launch_dir)
    if resume is not None:
        return MlflowTracker.reopen(uri, resume.run_id)
    return MlflowTracker(uri, cfg.tracking.experiment, run_name, parent_run_id=parent_run_id,
                         tags={**source_tags(launch_dir), **(tags or {})})


def mark_dead_runs(cfg: DictConfig, launch_dir: Path) -> None:
    """Mark KILLED, each in one line, the experiment's RUNNING runs whose process is gone or
    whose heartbeat is older than tracking.stale_after: one search of the store."""
    from gradexp.liveness import mark_dead_in_experiment

    if getattr(cfg.tracking.name, "value", cfg.tracking.name) == "none":
        return
    mark_dead_in_experiment(resolve_uri(cfg.tracking.uri, launch_dir), cfg.tracking.experiment,
                            cfg.tracking.stale_after, say=note_line)


def run_experiment(cfg: DictConfig, *, run_name: str = "defaults", launch_dir: Path | None = None,
                   hydra_dir: Path | None = None, parent_run_id: str | None = None,
                   quiet: bool = False, show_config: bool = True) -> RunResult:
    """Train and check one configuration; record it; return the final loss and where it is."""
    launch_dir = launch_dir or Path.cwd()
    check_ranges(cfg)  # before anything slow: a wrong value answers in about a second
    check_modules_exist(cfg, launch_dir)  # a typo in a module's name too
    check_config(cfg)  # a _target_ its option does not read (gradexp.setup_checks)
    check_store(cfg, launch_dir)  # and a store that cannot be reached, before TensorFlow loads
    resume = prepare_resume(cfg, launch_dir) if cfg.trainer.resume else None
    restart_of = None
    if resume is not None:
        cfg = resume.cfg  # the run's recorded config, trainer.epochs perhaps raised
        if resume.restart:  # killed before its first checkpoint: a new run from epoch 0
            restart_of, run_name, resume = resume.run_id, resume.run_name or run_name, None
    label_by_target(cfg)  # loss.name=mylosses.pseudo_huber, not the name of the option it replaced
    data = load_data(cfg.data, launch_dir)
    recorded = data_record(data, cfg.trainer.batch_size)  # rows, standardized, batches, labels
    check_objective(cfg, data.task)
    check_user_code(cfg, launch_dir, data)  # a bad _target_ ends here, before any MLflow run
    params = config_params(cfg)
    if show_config and not quiet:
        console.print_config(cfg, params)
    check_device(getattr(cfg.device.name, "value", cfg.device.name), cfg.device.cpu_replicas)
    mark_dead_runs(cfg, launch_dir)  # RUNNING runs whose process died (gradexp.liveness)
    tracker = open_tracker(cfg, run_name, launch_dir, parent_run_id, resume,
                           {"gradexp.restart_of": restart_of})
    for note in [] if quiet else recorded.notes:
        note_line(note)
    if restart_of is not None:
        note_line(f"run {restart_of} was killed before its first checkpoint: restarting it "
                  f"from epoch 0 as run {tracker.run_id} (the killed run keeps its points)")
    run = _Run(cfg, data, tracker, hydra_dir, quiet, launch_dir, resume)
    with sigterm_as_interrupt():
        try:
            if resume is None:
                tracker.log_params(params)
                tracker.log_text(_config_yaml(cfg), "config.yaml")  # first: a resume reads it
                tracker.log_datasets(data.name, data.splits(),
                                     str(cfg.data.get("path") or cfg.data["_target_"]))
                recorded.log(tracker)
            result = run.execute()
        except KeyboardInterrupt:
            run.save_what_we_have("KILLED", "interrupted (Ctrl-C or SIGTERM)")
            raise
        except (RunFailed, ConfigError) as failure:  # e.g. device=gpu with no GPU visible
            run.save_what_we_have("FAILED", str(failure))
            raise
        except BaseException as error:
            run.save_what_we_have("FAILED", f"{type(error).__name__}: {error}",
                                  traceback.format_exc())
            raise
    tracker.end("FINISHED")
    return result


def check_store(cfg: DictConfig, launch_dir: Path) -> None:
    """A tracking server that does not answer, or a sqlite store in a folder that does not
    exist, is one line now; opening the run later checks again (a server can go away)."""
    if getattr(cfg.tracking.name, "value", cfg.tracking.name) == "none":
        return
    uri = resolve_uri(cfg.tracking.uri, launch_dir)
    check_server(uri)
    check_store_folder(uri)


def _checkpoint_dir(cfg: DictConfig, launch_dir: Path, tracker: NullTracker) -> Path | None:
    """checkpoints/RUN_ID/ in the launch folder; None when off (trainer.checkpoint_every=0) or
    when there is no MLflow run to resume (tracking=none)."""
    from gradexp.resume import checkpoint_folder

    if cfg.trainer.checkpoint_every == 0 or tracker.run_id is None:
        return None
    return checkpoint_folder(launch_dir, tracker.run_id)


def _config_yaml(cfg: DictConfig) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(cfg, resolve=True)


def check_user_code(cfg: DictConfig, launch_dir: Path, data=None) -> None:
    """Make the launch folder importable and check the `_target_`s that name code to call: a
    loss that cannot be called as one, a model builder that cannot take the data's sizes and
    model.kwargs (its signature, when the data is given)."""
    from gradexp.losses import check_loss
    from gradexp.tensorflow_import import import_tensorflow

    import_tensorflow()  # quietly, before user modules (and keras.losses) import it loudly
    importable(launch_dir)
    check_loss(cfg.loss)
    locate("model._target_", cfg.model["_target_"])  # built later, once TensorFlow is set up
    if data is not None:
        from gradexp.models import check_builder

        check_builder(cfg.model, data.n_features, data.n_outputs)
        check_against_data(cfg, data)  # loss vs task, your model vs the data's shapes


class _Run:
    """The state of one run while it trains, so every ending can save what it has; the
    callbacks (gradexp.callbacks) read and add to it."""

    def __init__(self, cfg: DictConfig, data, tracker: NullTracker, hydra_dir: Path | None,
                 quiet: bool, launch_dir: Path, resume: Resume | None = None):
        self.cfg = cfg
        self.data = data
        self.tracker = tracker
        self.hydra_dir = hydra_dir
        self.quiet = quiet
        self.resume = resume
        self.history: dict[str, list[np.ndarray]] = {}
        self.first_epochs: list[int] = []
        self.checks: list = []
        # A resumed run's checks before its checkpoint (its first part's), counted in its summary
        self.earlier_checks = resume.earlier_checks if resume is not None else 0
        self.evaluations: dict[str, list[tuple[int, float]]] = {}  # "val/mse" -> (step, value)
        self.objective, self.direction = objective(cfg, data.task)
        self.stop_training = False  # set by a callback (early stopping)
        self.restored_epoch: int | None = None  # early stopping put back this epoch's weights
        self.callbacks: list = []
        self.trainer = None
        self.checkpoint_dir = _checkpoint_dir(cfg, launch_dir, tracker)

    # ---------------------------------------------------------------- the happy path
    def execute(self) -> RunResult:
        from gradexp.tensorflow_import import import_tensorflow

        tf = import_tensorflow()
        from gradexp.callbacks import build_callbacks
        from gradexp.callbacks.evaluation import eval_epochs
        from gradexp.devices import select_device
        from gradexp.evaluation import Evaluator
        from gradexp.losses import build_loss
        from gradexp.models import build_model
        from gradexp.schedules import build_optimizer
        from gradexp.trainer import Trainer

        cfg = self.cfg
        # Each job builds a fresh model and so a fresh tf.function: retracing is expected here.
        tf.get_logger().setLevel("ERROR")
        if cfg.trainer.deterministic:  # the same config, the same numbers, bit for bit
            import keras

            tf.config.experimental.enable_op_determinism()
            keras.utils.set_random_seed(cfg.trainer.seed)
        tf.random.set_seed(cfg.trainer.seed)
        device = select_device(getattr(cfg.device.name, "value", cfg.device.name),
                               cfg.device.cpu_replicas)
        self.tracker.set_tags({"tensorflow.version": tf.__version__, "device": device.used,
                               "gradexp.replicas": device.replicas,
                               "device.requested": device.requested, "gradexp.task": self.data.task,
                               "gradexp.objective": self.objective,
                               "gradexp.direction": self.direction,
                               "gradexp.checkpoints": self.checkpoint_dir})
        epochs = cfg.trainer.epochs
        with device.scope():
            self.model = build_model(cfg.model, self.data.n_features, self.data.n_outputs)
        with device.run_scope():
            self.evaluator = Evaluator(self.model, metric_specs(cfg, self.data.task),
                                       self.data.splits())
        with device.scope():
            batch_size = self.data.batch_size or cfg.trainer.batch_size  # a loader's batches win
            optimizer = build_optimizer(cfg.optimizer, self.data.steps_per_epoch(batch_size),
                                        epochs)
            schedule = getattr(cfg.optimizer.schedule.name, "value", cfg.optimizer.schedule.name)
            self.trainer = Trainer(
                self.model, build_loss(cfg.loss), optimizer, self.data,
                batch_size=batch_size, seed=cfg.trainer.seed,
                compile=cfg.trainer.compile, jit_compile=cfg.trainer.jit_compile,
                log_lr=schedule != "none", strategy=device.strategy,
                evaluator=self.evaluator, eval_epochs=eval_epochs(cfg))
            if self.resume is not None:
                self.resume.restore(self.trainer)
                self.tracker.set_tags({"gradexp.resumed_from_epoch": self.trainer.epoch})
                if not self.quiet:
                    console.console().print(
                        f"resuming run {self.resume.run_id} from epoch {self.trainer.epoch} "
                        f"(checkpoint {self.resume.checkpoint})", highlight=False)
        with device.run_scope():
            self.callbacks = build_callbacks(self)
            stops = {epochs}  # and the host events the callbacks need; nothing else
            for callback in self.callbacks:
                stops |= callback.stops(epochs)
            self.emit("on_train_begin")
            for stretch in self.trainer.train(stops):
                self.keep(stretch)
                if self.stop_training:
                    break
            self.emit("on_train_end", "FINISHED")
            if self.restored_epoch is not None:  # early stopping put the best weights back:
                self.evaluate(("train", "val"), step=self.trainer.epoch)  # what the run ends on
            final_loss = self.trainer.evaluate()
            self.evaluate(("test",))  # held out until now, evaluated once
        return self.finish(final_loss)

    def emit(self, event: str, *args) -> None:
        """Tell every callback, in order (gradexp.callbacks.build_callbacks)."""
        for callback in self.callbacks:
            getattr(callback, event)(self, *args)

    def keep(self, stretch) -> None:
        """Keep one stretch of epochs and tell the callbacks; stop at the first NaN or infinite
        value, keeping the good epochs before it."""
        bad_epoch = stretch.first_nonfinite_epoch()
        if bad_epoch is not None:
            stretch = stretch.upto(bad_epoch)
        if len(stretch.values["loss"]):
            self.first_epochs.append(stretch.first_epoch)
            for key, values in stretch.values.items():
                self.history.setdefault(key, []).append(values)
            if bad_epoch is None:
                self.emit("on_stretch_end", stretch)
            else:  # keep the good epochs' metrics; nothing is left to evaluate or check
                for callback in self.callbacks:
                    if isinstance(callback, MetricLogger):
                        callback.on_stretch_end(self, stretch)
        if bad_epoch is not None:
            lr = self.cfg.optimizer.learning_rate
            self.tracker.set_tags({"gradexp.failure": "diverged",
                                   "gradexp.failure_epoch": bad_epoch})
            raise Diverged(
                f"the loss or its gradient became NaN or infinite at epoch {bad_epoch}: "
                f"the learning rate is probably too high (optimizer.learning_rate={lr}); "
                "try a smaller one")

    def evaluate(self, splits: tuple[str, ...], step: int | None = None) -> None:
        """Metrics of the current parameters on whole splits, logged at step = epochs done."""
        self.record_evaluation(self.trainer.epoch if step is None else step,
                               self.evaluator(splits))

    def record_evaluation(self, step: int, metrics: dict[str, float], log: bool = True) -> None:
        """Keep held-out metrics (computed in the trainer's calls or by `evaluate`) for the
        history and the callbacks, and log them to MLflow unless `log` is False (thinned)."""
        for key, value in metrics.items():
            self.evaluations.setdefault(key, []).append((step, value))
            if log:
                self.tracker.log_metric(key, value, step)

    def checkpoint_manager(self, folder: Path, keep: int):
        import tensorflow as tf

        return tf.train.CheckpointManager(self.trainer.checkpoint(), str(folder), keep)

    def finish(self, final_loss: float) -> RunResult:
        """The final metrics, artifacts and the model, then the summary."""
        epochs = self.trainer.epoch
        scalars = {k: float(v) for k, v in self.model.scalars().items()}
        for key, value in {"final_loss": final_loss, **{f"final_{k}": v
                                                        for k, v in scalars.items()}}.items():
            self.tracker.log_metric(key, value, epochs)
        self.save_artifacts()
        if self.cfg.tracking.log_model:
            self.log_model()
        if self.data.task == "classification" and self.data.val is not None:
            self.save_confusion_matrix("val")
        result = RunResult(final_loss, epochs, self.tracker.run_id, self.tracker.experiment_id,
                           self.tracker.uri, self.checks[-1].passed if self.checks else None,
                           scalars, self.merged_history(), self.latest_evaluation(),
                           self.objective, self.direction)
        if not self.quiet:
            self.print_summary(result)
        return result

    def save_confusion_matrix(self, split: str) -> None:
        from gradexp.plots import confusion_matrix

        targets, outputs = self.evaluator.predictions(split)
        if targets.shape[1] == 1:  # one output: a binary label and a logit
            true, predicted, n_classes = targets[:, 0] > 0.5, outputs[:, 0] > 0, 2
        else:
            true, predicted, n_classes = targets.argmax(1), outputs.argmax(1), targets.shape[1]
        counts = np.zeros((n_classes, n_classes), dtype=int)
        np.add.at(counts, (true.astype(int), predicted.astype(int)), 1)
        self.tracker.log_figure(confusion_matrix(counts, f"{split} rows"),
                                f"plots/confusion_matrix_{split}.png")

    def latest_evaluation(self) -> dict[str, float]:
        return {key: values[-1][1] for key, values in self.evaluations.items()}

    def log_model(self) -> None:
        """The model as served (gradexp.export: raw features in, probabilities out) as the run's
        LoggedModel `model`, with the weights the run reports (after restore_best). A model
        Keras cannot save (a custom layer without get_config, say) is said in one warning; the
        run still finishes."""
        from gradexp.export import export

        if self.tracker.run_id is None:  # tracking=none: nowhere to log it
            return
        try:
            served = export(self.model.network, self.data,
                            outputs_are_logits=bool(self.cfg.loss.get("from_logits", True)))
            self.tracker.log_keras_model(served, step=self.trainer.epoch)
        except Exception as error:  # noqa: BLE001 - the run's results stand without the file
            self.tracker.set_tags({"gradexp.model_logged": "false"})
            if not self.quiet:
                first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
                console.console().print(f"[yellow]warning:[/yellow] the trained model was not "
                                        f"logged ({type(error).__name__}: {first}); "
                                        "tracking.log_model=false skips it")

    # ---------------------------------------------------------------- endings
    def merged_history(self) -> dict[str, np.ndarray]:
        return {key: np.concatenate(parts) for key, parts in self.history.items()}

    def history_table(self):
        """Every epoch's metrics and the evaluations as one table (gradexp.history); a resumed
        run's includes the epochs before its checkpoint, from the copy saved beside it."""
        from gradexp.history import ARTIFACT, build_table, merge, read_table

        start = self.first_epochs[0] if self.first_epochs else (
            self.trainer.epoch if self.trainer is not None else 0)
        table = build_table(start, self.merged_history(), self.evaluations)
        earlier = read_table(self.resume.folder / ARTIFACT) if self.resume is not None else None
        return table if earlier is None else merge(earlier, table, upto=start)

    def save_history(self, path: Path) -> None:
        from gradexp.history import write_table

        write_table(self.history_table(), path)

    def save_artifacts(self) -> None:
        """Hydra's .hydra/ files, history.parquet and the loss curve drawn from it (config.yaml
        went in at the start)."""
        import tempfile

        from gradexp.history import ARTIFACT, curves, write_table
        from gradexp.plots import loss_curves

        if self.hydra_dir is not None and (self.hydra_dir / ".hydra").is_dir():
            self.tracker.log_folder(self.hydra_dir / ".hydra", ".hydra")
        if self.tracker.run_id is None or (self.resume is not None and not self.first_epochs):
            return  # nothing recorded, or a resume that trained nothing: the old file stands
        table = self.history_table()
        with tempfile.TemporaryDirectory() as folder:
            write_table(table, Path(folder) / ARTIFACT)
            self.tracker.log_file(Path(folder) / ARTIFACT)
        loss = curves(table, ["loss"])
        if "loss" in loss and len(loss["loss"][0]):
            self.tracker.log_figure(loss_curves(loss), "plots/loss_curve.png")

    def save_what_we_have(self, status: str, reason: str, trace: str | None = None) -> None:
        """On any ending but success: tell the callbacks (a checkpoint on an interrupt), keep
        metrics and artifacts so far, then end the run."""
        try:
            try:
                self.emit("on_train_end", status)
            finally:
                self.tracker.set_tags({"gradexp.status_reason": reason[:5000]})
                if trace:
                    self.tracker.log_text(trace, "error/traceback.txt")
                self.save_artifacts()
        finally:
            self.tracker.end(status)

    def print_summary(self, result: RunResult) -> None:
        from gradexp.tracking import runs_view_link

        verdict = None
        if self.checks:  # the worst check of the run, not just the last
            failed = [check.epoch for check in self.checks if not check.passed]
            # The reported error (GradCheckEntry.reported_error), as the console and MLflow.
            worst = max(self.checks, key=lambda check: check.error_to_tolerance)
            error = worst.worst()
            count = len(self.checks) + self.earlier_checks  # both parts of a resumed run
            verdict = (("passed" if not failed else
                        f"FAILED at epoch{'s' if len(failed) > 1 else ''} "
                        f"{', '.join(map(str, failed))}")
                       + f" ({count} check{'s' if count > 1 else ''}"
                       + ("" if error is None else
                          f"; worst at epoch {worst.epoch}: {error[1].describe()}")
                       + (f"; wrong layer: {', '.join(v.name for v in worst.culprits)}"
                          if worst.culprits else "") + ")")
        objective = result.objective_value
        rows = {"final loss (after the last step)": result.final_loss, **result.scalars,
                **result.metrics,
                f"objective ({result.direction[:3]})": None if objective is None
                else f"{result.objective} = {objective:.6g}",
                "epochs": result.epochs, "gradient check": verdict, "mlflow run": result.run_id}
        console.print_summary(rows)
        if result.run_id:
            link = runs_view_link(result.tracking_uri, result.experiment_id)
            out = console.console()
            out.print(f"open the MLflow UI: {_ui_command(result.tracking_uri)}", highlight=False)
            out.print(f"then this experiment's runs: {link}", highlight=False)


def _ui_command(uri: str) -> str:
    from gradexp.tracking import redact_uri

    if uri.startswith("http"):
        return f"open {redact_uri(uri)}"
    return f"mlflow ui --backend-store-uri {uri}"
