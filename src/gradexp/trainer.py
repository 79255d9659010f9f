"""Training: GradientTape steps, many epochs per compiled call, metrics kept on the device.

The trainer knows nothing about MLflow or the console. `Trainer.train(stops)` runs epochs in
compiled calls (one `tf.function` of `tf.while_loop`s: no host sync inside) that end only at
the epochs in `stops` (events that need the host: a gradient check, an early-stopping decision, a
checkpoint) or when a call has run for about STRETCH_SECONDS, so the console, MLflow's writer and
Ctrl-C hear from it a few times a second. Each call returns every epoch's values (loss,
grad_norm, lr, W and b of a one-feature line) and, at the evaluation epochs, the held-out
metrics, computed inside the same call; the caller logs, checks and prints from those arrays.

The loss minimized is the one Keras' `fit` minimizes: the data loss plus the model's own losses
(`model.losses`: weight and activity regularizers, `add_loss`), with the model in training mode.
`loss` is that total; a model with losses of its own also gets `loss/data` and
`loss/regularization` per epoch, the two parts of it. An epoch's values are fit's too: the mean
of its batches' losses weighted by their rows (a short last batch counts for its rows).

The loops are written as `tf.while_loop`s, and the function is traced without autograph:
converting this module's Python loops cost ~0.4 s of every run's first call, more than the rest
of its tracing. User code the loop calls (a loss, a metric) is still converted, as tf.function
would convert it (gradexp.user_code.with_autograph). The loops' bounds are tensors, not a
`tf.range`, because XLA (trainer.jit_compile) wants a range's size known when compiling.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops  # the graph gradient registry

from gradexp.data import Dataset
from gradexp.models import Model, scales_its_loss
from gradexp.user_code import with_autograph

STRETCH_SECONDS = 0.25  # a compiled call's length when no host event comes sooner
FIRST_STRETCH = 16  # epochs in the first call, which also traces: its speed says little
MAX_GROWTH = 8  # a call runs at most this many times the previous call's epochs
TRACES = 0  # times a training call was traced in this process (gradexp.shared_programs' test)


@dataclass
class EpochMetrics:
    """Metrics of the epochs after `first_epoch` were done: epochs first_epoch + 1 ..
    first_epoch + len, numbered from 1 as the progress lines print them; each epoch's values are
    logged at step = its number."""

    first_epoch: int  # epochs done before this stretch
    values: dict[str, np.ndarray]  # per epoch: "loss", "grad_norm" (and "lr", "W", "b")
    evaluations: dict[int, dict[str, float]] = field(default_factory=dict)  # epoch -> val/mse..
    # The values that must be finite: not "grad_norm" under a LossScaleOptimizer, whose scaled
    # gradients overflow now and then by design (it skips those steps and lowers its scale).
    judged: tuple[str, ...] = ("loss", "grad_norm")

    @property
    def last_epoch(self) -> int:
        return self.first_epoch + len(self.values["loss"])

    @property
    def epochs(self) -> np.ndarray:
        return self.first_epoch + 1 + np.arange(len(self.values["loss"]))

    def at(self, epoch: int) -> dict[str, float]:
        """Every per-epoch value of one epoch of this stretch."""
        return {key: float(values[epoch - self.first_epoch - 1])
                for key, values in self.values.items()}

    def first_nonfinite_epoch(self) -> int | None:
        """The first epoch whose loss or gradient norm (`judged`) is NaN or infinite, else None."""
        bad = ~np.logical_and.reduce([np.isfinite(self.values[key]) for key in self.judged])
        return int(self.epochs[np.argmax(bad)]) if bad.any() else None

    def upto(self, epoch: int) -> EpochMetrics:
        """The metrics of the epochs before `epoch` (to keep what was good before a divergence)."""
        count = epoch - 1 - self.first_epoch
        return EpochMetrics(self.first_epoch, {k: v[:count] for k, v in self.values.items()},
                            {e: m for e, m in self.evaluations.items() if e < epoch},
                            self.judged)


class Trainer:
    """Minimises `loss(y, model(x, training=True)) + sum(model.losses)` over `data` with a
    Keras optimizer."""

    def __init__(self, model: Model, loss, optimizer, data: Dataset, *, batch_size: int | None,
                 seed: int, compile: bool = True, jit_compile: bool = False,
                 log_lr: bool = False, strategy=None, evaluator=None,
                 eval_epochs: Iterable[int] = ()):
        self.model = model
        self.strategy = strategy  # device=mirrored: each batch split across its replicas
        self.loss = with_autograph(loss)  # user code, converted as tf.function would
        if scales_its_loss(model.network) and not isinstance(
                optimizer, keras.optimizers.LossScaleOptimizer):
            # as Keras' compile does for a mixed_float16 model: the loss scaled up before the
            # gradients (float16's would underflow), the update skipped where they overflow
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        self.optimizer = optimizer
        self.scales_loss = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self._judged = ("loss",) if self.scales_loss else ("loss", "grad_norm")  # EpochMetrics
        self.x = tf.constant(data.x)
        self.y = tf.constant(data.y)
        self.n_samples = data.x.shape[0]
        self.batch_size = min(batch_size or self.n_samples, self.n_samples)
        self.n_batches = -(-self.n_samples // self.batch_size)
        # The epoch's rows in batches: n_batches when they divide, less with a short last batch
        # (the weight of a batch's loss in the epoch's mean, Keras' fit's: its rows / batch_size)
        self.epoch_batches = self.n_samples / self.batch_size
        self.shuffle = tf.random.Generator.from_seed(seed)
        self.epoch = 0
        self.epoch_variable = tf.Variable(0, dtype=tf.int64, trainable=False)  # checkpointed
        self.log_lr = log_lr  # a schedule: keep each epoch's learning rate as "lr"
        # Held-out metrics (gradexp.evaluation.Evaluator) at these epochs, inside the calls.
        self.evaluator = evaluator
        # sorted, so a call finds its evaluation epochs by bisection (eval.every=1 on a long
        # run would otherwise scan every epoch of the run at every call)
        self.eval_epochs = np.unique(np.fromiter(eval_epochs if evaluator is not None else (),
                                                 dtype=np.int64))
        self.eval_keys = evaluator.keys(("train", "val")) if evaluator is not None else ()
        self.stretch_seconds = STRETCH_SECONDS
        self.calls = 0
        self.untrained: list[str] = []  # variables no gradient reaches, known once traced
        self._seconds_per_epoch: float | None = None  # as measured on the last call
        self._longest = 0  # epochs in the longest call so far
        # The gradients TensorFlow registered for good while tracing this trainer's calls, let
        # go of once it is collected (a shape shared_programs dropped): _owned_gradients.
        self._gradients: list[str] = []
        weakref.finalize(self, _forget_gradients, self._gradients).atexit = False
        self.optimizer.build(model.params)
        # The optimizer's state before its first step, for a later job that shares this
        # trainer's traced calls (gradexp.shared_programs; restart).
        self._optimizer_start = [tf.identity(v) for v in self.optimizer.variables]
        # Known before tracing: the per-epoch arrays are laid out before the first step runs.
        self.own_losses = model.has_own_losses(self.x[:2])
        self.loss_keys = ["loss", *(PARTS if self.own_losses else ())]
        # A streamed tf.data training set (gradexp.tfdata): epochs iterate it on the host, one
        # compiled step per batch; self.x, self.y are its first rows only.
        self.stream = None
        if data.stream is not None:
            self.stream = data.stream if data.batch_size else data.stream.batch(batch_size)
            self.stream_steps = data.stream_steps
            self._batches = None  # with stream_steps: one iterator, epochs go on where it was
            spec = [tf.TensorSpec([None, data.x.shape[1]], tf.float32),
                    tf.TensorSpec([None, data.y.shape[1]], tf.float32)]
            self._stream_step = tf.function(self._traced_step, input_signature=spec,
                                            autograph=False) if compile else self._step
        run = self._run_epochs
        if compile:
            signature = [tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.bool)]
            run = tf.function(run, jit_compile=jit_compile or None, input_signature=signature,
                              autograph=False)
        self._run = run

    def restart(self, seed: int, eval_epochs: Iterable[int], learning_rate: float | None) -> None:
        """Start over as a new job of the same shape (gradexp.shared_programs), keeping the
        traced calls: epoch 0, the optimizer's state before its first step with this job's
        learning rate (None: a schedule, the same for every job of the shape), the batch order
        from `seed`, this job's evaluation epochs. The model's variables are the caller's."""
        for variable, start in zip(self.optimizer.variables, self._optimizer_start):
            variable.assign(start)
        if learning_rate is not None:
            self.optimizer.learning_rate = learning_rate  # assigns the variable the trace reads
        self.shuffle.reset_from_seed(seed)
        self.epoch = 0
        self.epoch_variable.assign(0)
        self.eval_epochs = np.unique(np.fromiter(eval_epochs if self.evaluator is not None
                                                 else (), dtype=np.int64))
        self.stretch_seconds = STRETCH_SECONDS
        self.calls = 0
        self._seconds_per_epoch = None
        self._longest = 0

    def final_loss(self) -> float:
        """The loss on the whole training set with the current parameters, as Keras'
        `evaluate` reports it: in inference mode, the model's own losses included."""
        if self.stream is not None:  # a streamed set: the row-weighted mean over an epoch
            total = rows = 0.0
            for x, y in self._epoch_batches():
                outputs = self.model(x)
                n = float(x.shape[0])
                total += n * float(_total(self.loss(y, outputs), self.model.own_loss(outputs)))
                rows += n
            return total / rows
        outputs = self.model(self.x)
        return float(_total(self.loss(self.y, outputs), self.model.own_loss(outputs)))

    def train(self, stops: Iterable[int]) -> Iterator[EpochMetrics]:
        """Train until each epoch count in `stops`, yielding the metrics of each compiled call
        (several per stop when the epochs to it take longer than about STRETCH_SECONDS)."""
        if self.stream is not None:
            yield from self._train_streamed(stops)
            return
        for stop in sorted(stops):
            while self.epoch < stop:
                count = min(stop - self.epoch, self._next_count())
                first = self.epoch
                segments, evaluate = self._segments(first, count)
                started = time.perf_counter()
                per_epoch, held_out = self._run(tf.constant(segments, tf.int32),
                                                tf.constant(evaluate))
                values = {key: value.numpy() for key, value in per_epoch.items()}
                self._measure(count, time.perf_counter() - started)
                ends = first + np.cumsum(segments)
                evaluations = {int(ends[s]): {key: float(value[s])
                                              for key, value in held_out.items()}
                               for s in np.flatnonzero(evaluate)}
                self.epoch = first + count
                yield EpochMetrics(first, values, evaluations, self._judged)

    # ---------------------------------------------------------------- a streamed data set
    def _train_streamed(self, stops: Iterable[int]) -> Iterator[EpochMetrics]:
        """As `train`, for a streamed set: epochs on the host, a stretch ending at each stop or
        after about STRETCH_SECONDS; held-out metrics after the evaluation epochs."""
        keys = (["lr"] if self.log_lr else []) + [*self.loss_keys, "grad_norm",
                                                   *self.model.scalars()]
        for stop in sorted(stops):
            while self.epoch < stop:
                first, started = self.epoch, time.perf_counter()
                values: dict[str, list[float]] = {key: [] for key in keys}
                evaluations = {}
                while self.epoch < stop:
                    epoch = {"lr": float(self.optimizer.learning_rate)} if self.log_lr else {}
                    epoch.update(self._streamed_epoch())
                    epoch.update({k: float(v) for k, v in self.model.scalars().items()})
                    for key in keys:
                        values[key].append(epoch[key])
                    self.epoch += 1
                    if self.eval_keys and self.epoch in self.eval_epochs:
                        evaluations[self.epoch] = self.evaluator(("train", "val"))
                    if time.perf_counter() - started > self.stretch_seconds:
                        break
                self.calls += 1
                yield EpochMetrics(first, {key: np.asarray(v, np.float32)
                                           for key, v in values.items()}, evaluations,
                                   self._judged)

    def _streamed_epoch(self) -> dict[str, float]:
        """One epoch of a streamed set: the losses as Keras' fit reports them, each batch's
        weighted by its rows (relative to the first batch's, so equal batches add up as they
        are), and the mean gradient norm of its steps."""
        totals: dict[str, tf.Tensor] = {}
        batches = 0
        weights = 0.0  # the batches' rows / the first batch's rows
        first = None
        for x, y in self._epoch_batches():
            rows = int(x.shape[0])  # eager: its static shape, no sync
            first = first or rows
            weight = rows / first
            for key, value in self._stream_step(x, y).items():
                if key != "grad_norm" and weight != 1:
                    value = value * tf.cast(weight, value.dtype)
                totals[key] = totals[key] + value if key in totals else value
            batches += 1
            weights += weight
        if not batches:
            raise ValueError("the streamed tf.data.Dataset gave no batch this epoch")
        return {key: float(total) / (batches if key == "grad_norm" else weights)
                for key, total in totals.items()}

    def _epoch_batches(self):
        """An epoch's batches: one pass, or data.steps_per_epoch batches of one iterator that
        goes on across epochs (an infinite .repeat() Dataset)."""
        if not self.stream_steps:
            yield from self.stream
            return
        if self._batches is None:
            self._batches = iter(self.stream.repeat())
        for _ in range(self.stream_steps):
            yield next(self._batches)

    def _segments(self, first: int, count: int) -> tuple[list[int], list[bool]]:
        """Epochs first+1 .. first+count cut after each evaluation epoch: the segments' lengths,
        and whether each ends with an evaluation (all but perhaps the last)."""
        last = first + count
        cuts = self.eval_epochs[np.searchsorted(self.eval_epochs, first, side="right"):
                                np.searchsorted(self.eval_epochs, last, side="right")].tolist()
        ends = cuts if cuts and cuts[-1] == last else [*cuts, last]
        lengths = np.diff([first, *ends]).tolist()
        return lengths, [True] * len(cuts) + [False] * (len(ends) - len(cuts))

    def _next_count(self) -> int:
        """Epochs for the next call: about `stretch_seconds`' worth at the last call's speed
        (the first call's includes its tracing, so the second is short), growing at most
        MAX_GROWTH-fold over the longest call so far in case one measurement was too kind."""
        if self._seconds_per_epoch is None:
            return FIRST_STRETCH
        fitting = int(self.stretch_seconds / max(self._seconds_per_epoch, 1e-9))
        return max(1, min(fitting, self._longest * MAX_GROWTH))

    def _measure(self, count: int, seconds: float) -> None:
        self.calls += 1
        self._longest = max(self._longest, count)
        self._seconds_per_epoch = seconds / count

    # ---------------------------------------------------------------- compiled parts
    def _losses(self, x: tf.Tensor, y: tf.Tensor, scale: tf.Tensor | float = 1.0,
                replicas: int = 1) -> dict[str, tf.Tensor]:
        """The loss that trains (under "loss") and, for a model with losses of its own, its
        parts; the data part weighted by `scale`, the model's own by 1/replicas (a replica's
        share of a mirrored batch: the replicas' gradients are summed)."""
        outputs = self.model(x, training=True)  # dropout on, batch norm learns
        data = self.loss(y, outputs) * scale
        if not self.own_losses:
            return {"loss": data}
        own = self.model.own_loss(outputs) / replicas
        return {"loss": data + own, "loss/data": data, "loss/regularization": own}

    def _step(self, x: tf.Tensor, y: tf.Tensor) -> dict[str, tf.Tensor]:
        """One update: the losses before it and the gradient's norm."""
        if self.strategy is not None:
            values = self.strategy.run(self._replica_step, args=(x, y))
            local = self.strategy.experimental_local_results
            return {key: local(value)[0] for key, value in values.items()}  # all-reduced
        with tf.GradientTape() as tape:
            values = self._losses(x, y)
            scaled = self.optimizer.scale_loss(values["loss"])
        gradients = tape.gradient(scaled, self.model.params)
        scale = self._loss_scale()  # read before the update, which may change it
        self._apply(gradients)
        return {**values, "grad_norm": _unscaled(tf.linalg.global_norm(gradients), scale)}

    def _loss_scale(self) -> tf.Tensor | None:
        """A LossScaleOptimizer's dynamic scale, by which its gradients are of the loss times
        it; None for any other optimizer."""
        return self.optimizer.scale_loss(1.0) if self.scales_loss else None

    def _apply(self, gradients: list[tf.Tensor | None]) -> None:
        """The optimizer's update of the variables that have a gradient. Those without one
        (not connected to the loss) are left out, as Keras' optimizer leaves them, and named in
        `untrained` (while tracing) for the run's own warning instead of Keras' (which asks
        about `model.compile()`)."""
        pairs = [(g, v) for g, v in zip(gradients, self.model.params) if g is not None]
        self.untrained = [name for name, g in zip(self.model.names, gradients) if g is None]
        self.optimizer.apply_gradients(pairs or zip(gradients, self.model.params))

    def _traced_step(self, x: tf.Tensor, y: tf.Tensor) -> dict[str, tf.Tensor]:
        """`_step` as the streamed set's compiled call traces it."""
        with _owned_gradients(self._gradients):
            return self._step(x, y)

    def _replica_step(self, x: tf.Tensor, y: tf.Tensor) -> dict[str, tf.Tensor]:
        """One replica's share of a batch: rows i·n/r .. (i+1)·n/r, so the shares differ by one
        row at most and none is empty while the batch has a row a replica.

        Keras scales a loss computed in a replica by 1/replicas and its optimizer sums the
        replicas' gradients; weighting by rows·replicas/batch makes that sum the gradient of the
        whole batch's mean loss, also when the shares are uneven. The model's own losses are
        not a Keras loss's, so each replica adds 1/replicas of them. A batch of fewer rows than
        replicas leaves some shares empty: such a replica computes the batch's first row at
        weight 0 (a gradient over no rows can come out shaped [0] where a broadcast bias's is
        [1], and the replicas' all-reduce then aborted the run: QA, 100 rows on 16 replicas)."""
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        rows = tf.shape(x)[0]
        index = context.replica_id_in_sync_group
        start, end = index * rows // replicas, (index + 1) * rows // replicas
        ends = tf.maximum(end, start + 1)  # an empty share: one row, weighted 0 below
        x_part, y_part = x[start:ends], y[start:ends]
        weight = tf.cast((end - start) * replicas, tf.float32) / tf.cast(rows, tf.float32)
        with tf.GradientTape() as tape:
            values = self._losses(x_part, y_part, weight, replicas)
            scaled = self.optimizer.scale_loss(values["loss"])
        gradients = tape.gradient(scaled, self.model.params)
        scale = self._loss_scale()  # read before the update, which may change it
        self._apply(gradients)
        summed = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
        return {**{key: context.all_reduce(tf.distribute.ReduceOp.SUM, value)
                   for key, value in values.items()},
                "grad_norm": _unscaled(tf.linalg.global_norm(summed), scale)}

    def _epoch(self) -> dict[str, tf.Tensor]:
        """One pass over the data: the epoch's loss (and its parts) as Keras' fit reports it,
        the batches' losses weighted by their rows (a short last batch counts for its rows), and
        the mean gradient norm of its steps."""
        if self.n_batches == 1:
            return self._step(self.x, self.y)
        order = tf.argsort(self.shuffle.uniform([self.n_samples]))
        keys = [*self.loss_keys, "grad_norm"]

        # Summed in Keras' floatx, as fit's loss tracker (a Mean) sums: a float64 model's
        # float64 losses did not fit float32 totals (a TypeError under floatx float64)
        dtype = keras.config.floatx()

        def batch(index, totals):
            rows = order[index * self.batch_size:(index + 1) * self.batch_size]
            values = self._step(tf.gather(self.x, rows), tf.gather(self.y, rows))
            weight = tf.cast(tf.size(rows), dtype) / self.batch_size  # 1 but the last
            return index + 1, {key: totals[key] + (
                tf.cast(values[key], dtype) if key == "grad_norm"
                else tf.cast(values[key], dtype) * weight) for key in keys}

        _, totals = tf.while_loop(
            lambda index, _: index < self.n_batches, batch,
            (tf.constant(0), {key: tf.constant(0.0, dtype) for key in keys}))
        return {key: total / (self.n_batches if key == "grad_norm" else self.epoch_batches)
                for key, total in totals.items()}

    def checkpoint(self) -> tf.train.Checkpoint:
        """Everything a resumed run needs to go on as if never stopped: the model (with its
        layers' seed generators, under `seeds`: dropout's masks go on where they were), the
        optimizer, the epoch, the batch order's generator. A checkpoint written without
        `seeds` (before they were saved) still restores, the seeds left as built."""
        seeds = seed_states(self.model.network)
        return tf.train.Checkpoint(model=self.model.network, optimizer=self.optimizer,
                                   epoch=self.epoch_variable, shuffle=self.shuffle,
                                   **({"seeds": seeds} if seeds else {}))

    def _run_epochs(self, segments: tf.Tensor,
                    evaluate: tf.Tensor) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        """sum(segments) epochs; per-epoch values stay in TensorArrays until the end. The
        held-out metrics are computed after each segment whose `evaluate` is true: one branch
        per segment, none per epoch, so evaluating costs the epochs nothing."""
        global TRACES
        TRACES += 1  # compiled: this body runs once per trace
        with _owned_gradients(self._gradients):
            return self._epochs(segments, evaluate)

    def _epochs(self, segments: tf.Tensor,
                evaluate: tf.Tensor) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        keys = (["lr"] if self.log_lr else []) + [*self.loss_keys, "grad_norm",
                                                   *self.model.scalars()]
        arrays = {key: tf.TensorArray(tf.float32, size=tf.reduce_sum(segments)) for key in keys}
        held_out = {key: tf.TensorArray(tf.float32, size=tf.size(segments))
                    for key in self.eval_keys}

        def epoch(i, arrays):
            values = {"lr": self.optimizer.learning_rate} if self.log_lr else {}
            values.update(self._epoch())
            values.update(self.model.scalars())
            return i + 1, {key: array.write(i, tf.cast(values[key], tf.float32))
                           for key, array in arrays.items()}

        def segment(index, i, arrays, held_out):
            end = i + segments[index]
            i, arrays = tf.while_loop(lambda i, _: i < end, epoch, (i, arrays))
            if self.eval_keys:
                metrics = tf.cond(evaluate[index], self._evaluate, self._no_evaluation)
                held_out = {key: array.write(index, tf.cast(metrics[key], tf.float32))
                            for key, array in held_out.items()}
            return index + 1, i, arrays, held_out

        _, _, arrays, held_out = tf.while_loop(
            lambda index, *_: index < tf.size(segments), segment,
            (tf.constant(0), tf.constant(0), arrays, held_out))
        return ({key: array.stack() for key, array in arrays.items()},
                {key: array.stack() for key, array in held_out.items()})

    def _evaluate(self) -> dict[str, tf.Tensor]:
        return self.evaluator.tensors(("train", "val"))

    def _no_evaluation(self) -> dict[str, tf.Tensor]:
        return {key: tf.constant(np.nan, tf.float32) for key in self.eval_keys}


