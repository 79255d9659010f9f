"""What the default gradient checks cost a run (issue 18, item 7), side by side in one run.

    python benchmarks/bench_default_checks.py            # about 4 minutes on 2 CPU cores
    python benchmarks/bench_default_checks.py --runs 3   # median of 3 processes per row
    python benchmarks/bench_default_checks.py --src /work/main/src --src src --only MLP
        # two source trees side by side, their processes interleaved (the same load for both)

Each row is `python -m gradexp ...` as a person types it, a process of its own, timed from
start to exit (median of --runs), with the default checks and with gradcheck=off; the checks'
own seconds are the sum of the `seconds` of every report the run logged. Rows:

1. seed 004's line (the default run): method auto gives W and b the exact Jacobian too.
2. a functional model of 593 parameters on the sine data (Dense 16 tanh, Dense 16 tanh,
   Dense 16, softplus, Dense 1), 100 epochs: the issue's "small model", whose default check
   cost 7 s under method both; also with gradcheck.method=both for comparison.
3. a 1.1M-parameter MLP on digits (model.hidden=[1024,1024]), 5 epochs of mini-batches of 64,
   checked every epoch (gradcheck.every_n_epochs=1). The target: at most 1.5x gradcheck=off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # no bars between the rows

FUNCTIONAL = '''
import keras


def build(n_features, n_outputs):
    inputs = keras.Input((n_features,))
    h = keras.layers.Dense(16, activation="tanh", name="encoder")(inputs)
    h = keras.layers.Dense(16, activation="tanh", name="middle")(h)
    h = keras.layers.Dense(16, name="pre")(h)
    h = keras.layers.Activation("softplus", name="softplus")(h)
    return keras.Model(inputs, keras.layers.Dense(n_outputs, name="head")(h), name="functional")
'''

ROWS = {
    "seed 004's line (default run)": (),
    "functional, 593 parameters, 100 epochs": (
        "data=sine", "model=custom", "model._target_=bench_functional.build"),
    "MLP [1024, 1024] on digits (1.1M), 5 epochs, checked every epoch": (
        "data=sklearn", "data.name=digits", "model=mlp", "model.hidden=[1024,1024]",
        "loss=categorical_crossentropy", "optimizer=adam", "optimizer.learning_rate=0.001",
        "trainer.epochs=5", "trainer.batch_size=64", "gradcheck.every_n_epochs=1"),
}
OLD_DEFAULT = "functional, 593 parameters, 100 epochs"  # also timed with method=both


def timed_run(folder: Path, overrides: tuple[str, ...], src: str | None = None
              ) -> tuple[float, float]:
    """(wall seconds of the process, seconds of its checks' reports); gradexp from ``src``
    (a source tree's src/ folder) if given, else as this process imports it."""
    from mlflow import MlflowClient

    name = f"bench{time.monotonic_ns()}"
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), str(folder)])
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gradexp", *overrides,
                           "tracking.log_model=false", f"tracking.experiment={name}"],
                          cwd=folder, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(overrides)} failed:\n{done.stderr[-2000:]}")
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name(name).experiment_id])
    seconds = 0.0
    for artifact in client.list_artifacts(run.info.run_id, "gradcheck"):
        if artifact.path.endswith(".json"):
            report = json.loads(Path(client.download_artifacts(run.info.run_id, artifact.path,
                                                               str(folder))).read_text())
            seconds += sum(r["seconds"] for r in report["reports"].values())
    return wall, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="processes per setting (median)")
    parser.add_argument("--src", action="append", default=[],
                        help="a source tree's src/ folder to run gradexp from (repeat to "
                             "compare trees; their processes alternate)")
    parser.add_argument("--only", default="", help="rows whose label contains this")
    args = parser.parse_args()
    srcs = args.src or [None]
    print(f"{'run':<66} {'off s':>7} {'defaults s':>10} {'x off':>6} {'checks s':>9}")
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        (folder / "bench_functional.py").write_text(FUNCTIONAL)
        for label, overrides in ROWS.items():
            if args.only not in label:
                continue
            settings = {"off": (*overrides, "gradcheck=off"), "defaults": overrides}
            if label == OLD_DEFAULT:
                settings["both"] = (*overrides, "gradcheck.method=both")
            measured: dict = {(src, key): [] for src in srcs for key in settings}
            for _ in range(args.runs):  # each tree's settings in turn, so loads even out
                for key, value in settings.items():
                    for src in srcs:
                        measured[src, key].append(timed_run(folder, value, src))
            for src in srcs:
                off = statistics.median(w for w, _ in measured[src, "off"])
                for key in [k for k in settings if k != "off"]:
                    wall = statistics.median(w for w, _ in measured[src, key])
                    checks = statistics.median(c for _, c in measured[src, key])
                    shown = label if key == "defaults" else "  the same with method=both (before)"
                    if src is not None and len(srcs) > 1:
                        shown = f"[{Path(src).resolve().parent.name}] {shown}"[:66]
                    print(f"{shown:<66} {off:>7.2f} {wall:>10.2f} {wall / off:>6.2f} "
                          f"{checks:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
