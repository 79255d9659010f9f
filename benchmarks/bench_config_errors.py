"""How fast a config error answers: `python -m gradexp trainer.epochs=-1` end to end (a process,
no TensorFlow), and gradexp's own checks of a composed config in-process (check_ranges: the
rules on the schema fields and the unknown-key merge). Prints a table of medians.

    PYTHONPATH=src python benchmarks/bench_config_errors.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from hydra import compose, initialize_config_dir

from gradexp.app import register_experiments
from gradexp.config_checks import check_ranges
from gradexp.resources import resource_dir
from gradexp.schema import register_schemas


def _cli_seconds(runs: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(runs):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "gradexp", "trainer.epochs=-1"],
                                  cwd=folder, capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            assert done.returncode == 2 and "trainer.epochs=-1" in done.stderr, done.stderr
    return times


def _check_seconds(runs: int) -> list[float]:
    register_schemas()
    register_experiments()
    with initialize_config_dir(config_dir=str(resource_dir("conf")), version_base="1.3"):
        configs = [compose(config_name="config", overrides=overrides) for overrides in (
            [], ["model=mlp", "optimizer=adam", "data=blobs"], ["trainer.deterministic=true"])]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(20):
            for cfg in configs:
                check_ranges(cfg)
        times.append((time.perf_counter() - start) / (20 * len(configs)))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    cli, check = _cli_seconds(runs), _check_seconds(runs)
    print(f"{'what':<44} {'median':>9} {'min':>9}")
    print(f"{'python -m gradexp trainer.epochs=-1 (s)':<44} {statistics.median(cli):>9.3f} "
          f"{min(cli):>9.3f}")
    print(f"{'check_ranges on a composed config (ms)':<44} "
          f"{1000 * statistics.median(check):>9.2f} {1000 * min(check):>9.2f}")


if __name__ == "__main__":
    main()
