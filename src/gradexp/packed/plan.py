"""Which jobs of a sweep pack together, which run sequentially and why; training the groups.

A job packs when its config asks for nothing the packed program does not write (an optimizer
without a stateless update here, a schedule, early stopping, checkpoints and resume, a mirrored
or XLA device, eager steps, callbacks of yours, which may need the host at epochs of their own)
and its built parts fit it (data in memory, a model without per-job state such as dropout seeds
or batch-norm statistics, and without losses of its own). Packable jobs group by what their
shapes depend on: the data's shapes, the model architecture, the loss, the batches and epochs.
A group of one job gains nothing: it runs sequentially too.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradexp.callbacks import AFTER_YOURS, BEFORE_YOURS
from gradexp.seeds import builder_seeded, derive_seeds
from gradexp.setup_checks import SIZED_FROM_DATA
from gradexp.tag_keys import PACKED_DRIFT_TAG

# Model keys that change the first weights only, not the program's shapes
WEIGHTS_ONLY_KEYS = ("seed", "init_scale")
# Why a job that sweep.skip_finished will reuse is in no program
REUSED = "FINISHED before, reused (sweep.skip_finished)"


@dataclass
class Prepared:
    """A packable job: its setup for the program, its group key, its parts."""

    setup: Any  # gradexp.packed.program.JobSetup
    key: tuple
    model: Any
    loss: Any
    batch_size: int
    epochs: int
    keep: set[int]  # epochs whose weights its recording needs
    cfg: Any = None  # its task config
    data: Any = None  # its gradexp.data.Dataset


@dataclass
class Plan:
    groups: list[list[int]] = field(default_factory=list)  # job numbers, each group packed
    prepared: dict[int, Prepared] = field(default_factory=dict)
    sequential: dict[int, str] = field(default_factory=dict)  # job number -> why

    def line(self) -> str:
        """The one line a packed sweep says about itself."""
        packed = sum(len(group) for group in self.groups)
        text = f"packed {packed} of {packed + len(self.sequential)} jobs in " \
               f"{len(self.groups)} program{'s' * (len(self.groups) != 1)}"
        if not self.sequential:
            return text
        by_reason: dict[str, list[int]] = defaultdict(list)
        for job, reason in sorted(self.sequential.items()):
            by_reason[reason].append(job)
        reasons = "; ".join(f"#{', #'.join(map(str, jobs))}: {reason}"
                            for reason, jobs in by_reason.items())
        return f"{text}; sequential: {reasons}"


def config_reason(cfg: DictConfig) -> str | None:
    """Why a job's config cannot be packed, before anything is built; None if it may."""
    name = lambda node: str(getattr(node, "value", node))  # noqa: E731 - an enum or a str
    trainer = cfg.trainer
    if name(cfg.device.name) in ("mirrored", "gpu") or cfg.device.cpu_replicas:
        return f"device={name(cfg.device.name)}"
    if trainer.jit_compile:
        return "XLA (trainer.jit_compile)"
    if not trainer.compile:
        return "trainer.compile=false"
    if trainer.checkpoint_every or trainer.resume or cfg.sweep.resume_killed:
        return "checkpoints and resume"
    if trainer.early_stopping.enabled:
        return "early stopping"
    if name(cfg.optimizer.schedule.name) != "none":
        return "a learning-rate schedule"
    yours = [str(n) for n in (cfg.get("callbacks") or {})
             if n not in BEFORE_YOURS + AFTER_YOURS and cfg.callbacks[n] is not None]
    if yours:
        return f"callbacks of yours ({', '.join(yours)})"
    return None


def keep_epochs(cfg: DictConfig) -> set[int]:
    """The epochs at which a job's recording reads its weights: evaluations, checks, the end."""
    from gradexp.callbacks.held_out import eval_epochs

    epochs = cfg.trainer.epochs
    keep = set(eval_epochs(cfg)) | {epochs}
    every = cfg.gradcheck.every_n_epochs if cfg.gradcheck.enabled else None
    if every:
        keep |= set(range(every, epochs, every))
    return keep


