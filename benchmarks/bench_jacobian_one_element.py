"""Does the jacobian method in float32 catch a backward wrong in one element only?

    python benchmarks/bench_jacobian_one_element.py [SEEDS]   # default 10 seeds, ~30 s

A smooth float32 function of 32 normal inputs, sin(x)·x + 0.3x³, as a scalar loss (its sum
weighted 1 to 2, about 40) and as the vector itself, its tf.custom_gradient backward off by 1%,
3%, 10% and 30% (relative) in one element drawn per seed. No step excuses such an error: the
function is smooth. Prints, per case, how many seeds passed (a correct backward should pass
every seed, a wrong one none).
"""

from __future__ import annotations

import os
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from op_bugs import one_element_off  # noqa: E402 - the tests' own, as bench_op_suite.py


def main(seeds: int) -> None:
    from gradexp.gradcheck import check_gradients

    print(f"{'output':8} {'element off':>12} {'passed':>8}")
    for scalar in (True, False):
        for error in (0.0, 0.01, 0.03, 0.1, 0.3):
            passed = 0
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                x, k = rng.normal(size=32).astype(np.float32), int(rng.integers(32))
                passed += check_gradients(one_element_off(k, error, scalar), [x],
                                          method="jacobian", dtype="float32", seed=seed,
                                          compile=False).passed
            print(f"{'scalar' if scalar else 'vector':8} {error:>12.0%} {passed:>5}/{seeds}",
                  flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
