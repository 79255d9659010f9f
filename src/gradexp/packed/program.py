"""One compiled program that trains a group of jobs of one shape together.

The jobs' parameters are stacked along a leading job axis; the forward pass is the model's
`stateless_call` (gradexp.models.Model.apply) under `tf.vectorized_map`, one loss per job; the
gradient of the sum of the jobs' losses is each job's own gradient (the jobs share nothing).
Keras' `optimizer.stateless_apply` raises on the TensorFlow backend, so the optimizer step is
written here, op for op as Keras 3 writes SGD (plain, momentum, Nesterov), Adagrad and Adam, with
each job's kind and hyperparameters as tensors: one program for every optimizer and rate.

The program runs `count` epochs a call and returns each epoch's loss and gradient norm per job
(and W, b of a one-feature line); the host calls it up to each epoch whose weights the jobs'
recording needs (evaluations, gradient checks, the end) and keeps those weights
(gradexp.packed.replay hands them to each job's ordinary run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from gradexp.interrupts import interrupt_pending, interrupts_deferred

# The optimizers with a stateless update here (keras class name -> kinds below)
SGD, MOMENTUM, NESTEROV, ADAGRAD, ADAM = range(5)
PACKABLE_OPTIMIZERS = ("SGD", "Adagrad", "Adam")
# Options of a Keras optimizer that change its update and that this program does not write
UNPACKED_OPTIONS = ("weight_decay", "clipnorm", "clipvalue", "global_clipnorm", "use_ema",
                    "gradient_accumulation_steps", "loss_scale_factor")


@dataclass
class JobSetup:
    """One job as the program needs it: its data, its first weights, its optimizer's update."""

    x: np.ndarray
    y: np.ndarray
    initial: list[np.ndarray]
    hyper: dict[str, float]  # kind, lr, momentum, b1, b2, one_minus_b1, one_minus_b2, eps, acc0
    orders: np.ndarray | None  # [epochs, rows]: each epoch's batch order (None: full batch)


@dataclass
class Trained:
    """What a job's packed training produced: every epoch's values, and its weights at the
    epochs its recording needs (0 = before training)."""

    values: dict[str, np.ndarray]
    weights: dict[int, list[np.ndarray]] = field(default_factory=dict)
    drift: str | None = None  # why its records may drift from a sequential run's (drift_reason)
    pruned_at: int | None = None  # the epoch sweep.pruner stopped it at, in its group
    trial: Any = None  # its Optuna trial, judged in its group (gradexp.pruning.DecidedTrial)


# A group drops its jobs stopped by sweep.pruner from the program (a narrower one, a new trace)
# once this fraction of its rows has stopped; before, it masks them (their arithmetic goes on)
DROP_FRACTION = 0.25

# An epoch's loss that rose by more than this (relative) counts as a rise; a job whose loss rose
# in more than OSCILLATING of its epochs oscillates (mini-batch noise near a minimum stays below).
RISE = 1e-3
OSCILLATING = 0.25


def drift_reason(loss: np.ndarray) -> str | None:
    """Why a job's packed records may drift from its sequential run's, from its loss curve; None
    for a job that converges. The packed program computes each job's step as the sequential
    trainer does, but its batched kernels sum in another order: ~1e-7 a step, which a converging
    job forgets and a diverging or oscillating one amplifies."""
    loss = np.asarray(loss, np.float64)
    if not np.all(np.isfinite(loss)):
        return f"diverged (loss not finite from epoch {int(np.argmin(np.isfinite(loss))) + 1})"
    # ended above where it began by more than a rise (QA: a plateau at 0.5351 -> 0.5352 read
    # "diverged")
    if len(loss) > 1 and loss[-1] > loss[0] + RISE * abs(loss[0]):
        return f"diverged (loss {loss[0]:.4g} at epoch 1, {loss[-1]:.4g} at the end)"
    rises = np.diff(loss) > RISE * np.abs(loss[:-1])
    if len(rises) >= 4 and rises.mean() > OSCILLATING:
        return f"oscillated (loss rose in {int(rises.sum())} of {len(rises)} epochs)"
    return None


