"""What tracking costs a long run: a default run (gradcheck off, no model logged) of EPOCHS
epochs into a fresh sqlite store, timed in-process after the imports, for each source tree given,
alternating the trees so machine load falls on both alike.

    python benchmarks/bench_tracking.py [EPOCHS] [REPEATS] [SRC ...]

SRC defaults to this tree's src/. Prints per tree the median wall seconds of run_experiment, the
points MLflow holds for `loss`, and the seconds spent after training (the run's end: the last
metric writes, the artifacts); and the first tree with tracking=none, what training alone costs.
E.g., branch against main:

    python benchmarks/bench_tracking.py 20000 3 src /work/main/src
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/../tests")
from conftest import compose_config
from gradexp.experiment import run_experiment
import gradexp.experiment as experiment
from mlflow import MlflowClient

folder = Path(tempfile.mkdtemp())
store = f"sqlite:///{folder / 'mlflow.db'}"
tracking = ["tracking=none"] if sys.argv[3] == "none" else []
cfg = compose_config(f"tracking.uri={store}", "gradcheck=off", "tracking.log_model=false",
                     f"trainer.epochs={sys.argv[2]}", *tracking)
run_experiment(compose_config(f"tracking.uri={store}", "gradcheck=off",
                              "tracking.log_model=false", "trainer.epochs=20"),
               quiet=True, launch_dir=folder)  # warm: imports, first trace, the store's tables
marks = {}
finish = experiment._Run.finish
def timed_finish(self, final_loss):
    marks["trained"] = time.perf_counter()
    return finish(self, final_loss)
experiment._Run.finish = timed_finish
started = time.perf_counter()
result = run_experiment(cfg, quiet=True, launch_dir=folder)
ended = time.perf_counter()
points = len(MlflowClient(store).get_metric_history(result.run_id, "loss")) if result.run_id \
    else 0
print(json.dumps({"wall": ended - started, "after_training": ended - marks["trained"],
                  "points": points}))
"""


def measure(src: Path, epochs: int, tracking: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("MLFLOW_TRACKING_URI", None)
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, "-c", CHILD, str(src), str(epochs), tracking],
                              cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    trees = [Path(arg).resolve() for arg in sys.argv[3:]] or [HERE / "src"]
    cases = [(tree, "mlflow") for tree in trees] + [(trees[0], "none")]
    results: dict[tuple[Path, str], list[dict]] = {case: [] for case in cases}
    for _ in range(repeats):
        for tree, tracking in cases:
            results[tree, tracking].append(measure(tree, epochs, tracking))
    print(f"{epochs} epochs, median of {repeats}:")
    print(f"{'src':<40} {'tracking':<9} {'wall s':>8} {'after training s':>17} "
          f"{'loss points':>12}")
    for (tree, tracking), rows in results.items():
        print(f"{str(tree):<40} {tracking:<9} {statistics.median(r['wall'] for r in rows):>8.2f} "
              f"{statistics.median(r['after_training'] for r in rows):>17.2f} "
              f"{rows[0]['points']:>12}")


if __name__ == "__main__":
    main()
