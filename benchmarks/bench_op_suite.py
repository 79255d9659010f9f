"""The checker on an op suite after TensorFlow's own gradient tests (tests/op_cases.py).

    python benchmarks/bench_op_suite.py                  # every case, probe seeds 0-7
    python benchmarks/bench_op_suite.py --seeds 2 --only cwise/tanh,pooling   # a part
    python benchmarks/bench_op_suite.py --more --seeds 4   # 151 more: tests/op_cases_more.py

For each case (an op at float32 or float64, correct and with a planted backward bug) it runs
tf.test.compute_gradient at the step and tolerance TensorFlow's own test uses (the reference),
check_gradients(method="jacobian") and check_gradients(method="probe", seed=s) for each seed,
all at gradexp's defaults, and prints one table: per method the false alarms (a correct case
that fails; per seed for the probe method), the missed bugs (a planted bug that passes) and the
seconds, then every case that went wrong, by name.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import op_cases  # noqa: E402


def run(cases: list, seeds: list[int]) -> tuple[dict, dict]:
    """Counts and times per method, and the wrong verdicts' case names."""
    import tensorflow as tf

    from gradexp.gradcheck import check_gradients

    methods = ["compute_gradient", "jacobian"] + [f"probe seed {s}" for s in seeds]
    stats = {m: {"false": 0, "missed": 0, "seconds": 0.0} for m in methods}
    wrong: dict[str, list[str]] = {m: [] for m in methods}

    def record(method: str, case, bug: bool, passed: bool, seconds: float) -> None:
        stats[method]["seconds"] += seconds
        if passed == bug:  # a passing bug or a failing correct function
            stats[method]["missed" if bug else "false"] += 1
            wrong[method].append(case.name + (" (bug missed)" if bug else " (false alarm)"))

    for case in cases:
        xs = [tf.constant(x) for x in case.inputs]
        for bug in (False, True):
            fn = case.bug if bug else case.f
            start = time.perf_counter()
            passed = op_cases.reference(case, bug)
            record("compute_gradient", case, bug, passed, time.perf_counter() - start)
            start = time.perf_counter()
            report = check_gradients(fn, xs, method="jacobian")
            record("jacobian", case, bug, report.passed, time.perf_counter() - start)
            for s in seeds:
                start = time.perf_counter()
                report = check_gradients(fn, xs, method="probe", seed=s)
                record(f"probe seed {s}", case, bug, report.passed, time.perf_counter() - start)
    return stats, wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="probe seeds 0..N-1 (default 8)")
    parser.add_argument("--only", default="", help="comma-separated name prefixes of cases")
    parser.add_argument("--more", action="store_true",
                        help="the cases of tests/op_cases_more.py instead: segment, cumulative, "
                             "top-k, scatter, QR/eigh/SVD, FFT, LRN, CTC, special functions and "
                             "edge inputs TensorFlow's tests avoid")
    args = parser.parse_args()
    import numpy as np
    import tensorflow as tf

    if args.more:
        import op_cases_more

        cases = op_cases_more.cases()
    else:
        cases = op_cases.cases()
    if args.only:
        prefixes = tuple(p.strip() for p in args.only.split(",") if p.strip())
        cases = [c for c in cases if c.name.startswith(prefixes)]
    seeds = list(range(args.seeds))
    print(f"tensorflow {tf.__version__}, numpy {np.__version__}, {os.cpu_count()} CPU cores; "
          f"{len(cases)} cases ({sum(c.dtype == 'float32' for c in cases)} float32), "
          "each correct and with a planted bug; gradexp at its defaults")
    stats, wrong = run(cases, seeds)
    header = f"{'method':<22}{'false alarms':>14}{'missed bugs':>13}{'seconds':>10}"
    print(header)
    print("-" * len(header))
    probe = {"false": 0, "missed": 0, "seconds": 0.0}
    for method, row in stats.items():
        print(f"{method:<22}{row['false']:>14}{row['missed']:>13}{row['seconds']:>10.1f}")
        if method.startswith("probe"):
            for k in probe:
                probe[k] += row[k]
    print(f"{'probe, all seeds':<22}{probe['false']:>14}{probe['missed']:>13}"
          f"{probe['seconds']:>10.1f}")
    for method, names in wrong.items():
        for name in names:
            print(f"  {method}: {name}")


if __name__ == "__main__":
    main()
