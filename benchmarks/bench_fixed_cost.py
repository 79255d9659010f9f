"""Benchmark: gradexp's fixed cost per run, beyond `import tensorflow, mlflow`.

    python benchmarks/bench_fixed_cost.py [--rounds 3] [--profile] [--baseline OTHER/src]

In one temp folder (the launch folder, so the default store sqlite:///mlflow.db lives there), as a
person runs them, interleaved round by round so that the machine's load swings (up to 2x within a
day here) hit every command alike:

    python -c "import tensorflow, mlflow"     the floor: what any TensorFlow + MLflow script pays
    python -m gradexp                         the default run: 100 epochs, gradient checks on
    python -m gradexp --help
    python -m gradexp --cfg job

The very first default run creates the MLflow store (its schema migrations are a one-off cost):
it is timed and reported on its own line, not in the medians. Reported: median seconds of each,
and gradexp's own time as a ratio, (default run - import) / import, against the issue's target
of 0.21 (1.0 s at a 4.7 s import); --help and --cfg job against 1 s.

--profile adds one more default run in this process's child with timers around its parts
(Hydra, MLflow store and writes, model, traces, gradient checks, plots, the model artifact);
the timers are wrapped around gradexp's functions at run time, the package is not changed.
Parts nest (a part's time includes the parts indented below it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
TARGET_RATIO = 0.21
TARGET_SMALL = 1.0


def environment(src: Path = SRC) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    return env


def timed(command: list[str], folder: Path, src: Path = SRC) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=environment(src), capture_output=True,
                          text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds


COMMANDS = {
    "import tensorflow, mlflow": [sys.executable, "-c", "import tensorflow, mlflow"],
    "python -m gradexp": [sys.executable, "-m", "gradexp"],
    "python -m gradexp --help": [sys.executable, "-m", "gradexp", "--help"],
    "python -m gradexp --cfg job": [sys.executable, "-m", "gradexp", "--cfg", "job"],
}


BASELINE = "python -m gradexp, --baseline src"


def measure(rounds: int, folder: Path,
            baseline: Path | None) -> tuple[float, dict[str, list[float]]]:
    first = timed(COMMANDS["python -m gradexp"], folder)  # creates mlflow.db
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    if baseline:
        times[BASELINE] = []
    for _ in range(rounds):
        for name, command in COMMANDS.items():
            times[name].append(timed(command, folder))
        if baseline:
            times[BASELINE].append(timed(COMMANDS["python -m gradexp"], folder, baseline))
    return first, times


# ---------------------------------------------------------------- --profile
# (label, module, attribute path): wrapped in the child, in this order of nesting.
PARTS = [
    ("Hydra: compose the config (each call)", "hydra._internal.hydra", "Hydra.compose_config"),
    ("Hydra: run the job (its own set-up + ours)", "hydra._internal.hydra", "run_job"),
    ("gradexp task", "gradexp.app", "task"),
    ("print the config", "gradexp.console", "print_config"),
    ("data", "gradexp.loop", "load_data"),
    ("check user code (TF import: floor)", "gradexp.loop", "check_user_code"),
    ("git commit", "gradexp.mlflow_store", "git_commit"),
    ("MLflow: open store, create run", "gradexp.callbacks.recorder", "MlflowRecorder.on_run_begin"),
    ("MLflow: client / store open", "gradexp.mlflow_store", "open_client"),
    ("MLflow: experiment id", "gradexp.mlflow_store", "experiment_id"),
    ("MLflow: log params", "gradexp.mlflow_store", "MlflowTracker.log_params"),
    ("MLflow: set tags", "gradexp.mlflow_store", "MlflowTracker.set_tags"),
    ("MLflow: log text (config.yaml, ...)", "gradexp.mlflow_store", "MlflowTracker.log_text"),
    ("MLflow: log dict (gradcheck reports)", "gradexp.mlflow_store", "MlflowTracker.log_dict"),
    ("MLflow: log figure (PNG + upload)", "gradexp.mlflow_store", "MlflowTracker.log_figure"),
    ("MLflow: log folder (.hydra, model)", "gradexp.mlflow_store", "MlflowTracker.log_folder"),
    ("MLflow: log dataset inputs", "gradexp.mlflow_store", "MlflowTracker.log_datasets"),
    ("MLflow: log_model (LoggedModel)", "gradexp.mlflow_store", "MlflowTracker.log_keras_model"),
    ("MLflow: wait for metric writes", "gradexp.mlflow_store", "MlflowTracker.wait"),
    ("MLflow: end run", "gradexp.mlflow_store", "MlflowTracker.end"),
    ("run: train (model .. on_train_end)", "gradexp.loop", "Loop.train"),
    ("model build", "gradexp.models", "build_model"),
    ("Trainer() (optimizer build)", "gradexp.trainer", "Trainer.__init__"),
    ("evaluator: calls (first traces)", "gradexp.evaluation", "Evaluator.__call__"),
    ("training calls (first traces)", "gradexp.trainer", "Trainer.train"),
    ("gradient checks", "gradexp.run_checks", "check_training_gradients"),
    ("gradient-check heat maps", "gradexp.callbacks.checks", "GradientChecks.log_heatmaps"),
    ("figure: loss curve", "gradexp.plots", "loss_curves"),
    ("figure: heat map", "gradexp.plots", "jacobian_heatmaps"),
    ("run: on_train_end (final eval .. end)", "gradexp.loop", "Loop.end"),
    ("run: artifacts (.hydra, loss curve)", "gradexp.callbacks.artifacts",
     "Artifacts.on_train_end"),
    ("summary print", "gradexp.callbacks.summary", "print_summary"),
]


def profile_child(out: Path) -> None:
    """One default run in this process, TensorFlow and MLflow imported first (the floor)."""
    import functools
    import importlib
    import inspect

    start = time.perf_counter()
    import mlflow  # noqa: F401
    import tensorflow  # noqa: F401

    floor = time.perf_counter() - start
    totals: dict[str, list[float]] = {}
    depth = [0]
    order: list[tuple[str, int]] = []

    def wrap(label: str, function):
        def clocked(call):
            if label not in totals:
                totals[label] = []
                order.append((label, depth[0]))
            depth[0] += 1
            began = time.perf_counter()
            try:
                return call()
            finally:
                depth[0] -= 1
                totals[label].append(time.perf_counter() - began)

        def stepped(generator):  # Trainer.train yields: time each step, not the generator's birth
            while True:
                try:
                    item = clocked(lambda: next(generator))
                except StopIteration:
                    return
                yield item

        @functools.wraps(function)
        def timed_call(*args, **kwargs):
            if inspect.isgeneratorfunction(function):
                return stepped(function(*args, **kwargs))
            return clocked(lambda: function(*args, **kwargs))
        return timed_call

    import gradexp.loop  # noqa: F401  (so its names can be wrapped)
    import gradexp.trainer  # noqa: F401
    for label, module_name, path in PARTS:
        module = importlib.import_module(module_name)
        owner, _, name = path.rpartition(".")
        target = getattr(module, owner) if owner else module
        wrapped = wrap(label, getattr(target, name))
        if isinstance(inspect.getattr_static(target, name), staticmethod):
            wrapped = staticmethod(wrapped)
        setattr(target, name, wrapped)
    sys.argv = ["gradexp"]
    from gradexp.app import main

    began = time.perf_counter()
    main()
    after_import = time.perf_counter() - began
    rows = [(label, level, sum(totals[label]), len(totals[label])) for label, level in order]
    out.write_text(json.dumps({"floor": floor, "after_import": after_import, "rows": rows}))


def profile(folder: Path) -> dict:
    out = folder / "profile.json"
    command = [sys.executable, __file__, "--profile-child", str(out)]
    done = subprocess.run(command, cwd=folder, env=environment(), capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"profile run failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


# ---------------------------------------------------------------- report
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout's src/ (e.g. main's): "
                        "its default run is timed in the same rounds")
    parser.add_argument("--profile-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.profile_child:
        profile_child(args.profile_child)
        return
    from rich.console import Console
    from rich.table import Table

    out = Console(width=max(Console().width, 110))
    with tempfile.TemporaryDirectory(prefix="gradexp-fixed-") as name:
        folder = Path(name)
        first, times = measure(args.rounds, folder, args.baseline)
        parts = profile(folder) if args.profile else None
    median = {name: statistics.median(values) for name, values in times.items()}
    floor = median["import tensorflow, mlflow"]
    run = median["python -m gradexp"]
    ratio = (run - floor) / floor
    table = Table(title=f"whole processes, median of {args.rounds} interleaved rounds "
                        f"(load average {os.getloadavg()[0]:.1f})")
    for column in ("command", "median s", "all s", "÷ import", "gradexp's own", "target",
                   "met"):
        table.add_column(column, justify="left" if column == "command" else "right")
    table.add_row("import tensorflow, mlflow", f"{floor:.2f}", _all(times["import tensorflow, "
                  "mlflow"]), "1", "", "", "")
    table.add_row("python -m gradexp (default run)", f"{run:.2f}",
                  _all(times["python -m gradexp"]), f"{run / floor:.2f}",
                  f"{run - floor:.2f} s = {ratio:.2f} x import", f"<= {TARGET_RATIO}",
                  _met(ratio <= TARGET_RATIO))
    table.add_row("  first run (creates mlflow.db)", f"{first:.2f}", "", f"{first / floor:.2f}",
                  "", "", "")
    if args.baseline:
        base = median[BASELINE]
        table.add_row(f"  the same, {args.baseline}", f"{base:.2f}", _all(times[BASELINE]),
                      f"{base / floor:.2f}",
                      f"{base - floor:.2f} s = {(base - floor) / floor:.2f} x import", "", "")
    for name in ("python -m gradexp --help", "python -m gradexp --cfg job"):
        table.add_row(name, f"{median[name]:.2f}", _all(times[name]),
                      f"{median[name] / floor:.2f}", "",
                      f"<= {TARGET_SMALL:.0f} s", _met(median[name] <= TARGET_SMALL))
    out.print(table)
    if parts:
        parts_table = Table(title="one default run's parts, in-process timers (a part includes "
                                  "the ones indented below it)")
        for column in ("part", "s", "calls"):
            parts_table.add_column(column, justify="left" if column == "part" else "right")
        parts_table.add_row("import tensorflow, mlflow (the floor, not ours)",
                            f"{parts['floor']:.3f}", "1")
        parts_table.add_row("everything after the import: gradexp's own",
                            f"{parts['after_import']:.3f}", "1")
        for label, level, seconds, calls in parts["rows"]:
            parts_table.add_row("  " * level + label, f"{seconds:.3f}", str(calls))
        out.print(parts_table)


def _all(values: list[float]) -> str:
    return " ".join(f"{value:.2f}" for value in values)


def _met(ok: bool) -> str:
    return "yes" if ok else "[red]no[/red]"


if __name__ == "__main__":
    main()
