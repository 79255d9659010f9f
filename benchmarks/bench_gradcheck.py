"""Benchmark gradexp's probe gradient check against tf.test.compute_gradient.

    python benchmarks/bench_gradcheck.py            # 2-3 minutes on 2 CPU cores
    python benchmarks/bench_gradcheck.py --full     # also compute_gradient at n = 90,000 (~5 min)

Three tables, every number measured in this run:

1. Speed: wall time of tf.test.compute_gradient (the full numerical Jacobian, 2n evaluations)
   and of check_gradients(method="probe") on the same float64 function of n inputs, their
   ratio, and the probe's cost as a multiple of one forward+backward pass of that function.
2. Locating a bug: one wrong gradient element planted among n; time and cost until the probe
   check names it (bisection included).
3. Detection probability: a planted gradient error whose directional error has standard
   deviation t x tolerance, checked with many seeds; the measured miss rate next to the
   predicted erf(1 / (t sqrt 2)) ** probes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from gradexp.gradcheck import check_gradients, miss_probability


def f(x):
    """An MLP-ish elementwise + reduction function of a vector: cheap per element, like a loss."""
    import tensorflow as tf

    return tf.reduce_sum(tf.tanh(1.3 * x + 0.1) * tf.nn.softplus(x)) + 0.5 * tf.reduce_mean(x * x)


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def forward_backward(x) -> None:
    """One forward and one backward pass of f: the unit the probe's cost is measured in."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    tape.gradient(y, x).numpy()


def planted_element(n: int, index: int):
    """f with a custom gradient that is right except at one element (doubled there)."""
    import tensorflow as tf

    mask = np.zeros(n)
    mask[index] = 1.0

    @tf.custom_gradient
    def g(x):
        def grad(up):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = f(x)
            return up * tape.gradient(y, x) * (1.0 + mask)

        return f(x), grad

    return g


def speed_rows(sizes: list[int], full: bool) -> list[list[str]]:
    import tensorflow as tf

    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        x = rng.standard_normal(n)
        xt = tf.constant(x)
        forward_backward(xt)  # warm up
        probe_report = check_gradients(f, [x], method="probe")
        # Interleaved, so a busy machine slows both sides of the ratio alike.
        fbs, probes = [], []
        for _ in range(5):
            fbs.append(median_time(lambda xt=xt: forward_backward(xt), 3))
            probes.append(median_time(lambda x=x: check_gradients(f, [x], method="probe"), 1))
        fb, probe = statistics.median(fbs), statistics.median(probes)
        cost = statistics.median(p / b for p, b in zip(probes, fbs))
        if n <= 10_000 or (full and n == 90_000):
            start = time.perf_counter()
            (theoretical,), (numerical,) = tf.test.compute_gradient(f, [xt])
            cg = time.perf_counter() - start
            agree = np.allclose(theoretical, numerical, rtol=1e-4, atol=1e-6)
            cg_text, ratio = f"{cg:.2f}{'' if agree else ' (disagrees!)'}", f"{cg / probe:,.0f}x"
        else:
            cg_text, ratio = "skipped", "-"
        rows.append([
            f"{n:,}", cg_text, f"{probe * 1e3:.1f}", ratio, f"{fb * 1e3:.2f}",
            f"{cost:.1f}",
            f"{probe_report.function_evaluations} + {probe_report.backward_passes}",
            "yes" if probe_report.passed else "NO",
        ])
    return rows


