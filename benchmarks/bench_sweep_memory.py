"""Benchmark: does a long sequential sweep hold its memory steady? (issue 20, item 7)

    python benchmarks/bench_sweep_memory.py                  # 200 jobs of 20 epochs (~4 minutes)
    python benchmarks/bench_sweep_memory.py --jobs 60 --src /other/checkout/src   # another tree
    python benchmarks/bench_sweep_memory.py --src before=/old/src --src after=src  # side by side
    python benchmarks/bench_sweep_memory.py --new-shapes --jobs 40 --epochs 5   # a shape a job

Runs `python -m gradexp -m 'trainer.seed=range(0,JOBS)' trainer.epochs=20` (Hydra's basic
launcher: every job in one process, the default checks and tracking on) in a fresh temp folder
and samples the process's resident set size (VmRSS, from /proc) each time Hydra starts a job,
reading its stdout as it goes. Prints the RSS after jobs 1, 20, 40, 60, ... and the growth per
job between job 20 and the last, and the seconds a job between them (the launcher's marginal cost
a job). Target: RSS after job 200 within 10% of after job 20. `--new-shapes` sweeps
`model=mlp model.hidden=[8],[9],...` instead: every job a new shape, past the MAX_SHARED shapes
gradexp keeps traced (gradexp.shared_programs). Several --src run one after
another in the same invocation, printed side by side.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def sweep_rss(jobs: int, epochs: int, src: str | None,
              new_shapes: bool = False) -> dict[int, tuple[float, float]]:
    """{jobs finished: (RSS in MiB, seconds since the first job started)} of one sweep."""
    swept = (["model=mlp", "model.hidden=" + ",".join(f"[{8 + job}]" for job in range(jobs))]
             if new_shapes else [f"trainer.seed=range(0,{jobs})"])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as folder:
        child = subprocess.Popen(
            [sys.executable, "-m", "gradexp", "-m", *swept, f"trainer.epochs={epochs}"],
            cwd=folder, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        samples, started, first = {}, 0, 0.0
        for line in child.stdout:
            if "\t#" in line and " : " in line:  # Hydra's "#N : overrides": job N-1 has ended
                if started:
                    samples[started] = (rss_mib(child.pid), time.perf_counter() - first)
                else:
                    first = time.perf_counter()
                started += 1
        if child.wait() != 0:
            raise SystemExit(f"the sweep failed (exit {child.returncode})")
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--src", action="append", default=[],
                        help="[LABEL=]a src/ folder to run instead of the installed gradexp "
                             "(repeat to compare)")
    parser.add_argument("--new-shapes", action="store_true",
                        help="every job a new model width (model.hidden), not a new seed")
    args = parser.parse_args()
    trees = [tuple(src.split("=", 1)) if "=" in src else (src, src) for src in args.src]
    runs = {label: sweep_rss(args.jobs, args.epochs, src, args.new_shapes)
            for label, src in trees or [("installed", None)]}
    print(f"{args.jobs} jobs of {args.epochs} epochs"
          f"{', a new model width each' if args.new_shapes else ''}; load average at the end: "
          f"{os.getloadavg()[0]:.1f}")
    labels = list(runs)
    print("| after job | " + " | ".join(f"{label} RSS MiB" for label in labels) + " |")
    print("|---:|" + "---:|" * len(labels))
    common = set.intersection(*(set(samples) for samples in runs.values()))
    for job in sorted(({1, max(common)} | set(range(20, max(common), 20))) & common):
        print(f"| {job} | " + " | ".join(f"{runs[label][job][0]:.0f}" for label in labels)
              + " |")
    last = max(common)
    if 20 in common and last > 20:
        for label in labels:
            (rss_20, t_20), (rss_last, t_last) = runs[label][20], runs[label][last]
            print(f"{label}: growth after job 20: {(rss_last - rss_20) / (last - 20):.2f} MiB a "
                  f"job; job {last} / job 20 = {rss_last / rss_20:.2f} (target <= 1.10); "
                  f"{(t_last - t_20) / (last - 20):.3f} s a job after job 20")


if __name__ == "__main__":
    main()
