"""What real runs record in MLflow, as plain JSON, to compare before and after a refactoring.

    python tests/baselines/record_baseline.py          # rewrites tests/baselines/records.json

Runs, each on a fresh sqlite store in a temp folder: the default run (in-process, as the command
line runs it), a few in-process runs that take the paths a default run does not (a
classification run with early stopping: the confusion matrix and restore_best; a run that
diverges: its failure tags), and a 4-job sweep (`python -m gradexp -m`, a child process). Each
run's params, metric histories, tags and artifact paths are written, minus what differs between
two identical runs (VOLATILE_TAGS; the temp folder is written as <TMP>).
tests/test_records_unchanged.py runs the same and compares. Other changes that record more on
purpose (new params, tags) rerun this script.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "records.json"

# Tags that differ between two runs of the same config: ids, times, the machine and process,
# the checkout, what started the process.
VOLATILE_TAGS = {
    "mlflow.parentRunId", "mlflow.user", "mlflow.source.name", "mlflow.source.type",
    "mlflow.source.git.commit", "mlflow.log-model.history", "mlflow.runName",
    "gradexp.host", "gradexp.pid", "gradexp.heartbeat", "gradexp.checkpoints",
    "gradexp.best_run_id",
}
VOLATILE_PREFIXES = ("gradexp.reused.",)

# The in-process runs: name -> overrides (beside tracking.uri).
IN_PROCESS = {
    "default": [],
    "classification_early_stopping": ["data=blobs", "model=mlp", "loss=categorical_crossentropy",
                                      "trainer.epochs=60", "eval.every=5", "gradcheck=off",
                                      "trainer.early_stopping.enabled=true",
                                      "trainer.early_stopping.patience=5"],
    "diverged": ["optimizer.learning_rate=1e6", "trainer.epochs=50", "gradcheck=off"],
}
SWEEP = ["-m", "optimizer=sgd,adam", "loss=mse,mae", "trainer.epochs=30"]


def _artifacts(client, run_id: str, path: str | None = None) -> list[str]:
    found = []
    for item in client.list_artifacts(run_id, path):
        found.extend(_artifacts(client, run_id, item.path) if item.is_dir else [item.path])
    return sorted(found)


def _models(client, run) -> list[list]:
    """The run's LoggedModels (MLflow 3 keeps them beside the run's artifacts): name, step,
    status."""
    outputs = run.outputs.model_outputs if run.outputs else []
    return sorted([client.get_logged_model(output.model_id).name, output.step,
                   str(client.get_logged_model(output.model_id).status)] for output in outputs)


def run_record(client, run, tmp: str) -> dict:
    """One run as plain data: params, metric histories [(step, value)], tags, artifacts, status."""
    def clean(text: str) -> str:
        return text.replace(tmp, "<TMP>")

    tags = {key: clean(value) for key, value in run.data.tags.items()
            if key not in VOLATILE_TAGS and not key.startswith(VOLATILE_PREFIXES)}
    metrics = {key: [(m.step, m.value) for m in sorted(
        client.get_metric_history(run.info.run_id, key), key=lambda m: (m.step, m.timestamp))]
        for key in sorted(run.data.metrics)}
    return {"status": run.info.status,
            "params": {key: clean(value) for key, value in sorted(run.data.params.items())},
            "metrics": metrics, "tags": dict(sorted(tags.items())),
            "artifacts": _artifacts(client, run.info.run_id), "models": _models(client, run)}


def store_records(uri: str, tmp: str) -> dict[str, dict]:
    """Every run of the store by its name (a sweep's parent as `sweep`)."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              max_results=1000)
    records = {}
    for run in runs:
        name = "sweep" if run.data.tags.get("gradexp.sweep") == "true" else run.info.run_name
        records[name] = run_record(client, run, tmp)
    return records


def in_process_records(name: str, overrides: list[str]) -> dict:
    from hydra import compose, initialize_config_dir

    from gradexp.app import register_experiments, resource_dir
    from gradexp.loop import RunFailed, run_experiment
    from gradexp.metrics import register_resolver
    from gradexp.schema import register_schemas

    register_schemas()
    register_experiments()
    register_resolver()
    with tempfile.TemporaryDirectory() as folder:
        tmp = str(Path(folder).resolve())
        uri = f"sqlite:///{tmp}/mlflow.db"
        with initialize_config_dir(config_dir=str(resource_dir("conf")), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[f"tracking.uri={uri}", *overrides])
        try:
            run_experiment(cfg, run_name=name, launch_dir=Path(tmp), quiet=True)
        except RunFailed:
            pass  # a run meant to fail (diverged): its record is the point
        return store_records(uri, tmp)[name]


def sweep_records() -> dict[str, dict]:
    """A 4-job sweep as the command line runs it: the parent (`sweep`) and its children."""
    import gradexp

    source = str(Path(gradexp.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (source, os.environ.get("PYTHONPATH")) if p), "TF_CPP_MIN_LOG_LEVEL": "3"}
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "HYDRA_FULL_ERROR"):
        env.pop(name, None)
    with tempfile.TemporaryDirectory() as folder:
        tmp = str(Path(folder).resolve())
        done = subprocess.run([sys.executable, "-m", "gradexp", *SWEEP], cwd=tmp, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"the sweep failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return {f"sweep:{name}": record for name, record in
                store_records(f"sqlite:///{tmp}/mlflow.db", tmp).items()}


def all_records() -> dict[str, dict]:
    records = {name: in_process_records(name, overrides) for name, overrides in IN_PROCESS.items()}
    records.update(sweep_records())
    return records


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    BASELINE.write_text(json.dumps(all_records(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {BASELINE}")


if __name__ == "__main__":
    main()