PARTS = ("loss/data", "loss/regularization")  # the parts of `loss` for a model with own losses


def seed_states(network: keras.Model) -> list:
    """The state variables of the Keras SeedGenerators the network's layers hold (Dropout's,
    GaussianNoise's, a person's own layer's), each once, in the order of the layers
    (`_flatten_layers`: the network, then its layers depth first) and of each layer's
    generators: the same order in every process that builds the model. A checkpoint of the
    network leaves them out (a SeedGenerator is no tf Trackable), so `Trainer.checkpoint` saves
    them beside it."""
    states, seen = [], set()
    flatten = getattr(network, "_flatten_layers", None)  # Keras 3's walk of the layer tree
    for layer in flatten(include_self=True, recursive=True) if flatten else [network]:
        for generator in getattr(layer, "_seed_generators", None) or ():
            state = getattr(generator, "state", None)
            if state is not None and id(state) not in seen:
                seen.add(id(state))
                states.append(state)
    return states


CUSTOM_GRADIENT = "CustomGradient-"  # tf.custom_gradient's registry names: this, then ops.uid()


@contextmanager
def _owned_gradients(names: list[str]):
    """Add to `names` the gradient functions TensorFlow registers while tracing the block for
    the block's own graph.

    A `tf.custom_gradient` called in a graph (Keras' optimizer calls one in every step:
    `apply_gradients` all-reduces the gradients through the replica context's
    `all_reduce`, a custom gradient even with one replica) registers its gradient function
    in TensorFlow's process-wide gradient registry under a new name, never taken out. That
    function holds the traced tensors, so through them the whole traced graph of the call
    (`_run_epochs` and its loops' bodies: ~3.3 MiB a job of `model=mlp` on the line) outlives
    the trainer, its model and the tf.function: a sweep over new shapes grew by one graph a
    job, past shared_programs' MAX_SHARED. The registry is frozen with TensorFlow's import
    (gradexp.tensorflow_import), so gc.get_referrers and objgraph see no referrer.

    Only entries whose tensors live in the block's graph (or its loops' and branches' bodies)
    are the trainer's: a person's own tf.function first traced here (a loss, a layer) keeps its
    trace in its own cache, and a later trainer, or the person's own tape, may differentiate
    it again through the registry."""
    if tf.executing_eagerly():  # eagerly nothing is registered
        yield
        return
    home, first = tf_ops.get_default_graph(), tf_ops.uid()
    try:
        yield
    finally:
        registry = getattr(tf_ops.gradient_registry, "_registry", None)
        for name, entry in (registry.items() if isinstance(registry, dict) else ()):
            number = name[len(CUSTOM_GRADIENT):]
            if (name.startswith(CUSTOM_GRADIENT) and number.isdigit() and int(number) > first
                    and _graphs_of(entry) == {home}):
                names.append(name)


