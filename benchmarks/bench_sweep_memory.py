"""Benchmark: does a long sequential sweep hold its memory steady? (issue 20, item 7)

    python benchmarks/bench_sweep_memory.py                  # 200 jobs of 20 epochs (~4 minutes)
    python benchmarks/bench_sweep_memory.py --jobs 60 --src /other/checkout/src   # another tree

Runs `python -m gradexp -m 'trainer.seed=range(0,JOBS)' trainer.epochs=20` (Hydra's basic
launcher: every job in one process, the default checks and tracking on) in a fresh temp folder
and samples the process's resident set size (VmRSS, from /proc) each time Hydra starts a job,
reading its stdout as it goes. Prints the RSS after jobs 1, 20, 50, 100, ... and the growth per
job between job 20 and the last. Target: RSS after job 200 within 10% of after job 20.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def sweep_rss(jobs: int, epochs: int, src: str | None) -> dict[int, float]:
    """{jobs finished: RSS in MiB} of one sequential sweep."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as folder:
        child = subprocess.Popen(
            [sys.executable, "-m", "gradexp", "-m", f"trainer.seed=range(0,{jobs})",
             f"trainer.epochs={epochs}"], cwd=folder, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        samples, started = {}, 0
        for line in child.stdout:
            if "\t#" in line and " : " in line:  # Hydra's "#N : overrides": job N-1 has ended
                if started:
                    samples[started] = rss_mib(child.pid)
                started += 1
        if child.wait() != 0:
            raise SystemExit(f"the sweep failed (exit {child.returncode})")
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--src", help="a src/ folder to run instead of the installed gradexp")
    args = parser.parse_args()
    samples = sweep_rss(args.jobs, args.epochs, args.src)
    print(f"load average before the last sample: {os.getloadavg()[0]:.1f}")
    print("| after job | RSS MiB |")
    print("|---:|---:|")
    marks = sorted({1, 20, 50, 100, 150, max(samples)} & set(samples))
    for job in marks:
        print(f"| {job} | {samples[job]:.0f} |")
    last = max(samples)
    if 20 in samples and last > 20:
        growth = (samples[last] - samples[20]) / (last - 20)
        ratio = samples[last] / samples[20]
        print(f"growth after job 20: {growth:.2f} MiB a job; job {last} / job 20 = {ratio:.2f} "
              f"(target <= 1.10)")


if __name__ == "__main__":
    main()
