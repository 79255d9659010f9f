"""Benchmark: what every sweep job costs before gradexp does anything, against issue 20's targets.

    python benchmarks/bench_job_floor.py              # ~4 min
    python benchmarks/bench_job_floor.py --no-digits  # without the 16-job digits sweep (~1 min)

Each job of a sweep, whatever the code around it, gets what the issue asks it to get: Hydra's
launcher composes its config and sets it up (its .hydra folder, HydraConfig, logging), MLflow
stores a child run with the run's params, its records and an end status, and the model as a
LoggedModel linked to it; the loss-curve plot is drawn. This measures those floors alone, side by
side in one run:

- Hydra's basic launcher on gradexp's config with a task that returns at once: the seconds
  between the first and the last job's start, a job; composing each job from scratch (gradexp's
  sweep callback removed), and with the configs gradexp's sweep keeps (gradexp.sweep_configs);
- MLflow's child run on sqlite, in this process: create (parent tag), the default config's
  params in batches of 100, one metric batch, FINISHED;
- the rest of the run's default records through gradexp's tracker, one MLflow call each:
  config.yaml, the data sets, the .hydra folder, history.parquet; and the model (its Keras
  file, the LoggedModel, its MLmodel files), as tracking.log_model=true writes it;
- the loss-curve PNG as gradexp draws it;
- a process start: `python -c "import tensorflow, keras, mlflow, hydra"`;
- the in-process limit (benchmarks/bench_sweep_cost.py: a fresh Keras model and one traced
  function of 100 epochs a job, no tracking), one default `python -m gradexp`, and, unless
  --no-digits, the 16-job digits sweep of benchmarks/bench_packed.py: sequential, and the
  packed launcher's training alone (what a packed sweep pays before recording any job).

Then, for each target, its budget against the sum of the floors it cannot avoid: all in the
job's process, and split over this machine's two cores (the job's process keeping its training
and its launcher, a writer process taking every write and the picture, in parallel). A floor is
a lower bound: a real job also builds its model, checks its gradients, evaluates it, and draws
its history table. The machine may be shared: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
SRC = str(HERE / "src")
sys.path[:0] = [SRC, str(HERE / "benchmarks")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
JOBS = 16
IMPORTS = "import gc, tensorflow, keras, mlflow, hydra; gc.freeze()"

# Hydra's launcher alone: gradexp's config search and schemas, a task that does nothing.
EMPTY_SWEEP = """
import sys, time
import hydra
from gradexp.app import VERSION_BASE, register_configs
starts = []
def task(cfg):
    starts.append(time.perf_counter())
register_configs()
hydra.main(config_path=sys.argv.pop(1), config_name="config", version_base=VERSION_BASE)(task)()
print((starts[-1] - starts[0]) / (len(starts) - 1))
"""


def hydra_launcher_seconds(kept: bool) -> float:
    """Seconds a job of Hydra's basic launcher, gradexp's config, an empty task; `kept`: with
    gradexp's sweep callback, whose check of every job keeps the configs it composed
    (gradexp.sweep_configs), else Hydra composing each job from scratch."""
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, "-c", EMPTY_SWEEP, str(HERE / "conf"), "-m",
             *([] if kept else ["~hydra.callbacks.mlflow_sweep"]),
             "optimizer=sgd,momentum,adagrad,adam", "optimizer.learning_rate=0.01,0.03,0.1,0.3"],
            cwd=folder, env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, text=True,
            check=True)
    return float(done.stdout.strip().splitlines()[-1])


def mlflow_seconds(folder: Path) -> tuple[float, float, float]:
    """Median seconds, on sqlite, of a minimal child run; of the rest of a run's default
    records, one MLflow call each through gradexp's tracker (config.yaml, the data sets, the
    .hydra folder's three files, history.parquet); and of the model as a LoggedModel with its
    MLmodel files (gradexp's log_keras_model, the Keras file's save included)."""
    import numpy as np
    from hydra import compose, initialize_config_dir
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param
    from omegaconf import OmegaConf

    from gradexp.app import register_configs
    from gradexp.data import Dataset
    from gradexp.export import export
    from gradexp.mlflow_store import MlflowTracker, config_params
    from gradexp.models import linear

    register_configs()
    with initialize_config_dir(str(HERE / "conf"), version_base="1.3"):
        cfg = compose("config")
    params = [Param(key, value) for key, value in config_params(cfg).items()]
    uri = f"sqlite:///{folder}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("floor")
    parent = client.create_run(experiment).info.run_id
    rng = np.random.default_rng(0)
    line = Dataset("linear", "regression", rng.random((100, 1), "float32"),
                   rng.random((100, 1), "float32"))
    network = linear(n_features=1, n_outputs=1, init_scale=1.0, seed=0)
    hydra_files = folder / "job" / ".hydra"
    hydra_files.mkdir(parents=True)
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (hydra_files / name).write_text(OmegaConf.to_yaml(cfg))
    history = folder / "history.parquet"
    history.write_bytes(bytes(8000))
    runs, records, models = [], [], []
    for job in range(JOBS + 2):
        start = time.perf_counter()
        run_id = client.create_run(experiment, run_name=f"job {job}",
                                   tags={"mlflow.parentRunId": parent}).info.run_id
        for first in range(0, len(params), 100):
            client.log_batch(run_id, params=params[first:first + 100])
        client.log_batch(run_id, metrics=[Metric("val/mse", 0.01, 0, 100)])
        client.set_terminated(run_id, "FINISHED")
        runs.append(time.perf_counter() - start)
        tracker = MlflowTracker.reopen(uri, run_id)
        start = time.perf_counter()
        tracker.log_text(OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
        tracker.log_datasets(line.name, line.splits(), "floor")
        tracker.log_folder(hydra_files, ".hydra")
        tracker.log_file(history)
        records.append(time.perf_counter() - start)
        start = time.perf_counter()
        tracker.log_keras_model(export(network, line), 100)
        models.append(time.perf_counter() - start)
        tracker.end("FINISHED")
    return tuple(statistics.median(times[2:]) for times in (runs, records, models))


def picture_seconds() -> float:
    """Median seconds of a job's loss-curve PNG (gradexp.plots.loss_curves, 100 epochs, saved
    as MLflow's log_figure saves it)."""
    import io

    import numpy as np

    from gradexp.plots import loss_curves

    epochs = np.arange(1, 101)
    pictures = []
    for job in range(JOBS + 2):
        start = time.perf_counter()
        figure = loss_curves({"loss": (epochs, np.exp(-epochs / 10.0) + 0.01 * job)})
        figure.savefig(io.BytesIO(), format="png")
        pictures.append(time.perf_counter() - start)
    return statistics.median(pictures[2:])


