"""One run, start to end: check the config, build the parts, emit the events, map every ending
to a status.

    config ─> range check ─> data ─> user code, callbacks (fail fast) ─> on_run_begin (the
    recorder opens the MLflow run) ─> TensorFlow: device, model, loss, optimizer ─> on_train_begin
    ─> Trainer stretches ─> on_stretch_end (and on_check) ─> on_train_end(status) ─> RunResult

The loop holds no tracker and writes nothing: each job besides training is a callback
(gradexp.callbacks, built from conf/callbacks/), and the recorder among them is the only MLflow
writer. `run_experiment` takes a composed config and plain values, so tests call it without a
process. Every way a run can end is told to the callbacks once, as FINISHED, FAILED (with why)
or KILLED, and leaves its MLflow run terminated. `trainer.resume=RUN_ID` continues a run from its
last checkpoint, as the same MLflow run.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from gradexp import console
from gradexp.callbacks import build_callbacks, check_callbacks
from gradexp.config_checks import check_ranges
from gradexp.data import data_record, load_data
from gradexp.devices import check_device
from gradexp.endings import (
    Diverged,
    GradientCheckFailed,
    RunFailed,
    Terminated,
    no_gradient,
    status_of,
)
from gradexp.interrupts import interrupts_deferred, sigterm_as_interrupt
from gradexp.losses import independent_outputs, outputs_are_logits
from gradexp.metrics import check_monitor, check_objective, metric_specs, objective
from gradexp.resume import prepare_resume
from gradexp.run_params import config_params
from gradexp.run_view import RunResult, RunView
from gradexp.seeds import builder_seeded, derive_seeds, replaced_seeds_note, seed_tensorflow
from gradexp.setup_checks import check_against_data, check_config
from gradexp.tag_keys import (
    DIRECTION_TAG,
    OBJECTIVE_TAG,
    PACKED_DRIFT_TAG,
    REPLICAS_TAG,
    RESUMED_FROM_EPOCH_TAG,
    RESUMED_TO_EPOCH_TAG,
    TASK_TAG,
)
from gradexp.tracking_uri import check_server, check_store_folder, check_store_kind, resolve_uri
from gradexp.user_code import check_modules_exist, importable, label_by_target, locate
from gradexp.xla_checks import xla_refused

__all__ = ["Diverged", "GradientCheckFailed", "RunFailed", "RunResult", "Terminated",
           "run_experiment"]


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
    derived = derive_seeds(cfg)  # seed=N: model.seed, trainer.seed, data's seed (gradexp.seeds)
    given = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    # loss.name=mylosses.pseudo_huber, not the name of the option it replaced; the optimizer's
    # below, once its build check has named the option its arguments came from (optimizer=sgd)
    label_by_target(cfg, ("data", "model", "loss"))
    data = load_data(cfg.data, launch_dir, independent_outputs(cfg.loss))
    recorded = data_record(data, cfg.trainer.batch_size)  # rows, standardized, batches, labels
    check_objective(cfg, data.task)
    check_monitor(cfg, data.task, tuple(data.splits()))  # early stopping's metric exists
    # before the model checks below start TensorFlow's runtime (mirrored's CPU replicas)
    check_device(getattr(cfg.device.name, "value", cfg.device.name), cfg.device.cpu_replicas)
    check_user_code(cfg, launch_dir, data)  # a bad _target_ ends here, before any MLflow run
    if resume is not None:  # a builder edited since the run: refused before it reopens (QA)
        resume.check_builder(data.n_features, data.n_outputs)
    label_by_target(cfg)  # optimizer.name=keras.optimizers.AdamW too (QA), before it is shown
    if show_config and not quiet:
        console.print_config(cfg, config_params(cfg))
    for note in [] if quiet else [*recorded.notes, replaced_seeds_note(cfg, derived, given)]:
        if note:
            console.note_line(note)
    callbacks = build_callbacks(cfg)
    metric, direction = objective(cfg, data.task)
    run = RunView(cfg, data, metric, direction, quiet=quiet, launch_dir=launch_dir,
                  hydra_dir=hydra_dir, resume=resume, run_name=run_name,
                  parent_run_id=parent_run_id, restart_of=restart_of, data_record=recorded,
                  earlier_checks=resume.earlier_checks if resume is not None else 0)
    try:
        return Loop(run, callbacks).execute()
    except BaseException as error:
        # The run this error ended, if it opened one (it holds the error, FAILED or KILLED): a
        # sweep's job that fails before then has no child run, and says so itself (app.run_job).
        # An interrupt that lands once the run had ended (FINISHED) leaves it so.
        with contextlib.suppress(AttributeError):
            error.run_id, error.run_status = run.run_id, run.ended_as
        raise


def check_store(cfg: DictConfig, launch_dir: Path) -> None:
    """A URI MLflow cannot open, a tracking server that does not answer, or a sqlite store in a
    folder that does not exist, is one line now; opening the run later checks again (a server
    can go away)."""
    if getattr(cfg.tracking.name, "value", cfg.tracking.name) == "none":
        return
    uri = resolve_uri(cfg.tracking.uri, launch_dir)
    check_store_kind(uri, shown=cfg.tracking.uri)
    check_server(uri)
    check_store_folder(uri)


def check_user_code(cfg: DictConfig, launch_dir: Path, data=None) -> None:
    """Make the launch folder importable and check the `_target_`s that name code to call: a
    loss that cannot be called as one, a model builder that cannot take the data's sizes and
    model.kwargs (its signature, when the data is given), a callback that does not import or
    does not take its arguments."""
    from gradexp.losses import check_loss
    from gradexp.tensorflow_import import import_tensorflow

    import_tensorflow()  # quietly, before user modules (and keras.losses) import it loudly
    importable(launch_dir)
    check_callbacks(cfg)
    check_loss(cfg.loss)
    locate("model._target_", cfg.model["_target_"])  # built later, once TensorFlow is set up
    if data is not None:
        from gradexp.models import check_builder

        check_builder(cfg.model, data.n_features, data.n_outputs)
        check_against_data(cfg, data)  # loss vs task, your model vs the data's shapes


class Loop:
    """Builds the parts of one run, trains, and tells the callbacks, in their order."""

    def __init__(self, run: RunView, callbacks: list[Any]):
        self.run = run
        self.callbacks = callbacks
        self.ended = False
        self.told: set[int] = set()  # the callbacks on_train_end was called on (by id)

    def emit(self, event: str, *args: Any) -> None:
        """Tell every callback that has a method for `event`, in order."""
        for callback in self.callbacks:
            method = getattr(callback, event, None)
            if method is not None:
                method(self.run, *args)

    def emit_with_checks(self, event: str, *args: Any) -> None:
        """`event`, then on_check for each gradient check a callback ran during it (even when
        that check ended the run: gradcheck.on_fail=fail)."""
        seen = len(self.run.checks)
        try:
            self.emit(event, *args)
        finally:
            for check in self.run.checks[seen:]:
                self.emit("on_check", check)

    def execute(self) -> RunResult:
        with sigterm_as_interrupt():
            try:
                self.emit("on_run_begin")
                self.train()
            except BaseException as error:
                # one line, recorded as its reason
                failure = no_gradient(error, self.run.cfg) or xla_refused(error, self.run.cfg)
                # Also when the end had begun: an interrupt between two callbacks' ends
                # would leave the later ones (the recorder: the run RUNNING) never told.
                self.end(*status_of(failure or error))
                if failure is not None:
                    raise failure from error
                raise
        return self.run.result()

    def train(self) -> None:
        run, cfg = self.run, self.run.cfg
        device = self.build()
        epochs = cfg.trainer.epochs
        with device.run_scope():
            self.emit_with_checks("on_train_begin")
            stops = {epochs}  # and the host events the callbacks need; nothing else
            for callback in self.callbacks:
                if hasattr(callback, "stops"):
                    stops |= callback.stops(epochs)
            stretches = iter(run.trainer.train(stops))
            while not run.stop_training:
                # A Ctrl-C or SIGTERM lands between stretches, never inside TensorFlow or a
                # checkpoint save (gradexp.interrupts): the run then ends KILLED at this epoch.
                with interrupts_deferred():
                    stretch = next(stretches, None)
                    if stretch is None:
                        break
                    try:
                        self.emit_with_checks("on_stretch_end", stretch, {})
                    except Diverged:
                        # The run ends at the last epoch it recorded, before the NaN one: the
                        # compiled call trained on past it (QA: on_train_end saw run.epoch 16,
                        # history.parquet and MLflow ended at epoch 6, the NaN at 7)
                        bad = stretch.first_nonfinite_epoch()
                        if bad is not None:
                            run.trainer.epoch = bad - 1
                        raise
                    run.say_untrained(run.trainer.untrained)  # known once its step traced
            self.end("FINISHED")

    def end(self, status: str, reason: str | None = None, trace: str | None = None) -> None:
        """on_train_end(status) to every callback, once (a second call tells only those not
        told yet). A callback that fails here does not keep the others (the recorder last)
        from theirs: a FINISHED run becomes FAILED (or KILLED) with that failure's reason, and
        the failure is raised at the end."""
        self.ended = True
        run = self.run
        untold = [callback for callback in self.callbacks
                  if hasattr(callback, "on_train_end") and id(callback) not in self.told]
        if not untold:
            return
        run.status_reason, run.traceback = reason, trace
        first: BaseException | None = None
        for callback in untold:
            try:
                self.told.add(id(callback))
                callback.on_train_end(run, status)
            except BaseException as error:  # noqa: BLE001 - raised below, after the others
                if first is None:
                    first = error
                    if status == "FINISHED":
                        status, run.status_reason, run.traceback = status_of(error)
        if first is not None:
            raise first

    def build(self):
        """TensorFlow set up (seeds, determinism, the device), then the model, the evaluator
        and the trainer (restored from its checkpoint when resuming); returns the device."""
        from gradexp.tensorflow_import import import_tensorflow

        tf = import_tensorflow()
        from gradexp import shared_programs
        from gradexp.callbacks.held_out import eval_epochs
        from gradexp.devices import select_device
        from gradexp.evaluation import Evaluator
        from gradexp.losses import build_loss
        from gradexp.models import build_model
        from gradexp.packed.replay import take_trained
        from gradexp.schedules import build_optimizer
        from gradexp.trainer import Trainer

        run, cfg, data = self.run, self.run.cfg, self.run.data
        tf.get_logger().setLevel("ERROR")
        if cfg.trainer.deterministic:  # the same config, the same numbers, bit for bit
            import keras

            tf.config.experimental.enable_op_determinism()
            keras.utils.set_random_seed(cfg.trainer.seed)
        seed_tensorflow(cfg.trainer.seed, cfg)  # keeps compiled programs where it can
        device = select_device(getattr(cfg.device.name, "value", cfg.device.name),
                               cfg.device.cpu_replicas)
        run.set_tags({"tensorflow.version": tf.__version__, "device": device.used,
                      REPLICAS_TAG: device.replicas, "device.requested": device.requested,
                      TASK_TAG: data.task, OBJECTIVE_TAG: run.objective,
                      DIRECTION_TAG: run.direction})
        with device.scope():
            with builder_seeded(cfg):  # seed=N: a builder of yours, the same first weights
                run.model = build_model(cfg.model, data.n_features, data.n_outputs)
        trained = take_trained()  # hydra/launcher=packed trained this job already
        # An earlier job of this shape in this process: its traced programs, set to this
        # job's start (gradexp.shared_programs), instead of a new trace. A packed job takes
        # them too: its replay never trains, but its evaluations and checks are the same
        # traced functions a sequential job of its shape calls.
        key = shared_programs.shape_key(cfg, data, device, metric_specs(cfg, data.task))
        shared = shared_programs.take(key, run.model)
        if shared is not None:
            run.model, run.evaluator, run.trainer = shared.model, shared.evaluator, shared.trainer
            schedule = getattr(cfg.optimizer.schedule.name, "value", cfg.optimizer.schedule.name)
            run.trainer.restart(cfg.trainer.seed, eval_epochs(cfg),
                                cfg.optimizer.learning_rate if schedule == "none" else None)
            self.replay(trained)
            return device
        with device.run_scope():
            # a regression's outputs are values, whatever the loss: never squashed for a metric
            run.evaluator = Evaluator(run.model, metric_specs(cfg, data.task), data.splits(),
                                      independent_outputs(cfg.loss),
                                      data.task == "classification" and outputs_are_logits(
                                          cfg.loss, run.model.ends_in_probabilities()))
        with device.scope():
            epochs = cfg.trainer.epochs
            batch_size = data.batch_size or cfg.trainer.batch_size  # a loader's batches win
            optimizer = build_optimizer(cfg.optimizer, data.steps_per_epoch(batch_size), epochs)
            schedule = getattr(cfg.optimizer.schedule.name, "value", cfg.optimizer.schedule.name)
            run.trainer = Trainer(
                run.model, build_loss(cfg.loss), optimizer, data,
                batch_size=batch_size, seed=cfg.trainer.seed,
                compile=cfg.trainer.compile, jit_compile=cfg.trainer.jit_compile,
                log_lr=schedule != "none", strategy=device.strategy,
                evaluator=run.evaluator, eval_epochs=eval_epochs(cfg))
            if run.resume is not None:
                run.resumed = run.resume.restore(run.trainer)
                run.set_tags({RESUMED_FROM_EPOCH_TAG: run.trainer.epoch,
                              RESUMED_TO_EPOCH_TAG: epochs})
                if not run.quiet:
                    console.console().print(
                        f"resuming run {run.resume.run_id} from epoch {run.trainer.epoch} "
                        f"(checkpoint {run.resume.checkpoint})", highlight=False)
        shared_programs.keep(key, run.model, run.evaluator, run.trainer)
        self.replay(trained)
        return device

    def replay(self, trained) -> None:
        """A packed job's trainer yields what its group trained (gradexp.packed.replay); the
        shared parts keep the trainer itself, which a later sequential job trains with."""
        from gradexp.packed.replay import ReplayTrainer

        run = self.run
        if trained is None or run.resume is not None:
            return
        run.trainer = ReplayTrainer(run.trainer, trained)
        if trained.drift:  # its loss swung or grew: it may not match a sequential run
            run.set_tags({PACKED_DRIFT_TAG: trained.drift})
