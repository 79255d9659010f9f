"""Training: GradientTape steps, many epochs per compiled call, metrics kept on the device.

The trainer knows nothing about MLflow or the console. `Trainer.train(stops)` runs the epochs up to
each stop as one call (one `tf.function` with a `tf.range` loop: no host sync inside) and yields the
per-epoch metrics of that stretch as numpy arrays; the caller logs them, checks gradients, prints.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from gradexp.data import Dataset
from gradexp.models import Model


@dataclass
class EpochMetrics:
    """Metrics of the epochs after `first_epoch` were done: epochs first_epoch + 1 ..
    first_epoch + len, numbered from 1 as the progress lines print them; each epoch's values are
    logged at step = its number."""

    first_epoch: int  # epochs done before this stretch
    values: dict[str, np.ndarray]  # per epoch: "loss", "grad_norm"
    latest: dict[str, float] = field(default_factory=dict)  # after the last epoch: "W", "b"

    @property
    def last_epoch(self) -> int:
        return self.first_epoch + len(self.values["loss"])

    @property
    def epochs(self) -> np.ndarray:
        return self.first_epoch + 1 + np.arange(len(self.values["loss"]))

    def first_nonfinite_epoch(self) -> int | None:
        """The first epoch whose loss or gradient norm is NaN or infinite, else None."""
        bad = ~(np.isfinite(self.values["loss"]) & np.isfinite(self.values["grad_norm"]))
        return int(self.epochs[np.argmax(bad)]) if bad.any() else None

    def upto(self, epoch: int) -> EpochMetrics:
        """The metrics of the epochs before `epoch` (to keep what was good before a divergence)."""
        count = epoch - 1 - self.first_epoch
        return EpochMetrics(self.first_epoch, {k: v[:count] for k, v in self.values.items()})



class Trainer:
    """Minimises `loss(y, model(x))` over `data` with a Keras optimizer."""

    def __init__(self, model: Model, loss, optimizer, data: Dataset, *, batch_size: int | None,
                 seed: int, compile: bool = True, jit_compile: bool = False,
                 log_lr: bool = False, strategy=None):
        self.model = model
        self.strategy = strategy  # device=mirrored: each batch split across its replicas
        self.loss = loss
        self.optimizer = optimizer
        self.x = tf.constant(data.x)
        self.y = tf.constant(data.y)
        self.n_samples = data.x.shape[0]
        self.batch_size = min(batch_size or self.n_samples, self.n_samples)
        self.n_batches = -(-self.n_samples // self.batch_size)
        self.shuffle = tf.random.Generator.from_seed(seed)
        self.epoch = 0
        self.epoch_variable = tf.Variable(0, dtype=tf.int64, trainable=False)  # checkpointed
        self.log_lr = log_lr  # a schedule: keep each epoch's learning rate as "lr"
        self.optimizer.build(model.params)
        run = self._run_epochs
        self._run = tf.function(run, jit_compile=jit_compile or None) if compile else run

    def evaluate(self) -> float:
        """The loss on the whole data set with the current parameters."""
        return float(self.loss(self.y, self.model(self.x)))

    def train(self, stops: list[int]) -> Iterator[EpochMetrics]:
        """Train until each epoch count in `stops` (ascending), yielding each stretch's metrics."""
        for stop in stops:
            count = stop - self.epoch
            if count <= 0:
                continue
            per_epoch = self._run(tf.constant(count, dtype=tf.int32))
            latest = {name: float(value) for name, value in self.model.scalars().items()}
            metrics = EpochMetrics(self.epoch, {k: v.numpy() for k, v in per_epoch.items()},
                                   latest)
            self.epoch = stop
            yield metrics

    # ---------------------------------------------------------------- compiled parts
    def _step(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        if self.strategy is not None:
            loss, norm = self.strategy.run(self._replica_step, args=(x, y))
            local = self.strategy.experimental_local_results
            return local(loss)[0], local(norm)[0]  # all-reduced: the same on every replica
        with tf.GradientTape() as tape:
            loss = self.loss(y, self.model(x, training=True))  # dropout on, batch norm learns
        gradients = tape.gradient(loss, self.model.params)
        self.optimizer.apply_gradients(zip(gradients, self.model.params))
        return loss, tf.linalg.global_norm(gradients)

    def _replica_step(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """One replica's share of a batch (rows i·k .. (i+1)·k, the last share maybe shorter).

        Keras scales a loss computed in a replica by 1/replicas and its optimizer sums the
        replicas' gradients; weighting by rows·replicas/batch makes that sum the gradient of the
        whole batch's mean loss, also when the shares are uneven."""
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        rows = tf.shape(x)[0]
        share = (rows + replicas - 1) // replicas
        start = context.replica_id_in_sync_group * share
        x_part, y_part = x[start:start + share], y[start:start + share]
        weight = tf.cast(tf.shape(x_part)[0] * replicas, tf.float32) / tf.cast(rows, tf.float32)
        with tf.GradientTape() as tape:
            loss = self.loss(y_part, self.model(x_part, training=True)) * weight
        gradients = tape.gradient(loss, self.model.params)
        self.optimizer.apply_gradients(zip(gradients, self.model.params))
        summed = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
        return (context.all_reduce(tf.distribute.ReduceOp.SUM, loss),
                tf.linalg.global_norm(summed))

    def _epoch(self) -> tuple[tf.Tensor, tf.Tensor]:
        """One pass over the data: mean batch loss and mean gradient norm."""
        if self.n_batches == 1:
            return self._step(self.x, self.y)
        order = tf.argsort(self.shuffle.uniform([self.n_samples]))
        total_loss = tf.constant(0.0)
        total_norm = tf.constant(0.0)
        for batch in tf.range(self.n_batches):
            rows = order[batch * self.batch_size:(batch + 1) * self.batch_size]
            loss, norm = self._step(tf.gather(self.x, rows), tf.gather(self.y, rows))
            total_loss += loss
            total_norm += norm
        return total_loss / self.n_batches, total_norm / self.n_batches

    def checkpoint(self) -> tf.train.Checkpoint:
        """Everything a resumed run needs to go on as if never stopped."""
        return tf.train.Checkpoint(model=self.model.network, optimizer=self.optimizer,
                                   epoch=self.epoch_variable, shuffle=self.shuffle)

    def _run_epochs(self, count: tf.Tensor) -> dict[str, tf.Tensor]:
        """`count` epochs; per-epoch loss, gradient norm (and learning rate) stay in
        TensorArrays until the end."""
        losses = tf.TensorArray(tf.float32, size=count)
        norms = tf.TensorArray(tf.float32, size=count)
        rates = tf.TensorArray(tf.float32, size=count)
        for i in tf.range(count):
            if self.log_lr:  # the rate of the epoch's first step
                rates = rates.write(i, tf.cast(self.optimizer.learning_rate, tf.float32))
            loss, norm = self._epoch()
            losses = losses.write(i, loss)
            norms = norms.write(i, norm)
        values = {"loss": losses.stack(), "grad_norm": norms.stack()}
        if self.log_lr:
            values["lr"] = rates.stack()
        return values