def _graphs_of(entry: dict) -> set:
    """The traced graphs a registered gradient function's tensors live in, each taken out of
    the while loops and conds that hold it (their bodies are graphs of their own, owned by the
    graph around them); empty when none is found, and then the entry is left alone."""
    from tensorflow.python.ops.control_flow_v2_func_graphs import ControlFlowFuncGraph

    graphs, functions, seen = set(), [entry.get("type")], set()
    while functions:  # custom_gradient's function, and the functions its closure holds
        function = functions.pop()
        if id(function) in seen or not callable(function):
            continue
        seen.add(id(function))
        for cell in getattr(function, "__closure__", None) or ():
            try:
                held = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            for item in held if isinstance(held, (list, tuple)) else (held,):
                if tf.is_symbolic_tensor(item):
                    graph = item.graph
                    while isinstance(graph, ControlFlowFuncGraph):
                        graph = graph.outer_graph
                    graphs.add(graph)
                elif callable(item):
                    functions.append(item)
    return graphs


def _forget_gradients(names: list[str]) -> None:
    """Take the gradient functions registered for a collected trainer's traces out of
    TensorFlow's registry (nothing can differentiate those graphs any more)."""
    registry = getattr(tf_ops.gradient_registry, "_registry", None)
    if isinstance(registry, dict):
        for name in names:
            registry.pop(name, None)
    names.clear()


def _unscaled(norm: tf.Tensor, scale: tf.Tensor | None) -> tf.Tensor:
    return norm if scale is None else norm / tf.cast(scale, norm.dtype)


def _total(data: tf.Tensor, own: tf.Tensor | None) -> tf.Tensor:
    return data if own is None else data + own
