"""A run whose loss or gradient becomes NaN or infinite: what is kept of the epochs before the
bad one, and the one line that says why (gradexp.callbacks.divergence)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from conftest import read_report, run
from gradexp.check_notes import RANDOM_NOTE
from gradexp.loop import Diverged

NAN_MODELS = '''
import keras
from keras import ops


def nan_at_start(n_features, n_outputs):
    """log(-1): NaN at the starting weights, on every row."""
    inputs = keras.Input((n_features,))
    z = keras.layers.Dense(n_outputs, kernel_initializer="zeros",
                           bias_initializer=keras.initializers.Constant(-1.0))(inputs)
    return keras.Model(inputs, keras.layers.Lambda(lambda t: ops.log(t))(z))


def sqrt_model(n_features, n_outputs):
    """3 sqrt(z) - 6: finite at the start, NaN once training pushes z below 0."""
    inputs = keras.Input((n_features,))
    z = keras.layers.Dense(n_outputs, kernel_initializer="zeros",
                           bias_initializer=keras.initializers.Constant(4.0))(inputs)
    return keras.Model(inputs, keras.layers.Lambda(lambda t: ops.sqrt(t) * 3.0 - 6.0)(z))
'''


@pytest.fixture
def nan_models(tmp_path):
    (tmp_path / "diverging_models.py").write_text(NAN_MODELS)
    return tmp_path


def steps_of(client, run_id: str, key: str) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(run_id, key)}


def test_a_diverged_run_keeps_the_evaluations_and_lines_of_the_epochs_before_the_nan(
        store, client, tmp_path):
    """SGD at 1.2 on the line grows the loss ~10^7 each 10 epochs until it overflows at epoch
    53, inside a compiled stretch that also held the evaluations of epochs 40 and 50: they were
    dropped (val/mse only at 10, 20, 30; no progress line past epoch 30), because the run ended
    before held-out evaluation and the progress line saw that stretch."""
    import pyarrow.parquet as pq

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(Diverged) as failed:
        run(store, "optimizer.learning_rate=1.2", "gradcheck=off", "trainer.epochs=60",
            launch_dir=tmp_path, quiet=False)
    (stored,) = client.search_runs(["1"])
    assert stored.info.status == "FAILED"
    assert stored.data.tags["gradexp.failure"] == "diverged"
    bad = int(stored.data.tags["gradexp.failure_epoch"])
    assert bad == 53
    assert str(failed.value) == (  # rising all the way: the learning rate's
        "the loss or its gradient became NaN or infinite at epoch 53: the learning rate is "
        "probably too high (optimizer.learning_rate=1.2); try a smaller one")
    run_id = stored.info.run_id
    val = steps_of(client, run_id, "val/mse")
    assert sorted(val) == [10, 20, 30, 40, 50]  # every evaluation before epoch 53, none after
    assert all(np.isfinite(list(val.values())))
    assert max(steps_of(client, run_id, "loss")) == bad - 1
    table = pq.read_table(client.download_artifacts(run_id, "history.parquet", str(tmp_path)))
    rows = table.to_pandas()
    assert rows["step"].tolist() == list(range(1, bad))
    evaluated = rows.dropna(subset=["val/mse"])
    assert evaluated["step"].tolist() == [10, 20, 30, 40, 50]
    assert evaluated["val/mse"].tolist() == pytest.approx([val[s] for s in sorted(val)])
    lines = [line for line in out.getvalue().splitlines() if "val/mse" in line]
    assert [line.split()[1] for line in lines] == ["10/60", "20/60", "30/60", "40/60", "50/60"]
    assert "nan" not in out.getvalue().lower().replace("nan or infinite", "")


def test_nan_at_the_starting_weights_with_mini_batches_is_not_blamed_on_the_learning_rate(
        store, client, nan_models):
    """With 16-row batches, epoch 1's loss is a mean over steps, so only full batches said
    so: 'became NaN or infinite at epoch 1: the learning rate is probably too high
    (optimizer.learning_rate=0.1)'. The loss at the starting weights says it now."""
    with pytest.raises(Diverged) as failed:
        run(store, "gradcheck=off", "model=custom", "model._target_=diverging_models.nan_at_start",
            "trainer.batch_size=16", "trainer.epochs=5", "tracking.log_model=false",
            launch_dir=nan_models)
    assert str(failed.value).startswith(
        "the loss or its gradient is NaN or infinite at the starting weights (epoch 1, before "
        "any update), so not because of the learning rate: the model or the loss gives NaN")
    (stored,) = client.search_runs(["1"])
    assert stored.info.status == "FAILED" and stored.data.tags["gradexp.failure_epoch"] == "1"


