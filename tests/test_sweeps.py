"""Sweeps that scale out (issue 4): parallel jobs on one sqlite store, Optuna, a Ray cluster, an
MLflow tracking server, and resuming a crashed sweep. Real parts only: a real sqlite store, a real
`mlflow server` and a real Ray head on 127.0.0.1, started and stopped here.

Each spawned `python -m gradexp` pays TensorFlow's and MLflow's imports (about 10-15 s), so the
jobs are tiny (3 epochs, no gradient check) and few.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from itertools import product
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import (
    CONF,
    cli_env,
    default_signals,
    free_port,
    run_cli,
    spawn_cli,
    wait_for_mlflow_server,
)

TINY = ("trainer.epochs=3", "gradcheck=off")
OPTIMIZERS = ("sgd", "adam", "rmsprop", "adagrad")


# ---------------------------------------------------------------- helpers
def runs_in(client, experiment: str = "gradexp"):
    """(parents, children) of an experiment."""
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], max_results=1000) if found else []
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


def local_client(folder: Path):
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")


def stop(process: subprocess.Popen, grace: float = 30) -> None:
    """End a server the test started in its own session: SIGTERM its process group, then KILL."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue


def most_overlapping(runs) -> int:
    """How many of the runs were open at the same time, at most."""
    events = sorted([(r.info.start_time, 1) for r in runs] + [(r.info.end_time, -1) for r in runs],
                    key=lambda e: (e[0], e[1]))
    open_now = peak = 0
    for _, change in events:
        open_now += change
        peak = max(peak, open_now)
    return peak


# ---------------------------------------------------------------- configs (no process)
def compose_hydra(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)


def test_lr_search_preset_is_an_optuna_search_over_the_learning_rate_on_a_log_scale():
    cfg = compose_hydra("experiment=lr_search")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper")
    assert sweeper.direction == "minimize"
    assert sweeper.params["optimizer.learning_rate"].startswith("tag(log, interval(")
    assert cfg.optimizer.name == "sgd" and cfg.tracking.experiment == "lr_search"


def test_ray_cluster_and_slurm_launchers_compose_with_an_absolute_sweep_folder():
    ray = compose_hydra("hydra/launcher=ray_cluster", "hydra.launcher.ray.init.address=h:6379")
    assert ray.hydra.launcher._target_.endswith("ray_launcher.RayLauncher")
    assert ray.hydra.launcher.ray.init == {"address": "h:6379", "object_store_memory": None}
    slurm = compose_hydra("hydra/launcher=slurm", "hydra.launcher.partition=gpu")
    assert slurm.hydra.launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert slurm.hydra.launcher.partition == "gpu"
    for cfg in (ray, slurm):
        sweep_dir = OmegaConf.to_container(cfg.hydra.sweep, resolve=False)["dir"]
        assert sweep_dir.startswith("${hydra.runtime.cwd}/")


# ---------------------------------------------------------------- sweeps (processes)
@pytest.mark.slow
def test_joblib_sweep_of_eight_jobs_four_at_a_time_lands_eight_children_under_one_parent(
        tmp_path):
    done = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=4",
                   f"optimizer={','.join(OPTIMIZERS)}", "loss=mse,mae", *TINY, cwd=tmp_path,
                   timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "locked" not in (done.stdout + done.stderr).lower()
    assert "n_jobs=4" in done.stdout  # Hydra's joblib launcher line
    parents, children = runs_in(local_client(tmp_path))
    assert len(parents) == 1 and len(children) == 8
    (parent,) = parents
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["gradexp.launcher"] == "JoblibLauncher"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert all(c.info.status == "FINISHED" for c in children)
    assert {(c.data.params["optimizer.name"], c.data.params["loss.name"]) for c in children} == \
        set(product(OPTIMIZERS, ("mse", "mae")))
    assert all(math.isfinite(c.data.metrics["final_loss"]) for c in children)
    assert parent.data.metrics["children"] == 8
    assert 2 <= most_overlapping(children) <= 4  # they ran side by side, never more than 4