def optimizer_update(optimizer) -> tuple[dict[str, float] | None, str | None]:
    """The kind and hyperparameters of a built Keras optimizer, or None and why it cannot be
    packed."""
    name = type(optimizer).__name__
    if name not in PACKABLE_OPTIMIZERS or not type(optimizer).__module__.split(".")[0] == "keras":
        return None, f"optimizer {name} has no stateless update here"
    for option in UNPACKED_OPTIONS:
        value = getattr(optimizer, option, None)
        if value not in (None, False):
            return None, f"optimizer option {option}={value}"
    if not isinstance(optimizer._learning_rate, tf.Variable) and callable(optimizer._learning_rate):
        return None, "a learning-rate schedule"
    hyper = {"kind": SGD, "lr": float(optimizer.learning_rate), "momentum": 0.0, "b1": 0.0,
             "b2": 0.0, "one_minus_b1": 0.0, "one_minus_b2": 0.0, "eps": 0.0, "acc0": 0.0}
    if name == "SGD" and optimizer.momentum != 0:
        hyper.update(kind=NESTEROV if optimizer.nesterov else MOMENTUM,
                     momentum=optimizer.momentum)
    elif name == "Adagrad":
        hyper.update(kind=ADAGRAD, eps=optimizer.epsilon, acc0=optimizer.initial_accumulator_value)
    elif name == "Adam":
        if optimizer.amsgrad:
            return None, "Adam(amsgrad=True)"
        # 1 - beta as Keras computes it: in Python floats, then cast (not 1 - float32(beta))
        hyper.update(kind=ADAM, b1=optimizer.beta_1, b2=optimizer.beta_2,
                     one_minus_b1=1 - optimizer.beta_1, one_minus_b2=1 - optimizer.beta_2,
                     eps=optimizer.epsilon)
    return hyper, None