def prepare(cfg: DictConfig, launch_dir: Path, built: dict | None = None
            ) -> tuple[Prepared | None, str | None]:
    """Build what a job's run would build (its data, model, loss, optimizer), as gradexp.loop
    builds them, and say whether it fits the packed program. `built` keeps the data sets and
    models already built for this sweep: jobs with the same data config share one data set, and
    jobs with the same model config and seeds one model (its first weights are all they take
    from it), jobs with the same seed and batches one batch order, instead of building each
    once a job (a 64-job sweep built 64 of each)."""
    built = {} if built is None else built
    from gradexp.tensorflow_import import import_tensorflow

    tf = import_tensorflow()
    import keras

    from gradexp.data import load_data
    from gradexp.losses import build_loss, independent_outputs
    from gradexp.models import build_model, scales_its_loss
    from gradexp.packed.program import JobSetup, optimizer_update, shuffle_orders
    from gradexp.schedules import build_optimizer
    from gradexp.user_code import importable

    importable(launch_dir)
    independent = independent_outputs(cfg.loss)  # a yes/no label: one column, or two
    data_key = ("data", OmegaConf.to_yaml(cfg.data, resolve=True), independent)
    if data_key not in built:
        built[data_key] = load_data(cfg.data, launch_dir, independent)
    data = built[data_key]
    if data.stream is not None:
        return None, "a streamed tf.data set"
    # What the first weights depend on: the model's config, the data's widths, the seeds set. A
    # builder of yours (no model.seed) may draw from a global state that moves: built per job.
    model_key = ("model", OmegaConf.to_yaml(cfg.model, resolve=True), data.n_features,
                 data.n_outputs, cfg.trainer.seed, bool(cfg.trainer.deterministic)) \
        if "seed" in cfg.model else ("model", object())
    if model_key not in built:
        if cfg.trainer.deterministic:
            keras.utils.set_random_seed(cfg.trainer.seed)
        tf.random.set_seed(cfg.trainer.seed)
        with builder_seeded(cfg):  # as a sequential job builds it (gradexp.loop)
            model = build_model(cfg.model, data.n_features, data.n_outputs)
        reason = None
        state = [v.path for v in model.network.non_trainable_variables]
        if state:  # named: a frozen layer was told as "dropout seeds, batch-norm statistics"
            reason = (f"a model with state per job (non-trainable variables: "
                      f"{', '.join(state[:3])}{', ...' if len(state) > 3 else ''})")
        elif model.has_own_losses(tf.constant(data.x[:2])):
            reason = "a model with losses of its own (regularizers)"
        elif scales_its_loss(model.network):
            reason = "a mixed_float16 model (its optimizer scales the loss, as Keras' fit)"
        built[model_key] = (model, reason)
    model, reason = built[model_key]
    if reason is not None:
        return None, reason
    loss = build_loss(cfg.loss)
    # the model's code and the loss's, not its weights: asked once per sweep of them
    code = {k: v for k, v in OmegaConf.to_container(cfg.model, resolve=True).items()
            if k not in WEIGHTS_ONLY_KEYS}
    vectorized_key = ("vectorized", repr(code), data.x.shape, data.y.shape,
                      OmegaConf.to_yaml(cfg.loss, resolve=True))
    if vectorized_key not in built:
        built[vectorized_key] = not_vectorized(cfg, model, loss, data)
    if built[vectorized_key] is not None:
        return None, built[vectorized_key]
    epochs = cfg.trainer.epochs
    rows = len(data.x)
    batch_size = min(cfg.trainer.batch_size or rows, rows)
    optimizer = build_optimizer(cfg.optimizer, data.steps_per_epoch(batch_size), epochs)
    hyper, reason = optimizer_update(optimizer)
    if hyper is None:
        return None, reason
    orders_key = ("orders", cfg.trainer.seed, rows, batch_size, epochs)
    if orders_key not in built:
        built[orders_key] = shuffle_orders(cfg.trainer.seed, rows, batch_size, epochs)
    setup = JobSetup(data.x, data.y, [v.numpy() for v in model.params], hyper,
                     built[orders_key])
    architecture = {k: v for k, v in OmegaConf.to_container(cfg.model, resolve=True).items()
                    if k not in WEIGHTS_ONLY_KEYS}
    key = (data.x.shape, data.y.shape, tuple(tuple(v.shape) for v in model.params),
           repr(architecture), OmegaConf.to_yaml(cfg.loss, resolve=True), epochs, batch_size)
    return Prepared(setup, key, model, loss, batch_size, epochs, keep_epochs(cfg), cfg,
                    data), None