@pytest.mark.slow
def test_optuna_sweep_records_the_best_trial_on_the_parent(tmp_path):
    done = run_cli("-m", "experiment=lr_search", "hydra.sweeper.n_trials=4",
                   "hydra.sweeper.sampler.n_startup_trials=2", "trainer.epochs=5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    parents, children = runs_in(local_client(tmp_path), "lr_search")
    assert len(parents) == 1 and len(children) == 4
    (parent,) = parents
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["gradexp.sweeper"] == "OptunaSweeper"
    rates = [float(c.data.params["optimizer.learning_rate"]) for c in children]
    assert len(set(rates)) == 4 and all(1e-4 <= rate <= 0.85 for rate in rates)
    # Named by the searched key only (hydra.sweeper.params), not trainer.epochs or the preset.
    names = [c.info.run_name for c in children]
    assert all(re.fullmatch(r"optimizer\.learning_rate=[0-9.e-]+", name) for name in names), names
    best = min(children, key=lambda c: c.data.metrics["val/mse"])  # the preset's objective
    assert float(parent.data.params["best.optimizer.learning_rate"]) == pytest.approx(
        float(best.data.params["optimizer.learning_rate"]))
    assert parent.data.metrics["best_value"] == pytest.approx(best.data.metrics["val/mse"])
    assert parent.data.tags["gradexp.best_run_id"] == best.info.run_id
    client = local_client(tmp_path)
    assert "optimization_results.yaml" in {a.path for a in client.list_artifacts(
        parent.info.run_id)}


@pytest.fixture
def ray_head(tmp_path):
    """A Ray head on 127.0.0.1 (`ray start --head --block`), stopped at the end; its address."""
    # Ray swaps 127.0.0.1 for the machine's outward address unless told it is one machine only;
    # this keeps all of its traffic on the loopback interface.
    # No drain on SIGTERM (a 30 s wait meant for Kubernetes pods): nothing runs at teardown.
    # Its workers run the jobs, so they import the gradexp under test too (cli_env).
    env = cli_env({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                   "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"})
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths have a cap
    port = free_port()
    log = (tmp_path / "ray_head.log").open("w")
    head = subprocess.Popen(
        [shutil.which("ray") or "ray", "start", "--head", "--block", "--node-ip-address=127.0.0.1",
         f"--port={port}", f"--ray-client-server-port={free_port()}",
         f"--dashboard-agent-listen-port={free_port()}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp_dir}"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        stdin=subprocess.DEVNULL, preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in (tmp_path / "ray_head.log").read_text():
            assert head.poll() is None, (tmp_path / "ray_head.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the Ray head did not start in 180 s"
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        stop(head)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_ray_launcher_runs_a_sweep_on_a_running_ray_head(tmp_path, ray_head):
    launch = tmp_path / "launch"
    launch.mkdir()
    done = run_cli("-m", "hydra/launcher=ray_cluster",
                   f"hydra.launcher.ray.init.address={ray_head}", "optimizer=sgd,adam", *TINY,
                   cwd=launch, timeout=600,
                   env={"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert f"Connecting to existing Ray cluster at address: {ray_head}" in output
    assert "(_run_job pid=" in output  # the jobs printed from Ray's worker processes
    parents, children = runs_in(local_client(launch))
    assert len(parents) == 1 and len(children) == 2
    (parent,) = parents
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["gradexp.launcher"] == "RayLauncher"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert all(c.info.status == "FINISHED" for c in children)
    assert {c.data.params["optimizer.name"] for c in children} == {"sgd", "adam"}
    # Ray's workers run in the head's folder; the jobs' outputs still land in the launch folder.
    assert len(list(launch.glob("multirun/*/*/[01]/.hydra/config.yaml"))) == 2


@pytest.fixture
def mlflow_server(tmp_path):
    """`mlflow server` on 127.0.0.1 with a sqlite store in a temp folder; its URL."""
    store = tmp_path / "server"
    store.mkdir()
    port = free_port()
    log = (store / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
         "--artifacts-destination", str(store / "artifacts")],
        cwd=store, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        stdin=subprocess.DEVNULL, preexec_fn=default_signals)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_mlflow_server(url, server, store / "server.log", 180)
        yield url
    finally:
        stop(server)
        log.close()


@pytest.mark.slow
def test_a_sweep_tracks_into_an_mlflow_server_and_reads_back_over_http(tmp_path, mlflow_server):
    launch = tmp_path / "launch"
    launch.mkdir()
    done = run_cli("-m", f"tracking.uri={mlflow_server}", "optimizer=sgd,adam", *TINY, cwd=launch)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (launch / "mlflow.db").exists() and not (launch / "mlruns").exists()
    assert mlflow_server in done.stdout  # the link to compare the runs points at the server
    assert "View run" not in done.stdout  # gradexp's own link, not MLflow's at every run end
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_server)  # over HTTP, as a teammate would
    parents, children = runs_in(client)
    assert len(parents) == 1 and len(children) == 2
    (parent,) = parents
    assert parent.info.status == "FINISHED"
    assert all(c.info.status == "FINISHED" for c in children)
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert {c.data.params["optimizer.name"] for c in children} == {"sgd", "adam"}
    for child in children:
        assert len(client.get_metric_history(child.info.run_id, "loss")) == 3  # one per epoch
        assert "config.yaml" in {a.path for a in client.list_artifacts(child.info.run_id)}
    summary = client.download_artifacts(parent.info.run_id, "sweep_summary.json", str(tmp_path))
    assert len(json.loads(Path(summary).read_text())["children"]) == 2


@pytest.mark.slow
def test_a_sweep_stops_before_any_job_when_no_tracking_server_answers(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = run_cli("-m", f"tracking.uri={url}", "optimizer=sgd,adam", *TINY, cwd=tmp_path,
                   timeout=120)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()  # one line, no traceback, no Hydra warning
    assert line.startswith(f"error: tracking.uri={url}: no MLflow server answers")
    assert "Launching" not in done.stdout  # no job started


@pytest.mark.slow
def test_skip_finished_resumes_a_crashed_sweep_where_it_stopped(tmp_path):
    sweep = ("-m", f"optimizer={','.join(OPTIMIZERS)}", *TINY)
    # 1. A sweep of 4 jobs, killed (SIGKILL: nothing can clean up) once its first job FINISHED.
    crashed = spawn_cli(*sweep, cwd=tmp_path, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        finished: list = []
        while not finished:
            assert crashed.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.2)
            if list(tmp_path.glob("multirun/*/*/.mlflow_parent_run_id")):  # store made
                finished = [c for c in runs_in(local_client(tmp_path))[1]
                            if c.info.status == "FINISHED"]
    finally:  # SIGKILL, as a crash: the parent and the running child stay RUNNING
        os.killpg(crashed.pid, signal.SIGKILL)
        crashed.wait(timeout=60)
    before = runs_in(local_client(tmp_path))
    done_before = {c.data.params["optimizer.name"] for c in before[1]
                   if c.info.status == "FINISHED"}
    assert 1 <= len(done_before) < 4

    # 2. The same sweep again with sweep.skip_finished=true runs only what did not finish.
    done = run_cli(*sweep, "sweep.skip_finished=true", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("skipped ") == len(done_before)
    client = local_client(tmp_path)
    parents, children = runs_in(client)
    (resumed,) = [p for p in parents if p.info.run_id not in {q.info.run_id for q in before[0]}]
    assert resumed.info.status == "FINISHED"
    new_children = [c for c in children if c.data.tags["mlflow.parentRunId"] ==
                    resumed.info.run_id]
    assert {c.data.params["optimizer.name"] for c in new_children} == set(OPTIMIZERS) - done_before
    for name in OPTIMIZERS:  # exactly one FINISHED run per config, none run twice
        assert sum(c.info.status == "FINISHED" and c.data.params["optimizer.name"] == name
                   for c in children) == 1
    summary = client.download_artifacts(resumed.info.run_id, "sweep_summary.json", str(tmp_path))
    rows = json.loads(Path(summary).read_text())["children"]
    assert len(rows) == 4 and sum(row["reused"] for row in rows) == len(done_before)
    assert resumed.data.metrics["children_reused"] == len(done_before)


def test_skip_finished_reuses_a_pruned_run_only_under_the_same_pruner(tmp_path):
    """A pruned run stopped at an early epoch: a sweep without that pruner must train the job
    to the end, not reuse it as finished; the same pruner settings may reuse it."""
    from mlflow import MlflowClient

    from conftest import empty_store
    from gradexp.sweep_reuse import find_finished_run

    client = MlflowClient(empty_store(tmp_path))
    experiment = client.create_experiment("gradexp")
    job = {"optimizer.learning_rate": "0.0001", "sweep.pruner": "asha",
           "sweep.pruner_warmup_epochs": "0"}

    def child(params: dict, tags: dict) -> str:
        run = client.create_run(experiment, tags={"mlflow.parentRunId": "p", **tags})
        for key, value in params.items():
            client.log_param(run.info.run_id, key, value)
        client.log_metric(run.info.run_id, "final_loss", 30.0)
        client.set_terminated(run.info.run_id, "FINISHED")
        return run.info.run_id

    pruned = child(job, {"gradexp.pruned_at_epoch": "10"})
    assert find_finished_run(client, "gradexp", {**job, "sweep.pruner": "none"}) is None
    assert find_finished_run(client, "gradexp", {**job, "sweep.pruner": "median"}) is None
    assert find_finished_run(client, "gradexp", job).info.run_id == pruned
    whole = child({**job, "sweep.pruner": "none"}, {})  # trained to the end: reused by any
    assert find_finished_run(client, "gradexp", job).info.run_id == whole


@pytest.mark.heavy  # two short jobs
def test_of_jobs_that_tie_the_first_started_is_the_best(tmp_path):
    # tracking.max_points only thins what is logged: both jobs end at the same val/mse. The
    # store lists the newest run first, so the later job was tagged best, where Optuna's best
    # trial among equals is the first (QA: the two named different trials).
    from mlflow import MlflowClient

    import gradexp
    from conftest import empty_store

    store = empty_store(tmp_path)
    results = gradexp.sweep(f"tracking.uri={store}", "tracking.max_points=50,100",
                            "trainer.epochs=5", "gradcheck=off", "tracking.log_model=false",
                            launch_dir=tmp_path)
    assert results[0].objective_value == results[1].objective_value
    (parent,) = [run for run in MlflowClient(store).search_runs(["1"])
                 if run.data.tags.get("gradexp.sweep") == "true"]
    assert parent.data.tags["gradexp.best_run_id"] == results[0].run_id