def shuffle_orders(seed: int, rows: int, batch_size: int, epochs: int) -> np.ndarray | None:
    """Each epoch's batch order as gradexp.trainer.Trainer draws it from trainer.seed."""
    if -(-rows // batch_size) == 1:
        return None
    generator = tf.random.Generator.from_seed(seed)
    # The draws one epoch at a time (the generator's stream as the trainer consumes it), one
    # argsort over all epochs' rows (per row, as the trainer's per epoch): 2 ops an epoch, not 3
    return tf.argsort(tf.stack([generator.uniform([rows]) for _ in range(epochs)])).numpy()


class PackedProgram:
    """Trains `jobs` (one shape: the same model architecture, loss, data shapes, batches and
    epochs) with `model` (one job's gradexp.models.Model, whose stateless call serves all)."""

    def __init__(self, model, loss, jobs: list[JobSetup], batch_size: int):
        self.model = model
        self.loss = loss
        self.jobs = jobs
        self.rows = jobs[0].x.shape[0]
        self.batch_size = min(batch_size, self.rows)
        self.n_batches = -(-self.rows // self.batch_size)
        self.x = tf.constant(np.stack([job.x for job in jobs]))
        self.y = tf.constant(np.stack([job.y for job in jobs]))
        self.hyper = {key: tf.constant([job.hyper[key] for job in jobs],
                                       tf.int32 if key == "kind" else tf.float32)
                      for key in jobs[0].hyper}
        names = dict(zip(model.names, range(len(model.names))))
        scalar = set(names) == {"W", "b"} and tuple(model.params[names["W"]].shape) == (1, 1)
        self.scalar_index = (names["W"], names["b"]) if scalar else None
        # reduce_retracing: segments of other lengths (a check every N epochs) share a trace
        self._run = tf.function(self._epochs, autograph=False, reduce_retracing=True)

    # ------------------------------------------------------------------ host side
    def train(self, epochs: int, keep: set[int],
              judge: Callable[[int, list[Trained]], set[int]] | None = None) -> list[Trained]:
        """All epochs, the weights kept after each epoch in `keep` (and before the first).
        `judge(epoch, trained)` (sweep.pruner), called after each stretch, names the jobs that
        stop there (never at the last epoch): their later values are dropped, and the group
        goes on without them: masked (their weights and optimizer state held) while few have
        stopped, dropped from the program (a narrower one, traced anew) once a quarter of its
        rows have."""
        count = len(self.jobs)
        program, rows = self, list(range(count))  # rows: the job behind each row of `program`
        active = np.ones(count, np.float32)
        params = [tf.constant(np.stack([job.initial[i] for job in self.jobs]))
                  for i in range(len(self.jobs[0].initial))]
        acc0 = self.hyper["acc0"]
        first = [_per_job(acc0, p) * tf.ones_like(p) for p in params]
        second = [tf.zeros_like(p) for p in params]
        iteration = tf.constant(0, tf.int64)
        trained = [Trained({}, {0: [p[j].numpy() for p in params]}) for j in range(count)]
        parts: list[dict[int, dict[str, np.ndarray]]] = []  # each stretch: job -> its values
        done = 0
        for end in sorted({e for e in keep if 0 < e <= epochs} | {epochs}):
            # A Ctrl-C or SIGTERM lands between stretches, never inside TensorFlow's Python
            # code around the compiled call (gradexp.interrupts), as in a sequential run; one
            # held by the caller (the packed launcher's training) stops the stretches here.
            if interrupt_pending():
                break
            with interrupts_deferred():
                orders = (np.stack([job.orders[done:end] for job in program.jobs])
                          if self.n_batches > 1 else np.zeros((len(rows), end - done, 1)))
                params, first, second, iteration, values = program._run(
                    params, first, second, iteration, tf.constant(orders.astype(np.int32)),
                    tf.constant(end - done), tf.constant(active))
                values = {key: value.numpy() for key, value in values.items()}
                parts.append({j: {key: value[:, r] for key, value in values.items()}
                              for r, j in enumerate(rows) if active[r]})
                done = end
                for r, j in enumerate(rows):
                    if active[r]:
                        trained[j].weights[end] = [p[r].numpy() for p in params]
                if judge is None:
                    continue
                for j in judge(end, trained):  # at the last epoch too: it reports, as it would
                    active[rows.index(j)] = 0.0
                    trained[j].pruned_at = end
                if not active.any():
                    break
                if end < epochs and len(rows) - active.sum() >= DROP_FRACTION * len(rows):
                    going = np.flatnonzero(active).tolist()
                    params, first, second = ([tf.gather(t, going) for t in state]
                                             for state in (params, first, second))
                    rows = [rows[r] for r in going]
                    program = PackedProgram(self.model, self.loss, [self.jobs[j] for j in rows],
                                            self.batch_size)
                    active = np.ones(len(rows), np.float32)
        if interrupt_pending():
            return trained  # cut short: the held signal lands as the caller's block ends
        for j in range(count):
            mine = [part[j] for part in parts if j in part]
            trained[j].values = {key: np.concatenate([part[key] for part in mine])
                                 for key in mine[0]}
            trained[j].drift = drift_reason(trained[j].values["loss"])
        return trained

    # ------------------------------------------------------------------ compiled
    def _job_loss(self, args) -> tf.Tensor:
        params, x, y = args
        return self.loss(y, self.model.apply(list(params), x, training=True))

    def _step(self, params, first, second, iteration, x, y, active):
        with tf.GradientTape() as tape:
            tape.watch(params)
            losses = tf.vectorized_map(self._job_loss, (params, x, y))
            total = tf.reduce_sum(losses)
        gradients = tape.gradient(total, params)
        norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g), axis=list(range(1, len(g.shape))))
                                 for g in gradients]))
        new = [self._update(p, g, m, v, iteration, active)
               for p, g, m, v in zip(params, gradients, first, second)]
        return ([n[0] for n in new], [n[1] for n in new], [n[2] for n in new], iteration + 1,
                losses, norm)

    def _update(self, p, g, m, v, iteration, active):
        """Every job's update, written as Keras writes each optimizer; each job keeps its own
        (a job no longer `active`, stopped by sweep.pruner, keeps what it has)."""
        h = {key: _per_job(value, p) for key, value in self.hyper.items()}
        kind = h["kind"]
        lr = h["lr"]
        # SGD
        plain = p - g * lr
        # momentum and Nesterov: m = m·momentum - g·lr; p += m (Nesterov: p += m·momentum - g·lr)
        velocity = m * h["momentum"] - g * lr
        momentum = p + velocity
        nesterov = p + (velocity * h["momentum"] - g * lr)
        # Adagrad: acc += g²; p -= lr·g / sqrt(acc + eps)
        accumulator = m + tf.square(g)
        adagrad = p - (lr * g) / tf.sqrt(accumulator + h["eps"])
        # Adam
        step = tf.cast(iteration + 1, p.dtype)
        alpha = lr * tf.sqrt(1 - tf.pow(h["b2"], step)) / (1 - tf.pow(h["b1"], step))
        mean = m + (g - m) * h["one_minus_b1"]
        square = v + (tf.square(g) - v) * h["one_minus_b2"]
        adam = p - (mean * alpha) / (tf.sqrt(square) + h["eps"])

        def pick(*by_kind):
            out = by_kind[0]
            for index, value in enumerate(by_kind[1:], start=1):
                out = tf.where(tf.equal(kind, index), value, out)
            return out

        going = tf.greater(_per_job(active, p), 0.0)
        return (tf.where(going, pick(plain, momentum, nesterov, adagrad, adam), p),
                tf.where(going, pick(m, velocity, velocity, accumulator, mean), m),
                tf.where(going, pick(v, v, v, v, square), v))

    def _epoch(self, params, first, second, iteration, orders, e, active):
        if self.n_batches == 1:
            return self._step(params, first, second, iteration, self.x, self.y, active)
        size, count = self.batch_size, len(self.jobs)

        def batch(index, params, first, second, iteration, loss, norm):
            rows = orders[:, e, index * size:(index + 1) * size]
            x = tf.gather(self.x, rows, batch_dims=1)
            y = tf.gather(self.y, rows, batch_dims=1)
            params, first, second, iteration, losses, norms = self._step(
                params, first, second, iteration, x, y, active)
            # the epoch's loss as the sequential trainer's (gradexp.trainer.Trainer._epoch) and
            # Keras' fit's: each batch's weighted by its rows, a short last batch less
            weight = tf.cast(tf.shape(rows)[1], losses.dtype) / size
            return (index + 1, params, first, second, iteration, loss + losses * weight,
                    norm + norms)

        zero = tf.zeros([count])
        _, params, first, second, iteration, loss, norm = tf.while_loop(
            lambda index, *_: index < self.n_batches, batch,
            (tf.constant(0), params, first, second, iteration, zero, zero))
        return (params, first, second, iteration, loss / (self.rows / size),
                norm / self.n_batches)

    def _epochs(self, params, first, second, iteration, orders, count, active):
        keys = ["loss", "grad_norm", *(("W", "b") if self.scalar_index else ())]
        arrays = {key: tf.TensorArray(tf.float32, size=count) for key in keys}

        def epoch(e, params, first, second, iteration, arrays):
            params, first, second, iteration, loss, norm = self._epoch(
                params, first, second, iteration, orders, e, active)
            values = {"loss": loss, "grad_norm": norm}
            if self.scalar_index:
                w, b = self.scalar_index
                values.update(W=params[w][:, 0, 0], b=params[b][:, 0])
            return (e + 1, params, first, second, iteration,
                    {key: array.write(e, values[key]) for key, array in arrays.items()})

        _, params, first, second, iteration, arrays = tf.while_loop(
            lambda e, *_: e < count, epoch,
            (tf.constant(0), params, first, second, iteration, arrays))
        return params, first, second, iteration, {key: a.stack() for key, a in arrays.items()}


def _per_job(value: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    """A per-job [jobs] tensor shaped to broadcast against a stacked [jobs, ...] parameter."""
    return tf.reshape(value, [-1] + [1] * (len(like.shape) - 1))
