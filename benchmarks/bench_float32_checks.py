"""How well the runner's gradient check judges float32 user code: false alarms and misses.

Runs examples/robust_losses.py's losses (right, and with one branch of the backward 10% off)
and the built-in losses under gradcheck.dtype=float32 and under the default float64 (which falls
back to float32 for the float32-only Keras class), over several data and model seeds, and
counts the verdicts at the start (epoch 0) and the end of training.

    python benchmarks/bench_float32_checks.py [SEEDS]      # default 10 seeds, ~2 minutes
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))

from hydra import compose, initialize_config_dir  # noqa: E402

from gradexp.app import register_experiments, resource_dir  # noqa: E402
from gradexp.experiment import run_experiment  # noqa: E402
from gradexp.schema import register_schemas  # noqa: E402

CASES = {  # name -> (overrides, is the gradient right?)
    "PseudoHuber (class, float32-only)": (["loss._target_=robust_losses.PseudoHuber"], True),
    "PseudoHuberWrongBranch (class)": (["loss._target_=robust_losses.PseudoHuberWrongBranch"],
                                       False),
    "pseudo_huber (function)": (["loss._target_=robust_losses.pseudo_huber"], True),
    "pseudo_huber_wrong_branch (function)": (
        ["loss._target_=robust_losses.pseudo_huber_wrong_branch"], False),
    "mse": (["loss=mse"], True),
    "huber": (["loss=huber"], True),
    "mlp tanh + mse on sine": (["model=mlp", "model.hidden=[16,16]", "data=sine"], True),
}


def main(seeds: int) -> None:
    from mlflow import MlflowClient

    register_schemas()
    register_experiments()
    store = f"sqlite:///{tempfile.mkdtemp()}/mlflow.db"
    client = MlflowClient(store)
    print(f"{'case':38} {'asked':8} {'checked in':10} verdicts over {seeds} seeds: "
          "start / end of training")
    for name, (overrides, right) in CASES.items():
        for dtype in ("float64", "float32"):
            counts: Counter = Counter()
            used = set()
            start = time.perf_counter()
            for seed in range(seeds):
                with initialize_config_dir(config_dir=str(resource_dir("conf")),
                                           version_base="1.3"):
                    cfg = compose("config", overrides=[
                        *overrides, f"tracking.uri={store}", "data.outliers=0.1",
                        f"data.seed={seed}", f"model.seed={seed}", f"gradcheck.dtype={dtype}",
                        "gradcheck.plots=false"])
                result = run_experiment(cfg, quiet=True, launch_dir=REPO / "examples",
                                        show_config=False)
                for metric in client.get_metric_history(result.run_id, "gradcheck/passed"):
                    counts[("start" if metric.step == 0 else "end", metric.value == 1.0)] += 1
                tags = client.get_run(result.run_id).data.tags
                used.add(tags.get("gradexp.gradcheck_dtype", dtype))
            word = "passed" if right else "caught"
            shown = " / ".join(f"{counts[(when, right)]}/{seeds} {word}"
                               for when in ("start", "end"))
            print(f"{name:38} {dtype:8} {','.join(sorted(used)):10} {shown}"
                  f"   ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
