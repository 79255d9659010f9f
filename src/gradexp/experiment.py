"""One experiment, start to end: check the config, build, train, check gradients, record.

    config ─> range check ─> data ─> tracker (fails fast) ─> TensorFlow: device, model, loss,
    optimizer ─> Trainer stretches ─> gradient checks ─> metrics, plots, reports ─> RunResult

`run_experiment` takes a composed config and plain values, so tests call it without a process.
Every way a run can end leaves its MLflow run terminated: FINISHED, FAILED (with why) or KILLED.
"""

from __future__ import annotations

import signal
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from gradexp import console
from gradexp.data import load_data
from gradexp.devices import check_device
from gradexp.objective import check_objective, metric_specs, objective
from gradexp.schema import ConfigError, check_ranges
from gradexp.targets import importable, label_by_target
from gradexp.tracking import MlflowTracker, NullTracker, config_params, git_commit, resolve_uri


class RunFailed(Exception):
    """The run ended FAILED for a reason a person can act on; the message is one line."""

    exit_code = 1


class Diverged(RunFailed):
    """The loss or the gradients became NaN or infinite."""


class GradientCheckFailed(RunFailed):
    """A gradient check failed and `gradcheck.on_fail=fail`."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: the run ends KILLED, exit code 143."""


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
                 parent_run_id: str | None) -> NullTracker:
    """The MLflow run to record into (tracking=mlflow), or a tracker that records nothing."""
    if getattr(cfg.tracking.name, "value", cfg.tracking.name) == "none":
        return NullTracker()
    uri = resolve_uri(cfg.tracking.uri, launch_dir)
    tags = {"mlflow.source.git.commit": git_commit(launch_dir)}
    return MlflowTracker(uri, cfg.tracking.experiment, run_name, parent_run_id=parent_run_id,
                         tags=tags)


def run_experiment(cfg: DictConfig, *, run_name: str = "defaults", launch_dir: Path | None = None,
                   hydra_dir: Path | None = None, parent_run_id: str | None = None,
                   quiet: bool = False, show_config: bool = True) -> RunResult:
    """Train and check one configuration; record it; return the final loss and where it is."""
    launch_dir = launch_dir or Path.cwd()
    check_ranges(cfg)  # before anything slow: a wrong value answers in about a second
    label_by_target(cfg)  # loss.name=mylosses.pseudo_huber, not the name of the option it replaced
    data = load_data(cfg.data, launch_dir)
    check_objective(cfg, data.task)
    check_user_code(cfg, launch_dir)  # a bad loss._target_ ends here, before any MLflow run
    params = config_params(cfg)
    if show_config and not quiet:
        console.print_config(cfg, params)
    check_device(getattr(cfg.device.name, "value", cfg.device.name))
    tracker = open_tracker(cfg, run_name, launch_dir, parent_run_id)
    run = _Run(cfg, data, tracker, hydra_dir, quiet)
    with sigterm_as_interrupt():
        try:
            tracker.log_params(params)
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


def check_user_code(cfg: DictConfig, launch_dir: Path) -> None:
    """Make the launch folder importable and check the `_target_`s that name code to call."""
    from gradexp.losses import check_loss
    from gradexp.tensorflow_import import import_tensorflow

    import_tensorflow()  # quietly, before user modules (and keras.losses) import it loudly
    importable(launch_dir)
    check_loss(cfg.loss)