def wall(*command: str, cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env={**os.environ, "PYTHONPATH": SRC}, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-digits", action="store_true",
                        help="skip the 16-job sequential digits sweep")
    options = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        composed = statistics.median(hydra_launcher_seconds(kept=False) for _ in range(3))
        hydra_job = statistics.median(hydra_launcher_seconds(kept=True) for _ in range(3))
        child_run, records, model = mlflow_seconds(folder)
        picture = picture_seconds()
        # gc.freeze as gradexp's main does: else the exit's cycle collection adds ~1.5 s
        start = min(wall(sys.executable, "-c", IMPORTS, cwd=folder) for _ in range(2))
        one = min(wall(sys.executable, "-m", "gradexp", cwd=folder) for _ in range(2))
    digits = trained = None
    if not options.no_digits:
        from bench_packed import digits_sweep, timed

        digits, _, _ = timed(*digits_sweep(30), "hydra/launcher=basic")
        _, _, trained = timed(*digits_sweep(30), "hydra/launcher=packed")
    from bench_sweep_cost import limit_seconds

    limit = statistics.mean(limit_seconds()[2:])
    print(f"\nload average after: {os.getloadavg()[0]:.1f}\n")
    floors = (("Hydra's basic launcher composing each job (empty task)", composed),
              ("Hydra's basic launcher, gradexp's kept configs (empty task)", hydra_job),
              ("MLflow child run on sqlite (params, a metric, FINISHED)", child_run),
              ("its other records (config.yaml, data sets, .hydra, history.parquet)", records),
              ("its model: Keras file, LoggedModel, MLmodel files (log_keras_model)", model),
              ("the loss-curve PNG (gradexp.plots.loss_curves, savefig)", picture),
              ("a process start (import tensorflow, keras, mlflow, hydra)", start),
              ("the in-process limit, a job", limit),
              ("one default python -m gradexp", one))
    print("| floor | seconds |\n|---|---:|")
    for what, seconds in floors:
        print(f"| {what} | {seconds:.3f} |")
    if digits is not None:
        print(f"| the 16-job sequential digits sweep (30 epochs) | {digits:.1f} |")
        print(f"| its packed training alone (the packed launcher's line) | {trained:.1f} |")
    # What a job adds to the limit, all in the job's process; or split over this machine's two
    # cores, the job's process keeping only its launcher and a writer process taking MLflow's
    # records and the picture, in parallel (generous: the model's file is saved with the rest).
    writes = child_run + records + model + picture
    alone = hydra_job + writes  # a packed job's replay: its training was packed
    split = max(hydra_job, writes)
    print("\n| target | budget s | floor s, one process | floor s, two | floor / budget |"
          "\n|---|---:|---:|---:|---:|")
    rows = [("sequential job within 1.5x the limit", 1.5 * limit, limit + alone,
             max(limit + hydra_job, writes)),
            ("64 line jobs packed within 3x one process", 3 * one, start + 64 * alone,
             start + 64 * split)]
    if digits is not None:
        rows.append(("16 digits jobs packed 3x faster than sequential", digits / 3,
                     start + trained + JOBS * alone, start + trained + JOBS * split))
    for what, budget, floor, floor_split in rows:
        print(f"| {what} | {budget:.2f} | {floor:.2f} | {floor_split:.2f} | "
              f"{floor / budget:.2f} ({floor_split / budget:.2f}) |")
    print("\nfloor / budget above 1: the floors alone, before any check, evaluation or model "
          "build, exceed the target on this machine (in parentheses: with a writer process)")


if __name__ == "__main__":
    main()