# gradexp's own line and MLP under a Keras loss: no gradient of their own, no random numbers
VECTORIZED = tuple(target for target in SIZED_FROM_DATA if not target.endswith(".buggy_linear"))


def not_vectorized(cfg: DictConfig, model: Any, loss: Any, data: Any) -> str | None:
    """Why the packed program would not train what the job alone trains, or None. Two things
    are asked on a few rows at the first weights: is the loss the same twice (raw tf.random in
    a layer: the map draws other numbers; QA: 6e-4 off the job alone, no word), and is its
    gradient alone the one two jobs of a tf.vectorized_map get, which vectorizes a
    tf.custom_gradient's backward as it can (QA: a planted wrong backward in a layer or a loss
    trained packed exactly as the correct one). ~0.1-0.5 s once per model code and loss."""
    import numpy as np
    import tensorflow as tf

    from gradexp.gradcheck.rebuilt import dense

    if cfg.model.get("_target_") in VECTORIZED and str(cfg.loss.get("_target_", "")).startswith(
            "keras.losses."):
        return None
    x, y = tf.constant(data.x[:8]), tf.constant(data.y[:8])
    params = [tf.constant(v.numpy()) for v in model.params]

    def alone() -> list[np.ndarray]:
        with tf.GradientTape() as tape:
            tape.watch(params)
            value = loss(y, model.apply(params, x, training=True))
        # an Embedding's IndexedSlices densified, a weight the loss does not reach as zeros
        return [np.asarray(value), *dense(tape.gradient(
            value, params, unconnected_gradients=tf.UnconnectedGradients.ZERO))]

    first = alone()
    if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(first, alone())):
        return "a loss that is not the same twice (a layer drawing raw tf.random)"

    @tf.function(autograph=False)  # as the packed program runs it (gradexp.packed.program)
    def vectorized(stacked: list) -> list:
        with tf.GradientTape() as tape:
            tape.watch(stacked)
            total = tf.reduce_sum(tf.vectorized_map(
                lambda args: loss(args[2], model.apply(list(args[0]), args[1], training=True)),
                (stacked, tf.stack([x, x]), tf.stack([y, y]))))
        return tape.gradient(total, stacked, unconnected_gradients=tf.UnconnectedGradients.ZERO)

    # Two jobs, as a group has: a map of one can vectorize what a map of two does not (a
    # backward sizing itself by tf.size saw both jobs' gradients as one: QA's buggy_linear)
    packed = [np.asarray(tf.convert_to_tensor(g))  # IndexedSlices, from the map's gathers
              for g in vectorized([tf.stack([p, p]) for p in params])]
    if not all(np.allclose(job, b, rtol=1e-4, atol=1e-6 * (np.max(np.abs(b)) + 1e-30))
               for a, b in zip(packed, first[1:]) for job in a):
        return ("a gradient of its own (a tf.custom_gradient) that vectorized training does "
                "not reproduce")
    return None


OUTSIDE_VARIABLES = "a model with state outside its variables (a tensor its builder drew)"


def _same_model(first: Prepared, other: Prepared) -> bool:
    """Does the first job's model, given the other job's weights, compute what the other's
    does (a few rows, inference mode)? Not where a builder keeps state outside variables (QA:
    a random projection made as a tf.constant in build(): every seed's replicate trained the
    first job's projection)."""
    import numpy as np
    import tensorflow as tf

    if first.model is other.model:
        return True
    params = [tf.constant(v) for v in other.setup.initial]
    rows = tf.constant(other.data.x[:4])
    return bool(np.array_equal(np.asarray(first.model.apply(params, rows)),
                               np.asarray(other.model.apply(params, rows)), equal_nan=True))


