"""device=mirrored really splits each batch across replicas (issue 10). Without a GPU the CPU is
split into logical devices (device.cpu_replicas), which TensorFlow allows only before its runtime
starts: so each configuration runs as its own process."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run_cli

# 256 rows in batches of 50: the last batch (6 rows) splits 3 and 3. The hidden layer's L2
# penalty is the model's own loss: counted once per batch, not once per replica.
RUN = ("data=sine", "model=keras",
       "model.layers=[{_target_:keras.layers.Dense,units:8,activation:tanh,kernel_regularizer:l2}]",
       "optimizer=adam", "optimizer.learning_rate=0.01", "trainer.epochs=30",
       "trainer.batch_size=50", "gradcheck=off")


@pytest.mark.slow
def test_mirrored_on_two_cpu_replicas_equals_one_device(tmp_path):
    from mlflow import MlflowClient

    one = run_cli(*RUN, "device=cpu", "tracking.experiment=one", cwd=tmp_path)
    assert one.returncode == 0, one.stderr[-2000:]
    two = run_cli(*RUN, "device=mirrored", "device.cpu_replicas=2", "tracking.experiment=two",
                  cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-2000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (single,), (mirrored,) = (client.search_runs([client.get_experiment_by_name(name)
                                                  .experiment_id]) for name in ("one", "two"))
    assert mirrored.data.tags["gradexp.replicas"] == "2"
    assert mirrored.data.tags["device"] == "mirrored(2 CPU replicas)"
    for key in ("loss", "loss/data", "loss/regularization", "grad_norm", "val/mse"):
        a, b = ([m.value for m in sorted(client.get_metric_history(run.info.run_id, key),
                                          key=lambda m: m.step)] for run in (single, mirrored))
        np.testing.assert_allclose(b, a, rtol=1e-4, err_msg=key)
    assert mirrored.data.metrics["final_loss"] == pytest.approx(
        single.data.metrics["final_loss"], rel=1e-4)


def test_cpu_replicas_out_of_range_is_one_line():
    from conftest import compose_config
    from gradexp.config_checks import check_ranges
    from gradexp.schema import ConfigError

    with pytest.raises(ConfigError, match="device.cpu_replicas=-1: must be an integer >= 0"):
        check_ranges(compose_config("device=mirrored", "device.cpu_replicas=-1"))


MIRRORED_SESSION = '''
import json
import gradexp

mirrored = ["device=mirrored", "device.cpu_replicas=2", "trainer.epochs=3", "gradcheck=off",
            "tracking=none"]
# two model shapes in one process (a sweep, a notebook's next call)
shapes = [gradexp.run(*mirrored, "model=mlp", f"model.hidden=[{width}]").final_loss
          for width in (8, 16, 8)]
# a loss given as a function; batches of 33 rows leave a last batch of 1 row: one replica's
# share is empty
function = ("loss._target_=keras.losses.mean_squared_error", "trainer.batch_size=33")
on_two = gradexp.run(*mirrored, *function).history
on_one = gradexp.run(*mirrored[2:], "device=cpu", *function).history
print(json.dumps({"shapes": shapes,
                  "two": {k: on_two[k].tolist() for k in ("loss", "grad_norm", "W")},
                  "one": {k: on_one[k].tolist() for k in ("loss", "grad_norm", "W")}}))
'''


@pytest.mark.slow
def test_mirrored_runs_of_two_shapes_and_a_function_loss_in_one_process(tmp_path):
    """QA: a second model shape died in the collective all-reduce ("Shape mismatch in the
    collective instance 100"), and so did every later mirrored run of the process; a loss given
    as a function trained at twice the rate on 2 replicas (Keras' 1/replicas never applied),
    and gave NaN, called a divergence, where a replica's share of the last batch was empty."""
    import json
    import subprocess
    import sys

    from conftest import cli_env

    (tmp_path / "session.py").write_text(MIRRORED_SESSION)
    done = subprocess.run([sys.executable, "session.py"], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    first, second, again = found["shapes"]
    assert np.isfinite([first, second, again]).all() and again == pytest.approx(first)
    for key in ("loss", "grad_norm", "W"):  # the same run on one device
        np.testing.assert_allclose(found["two"][key], found["one"][key], rtol=1e-5, err_msg=key)


FEW_ROWS_SESSION = '''
import json
import gradexp

common = ["trainer.epochs=20", "gradcheck=off", "tracking=none"]
found = {}
for rows in (4, 2):  # 4 rows on 3 replicas: shares of 1, 1 and 2; 2 rows: one share empty
    mirrored = gradexp.run("device=mirrored", "device.cpu_replicas=3", f"data.n_samples={rows}",
                           *common).history
    one = gradexp.run("device=cpu", f"data.n_samples={rows}", *common).history
    found[rows] = {"mirrored": {k: mirrored[k].tolist() for k in ("loss", "W", "b")},
                   "one": {k: one[k].tolist() for k in ("loss", "W", "b")}}
print(json.dumps(found))
'''


@pytest.mark.slow
def test_mirrored_on_more_replicas_than_a_share_of_rows_each_equals_one_device(tmp_path):
    """QA: 100 rows on 16 CPU replicas (or 4 rows on 3) left a replica's share empty, its
    gradient came out shaped [0], and the replicas' all-reduce aborted the run ("Shape mismatch
    in the collective instance"). Shares now differ by one row at most, and a batch of fewer
    rows than replicas gives the rest one row at weight 0."""
    import json
    import subprocess
    import sys

    from conftest import cli_env

    (tmp_path / "session.py").write_text(FEW_ROWS_SESSION)
    done = subprocess.run([sys.executable, "session.py"], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for rows, runs in found.items():
        for key in ("loss", "W", "b"):
            np.testing.assert_allclose(runs["mirrored"][key], runs["one"][key], rtol=1e-5,
                                       err_msg=f"{rows} rows: {key}")
