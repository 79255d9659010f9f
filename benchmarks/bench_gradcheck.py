"""Benchmark gradexp's probe gradient check against tf.test.compute_gradient.

    python benchmarks/bench_gradcheck.py            # about 8 minutes on 2 CPU cores
    python benchmarks/bench_gradcheck.py --only speed --repeats 7   # one table
    python benchmarks/bench_gradcheck.py --full     # also compute_gradient at n = 10,000
    python benchmarks/bench_gradcheck.py --only digits --epochs 300   # a longer digits run

Four tables, every number measured in this run:

1. Speed, for a nonlinear function (tanh, then a dense layer; also as a tf.function, and
   checked eagerly with compile=False), an elementwise one and a linear one of n float64
   inputs: tf.test.compute_gradient (the full numerical Jacobian, 2n evaluations; median of 3)
   against check_gradients(method="probe"),
   and the check as a multiple of one compiled (tf.function) forward+backward pass of the same
   function, measured back to back (median of --repeats ratios, with their range); also for a
   seed not used before, whose directions are drawn rather than reused.
2. Locating a bug: one wrong gradient element planted among n; time and cost until the probe
   check names it (bisection included).
3. Detection probability: a planted gradient error whose directional error has standard
   deviation t x tolerance, checked with many seeds; the measured miss rate next to the
   predicted erf(1 / (t sqrt 2)) ** probes.
4. In-training checks: python -m gradexp experiment=digits_mlp trainer.batch_size=32 (probe
   checks) with gradcheck.every_n_epochs=10 (on the experiment's gradcheck.max_rows, and on all
   rows) and with gradcheck=off, each a process of its own (median of --runs): the checks'
   seconds as a share of the training loop's without checks (the issue's target: <= 10%).
   Also a floor for any check made in the run's process: one fused tf.function on the same
   model and rows (fused_floor), its one-off costs plus three later calls.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

import numpy as np

from gradexp.gradcheck import check_gradients, miss_probability


def f(x):
    """An MLP-ish elementwise + reduction function of a vector: cheap per element, like a loss."""
    import tensorflow as tf

    return tf.reduce_sum(tf.tanh(1.3 * x + 0.1) * tf.nn.softplus(x)) + 0.5 * tf.reduce_mean(x * x)


def functions(n: int) -> dict:
    """The measured functions of a float64 vector of n elements (n a multiple of 100)."""
    import tensorflow as tf

    rng = np.random.default_rng(5)
    w = tf.constant(rng.standard_normal((100, 10)) / 10)
    b = tf.constant(rng.standard_normal(10))
    a = tf.constant(rng.standard_normal(n))

    def tanh_dense(x):  # rows of 100 features through tanh, then a dense layer to 10, MSE-like
        return 0.5 * tf.reduce_mean(tf.square(tf.matmul(tf.tanh(tf.reshape(x, [-1, 100])), w) + b))

    def linear(x):
        return tf.reduce_sum(a * x)

    # The same function as a tf.function, as training code passes it, and checked eagerly
    # (compile=False): plain functions are probed as tf.functions by default
    # (gradcheck/plain_functions.py), whose evaluations and VJPs run as one compiled call each.
    return {"tanh -> dense": tanh_dense, "tanh -> dense (tf.function)": tf.function(tanh_dense),
            "tanh -> dense (compile=False)": tanh_dense, "elementwise": f, "linear": linear}


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compiled_forward_backward(fn):
    """One compiled forward and backward pass of fn: the unit a check's cost is measured in."""
    import tensorflow as tf

    @tf.function(autograph=False)
    def pass_(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return tape.gradient(y, x)

    return lambda x: pass_(x).numpy()


def forward_backward(x) -> None:
    """One (eager) forward and backward pass of f, for table 2."""
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


def speed_rows(sizes: list[int], repeats: int, full: bool) -> list[list[str]]:
    import tensorflow as tf

    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        x = rng.standard_normal(n)
        for name, fn in functions(n).items():
            rows.append(speed_row(name, fn, x, tf.constant(x), repeats, full))
    return rows


def speed_row(name: str, fn, x, xt, repeats: int, full: bool) -> list[str]:
    """The probe check of fn at x against one compiled forward+backward pass, measured back to
    back `repeats` times (each ratio against the median of 3 passes either side of it), and
    tf.test.compute_gradient (median of 3) where it takes seconds, not minutes."""
    import tensorflow as tf

    n = x.size
    unit = compiled_forward_backward(fn)
    unit(xt)  # traced
    check = functools.partial(check_gradients, compile="compile=False" not in name)
    check(fn, [x], method="probe")  # a plain f's first check runs eagerly, directions drawn
    report = check(fn, [x], method="probe")  # warm: traced (compiled from the second check)
    checks, ratios, cold = [], [], []
    for r in range(repeats):
        before = median_time(lambda: unit(xt), 3)
        seconds = median_time(lambda: check(fn, [x], method="probe"), 1)
        # A seed not used before: its directions are drawn, not reused.
        first = median_time(lambda r=r: check(fn, [x], seed=1000 + r), 1)
        after = median_time(lambda: unit(xt), 3)
        checks.append(seconds)
        ratios.append(seconds / ((before + after) / 2))
        cold.append(first / ((before + after) / 2))
    fb = median_time(lambda: unit(xt), 5)
    if n <= 5_000 or (full and n <= 10_000):
        cg_times = []
        for _ in range(3):
            start = time.perf_counter()
            (theoretical,), (numerical,) = tf.test.compute_gradient(fn, [xt])
            cg_times.append(time.perf_counter() - start)
        cg = statistics.median(cg_times)
        agree = np.allclose(theoretical, numerical, rtol=1e-4, atol=1e-6)
        cg_text = f"{cg:.2f}{'' if agree else ' (disagrees!)'}"
        speedup = f"{cg / statistics.median(checks):,.0f}x"
    else:
        cg_text, speedup = "skipped", "-"
    return [
        name, f"{n:,}", cg_text, f"{statistics.median(checks) * 1e3:.1f}", speedup,
        f"{fb * 1e3:.2f}", f"{statistics.median(ratios):.1f}",
        f"{min(ratios):.1f}-{max(ratios):.1f}", f"{statistics.median(cold):.1f}",
        f"{report.function_evaluations} + {report.backward_passes}",
        "yes" if report.passed else "NO",
    ]


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


# Mini-batches of 32, as the performance issue and bench_runner.py time it.
DIGITS = ("experiment=digits_mlp", "tracking=none", "trainer.batch_size=32")


def digits_child(overrides: list[str]) -> None:
    """Run `python -m gradexp` in this process with each gradient check and the training loop
    (the progress callback's begin to end) timed; print them as JSON."""
    import json
    import runpy
    import sys

    import gradexp.callbacks.checks as checks
    import gradexp.callbacks.progress as progress

    times: dict = {"checks": [], "train": None, "rows": None}
    check, begin, end = (checks.GradientChecks.check, progress.Progress.on_train_begin,
                         progress.Progress.on_train_end)

    def timed_check(self, run, epoch):
        start = time.perf_counter()
        check(self, run, epoch)
        times["checks"].append(time.perf_counter() - start)
        times["rows"] = run.checks[-1].rows

    def timed_begin(self, run, *rest):
        times["start"] = time.perf_counter()
        return begin(self, run, *rest)

    def timed_end(self, run, *rest):
        times["train"] = time.perf_counter() - times["start"]
        return end(self, run, *rest)

    checks.GradientChecks.check = timed_check
    progress.Progress.on_train_begin, progress.Progress.on_train_end = timed_begin, timed_end
    if overrides[:1] == ["--floor"]:  # no training: the floor, on the run's model and rows
        overrides = overrides[1:]
        progress.Progress.on_train_begin = lambda self, run, *rest: fused_floor(run)
    sys.argv = ["gradexp", *overrides]
    try:
        runpy.run_module("gradexp", run_name="__main__")
    except SystemExit:
        pass
    print("DIGITS " + json.dumps({k: times[k] for k in ("checks", "train", "rows")}))


def fused_floor(run) -> None:
    """A lower bound for any check made in this process: one tf.function of the float64 loss
    on the run's checked rows that returns the gradient along 8 directions and the 16 losses
    at +-h along them (what a check at step h needs; no step 2h, no shares, no retries), run
    without Grappler as the checks are. Prints the seconds of building the float64 model, of
    the trace, of the first call and of a later call (median of 5), then ends the process."""
    import json

    from gradexp.run_checks import _without_graph_optimizer

    times, call = build_fused_floor(run.cfg, run.model, run.data)
    with _without_graph_optimizer():
        later = []
        for _ in range(5):
            start = time.perf_counter()
            call()
            later.append(time.perf_counter() - start)
    times["later call"] = statistics.median(later)
    print("FLOOR " + json.dumps(times), flush=True)
    os._exit(0)  # nothing else of the run is wanted


def build_fused_floor(cfg, model, data) -> tuple[dict, object]:
    """fused_floor's function, traced and called once: ({"float64 model", "trace", "first
    call"} seconds, a later call as a function of no arguments). Also used in-process, beside
    the run's own later checks, by benchmarks/profile_later_checks.py --floor."""
    import tensorflow as tf

    from gradexp.losses import build_loss
    from gradexp.run_checks import _without_graph_optimizer, checked_rows

    rows = checked_rows(len(data.x), cfg.gradcheck.max_rows)
    x, y = tf.constant(data.x[rows], tf.float64), tf.constant(data.y[rows], tf.float64)
    loss = build_loss(cfg.loss, dtype="float64")
    shapes = [tuple(p.shape) for p in model.params]
    sizes = [int(np.prod(shape)) for shape in shapes]
    times = {}
    start = time.perf_counter()
    model.prepare("float64")
    times["float64 model"] = time.perf_counter() - start

    def of_flat(flat):
        parts = tf.split(flat, sizes)
        return loss(y, model.apply([tf.reshape(p, s) for p, s in zip(parts, shapes)], x))

    @tf.function(autograph=False)
    def fused(flat, directions, h):
        with tf.GradientTape() as tape:
            tape.watch(flat)
            value = of_flat(flat)
        along = tf.linalg.matvec(directions, tape.gradient(value, flat))
        steps = tf.concat([h * directions, -h * directions], 0)
        return along, tf.map_fn(lambda step: of_flat(flat + step), steps)

    flat = tf.constant(np.concatenate([p.numpy().ravel() for p in model.params]), tf.float64)
    args = (flat, tf.constant(np.random.default_rng(0).standard_normal((8, sum(sizes)))),
            tf.constant(1e-4, tf.float64))
    with _without_graph_optimizer():
        start = time.perf_counter()
        fused.get_concrete_function(*args)
        times["trace"] = time.perf_counter() - start
        start = time.perf_counter()
        fused(*args)[1].numpy()
        times["first call"] = time.perf_counter() - start
    return times, lambda: fused(*args)[1].numpy()


# The settings timed against gradcheck=off: the experiment's own (gradcheck.max_rows as
# experiments/digits_mlp.yaml sets it) and every training row.
DIGITS_SETTINGS = (("off", ["gradcheck=off"]),
                   ("every 10", ["gradcheck.every_n_epochs=10"]),
                   ("every 10, all rows", ["gradcheck.every_n_epochs=10",
                                           "gradcheck.max_rows=null"]))


def digits_rows(runs: int, epochs: int | None = None) -> list[list[str]]:
    """The digits MLP (experiment=digits_mlp, probe checks) without checks (gradcheck=off) and
    with checks every 10 epochs (on the experiment's rows, and on all rows), alternating, `runs`
    times each, each a process of its own. Share: seconds of checks / training s without."""
    import json
    import subprocess
    import sys
    import tempfile

    def child(*arguments: str, tag: str = "DIGITS") -> dict:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--digits-child",
                               *arguments], cwd=workdir, capture_output=True, text=True,
                              check=True)
        line = [x for x in done.stdout.splitlines() if x.startswith(tag + " ")][-1]
        return json.loads(line.removeprefix(tag + " "))

    common = [*DIGITS, *([f"trainer.epochs={epochs}"] if epochs else [])]
    results: dict[str, list[dict]] = {label: [] for label, _ in DIGITS_SETTINGS}
    floors: list[dict] = []
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(runs):
            for label, extra in DIGITS_SETTINGS:
                results[label].append(child(*common, *extra))
            floors.append(child("--floor", *common, "gradcheck.every_n_epochs=10",
                                tag="FLOOR"))
    train_off = statistics.median(r["train"] for r in results["off"])
    rows = [["off", "0", "-", f"{train_off:.2f}", "-", "-", "-", "-", "-"]]
    for label, _ in DIGITS_SETTINGS[1:]:
        with_checks = results[label]
        total = statistics.median(sum(r["checks"]) for r in with_checks)
        first = statistics.median(r["checks"][0] for r in with_checks)
        later = statistics.median(statistics.mean(r["checks"][1:]) for r in with_checks)
        train_on = statistics.median(r["train"] - sum(r["checks"]) for r in with_checks)
        shares = sorted(sum(r["checks"]) / train_off for r in with_checks)
        rows.append([
            label, f"{len(with_checks[0]['checks'])}", f"{with_checks[0].get('rows', '?')}",
            f"{train_on:.2f}", f"{total:.2f}", f"{first:.2f}", f"{later * 1e3:.0f}",
            f"{total / train_off:.0%}", f"{shares[0]:.0%}-{shares[-1]:.0%}",
        ])
    # The floor: the first check's one-off parts and a later call for each other check, as if
    # the run's checks were made by the fused function alone.
    count = len(results[DIGITS_SETTINGS[1][0]][0]["checks"])
    one_off = [r["float64 model"] + r["trace"] + r["first call"] for r in floors]
    floor_totals = sorted(o + (count - 1) * r["later call"] for o, r in zip(one_off, floors))
    parts = " + ".join(f"{statistics.median(r[k] for r in floors):.3f}"
                       for k in ("float64 model", "trace", "first call"))
    rows.append(["floor (one fused function)", f"{count}",
                 f"{results[DIGITS_SETTINGS[1][0]][0].get('rows', '?')}", "-",
                 f"{statistics.median(floor_totals):.2f}",
                 f"{statistics.median(one_off):.2f} ({parts})",
                 f"{statistics.median(r['later call'] for r in floors) * 1e3:.0f}",
                 f"{statistics.median(floor_totals) / train_off:.0%}",
                 f"{floor_totals[0] / train_off:.0%}-{floor_totals[-1] / train_off:.0%}"])
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
                        help="also run tf.test.compute_gradient at n = 10,000 (~1.5 minutes)")
    parser.add_argument("--seeds", type=int, default=200, help="seeds per detection row")
    parser.add_argument("--repeats", type=int, default=5, help="timed checks per row (>= 3)")
    parser.add_argument("--runs", type=int, default=3, help="digits MLP runs per setting")
    parser.add_argument("--epochs", type=int,
                        help="digits MLP epochs (default: the experiment's 30)")
    parser.add_argument("--only", choices=["speed", "locate", "detection", "digits"])
    parser.add_argument("--digits-child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow loads
    if args.digits_child is not None:
        digits_child(args.digits_child)
        return
    import tensorflow as tf

    print(f"tensorflow {tf.__version__}, numpy {np.__version__}, {os.cpu_count()} CPU cores; "
          "float64; probe: 4 probes (defaults)")
    print("tanh -> dense: 0.5 mean((tanh(x as rows of 100) W + b)^2), W 100x10; "
          "elementwise: sum(tanh(1.3x + 0.1) softplus(x)) + 0.5 mean(x^2); linear: sum(a x)")
    if args.only in (None, "speed"):
        show("1. probe check vs tf.test.compute_gradient and vs one compiled forward+backward "
             f"pass (medians of {args.repeats})",
             ["f", "n", "compute_gradient s", "probe ms", "speed-up", "fwd+bwd ms",
              "probe / (fwd+bwd)", "range", "new seed / (fwd+bwd)", "evals + backward",
              "passed"],
             speed_rows([1_000, 5_000, 100_000, 1_000_000], args.repeats, args.full))
        print("fwd+bwd: one compiled (tf.function) forward and backward pass of the same f. "
              "'new seed': a check whose directions are drawn, not reused (the first check of "
              "a process, or another seed). compute_gradient: median of 3, n <= 5,000 "
              "(--full: 10,000).")
    if args.only in (None, "locate"):
        show("2. one wrong gradient element planted among n: found by probe + bisection",
             ["n", "wrong index", "reported index", "found", "seconds", "x fwd+bwd",
              "evals + backward"],
             locate_rows([10_000, 1_000_000]))
    if args.only in (None, "detection"):
        show(f"3. miss rate: error std = t x tolerance (n = 200, {args.seeds} seeds per row)",
             ["t", "probes", "predicted miss", "measured miss"],
             detection_rows(args.seeds))
    if args.only in (None, "digits"):
        epochs = f"trainer.epochs={args.epochs} " if args.epochs else ""
        show(f"4. in-training checks: python -m gradexp experiment=digits_mlp "
             f"trainer.batch_size=32 {epochs}gradcheck.every_n_epochs=10 (medians of "
             f"{args.runs} processes each)",
             ["setting", "checks", "rows checked", "training s (less checks)", "checks s",
              "first check s", "later checks ms", "checks / training (off)", "range"],
             digits_rows(args.runs, args.epochs))


if __name__ == "__main__":
    main()