def plan_sweep(jobs: dict[int, DictConfig], launch_dir: Path) -> Plan:
    """Sort a sweep's jobs (number -> task config) into packed groups and a sequential rest."""
    from gradexp.sweep_reuse import will_reuse

    plan = Plan()
    groups: dict[tuple, list[int]] = defaultdict(list)
    built: dict[tuple, Any] = {}  # data sets and models, shared by the jobs that agree on them
    for number, cfg in jobs.items():
        # the seeds the job's run derives from a master `seed` (gradexp.loop does the same)
        derive_seeds(cfg)
        if will_reuse(cfg, launch_dir):
            plan.sequential[number] = REUSED
            continue
        reason = config_reason(cfg)
        prepared = None
        if reason is None:
            try:
                prepared, reason = prepare(cfg, launch_dir, built)
            except Exception as error:  # noqa: BLE001 - its own run will say it in full
                reason = f"could not be built ahead ({type(error).__name__})"
        if prepared is None:
            plan.sequential[number] = reason or "unknown"
            continue
        plan.prepared[number] = prepared
        groups[prepared.key].append(number)
    for members in groups.values():
        first = plan.prepared[members[0]]
        for number in members[1:]:  # the program computes with the first job's model
            if not _same_model(first, plan.prepared[number]):
                plan.sequential[number] = OUTSIDE_VARIABLES
                del plan.prepared[number]
                members.remove(number)
        if len(members) == 1:
            plan.sequential[members[0]] = "no other job of its shape"
            del plan.prepared[members[0]]
        else:
            plan.groups.append(members)
    return plan


def task_configs(configs: dict[int, DictConfig]) -> dict[int, DictConfig]:
    """Each job's config (number -> Hydra's sweep config) as its task gets it: no `hydra` node,
    its interpolations resolved against its own Hydra config (`${hydra:job.num}`), as run_job
    resolves them. Sets Hydra's config to each job's in turn (the caller keeps its own)."""
    from hydra.core.hydra_config import HydraConfig

    from gradexp.sweep_configs import task_config

    jobs = {}
    for number, config in configs.items():
        HydraConfig.instance().set_config(config)
        jobs[number] = task_config(config)
    return jobs


@dataclass
class Planned:
    """A sweep planned and its groups trained, as the launcher says and replays it: what a
    helper process that planned hands back (the models and data it built stay there)."""

    line: str  # Plan.line()
    programs: int
    trained: dict[int, Any]  # job number -> gradexp.packed.program.Trained
    seconds: float  # the packed training alone

    def lines(self) -> list[tuple[str, bool]]:
        """What the launcher says once the groups trained, each (line, a note: else logged):
        the packed training's seconds (benchmarks/bench_packed.py reads that line), the jobs
        whose records may drift."""
        said = []
        if self.trained:
            said.append((f"trained {len(self.trained)} packed jobs in {self.programs} "
                         f"program{'s' * (self.programs != 1)}: {self.seconds:.2f} s", False))
        drift = drift_line(self.trained)
        if drift:
            said.append((drift, True))
        return said


def plan_and_train(configs: dict[int, DictConfig], launch_dir: Path) -> Planned:
    """plan_sweep and train_groups for jobs judged by no pruner as they train (a helper process
    plans these: gradexp.packed.replay_processes)."""
    plan = plan_sweep(task_configs(configs), launch_dir)
    started = time.perf_counter()
    trained = train_groups(plan)
    return Planned(plan.line(), len(plan.groups), trained, time.perf_counter() - started)


