"""`python -m gradexp` as a process: where the process boundary is the point."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from conftest import REPO, finish, run_cli, spawn_cli

pytestmark = pytest.mark.slow


def test_help_and_cfg_answer_without_importing_tensorflow(tmp_path):
    for args in (["--help"], ["--cfg", "job", "optimizer=adam"]):
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "gradexp", *args],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()}
        assert "tensorflow" not in imported and "mlflow" not in imported
    shown = run_cli("--help", cwd=tmp_path).stdout
    assert "optimizer: adagrad, adam, adamw, momentum, nadam, rmsprop, sgd" in shown
    assert "experiment: diabetes_regression, digits_mlp," in shown
    assert "schema/" not in shown  # the type-check groups are no choices: not listed
    composed = run_cli("--help", "optimizer=adam", cwd=tmp_path).stdout
    assert "_target_: keras.optimizers.Adam" in composed  # the config the overrides compose


def test_a_sweep_is_one_parent_run_with_a_finished_child_per_job(tmp_path):
    done = run_cli("-m", "optimizer=sgd,adam", "loss=mse,mae", "trainer.epochs=5",
                   "gradcheck=off", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 4
    (parent,) = parents
    assert parent.info.status == "FINISHED"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert all(c.info.status == "FINISHED" for c in children)
    assert {(c.data.params["optimizer.name"], c.data.params["loss.name"]) for c in children} == {
        ("sgd", "mse"), ("sgd", "mae"), ("adam", "mse"), ("adam", "mae")}
    names = {c.info.run_name for c in children}
    # The swept overrides only: what every job shares (trainer.epochs, gradcheck) is left out.
    assert names == {"loss=mse,optimizer=sgd", "loss=mae,optimizer=sgd", "loss=mse,optimizer=adam",
                     "loss=mae,optimizer=adam"}
    assert parent.data.tags["gradexp.best_run_id"] in {c.info.run_id for c in children}
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "sweep_summary.json" in artifacts
    assert "workflowType=machine_learning" in done.stdout


def test_wheel_ships_conf_and_experiments_and_runs_from_any_folder(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
                    str(REPO)], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("gradexp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gradexp/conf/config.yaml" in names and "gradexp/conf/optimizer/adam.yaml" in names
    assert any(n.startswith("gradexp/experiments/") for n in names)
    # Install only the wheel (dependencies are already here) and run it from an unrelated folder.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "gradexp", "--cfg", "job", "optimizer=nadam"],
                          cwd=elsewhere, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "_target_: keras.optimizers.Nadam" in done.stdout
    located = subprocess.run([sys.executable, "-c", "import gradexp; print(gradexp.__file__)"],
                             env={"PYTHONPATH": str(target)}, capture_output=True, text=True)
    assert located.stdout.startswith(str(target))


def test_multirun_flag_anywhere_on_the_line(tmp_path):
    # The README writes `experiment=NAME -m`; overrides after -m are part of the same sweep.
    done = run_cli("trainer.epochs=2", "-m", "optimizer=sgd,adam", "gradcheck=off", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "usage:" not in done.stderr
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert {c.data.params["optimizer.name"] for c in children} == {"sgd", "adam"}
    assert {c.data.params["trainer.epochs"] for c in children} == {"2"}


def test_a_first_run_on_a_fresh_store_prints_only_gradexps_lines(tmp_path):
    # A new store (MLflow creates its tables) and a new matplotlib cache (it builds its font
    # list): both libraries log INFO lines then, which Hydra's logging setup lets through.
    done = run_cli("trainer.epochs=2", "optimizer=adam", "tracking.uri=http://u:hunter2@127.0.0.1:1",
                   "tracking=none", "seed=null", cwd=tmp_path,
                   env={"MPLCONFIGDIR": str(tmp_path / "mpl")})
    assert done.returncode == 0, done.stderr
    # The config is one line (the options chosen, the overrides with secrets cut), not a tree.
    first = done.stdout.splitlines()[0]
    assert first.startswith("config: data=linear model=linear loss=mse optimizer=adam"), first
    assert "overrides: trainer.epochs=2 optimizer=adam" in first and "hunter2" not in done.stdout
    assert " seed=null (every key" in first  # as typed: its logged value, seed=None, is refused
    assert "├──" not in done.stdout
    done = run_cli("trainer.epochs=2", cwd=tmp_path, env={"MPLCONFIGDIR": str(tmp_path / "mpl")})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mlflow.db").exists() and (tmp_path / "mpl").exists()
    assert done.stderr == ""
    for chatter in ("INFO", "Creating initial MLflow database tables", "fontManager"):
        assert chatter not in done.stdout
    assert "gradexp run" in done.stdout and "open the MLflow UI" in done.stdout
    # A run to resume that is not there: one line too, with no TensorFlow start-up chatter
    # (absl's and oneDNN's lines, which TF_CPP_MIN_LOG_LEVEL does not silence) before it.
    done = run_cli("trainer.resume=0123456789abcdef", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: trainer.resume=0123456789abcdef: no such run in sqlite:///")


def test_help_piped_into_head_ends_quietly(tmp_path):
    # QA: `python -m gradexp --help | head -2` ended in a BrokenPipeError traceback, exit 1
    gradexp = spawn_cli("--help", cwd=tmp_path)
    head = subprocess.Popen(["head", "-n", "1"], stdin=gradexp.stdout, stdout=subprocess.PIPE,
                            text=True)
    gradexp.stdout.close()
    done = finish(gradexp, timeout=120)
    assert head.communicate(timeout=60)[0].startswith("gradexp: declarative")
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]


@pytest.mark.parametrize(("args", "first", "runs"), [
    (("trainer.epochs=30",), "config: data=linear model=linear", 1),
    # a sweep: Hydra's own log lines (on stdout too) meet the closed pipe first
    (("-m", "optimizer=sgd,adam", "trainer.epochs=30"), "[HYDRA] Launching 2 jobs locally", 3),
])
def test_a_run_piped_into_head_finishes_and_is_recorded(tmp_path, args, first, runs):
    # `python -m gradexp | head -n 1`: head prints the first line and exits, and every line
    # after it meets a closed pipe. Seeing one line was the person's choice; the run goes on.
    gradexp = spawn_cli(*args, cwd=tmp_path)
    head = subprocess.Popen(["head", "-n", "1"], stdin=gradexp.stdout, stdout=subprocess.PIPE,
                            text=True)
    gradexp.stdout.close()  # head is the pipe's only reader: when it exits, the pipe is closed
    done = finish(gradexp, timeout=300)
    shown = head.communicate(timeout=60)[0]
    assert first in shown, shown
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""  # no BrokenPipeError, no "--- Logging error ---", no traceback
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    recorded = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    assert len(recorded) == runs  # a sweep: its parent and a child per job
    for run in recorded:
        assert run.info.status == "FINISHED", run.data.tags.get("gradexp.status_reason")
        if "gradexp.sweep" not in run.data.tags:  # a job, not the sweep's parent
            assert len(client.get_metric_history(run.info.run_id, "loss")) == 30
            assert "final_loss" in run.data.metrics and "val/mse" in run.data.metrics
