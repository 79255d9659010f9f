"""How well the runner's gradient check judges float32 user code: false alarms and misses.

Runs examples/robust_losses.py's losses (right, and with one branch of the backward 10% off)
and the built-in losses under gradcheck.dtype=float32 and under the default float64 (which falls
back to float32 for the float32-only Keras class), over several data and model seeds, and
counts the verdicts at the start (epoch 0) and the end of training. Then, with the checker
alone, why gradcheck.dtype refuses float16 and bfloat16: in them, the wrong branch passes.

    python benchmarks/bench_float32_checks.py [SEEDS]      # default 10 seeds, ~3 minutes
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
from gradexp.loop import run_experiment  # noqa: E402
from gradexp.schema import register_schemas  # noqa: E402

OUTLIERS = "data.outliers=0.1"  # a tenth of the rows far off: the robust losses' large branch
CASES = {  # name -> (overrides, is the gradient right?)
    "PseudoHuber (class, float32-only)": (
        ["loss._target_=robust_losses.PseudoHuber", OUTLIERS], True),
    "PseudoHuberWrongBranch (class)": (
        ["loss._target_=robust_losses.PseudoHuberWrongBranch", OUTLIERS], False),
    "pseudo_huber (function)": (["loss._target_=robust_losses.pseudo_huber", OUTLIERS], True),
    "pseudo_huber_wrong_branch (function)": (
        ["loss._target_=robust_losses.pseudo_huber_wrong_branch", OUTLIERS], False),
    "mse": (["loss=mse", OUTLIERS], True),
    "huber": (["loss=huber", OUTLIERS], True),
    "buggy_linear (dLoss/dW 10% off)": (["model=buggy_linear"], False),
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
                        *overrides, f"tracking.uri={store}", f"data.seed={seed}",
                        f"model.seed={seed}", f"gradcheck.dtype={dtype}", "gradcheck.plots=false"])
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


def low_precision(seeds: int) -> None:
    """check_gradients on the pseudo-Huber function, right and wrong, with inputs in each dtype."""
    import numpy as np
    import robust_losses
    import tensorflow as tf

    from gradexp.gradcheck import check_gradients

    print(f"\n{'inputs in':10} {'loss':26} {'method':9} passed over {seeds} random batches of 32")
    for dtype in ("float32", "float16", "bfloat16"):
        for loss in (robust_losses.pseudo_huber, robust_losses.pseudo_huber_wrong_branch):
            for method in ("probe", "jacobian"):
                passed = 0
                for seed in range(seeds):
                    rng = np.random.default_rng(seed)
                    y_true = tf.constant(3 * rng.standard_normal((32, 1)), dtype)
                    y_pred = tf.constant(rng.standard_normal((32, 1)), dtype)
                    passed += check_gradients(lambda p, y=y_true, f=loss: f(y, p), [y_pred],
                                              method=method, seed=seed).passed
                print(f"{dtype:10} {loss.__name__:26} {method:9} {passed}/{seeds}", flush=True)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    main(count)
    low_precision(2 * count)
