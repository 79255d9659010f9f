"""The runner end to end, in-process: what it learns and what lands in MLflow."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import compose_config, run
from gradexp.loop import Diverged, run_experiment


def test_default_run_learns_seed_004s_line(store, client):
    result = run(store, "gradcheck=off")
    loss = result.history["loss"]
    assert len(loss) == 100
    assert loss[-1] < loss[0] / 100  # the loss falls by orders of magnitude
    # 100 epochs of SGD(0.1) get close to, not onto, W = 3 and b = 4 (seed 004's invented
    # output says 3.000/4.000; with model.seed=0 the real values are about 2.91 and 4.05).
    assert abs(result.scalars["W"] - 3) < 0.2 and abs(result.scalars["b"] - 4) < 0.1
    series = {key: [m.value for m in sorted(client.get_metric_history(result.run_id, key),
                                            key=lambda m: m.step)] for key in ("W", "b")}
    assert len(series["W"]) == len(series["b"]) == 100  # every epoch, as seed 004 prints them
    assert series["W"] == sorted(series["W"])  # W climbs toward 3 all the way
    assert series["W"] == pytest.approx(list(result.history["W"]))
    assert series["W"][-1] == pytest.approx(result.scalars["W"])
    assert result.final_loss == pytest.approx(0.00997, rel=0.05)  # about noise² = 0.01


def test_mlflow_holds_params_metric_history_tags_and_artifacts(store, client):
    result = run(store, "gradcheck=off", "optimizer=adam", "loss=mae", run_name="adam-mae")
    stored = client.get_run(result.run_id)
    assert stored.info.status == "FINISHED"
    assert stored.info.run_name == "adam-mae"
    params = stored.data.params
    assert params["optimizer.name"] == "adam" and params["loss.name"] == "mae"
    assert params["trainer.epochs"] == "100" and params["optimizer.learning_rate"] == "0.1"
    assert params["trainer.batch_size"] == "None"
    history = client.get_metric_history(result.run_id, "loss")
    assert sorted(m.step for m in history) == list(range(1, 101))  # step = epoch, 1..100
    assert np.allclose([m.value for m in sorted(history, key=lambda m: m.step)],
                       result.history["loss"])
    assert len(client.get_metric_history(result.run_id, "grad_norm")) == 100
    for key in ("W", "b"):  # every epoch, as seed 004 prints them
        assert sorted(m.step for m in client.get_metric_history(result.run_id, key)) == list(
            range(1, 101))
    assert stored.data.metrics["final_loss"] == pytest.approx(result.final_loss)
    assert stored.data.tags["tensorflow.version"].startswith("2.")
    assert stored.data.tags["device"] == "/CPU:0"
    artifacts = {a.path for a in client.list_artifacts(result.run_id)}
    assert {"config.yaml", "plots"} <= artifacts
    assert [a.path for a in client.list_artifacts(result.run_id, "plots")] == [
        "plots/loss_curve.png"]


def test_compiled_and_eager_training_agree(store):
    compiled = run(store, "gradcheck=off", "trainer.epochs=20")
    eager = run(store, "gradcheck=off", "trainer.epochs=20", "trainer.compile=false")
    assert np.allclose(compiled.history["loss"], eager.history["loss"], rtol=1e-5)
    assert compiled.scalars["W"] == pytest.approx(eager.scalars["W"], rel=1e-5)


def test_mini_batches_take_several_steps_per_epoch(store):
    full = run(store, "gradcheck=off", "trainer.epochs=10")
    batched = run(store, "gradcheck=off", "trainer.epochs=10", "trainer.batch_size=10")
    # ten steps per epoch get much further than one in the same number of epochs
    assert batched.final_loss < full.final_loss / 5


def test_an_mlp_fits_the_sine(store):
    # y = sin(2πx) + 0.1·N(0, 1) on [-1, 1): the best straight line leaves an mse of about 0.42
    # (it explains 0.076 of the variance 0.51), the noise alone 0.01. Below 0.05 is a fitted sine.
    result = run(store, "gradcheck=off", "data=sine", "model=mlp", "model.hidden=[16]",
                 "optimizer=adam", "optimizer.learning_rate=0.05", "trainer.epochs=300")
    assert result.final_loss < 0.05  # measured: 0.021
    assert "W" not in result.scalars  # W, b metrics only for y = W·x + b


def test_an_mlp_classifies_the_blobs(store):
    # A misclassified point gives the true class probability <= 1/2, so cross-entropy >= ln 2
    # there: the error rate is at most mean cross-entropy / ln 2. Chance is 1/3 (3 classes).
    result = run(store, "gradcheck=off", "data=blobs", "model=mlp", "model.hidden=[8]",
                 "loss=categorical_crossentropy", "optimizer=adam",
                 "optimizer.learning_rate=0.05", "trainer.epochs=60")
    accuracy_at_least = 1 - result.final_loss / np.log(2)
    assert accuracy_at_least > 0.95  # measured: cross-entropy 0.0054, so >= 99.2 % right


def test_huber_with_momentum_fits_three_features(store):
    # y = 3·(x0 + x1 + x2) + 4 + 0.1·noise: predicting the mean leaves a Huber loss of 0.77,
    # the noise alone about 0.005.
    result = run(store, "gradcheck=off", "data.n_features=3", "loss=huber", "optimizer=momentum",
                 "trainer.epochs=60")
    assert result.final_loss < 0.05  # measured: 0.023
    assert "W" not in result.scalars


def test_log_cosh_with_rmsprop_finds_the_line(store):
    result = run(store, "gradcheck=off", "loss=log_cosh", "optimizer=rmsprop",
                 "optimizer.learning_rate=0.1", "trainer.epochs=60")
    # RMSprop at 0.1 takes fixed-size steps, so after 60 epochs it hovers near the line
    # (measured: W 3.25, b 3.84) rather than on it.
    assert abs(result.scalars["W"] - 3) < 0.4 and abs(result.scalars["b"] - 4) < 0.3
    assert result.final_loss < 0.02  # log cosh(r) ≈ r²/2: noise 0.1 alone gives 0.005


def test_tracking_none_records_nothing(tmp_path):
    cfg = compose_config("tracking=none", "gradcheck=off", "trainer.epochs=5")
    result = run_experiment(cfg, quiet=True, launch_dir=tmp_path)
    assert result.run_id is None
    assert not (tmp_path / "mlflow.db").exists()


NAN_AT_THE_START = '''
import keras


def build(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    logs = keras.layers.Lambda(lambda x: keras.ops.log(x))(inputs)  # NaN for x < 0
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(logs))
'''


def test_a_loss_nan_at_the_starting_weights_is_not_blamed_on_the_learning_rate(store, client,
                                                                                tmp_path):
    """A model whose forward pass gives NaN on the data (a log of a standardized feature): full
    batch, epoch 1's loss is measured at the starting weights, before any update; it said
    'the learning rate is probably too high (optimizer.learning_rate=0.1); try a smaller one'."""
    (tmp_path / "nan_models.py").write_text(NAN_AT_THE_START)
    with pytest.raises(Diverged) as failed:
        run(store, "gradcheck=off", "data=sklearn", "data.name=diabetes", "model=custom",
            "model._target_=nan_models.build",
            "trainer.epochs=5", "tracking.log_model=false", launch_dir=tmp_path)
    assert str(failed.value).startswith(
        "the loss or its gradient is NaN or infinite at the starting weights (epoch 1, before "
        "any update), so not because of the learning rate: the model or the loss gives NaN")
    (stored,) = client.search_runs(["1"])
    assert stored.info.status == "FAILED" and stored.data.tags["gradexp.failure_epoch"] == "1"


def test_divergence_stops_fails_the_run_and_keeps_the_metrics_so_far(store, client, tmp_path):
    import pyarrow.parquet as pq

    from gradexp.callbacks.epoch_history import kept_epochs

    with pytest.raises(Diverged, match=r"epoch \d+.*learning rate.*optimizer.learning_rate=50"):
        run(store, "gradcheck=off", "optimizer.learning_rate=50", "trainer.epochs=500")
    (stored,) = client.search_runs(["1"])
    assert stored.info.status == "FAILED"
    epoch = int(stored.data.tags["gradexp.failure_epoch"])
    assert stored.data.tags["gradexp.failure"] == "diverged"
    history = client.get_metric_history(stored.info.run_id, "loss")
    # MLflow: the kept epochs before the first bad one (epochs count from 1), the last good
    # epoch, and (an early end) the grid over the epochs run: here every one of them;
    # history.parquet (written on this ending too): every epoch before it, all finite
    kept = [e for e in kept_epochs(0, 500, 320) if e < epoch - 1]
    assert set(kept) <= {m.step for m in history}
    assert sorted(m.step for m in history) == list(range(1, epoch))
    assert all(np.isfinite(m.value) for m in history)
    assert {"plots", "history.parquet"} <= {a.path for a in
                                            client.list_artifacts(stored.info.run_id)}
    table = pq.read_table(client.download_artifacts(stored.info.run_id, "history.parquet",
                                                    str(tmp_path)))
    assert table["step"].to_pylist() == list(range(1, epoch))
    assert np.isfinite(table["loss"].to_numpy()).all()
