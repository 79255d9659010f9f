"""What tracking costs a long run: a default run (gradcheck off, no model logged) of EPOCHS
epochs into a fresh sqlite store, timed in-process after the imports, for each source tree given,
alternating the trees so machine load falls on both alike.

    python benchmarks/bench_tracking.py [EPOCHS] [REPEATS] [SRC ...] [--eval-every N]

SRC defaults to this tree's src/. Prints per tree the median wall seconds of run_experiment, the
points MLflow holds for `loss` and `val/mse`, and the seconds spent after training (the run's
end: the last metric writes, the artifacts); and the first tree with tracking=none, what
training alone costs. --eval-every sets eval.every (default: the config's, ~10 evaluations a
run). E.g., branch against main, and held-out evaluations every epoch:

    python benchmarks/bench_tracking.py 20000 3 src /work/main/src
    python benchmarks/bench_tracking.py 5000 3 --eval-every 1
"""

from __future__ import annotations

import argparse
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
from gradexp.loop import run_experiment
import gradexp.loop as loop
from mlflow import MlflowClient

folder = Path(tempfile.mkdtemp())
store = f"sqlite:///{folder / 'mlflow.db'}"
tracking = ["tracking=none"] if sys.argv[3] == "none" else []
cfg = compose_config(f"tracking.uri={store}", "gradcheck=off", "tracking.log_model=false",
                     f"trainer.epochs={sys.argv[2]}", *tracking, *sys.argv[4:])
run_experiment(compose_config(f"tracking.uri={store}", "gradcheck=off",
                              "tracking.log_model=false", "trainer.epochs=20"),
               quiet=True, launch_dir=folder)  # warm: imports, first trace, the store's tables
marks = {}
finish = loop.Loop.end
def timed_finish(self, *args):
    marks["trained"] = time.perf_counter()
    return finish(self, *args)
loop.Loop.end = timed_finish
started = time.perf_counter()
result = run_experiment(cfg, quiet=True, launch_dir=folder)
ended = time.perf_counter()
client = MlflowClient(store)
points = {key: len(client.get_metric_history(result.run_id, key)) if result.run_id else 0
          for key in ("loss", "val/mse")}
print(json.dumps({"wall": ended - started, "after_training": ended - marks["trained"],
                  "points": points}))
"""


def measure(src: Path, epochs: int, tracking: str, overrides: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("MLFLOW_TRACKING_URI", None)
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, "-c", CHILD, str(src), str(epochs), tracking,
                               *overrides],
                              cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("epochs", type=int, nargs="?", default=20_000)
    parser.add_argument("repeats", type=int, nargs="?", default=3)
    parser.add_argument("src", type=Path, nargs="*")
    parser.add_argument("--eval-every", type=int, help="eval.every (default: the config's)")
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.src] or [HERE / "src"]
    overrides = [f"eval.every={args.eval_every}"] if args.eval_every else []
    cases = [(tree, "mlflow") for tree in trees] + [(trees[0], "none")]
    results: dict[tuple[Path, str], list[dict]] = {case: [] for case in cases}
    for _ in range(args.repeats):
        for tree, tracking in cases:
            results[tree, tracking].append(measure(tree, args.epochs, tracking, overrides))
    print(f"{args.epochs} epochs{', ' + overrides[0] if overrides else ''}, "
          f"median of {args.repeats}:")
    print(f"{'src':<40} {'tracking':<9} {'wall s':>8} {'after training s':>17} "
          f"{'loss points':>12} {'val/mse points':>15}")
    for (tree, tracking), rows in results.items():
        print(f"{str(tree):<40} {tracking:<9} {statistics.median(r['wall'] for r in rows):>8.2f} "
              f"{statistics.median(r['after_training'] for r in rows):>17.2f} "
              f"{rows[0]['points']['loss']:>12} {rows[0]['points']['val/mse']:>15}")


if __name__ == "__main__":
    main()
