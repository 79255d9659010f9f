"""Where a later in-training gradient check's time goes (digits MLP, every 10 epochs).

    PYTHONPATH=$PWD/src python benchmarks/profile_later_checks.py [--repeat 30]

Runs experiment=digits_mlp (tracking=none, batch 32, checks every 10 epochs) in this process,
then repeats the check of --epoch (the last: where a probe crosses a relu kink; 20: a smooth
one) --repeat times on the trained model, with perf_counter around the check's parts (inclusive
times; no profiler). Prints the medians of the repeated checks. --floor also times, alternating
with them, a later call of bench_gradcheck.py's fused floor (one tf.function computing what a
passing check at step h needs) on the same model and rows, and prints the check / floor ratio
(issue 20's target: at most 2x), which load on the machine moves less than either.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import runpy
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

TIMES: dict[str, list[float]] = collections.defaultdict(list)
FLOOR: list[float] = []
ACTIVE = [False]


def timed(owner, name: str, label: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if not ACTIVE[0]:
            return original(*args, **kwargs)
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            TIMES[label].append(time.perf_counter() - start)

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--epoch", type=int, default=30, help="the check repeated")
    parser.add_argument("--floor", action="store_true", help="also the fused floor, alternated")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_gradcheck import build_fused_floor

    import gradexp.run_checks as verification
    from gradexp.gradcheck import checked_function, checker, joint, probe

    parts = [(verification, "_check_in", "verification._check_in"),
             (verification, "check_jointly", "joint.check_jointly"),
             (verification, "_without_graph_optimizer", "_without_graph_optimizer (enter)"),
             (probe, "_crosses_kink", "probe._crosses_kink"),
             (probe, "_measure", "probe._measure"),
             (checked_function._Target, "directional", "target.directional"),
             (checked_function._Target, "vjp_at", "target.vjp_at"),
             (checked_function._Target, "evaluate", "target.evaluate"),
             (joint.JointFunction, "__call__", "JointFunction call (y)"),
             (joint, "check_gradients", "checker.check_gradients (in joint)"),
             (checker, "_run", "checker._run"),
             (checker, "_try_dtype", "checker._try_dtype"),
             (checked_function._Target, "start", "target.start"),
             (probe, "_probe_entries", "probe._probe_entries"),
             (checked_function._Target, "vjps", "target.vjps (probe VJPs)"),
             (probe, "_probe_one", "probe._probe_one"),
             (checked_function._FunctionTarget, "first_directionals", "first_directionals"),
             (checked_function, "_direction", "checked_function._direction"),
             (probe, "_judge", "probe._judge"),
             (joint, "_split", "joint._split")]
    for owner, name, label in parts:
        timed(owner, name, label)
    # compiled calls: wrap the tf.functions' __call__ via the factories
    for factory in ("compiled_vjp", "compiled_directionals"):
        original = getattr(checked_function, factory)

        def make(original=original, factory=factory):
            def patched(*a, **k):
                fn = original(*a, **k)
                if fn is None:
                    return None

                def call(*ca, **ck):
                    start = time.perf_counter()
                    out = fn(*ca, **ck)
                    if ACTIVE[0]:
                        TIMES[f"{factory} call"].append(time.perf_counter() - start)
                    return out
                return call
            return patched
        setattr(checked_function, factory, make())
    joint.compiled_vjp = checked_function.compiled_vjp

    check = verification.check_training_gradients
    results = []

    def wrapped(cfg, model, loss_cfg, data, epoch, eager=False):
        start = time.perf_counter()
        result = check(cfg, model, loss_cfg, data, epoch, eager)
        TIMES["check (run's own)"].append(time.perf_counter() - start)
        results.append(result)
        if epoch == args.epoch:  # repeat it on the trained model
            floor = build_fused_floor(run_cfg[0], model, data)[1] if args.floor else None
            for _ in range(args.repeat):
                ACTIVE[0] = True
                start = time.perf_counter()
                with_timer = check(cfg, model, loss_cfg, data, epoch, eager)
                TIMES["check_training_gradients"].append(time.perf_counter() - start)
                ACTIVE[0] = False
                assert with_timer.passed
                if floor is not None:
                    with verification._without_graph_optimizer():
                        start = time.perf_counter()
                        floor()
                        FLOOR.append(time.perf_counter() - start)
        return result

    verification.check_training_gradients = wrapped
    run_cfg: list = []  # the run's whole config (the floor's rows and loss)
    import gradexp.callbacks.checks as callback

    begin = callback.GradientChecks.on_train_begin

    def keep_cfg(self, run):
        run_cfg[:] = [run.cfg]
        return begin(self, run)

    callback.GradientChecks.on_train_begin = keep_cfg
    sys.argv = ["gradexp", "experiment=digits_mlp", "tracking=none", "trainer.batch_size=32",
                "gradcheck.every_n_epochs=10"]
    try:
        runpy.run_module("gradexp", run_name="__main__")
    except SystemExit:
        pass
    own = TIMES.pop("check (run's own)")
    print("run's checks ms:", " ".join(f"{t * 1e3:.1f}" for t in own))
    total = statistics.median(TIMES["check_training_gradients"])
    print(f"repeated last check x{args.repeat}: median ms (calls per check)")
    for label, values in TIMES.items():
        per = len(values) / args.repeat
        # per-check sum, median over checks
        k = max(1, round(per))
        sums = [sum(values[i:i + k]) for i in range(0, len(values), k)]
        med = statistics.median(sums)
        print(f"  {label:36s} {med * 1e3:7.2f}  ({per:g}/check)  {med / total:5.0%}")
    if FLOOR:
        floor = statistics.median(FLOOR)
        ratios = sorted(t / f for t, f in zip(TIMES["check_training_gradients"], FLOOR))
        print(f"fused floor, alternated: median {floor * 1e3:.2f} ms; check / floor: median "
              f"{statistics.median(ratios):.2f}x (quartiles {ratios[len(ratios) // 4]:.2f}-"
              f"{ratios[3 * len(ratios) // 4]:.2f}x)")
    r = results[-1]
    rep = r.reports["variables/probe"]
    print("report: passed", r.passed, "evals", rep.function_evaluations, "backward",
          rep.backward_passes, "max_rel", rep.max_rel_error)


if __name__ == "__main__":
    main()
