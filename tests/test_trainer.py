"""The trainer's compiled calls: they end only where the host is needed (or after about a quarter
second), and what they compute inside (every epoch's values, held-out metrics) is what the host
would have computed between calls. Real TensorFlow and Keras, tiny data."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import compose_config
from gradexp.data import load_data
from gradexp.evaluation import Evaluator
from gradexp.losses import build_loss
from gradexp.metrics import metric_specs
from gradexp.models import build_model
from gradexp.schedules import build_optimizer
from gradexp.trainer import FIRST_STRETCH, Trainer


def make_trainer(*overrides: str, eval_epochs=(), batch_size=None) -> Trainer:
    cfg = compose_config(*overrides)
    data = load_data(cfg.data)
    model = build_model(cfg.model, data.n_features, data.n_outputs)
    evaluator = Evaluator(model, metric_specs(cfg, data.task), data.splits())
    optimizer = build_optimizer(cfg.optimizer, 1, cfg.trainer.epochs)
    return Trainer(model, build_loss(cfg.loss), optimizer, data, batch_size=batch_size, seed=0,
                   evaluator=evaluator, eval_epochs=eval_epochs)


def test_calls_end_at_the_stops_and_otherwise_run_on():
    trainer = make_trainer()
    trainer.stretch_seconds = 1e9  # no time limit: only the stops end a call
    ends = [stretch.last_epoch for stretch in trainer.train([40, 300])]
    # the first call (which traces) is short; after it, one call to each stop, whatever
    # trainer.log_every or the evaluation epochs say
    assert ends == [FIRST_STRETCH, 40, 40 + (40 - FIRST_STRETCH) * 8, 300]
    assert trainer.epoch == 300 and trainer.calls == 4


def test_a_call_lasts_about_the_time_budget():
    trainer = make_trainer()
    trainer.stretch_seconds = 0.02
    stretches = list(trainer.train([20_000]))
    assert stretches[-1].last_epoch == 20_000
    # a few thousand epochs a second even on a loaded machine: a budget-bound call covers many
    # of them, and the run is cut into more than a handful of calls (not one per log_every=10)
    lengths = [len(s.values["loss"]) for s in stretches]
    assert 3 < len(lengths) < 1_000 and max(lengths) > 40


def test_held_out_metrics_inside_the_calls_equal_those_computed_between_them():
    every = list(range(7, 61, 7)) + [60]
    inside = make_trainer(eval_epochs=every)
    inside_evaluations = {}
    for stretch in inside.train([60]):
        inside_evaluations.update(stretch.evaluations)
    assert sorted(inside_evaluations) == every  # also the epochs inside a call

    between = make_trainer()  # the same run, stopping for a host-side evaluation each time
    between.stretch_seconds = 1e9
    for stretch in between.train(every):
        expected = between.evaluator(("train", "val"))
        assert inside_evaluations[stretch.last_epoch] == pytest.approx(expected, rel=1e-5)
    assert set(expected) == {"train/mse", "train/mae", "train/r2", "val/mse", "val/mae", "val/r2"}


def test_every_epoch_keeps_its_loss_norm_and_the_lines_w_and_b():
    trainer = make_trainer()
    stretches = list(trainer.train([50]))
    w = np.concatenate([s.values["W"] for s in stretches])
    assert len(w) == 50 and np.all(np.diff(w) > 0)  # W climbs toward 3, epoch by epoch
    assert w[-1] == pytest.approx(float(trainer.model.scalars()["W"]))
    assert stretches[-1].at(50)["W"] == w[-1]


def test_mini_batch_evaluations_fall_on_their_epochs():
    trainer = make_trainer("data=sine", "model=mlp", eval_epochs={3, 5}, batch_size=32)
    found = {}
    for stretch in trainer.train([5]):
        found.update(stretch.evaluations)
    assert sorted(found) == [3, 5] and all(np.isfinite(v) for v in found[5].values())


@pytest.mark.parametrize("batch_size", [None, 32])
def test_a_dropped_trainer_lets_go_of_the_graphs_it_traced(batch_size):
    # Keras' optimizer step is a tf.custom_gradient (the replica context's all_reduce), and
    # TensorFlow keeps every traced one in its process-wide gradient registry, holding the
    # whole traced training call: a sweep over new model shapes grew ~4 MiB a job for good.
    import gc

    from tensorflow.python.framework import ops
    from tensorflow.python.framework.func_graph import FuncGraph

    def run_epochs_graphs() -> int:
        gc.collect()  # the trainer, whose finalizer takes its entries out of the registry
        gc.collect()  # then what those entries held
        return sum(isinstance(o, FuncGraph) and o.name.startswith("_run_epochs")
                   for o in gc.get_objects())

    before = run_epochs_graphs()
    trainer = make_trainer("model=mlp", "model.hidden=[5]", "trainer.epochs=3",
                           batch_size=batch_size)
    list(trainer.train([3]))
    names = set(ops.gradient_registry._registry)
    assert run_epochs_graphs() == before + 1
    del trainer
    assert run_epochs_graphs() == before
    assert set(ops.gradient_registry._registry) < names  # its entries taken out


def test_a_dropped_trainer_leaves_a_persons_own_traced_functions_differentiable():
    # A person's loss, a tf.function with a tf.custom_gradient inside, is first traced inside
    # the trainer's training call. Its trace stays in the function's own cache after the
    # trainer is gone, and its gradient comes from TensorFlow's registry each time a new tape
    # asks: taking that entry out with the trainer's own made it fail with "No gradient
    # defined for operation 'IdentityN'" in the person's later code.
    import gc

    import tensorflow as tf

    @tf.custom_gradient
    def square(e):
        return e * e, lambda upstream: 2.0 * e * upstream

    @tf.function(reduce_retracing=True)
    def own_loss(y_true, y_pred):
        return tf.reduce_mean(square(y_true - y_pred))

    trainer = make_trainer("model=mlp", "model.hidden=[5]", "trainer.epochs=3")
    trainer.loss = own_loss
    list(trainer.train([3]))
    y = tf.constant(trainer.y)
    del trainer
    gc.collect()

    guess = tf.zeros_like(y)
    with tf.GradientTape() as tape:
        tape.watch(guess)
        loss = own_loss(y, guess)
    gradient = tape.gradient(loss, guess)
    assert np.allclose(gradient, -2 * y.numpy() / y.shape[0])