def locate_rows(sizes: list[int]) -> list[list[str]]:
    import tensorflow as tf

    rows = []
    rng = np.random.default_rng(1)
    for n in sizes:
        x = rng.standard_normal(n)
        bad = int(rng.integers(n))
        g = planted_element(n, bad)
        xt = tf.constant(x)
        before = median_time(lambda xt=xt: forward_backward(xt), 3)
        start = time.perf_counter()
        report = check_gradients(g, [x], method="probe")
        seconds = time.perf_counter() - start
        fb = statistics.median([before, median_time(lambda xt=xt: forward_backward(xt), 3)])
        entry = report.entries[0]
        found = entry.worst_input_index == (bad,)
        rows.append([
            f"{n:,}", f"{bad:,}", str(entry.worst_input_index[0]) if entry.worst_input_index
            else "-", "yes" if found and not report.passed else "NO", f"{seconds:.2f}",
            f"{seconds / fb:.0f}",
            f"{report.function_evaluations} + {report.backward_passes}",
        ])
    return rows


def detection_rows(seeds: int) -> list[list[str]]:
    """Measured vs predicted miss rate for an error of t x tolerance (linear f: no FD noise).

    Each row uses its own seeds, so the rows are independent samples.
    """
    import tensorflow as tf

    n, tol = 200, 1e-3
    rng = np.random.default_rng(2)
    x = rng.standard_normal(n)
    a = rng.standard_normal(n)
    direction = rng.standard_normal(n)
    direction /= np.linalg.norm(direction)
    rows = []
    for t in (0.5, 1.0, 2.0, 4.0):
        # Normalised directional error e·u/|u| has std |e|/sqrt(n); make it t x tol.
        e = direction * t * tol * np.sqrt(n)

        @tf.custom_gradient
        def lin(x, e=e):
            return tf.reduce_sum(a * x), lambda up: up * (a + e)

        for probes in (1, 2, 4):
            missed = sum(
                check_gradients(lin, [x], probes=probes, seed=10_000 * len(rows) + s, atol=tol,
                                rtol=0.0).passed
                for s in range(seeds)
            )
            rows.append([f"{t:g}", str(probes), f"{miss_probability(t, probes):.3f}",
                         f"{missed / seeds:.3f}  ({missed}/{seeds})"])
    return rows


def show(title: str, header: list[str], rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(f"\n{title}")
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        print(" | ".join(h.rjust(w) for h, w in zip(header, widths)))
        print("-+-".join("-" * w for w in widths))
        for r in rows:
            print(" | ".join(c.rjust(w) for c, w in zip(r, widths)))
        return
    table = Table(title=title, title_justify="left", min_width=len(title))
    for h in header:
        table.add_column(h, justify="right")
    for r in rows:
        table.add_row(*r)
    Console(width=140).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true",
                        help="also run tf.test.compute_gradient at n = 90,000 (about 5 minutes)")
    parser.add_argument("--seeds", type=int, default=200, help="seeds per detection row")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow loads
    import tensorflow as tf

    print(f"tensorflow {tf.__version__}, numpy {np.__version__}, {os.cpu_count()} CPU cores; "
          "f(x) = sum(tanh(1.3x + 0.1) * softplus(x)) + 0.5 mean(x^2), float64; "
          "probe: 4 probes (defaults)")
    sizes = [1_000, 5_000, 10_000, *([90_000] if args.full else []), 100_000, 1_000_000]
    show("1. probe vs tf.test.compute_gradient (seconds; probe in ms; times are medians)",
         ["n", "compute_gradient s", "probe ms", "speed-up", "fwd+bwd ms",
          "probe / (fwd+bwd)", "probe evals + backward", "probe passed"],
         speed_rows(sizes, args.full))
    print("compute_gradient is skipped above n = 10,000: it needs 2n evaluations of f "
          "(DESIGN.md: n = 90,000 took about 5 minutes); --full measures it at n = 90,000.")
    show("2. one wrong gradient element planted among n: found by probe + bisection",
         ["n", "wrong index", "reported index", "found", "seconds", "x fwd+bwd",
          "evals + backward"],
         locate_rows([10_000, 1_000_000]))
    show(f"3. miss rate: error std = t x tolerance (n = 200, {args.seeds} seeds per row)",
         ["t", "probes", "predicted miss", "measured miss"],
         detection_rows(args.seeds))


if __name__ == "__main__":
    main()