class _Run:
    """The state of one run while it trains, so every ending can save what it has."""

    def __init__(self, cfg: DictConfig, data, tracker: NullTracker, hydra_dir: Path | None,
                 quiet: bool):
        self.cfg = cfg
        self.data = data
        self.tracker = tracker
        self.hydra_dir = hydra_dir
        self.quiet = quiet
        self.history: dict[str, list[np.ndarray]] = {}
        self.first_epochs: list[int] = []
        self.checks: list = []
        self.evaluations: dict[str, list[tuple[int, float]]] = {}  # "val/mse" -> (step, value)
        self.objective, self.direction = objective(cfg, data.task)
        self.metric_stride = -(-cfg.trainer.epochs // cfg.tracking.max_points)  # ceil

    # ---------------------------------------------------------------- the happy path
    def execute(self) -> RunResult:
        from hydra.utils import instantiate

        from gradexp.losses import build_loss
        from gradexp.tensorflow_import import import_tensorflow

        tf = import_tensorflow()
        from gradexp.devices import select_device
        from gradexp.evaluation import Evaluator
        from gradexp.models import build_model
        from gradexp.trainer import Trainer

        cfg = self.cfg
        # Each job builds a fresh model and so a fresh tf.function: retracing is expected here.
        tf.get_logger().setLevel("ERROR")
        tf.random.set_seed(cfg.trainer.seed)
        device = select_device(getattr(cfg.device.name, "value", cfg.device.name))
        self.tracker.set_tags({"tensorflow.version": tf.__version__, "device": device.used,
                               "device.requested": device.requested, "gradexp.task": self.data.task,
                               "gradexp.objective": self.objective,
                               "gradexp.direction": self.direction})
        with device.scope():
            self.model = build_model(cfg.model, self.data.n_features, self.data.n_outputs)
            self.trainer = Trainer(
                self.model, build_loss(cfg.loss), instantiate(cfg.optimizer), self.data,
                batch_size=cfg.trainer.batch_size, seed=cfg.trainer.seed,
                compile=cfg.trainer.compile, jit_compile=cfg.trainer.jit_compile)
            self.evaluator = Evaluator(self.model, metric_specs(cfg, self.data.task),
                                       self.data.splits())
            epochs = cfg.trainer.epochs
            check_epochs = self.check_schedule(epochs)
            eval_epochs = self.eval_schedule(epochs)
            if 0 in check_epochs:
                self.check_gradients(0)
            stops = sorted(set(range(cfg.trainer.log_every, epochs, cfg.trainer.log_every))
                           | {e for e in check_epochs if e > 0} | eval_epochs | {epochs})
            with console.progress(epochs) if not self.quiet else nullcontext() as bar:
                for stretch in self.trainer.train(stops):
                    self.record(stretch)
                    if self.trainer.epoch in eval_epochs:
                        self.evaluate(("train", "val"))
                    if bar is not None:
                        self.report_progress(bar, stretch, epochs)
                    if self.trainer.epoch in check_epochs and self.trainer.epoch > 0:
                        self.check_gradients(self.trainer.epoch)
            final_loss = self.trainer.evaluate()
            self.evaluate(("test",))  # held out until now, evaluated once
        scalars = {k: float(v) for k, v in self.model.scalars().items()}
        for key, value in {"final_loss": final_loss, **{f"final_{k}": v
                                                        for k, v in scalars.items()}}.items():
            self.tracker.log_metric(key, value, epochs)
        self.save_artifacts()
        if self.data.task == "classification" and self.data.val is not None:
            self.save_confusion_matrix("val")
        result = RunResult(final_loss, epochs, self.tracker.run_id, self.tracker.experiment_id,
                           self.tracker.uri, self.checks[-1].passed if self.checks else None,
                           scalars, self.merged_history(), self.latest_evaluation(),
                           self.objective, self.direction)
        if not self.quiet:
            self.print_summary(result)
        return result

    def report_progress(self, bar, stretch, epochs: int) -> None:
        """Move the bar; about ten times a run print a line as seed 004 does (loss, W, b)."""
        latest = {**{key: values[-1] for key, values in stretch.values.items()}, **stretch.latest}
        bar.update(bar.task_ids[0], completed=self.trainer.epoch, loss=f"{latest['loss']:.6g}")
        if self.trainer.epoch % self.print_every(epochs) == 0 or self.trainer.epoch == epochs:
            held_out = {key: values[-1][1] for key, values in self.evaluations.items()
                        if key.startswith("val/") and values[-1][0] == self.trainer.epoch - 1}
            values = "  ".join(f"{key} {value:.6g}" for key, value in {**latest,
                                                                         **held_out}.items())
            bar.console.print(f"epoch {self.trainer.epoch:>{len(str(epochs))}}/{epochs}  {values}",
                              highlight=False)

    def eval_schedule(self, epochs: int) -> set[int]:
        """Epochs after which train/ and val/ metrics are computed: every eval.every epochs, or
        where the progress lines print; always after the last."""
        every = self.cfg.eval.every or self.print_every(epochs)
        return set(range(every, epochs, every)) | {epochs}

    def print_every(self, epochs: int) -> int:
        """About ten progress lines a run, at multiples of trainer.log_every."""
        log_every = self.cfg.trainer.log_every
        return log_every * max(1, round(epochs / 10 / log_every))

    def evaluate(self, splits: tuple[str, ...]) -> None:
        """Metrics of the current parameters on whole splits, logged at the last epoch's step."""
        step = self.trainer.epoch - 1
        for key, value in self.evaluator(splits).items():
            self.evaluations.setdefault(key, []).append((step, value))
            self.tracker.log_metric(key, value, step)

    def latest_evaluation(self) -> dict[str, float]:
        return {key: values[-1][1] for key, values in self.evaluations.items()}

    def check_schedule(self, epochs: int) -> set[int]:
        gc = self.cfg.gradcheck
        if not gc.enabled:
            return set()
        wanted = set(range(gc.every_n_epochs, epochs, gc.every_n_epochs)) if gc.every_n_epochs \
            else set()
        if gc.at_start:
            wanted.add(0)
        if gc.at_end:
            wanted.add(epochs)
        return wanted

    def record(self, stretch) -> None:
        """Keep and log one stretch of epochs; stop at the first NaN or infinite value."""
        bad_epoch = stretch.first_nonfinite_epoch()
        if bad_epoch is not None:
            stretch = stretch.upto(bad_epoch)
        if len(stretch.values["loss"]):
            self.first_epochs.append(stretch.first_epoch)
            for key, values in stretch.values.items():
                self.history.setdefault(key, []).append(values)
            # At most tracking.max_points steps per metric: MLflow writes ~5,000 points a second
            # to sqlite, a compiled epoch takes ~20 µs, so long runs are thinned evenly.
            keep = stretch.epochs % self.metric_stride == 0
            self.tracker.log_history(stretch.epochs[keep],
                                     {key: values[keep] for key, values in stretch.values.items()})
            if bad_epoch is None:  # W and b at each logging point, as seed 004 prints them
                for key, value in stretch.latest.items():
                    self.tracker.log_metric(key, value, stretch.last_epoch)
        if bad_epoch is not None:
            lr = self.cfg.optimizer.learning_rate
            self.tracker.set_tags({"gradexp.failure": "diverged",
                                   "gradexp.failure_epoch": bad_epoch})
            raise Diverged(
                f"the loss or its gradient became NaN or infinite at epoch {bad_epoch}: "
                f"the learning rate is probably too high (optimizer.learning_rate={lr}); "
                "try a smaller one")

    def check_gradients(self, epoch: int) -> None:
        from gradexp.verification import check_training_gradients

        result = check_training_gradients(self.cfg.gradcheck, self.model, self.cfg.loss,
                                          self.data, epoch)
        self.checks.append(result)
        if result.notes and len(self.checks) == 1:  # e.g. user code that only runs in float32
            self.tracker.set_tags({"gradexp.gradcheck_dtype": result.dtype})
            if not self.quiet:
                console.console().print(f"[yellow]warning:[/yellow] {result.notes[0]}",
                                        highlight=False)
        for key, value in result.metrics().items():
            self.tracker.log_metric(key, value, epoch)
        self.tracker.log_dict(result.to_dict(), f"gradcheck/report_epoch_{epoch:05d}.json")
        # Heat maps where they help: after training, and whenever a check fails.
        if self.cfg.gradcheck.plots and (epoch == self.cfg.trainer.epochs or not result.passed):
            self.log_heatmaps(result)
        if not result.passed:
            lines = "; ".join(result.failures())
            self.tracker.set_tags({"gradexp.gradcheck": "failed"})
            message = f"gradient check failed at epoch {epoch}: {lines}"
            if self.cfg.gradcheck.on_fail == "fail":
                self.tracker.set_tags({"gradexp.failure": "gradcheck",
                                       "gradexp.failure_epoch": epoch})
                raise GradientCheckFailed(message)
            if not self.quiet:
                console.console().print(f"[yellow]warning:[/yellow] {message}")

    def log_heatmaps(self, result) -> None:
        from gradexp.plots import jacobian_heatmaps
        from gradexp.verification import heatmap_arrays

        for name, (analytical, numerical) in heatmap_arrays(result).items():
            safe = name.replace("/", "_")
            self.tracker.log_figure(jacobian_heatmaps(name, analytical, numerical),
                                    f"gradcheck/heatmap_{safe}_epoch_{result.epoch:05d}.png")

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

    # ---------------------------------------------------------------- endings
    def merged_history(self) -> dict[str, np.ndarray]:
        return {key: np.concatenate(parts) for key, parts in self.history.items()}

    def save_artifacts(self) -> None:
        """The resolved config, Hydra's .hydra/ files and the loss curve."""
        from omegaconf import OmegaConf

        from gradexp.plots import loss_curves

        self.tracker.log_text(OmegaConf.to_yaml(self.cfg, resolve=True), "config.yaml")
        if self.hydra_dir is not None:
            self.tracker.log_folder(self.hydra_dir / ".hydra", ".hydra")
        history = self.merged_history()
        if "loss" in history and len(history["loss"]):
            epochs = np.arange(self.first_epochs[0], self.first_epochs[0] + len(history["loss"]))
            self.tracker.log_figure(loss_curves({"loss": (epochs, history["loss"])}),
                                    "plots/loss_curve.png")

    def save_what_we_have(self, status: str, reason: str, trace: str | None = None) -> None:
        """On any ending but success: keep metrics and artifacts so far, then end the run."""
        try:
            self.tracker.set_tags({"gradexp.status_reason": reason[:5000]})
            if trace:
                self.tracker.log_text(trace, "error/traceback.txt")
            self.save_artifacts()
        finally:
            self.tracker.end(status)

    def print_summary(self, result: RunResult) -> None:
        from gradexp.tracking import runs_view_link

        verdict = None
        if self.checks:
            last = self.checks[-1]
            verdict = (f"{'passed' if last.passed else 'FAILED'} "
                       f"(max abs error {last.max_abs_error:.2g}, "
                       f"max rel error {last.max_rel_error:.2g})")
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