def test_a_nan_after_a_falling_loss_is_not_blamed_on_the_learning_rate(store, nan_models):
    """3 sqrt(z) - 6 fitting a line below -6: the loss falls every epoch as z is pushed
    toward 0, until a step takes z below it (NaN at epoch 21); a smaller learning rate would
    only get there later."""
    with pytest.raises(Diverged) as failed:
        run(store, "gradcheck=off", "model=custom", "model._target_=diverging_models.sqrt_model",
            "data.intercept=-10", "optimizer.learning_rate=0.01", "trainer.epochs=40",
            "tracking.log_model=false", launch_dir=nan_models)
    message = str(failed.value)
    assert message.startswith("the loss or its gradient became NaN or infinite at epoch 21 "
                              "while the loss was still falling (")
    assert "so probably not because of the learning rate (optimizer.learning_rate=0.01): the " \
           "model or the loss gives NaN or inf" in message
    assert "too high" not in message and "\n" not in message


def test_a_loss_nan_at_the_checked_point_is_not_taken_for_random_layers(store, client,
                                                                       nan_models):
    """The check at epoch 0 evaluates the training-mode loss twice to see whether a layer
    draws random numbers; NaN twice compared unequal (NaN != NaN), so it warned of random
    layers and checked in inference mode instead."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(Diverged):
        run(store, "model=custom", "model._target_=diverging_models.nan_at_start",
            "trainer.epochs=5", "tracking.log_model=false", launch_dir=nan_models, quiet=False)
    (stored,) = client.search_runs(["1"])
    report = read_report(client, stored.info.run_id, 0)
    assert report["mode"] == "train" and RANDOM_NOTE not in report["notes"]
    assert "gradexp.gradcheck_mode" not in stored.data.tags
    assert "layer draws random numbers" not in out.getvalue()


def test_a_loss_climbing_slowly_to_overflow_is_blamed_on_the_learning_rate():
    """A rate just past 2/λmax grows the loss ~9% an epoch, below the 10% an epoch a rise is
    counted at, to 3e36 over 1000 epochs (seed=1, optimizer.learning_rate=0.8: NaN at epoch
    1125); the message said "while the loss was still falling ... probably not because of the
    learning rate", quoting numbers that doubled (QA)."""
    from types import SimpleNamespace

    from gradexp.callbacks.divergence import Divergence

    divergence = Divergence()
    divergence.losses = 1.725e36 * 1.09 ** np.arange(10)  # the last 10 epochs before the NaN
    run = SimpleNamespace(cfg=SimpleNamespace(optimizer=SimpleNamespace(learning_rate=0.8)))
    assert divergence.why(run, 1125) == (
        "the loss or its gradient became NaN or infinite at epoch 1125: the learning rate is "
        "probably too high (optimizer.learning_rate=0.8); try a smaller one")
    divergence.losses = 1.0 / 1.09 ** np.arange(10)  # falling: the model's or the loss's NaN
    assert "while the loss was still falling" in divergence.why(run, 1125)
    # review: a converged loss wobbling by 0.02% (0.5012 ... 0.5013) is level, not rising
    divergence.losses = 0.5012 + 1e-4 * np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1])
    said = divergence.why(run, 1125)
    assert "while the loss was level (0.5012 at epoch 1115" in said and "too high" not in said