def train_groups(plan: Plan, trials: dict[int, Any] | None = None) -> dict[int, Any]:
    """Train every packed group: job number -> its gradexp.packed.program.Trained. `trials`
    (job number -> gradexp.pruning.JobTrial, sweep.pruner=asha or hyperband): each such job is
    judged at its evaluations as its group trains, and a job stopped stops updating."""
    from gradexp.interrupts import interrupt_pending
    from gradexp.packed.program import PackedProgram
    from gradexp.pruning import DecidedTrial

    trials = trials or {}
    trained = {}
    for members in plan.groups:
        if interrupt_pending():  # held (the launcher's region): it lands once this returns
            break
        first = plan.prepared[members[0]]
        keep = set().union(*(plan.prepared[n].keep for n in members))
        program = PackedProgram(first.model, first.loss,
                                [plan.prepared[n].setup for n in members], first.batch_size)
        judged = [n for n in members if n in trials]
        judge = GroupJudge(members, plan.prepared, trials) if judged else None
        results = program.train(first.epochs, keep, judge)
        for number, job in zip(members, results):
            if number in trials:  # judged in the group, or else in its run (GroupJudge.unjudged)
                job.trial = trials[number] if number in judge.unjudged else \
                    DecidedTrial(trials[number], job.pruned_at)
        trained.update(zip(members, results))
    return trained


class GroupJudge:
    """sweep.pruner in a packed group: at each evaluation epoch, in job order, each job still
    training reports its objective to its trial, evaluated as its run evaluates it (its own
    gradexp.evaluation.Evaluator on its weights of that epoch), and Optuna's pruner says whether
    it stops, as the pruning callback (gradexp.callbacks.pruning) asks in a sequential sweep.
    asha and hyperband judge a job at a rung against the jobs that reached that rung, so a group
    judged epoch by epoch stops the jobs a sequential sweep in the same order stops. A job whose
    evaluation fails here (a metric of yours, say) is left to its run, which judges it in its
    replay and fails as it would alone (`unjudged`)."""

    def __init__(self, members: list[int], prepared: dict[int, Prepared],
                 trials: dict[int, Any]):
        from gradexp.callbacks.held_out import eval_epochs
        from gradexp.evaluation import Evaluator
        from gradexp.losses import independent_outputs, outputs_are_logits
        from gradexp.metrics import metric_specs, objective

        self.jobs = []  # (position in the group, its number, trial, parts, evaluator, ...)
        self.unjudged: set[int] = set()
        for position, number in enumerate(members):
            if number not in trials:
                continue
            job = prepared[number]
            try:
                evaluator = Evaluator(job.model, metric_specs(job.cfg, job.data.task),
                                      job.data.splits(), independent_outputs(job.cfg.loss),
                                      job.data.task == "classification" and outputs_are_logits(
                                          job.cfg.loss, job.model.ends_in_probabilities()))
            except Exception:  # noqa: BLE001 - its own run will say it in full
                self.unjudged.add(number)
                continue
            self.jobs.append((position, number, trials[number], job, evaluator,
                              eval_epochs(job.cfg), objective(job.cfg, job.data.task)[0]))

    def __call__(self, epoch: int, trained: list[Any]) -> set[int]:
        stopped = set()
        for position, number, trial, job, evaluator, epochs, metric in self.jobs:
            if trained[position].pruned_at is not None or epoch not in epochs \
                    or number in self.unjudged:
                continue
            for variable, value in zip(job.model.params, trained[position].weights[epoch]):
                variable.assign(value)
            try:
                value = evaluator(("train", "val")).get(metric)
            except Exception:  # noqa: BLE001 - its own run will say it in full
                self.unjudged.add(number)
                continue
            if value is None:
                continue  # an objective no evaluation gives (final_loss): never judged
            if trial.judge(value, epoch, last=epoch >= job.epochs):
                stopped.add(position)
        return stopped


def drift_line(trained: dict[int, Any]) -> str | None:
    """One line naming the packed jobs whose training diverged or oscillated (their records may
    drift from a sequential run's; each such child is tagged gradexp.packed_drift); None if
    none did."""
    drifting = sorted(number for number, job in trained.items() if job.drift)
    if not drifting:
        return None
    return (f"packed jobs #{', #'.join(map(str, drifting))} diverged or oscillated: their "
            "records may differ from a sequential run's in float arithmetic (tag "
            f"{PACKED_DRIFT_TAG})")
