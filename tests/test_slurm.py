"""Sweeps on SLURM for real (issue 21, item 5): `hydra/launcher=slurm` (hydra-submitit-launcher)
submits each job to a one-node SLURM cluster that the `slurm` fixture starts on 127.0.0.1
(tests/slurm_cluster.py), and the jobs record into the launch folder's sqlite store.

Without SLURM's programs (Debian: slurm-wlm, slurmdbd, munge, mariadb-server; .ci/run installs
them) the tests skip and say why; under CI (CI=true) they fail instead, so CI cannot pass them
by skipping.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import time
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, missing_programs

from conftest import finish, free_port, run_cli, spawn_cli

pytestmark = pytest.mark.slow

# Each job one CPU and 1 GB, so the node's CPUs run the jobs side by side; tiny runs.
SWEEP = ("-m", "hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1",
         "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10", "gradcheck=off",
         "tracking.log_model=false")
# A run long enough to be cancelled after its first checkpoint (about 10 s of training here).
LONG = ("loss=mse", "trainer.epochs=100000", "trainer.checkpoint_every=5000",
        "trainer.deterministic=true")


def _unavailable() -> str | None:
    missing = missing_programs()
    if missing:
        return (f"no SLURM here ({', '.join(missing)} not found): as root, apt-get install -y "
                "slurm-wlm slurmdbd munge mariadb-server")
    if os.geteuid() != 0:
        return "the one-node SLURM cluster runs its daemons as root"
    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        return 'hydra-submitit-launcher is not installed: pip install "gradexp[slurm]"'
    return None


def _distinct_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> SlurmCluster:
    reason = _unavailable()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI must run the SLURM tests; .ci/run installs them)")
        pytest.skip(reason)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), _distinct_ports(4))
    try:
        cluster.start()
    except Exception as error:
        cluster.stop()
        raise RuntimeError(f"{error}\n{cluster.logs()}") from None
    yield cluster
    cluster.stop()


def _client(folder: Path):
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")


def _runs(folder: Path):
    client = _client(folder)
    experiment = client.get_experiment_by_name("gradexp").experiment_id
    return client.search_runs([experiment], max_results=1000)


def _accounted(slurm: SlurmCluster) -> list[str]:
    """The states sacct records for this cluster's jobs (array tasks, not their steps)."""
    lines = slurm.output(["sacct", "-n", "-X", "-P", "-o", "JobID,State"]).splitlines()
    return [line.split("|")[1] for line in lines]


def test_a_sweep_runs_as_slurm_jobs_every_child_finished_under_one_parent(slurm, tmp_path):
    before = len(_accounted(slurm))
    done = run_cli(*SWEEP, "optimizer=sgd,adam", "trainer.epochs=20", cwd=tmp_path,
                   env={"SLURM_CONF": slurm.env["SLURM_CONF"]}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + slurm.logs()
    runs = _runs(tmp_path)
    (parent,) = [run for run in runs if run.data.tags.get("gradexp.sweep") == "true"]
    children = [run for run in runs if run.data.tags.get("mlflow.parentRunId")
                == parent.info.run_id]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["gradexp.launcher"] == "SlurmLauncher"
    assert sorted(run.data.params["optimizer.name"] for run in children) == ["adam", "sgd"]
    assert [run.info.status for run in children] == ["FINISHED", "FINISHED"]
    assert len(runs) == 3  # nothing else was recorded
    assert _accounted(slurm)[before:] == ["COMPLETED", "COMPLETED"]  # two SLURM jobs ran them


def _wait_for_checkpoint(folder: Path, process: subprocess.Popen, timeout: float = 300) -> None:
    """Until the job's run has saved its first checkpoint (the manager's state file is written
    last, once a checkpoint is whole)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sorted(folder.glob("checkpoints/*/checkpoint")):
            return
        assert process.poll() is None, "the sweep ended before its job's first checkpoint"
        time.sleep(0.1)
    raise AssertionError(f"no checkpoint in {timeout:.0f} s")


def test_scancel_leaves_the_child_killed_and_resume_killed_continues_it(slurm, tmp_path):
    env = {"SLURM_CONF": slurm.env["SLURM_CONF"]}
    first = spawn_cli(*SWEEP, *LONG, cwd=tmp_path, env=env)
    _wait_for_checkpoint(tmp_path, first)
    (job,) = slurm.jobs()
    subprocess.run(["scancel", job], env=slurm.env, check=True)
    ended = finish(first, 300)
    assert ended.returncode != 0  # the sweep's one job did not finish
    (killed,) = [run for run in _runs(tmp_path) if run.data.tags.get("mlflow.parentRunId")]
    assert killed.info.status == "KILLED", ended.stderr[-3000:]
    assert "CANCELLED" in _accounted(slurm)[-1]
    assert not [run for run in _runs(tmp_path) if run.info.status == "RUNNING"]

    again = run_cli(*SWEEP, *LONG, "sweep.resume_killed=true", cwd=tmp_path, env=env,
                    timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = _client(tmp_path).get_run(killed.info.run_id)
    assert resumed.info.status == "FINISHED"
    assert int(resumed.data.tags["gradexp.resumed_from_epoch"]) >= 5000
    assert resumed.data.metrics["final_loss"] < 0.02  # trained to the end: seed 004's line
    parents = [run for run in _runs(tmp_path) if run.data.tags.get("gradexp.sweep") == "true"]
    newest = max(parents, key=lambda run: run.info.start_time)
    assert newest.info.status == "FINISHED"
    assert newest.data.tags["gradexp.reused.0"] == killed.info.run_id  # listed as its job's run
    # the killed job continued as its own run: no new child was made
    assert len([run for run in _runs(tmp_path) if run.data.tags.get("mlflow.parentRunId")]) == 1
