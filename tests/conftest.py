"""Shared fixtures: compose configs in-process with Hydra's compose API (no subprocess, no
TensorFlow import just to build a config), a real MLflow sqlite store in a temp folder, and
`python -m gradexp` as a child process that behaves the same wherever the suite is started.

The suite must pass however it is started: from a terminal, from CI, or as a background job of a
script (`nohup ... &`), which starts with SIGINT ignored and hands that on to every child. So the
children get the signal dispositions, stdin and environment the tests rely on, and nothing else
is assumed: not a TTY, not the terminal's width or TERM, not the locale or a port.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

import gradexp
from gradexp.app import register_experiments, resource_dir
from gradexp.metrics import register_resolver
from gradexp.schema import register_schemas

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Settings of the person running the suite that would change what the tests check: their own
# MLflow store or experiment (the tests would write into it and read another store), Hydra's full
# tracebacks (the tests check the one-line errors), forced colours (escape codes in the text).
for _name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID",
              "MLFLOW_RUN_ID", "HYDRA_FULL_ERROR", "FORCE_COLOR", "TTY_COMPATIBLE",
              "TTY_INTERACTIVE"):
    os.environ.pop(_name, None)
register_schemas()
register_experiments()
register_resolver()

# absl (TensorFlow's logger) makes its handler when first imported, on the sys.stderr of that
# moment: under pytest, the capture file of whichever module's collection imported TensorFlow.
# Hydra's logging set-up (every gradexp.sweep) closes all handlers, and absl's closes its stream
# unless it is the current sys.stderr, so it closed pytest's capture file under a later test
# ("I/O operation on closed file"). The real stderr is never closed by it.
import absl.logging  # noqa: E402  (light: no TensorFlow)

absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__

REPO = Path(__file__).resolve().parents[1]
CONF = resource_dir("conf")


def compose_config(*overrides: str) -> DictConfig:
    """The config `python -m gradexp OVERRIDES` would run, composed in-process."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


_SCHEMA_LINE = re.compile(r"^\s*-\s*/schema/(\w+)/(\w+)@_here_\s*$", re.MULTILINE)


def option_schema(group: str | None = None, option: str | None = None) -> DictConfig:
    """The schema node an option's YAML is merged into (its `/schema/GROUP/NAME@_here_` default)
    or, with no group, the root Config's: its fields, types, defaults and rules, without a Hydra
    compose (~0.15-0.4 s of CPU each). For the tables test_every_key.py and test_config.py build
    at collection, which every xdist worker builds again; their tests compose each option and
    check that its composed node has this schema's type (test_config)."""
    from gradexp.schema import SCHEMAS, Config

    if group is None:
        return OmegaConf.structured(Config)
    (schema,) = _SCHEMA_LINE.findall((CONF / group / f"{option}.yaml").read_text())
    return OmegaConf.structured(SCHEMAS[schema[0]][schema[1]])


def run(store: str, *overrides: str, launch_dir: Path | None = None, quiet: bool = True,
        **kwargs):
    """One run as `python -m gradexp tracking.uri=STORE OVERRIDES` does it, in-process: its
    RunResult. The suite's one way to run an experiment (each file adds its own defaults)."""
    from gradexp.loop import run_experiment
    from gradexp.user_code import new_launch

    new_launch()  # as a new `python -m gradexp` process: a person's code is not reused
    cfg = compose_config(f"tracking.uri={store}", *overrides)
    return run_experiment(cfg, quiet=quiet, launch_dir=launch_dir, **kwargs)


_EMPTY_STORE: list[Path] = []


def empty_store(folder: Path) -> str:
    """The URI of a new, empty MLflow sqlite store at FOLDER/mlflow.db, as MLflow makes it.

    MLflow creates a sqlite store by running its ~50 schema migrations: 1-2 s unloaded, ~9 s at
    a load of 8, on each of the suite's hundreds of stores, for nothing a test checks. So MLflow
    makes one empty store per session (in the session's launch folder, the folder every test
    runs in, so its Default experiment's artifact root is the one a fresh store would get) and
    each test gets a byte copy of it: the same tables and rows, opened in ~0.1 s. A test of what
    happens where no store exists yet does not call this."""
    if not _EMPTY_STORE:
        from mlflow import MlflowClient

        template = Path.cwd() / "empty-store-template" / "mlflow.db"
        template.parent.mkdir(exist_ok=True)
        MlflowClient(f"sqlite:///{template}").search_experiments()  # creates the tables
        _EMPTY_STORE.append(template)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_EMPTY_STORE[0], folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


def artifact_paths(client, run_id: str, path: str | None = None) -> set[str]:
    """Every artifact file of a run, by its path in the run."""
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= artifact_paths(client, run_id, item.path) if item.is_dir else {item.path}
    return found


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A fresh MLflow sqlite store (MLflow's embedded default kind) in a temp folder."""
    return empty_store(tmp_path)


@pytest.fixture
def client(store: str):
    from mlflow import MlflowClient

    return MlflowClient(store)


@contextlib.contextmanager
def user_modules(folder: Path, monkeypatch, **sources: str) -> Iterator[Path]:
    """`folder` as a launch folder holding a person's modules (name=source), importable only
    inside: sys.path is restored afterwards (a run puts its launch folder first), and the
    modules are forgotten before and after (another test's folder has its own of that name)."""
    for name, source in sources.items():
        (folder / f"{name}.py").write_text(source)
        sys.modules.pop(name, None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        yield folder
    finally:
        for name in sources:
            sys.modules.pop(name, None)


def read_report(client, run_id: str, epoch: int) -> dict:
    """The gradient-check report a run logged for one epoch (gradcheck/report_epoch_NNNNN.json)."""
    import json

    path = client.download_artifacts(run_id, f"gradcheck/report_epoch_{epoch:05d}.json")
    with open(path) as handle:
        return json.load(handle)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_mlflow_server(url: str, process: subprocess.Popen, log: Path, seconds: float) -> None:
    """Until the `mlflow server` at `url` answers gradexp's own probe (tracking_uri.check_server,
    what a run asks before it opens), so a test starts when a run could; fails with the server's
    log if it exits, or with the probe's line after `seconds`."""
    from gradexp.schema import ConfigError
    from gradexp.tracking_uri import check_server

    deadline = time.monotonic() + seconds
    while True:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            return check_server(url, timeout=2)
        except ConfigError as error:
            assert time.monotonic() < deadline, f"after {seconds:.0f} s: {error}"
            time.sleep(0.3)  # the server boots (10-40 s); ask again


def imported_modules(stderr: str) -> set[str]:
    """The modules a `python -X importtime` child imported, from its stderr."""
    return {line.split("|")[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:")}


def default_signals() -> None:
    """In the child before it runs: SIGINT and SIGTERM as a terminal's shell leaves them.

    A background job of a non-interactive shell (`nohup pytest &`, many CI runners and
    schedulers) starts with SIGINT ignored, and children inherit that; gradexp then rightly keeps
    ignoring Ctrl-C. The tests that interrupt a run play a person at a terminal, so their child
    starts with the default dispositions whatever the suite inherited.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


# The gradexp these tests imported: children import the same one, whatever their folder (a
# relative PYTHONPATH=src, or an installed copy elsewhere, would otherwise win there).
SOURCE = str(Path(gradexp.__file__).resolve().parents[1])


def cli_env(env: dict | None = None) -> dict:
    path = os.pathsep.join(p for p in (SOURCE, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **(env or {})}


def spawn_cli(*args: str, cwd: Path, env: dict | None = None, python_args: tuple = (),
              **popen) -> subprocess.Popen:
    """Start `python -m gradexp ARGS` in folder `cwd` (stdin /dev/null, default signals)."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen([sys.executable, *python_args, "-m", "gradexp", *args], cwd=cwd,
                            env=cli_env(env), stdin=subprocess.DEVNULL, text=True,
                            encoding="utf-8", errors="replace", preexec_fn=default_signals,
                            **popen)


def finish(process: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
    """Wait for a spawned process; past `timeout` kill it (no child outlives its test)."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        said = stderr[-3000:] if stderr is not None else "(redirected by the test)"
        raise AssertionError(f"{' '.join(process.args)} did not end in {timeout} s; "
                             f"its stderr:\n{said}") from None
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_cli(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None,
            python_args: tuple = ()) -> subprocess.CompletedProcess:
    """`python -m gradexp ARGS` as a person would type it, in folder `cwd`."""
    return finish(spawn_cli(*args, cwd=cwd, env=env, python_args=python_args), timeout)


# ---------------------------------------------------------------- `-m "not slow"` starts no process
# A test that starts a process (python -m gradexp, an MLflow server, Ray, a helper script) is
# marked slow. When the session selects no slow test (`-m "not slow"`, or only unmarked tests),
# an audit hook fails any process start, so an unmarked spawning test cannot hide. Let through:
# two tiny commands that the code under test runs itself, not a test.
_ALLOWED = {
    ("git", "rev-parse", "HEAD"),  # each run's source commit (gradexp.source_tags.git_commit)
    ("uname", "-p"),  # platform.processor(): `import mlflow` asks it once a process
}
_PROCESS_EVENTS = {"subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec",
                   "os.spawn", "os.system"}
_GUARD: dict = {"on": False, "started": []}


def _process_command(event: str, args: tuple) -> list[str]:
    if event == "subprocess.Popen":  # (executable, args, cwd, env)
        command = args[1]
        return [command] if isinstance(command, (str, bytes)) else [str(a) for a in command]
    if event in ("os.posix_spawn", "os.exec", "os.spawn"):  # (path, argv, env) / (mode, path, ...)
        return [str(a) for a in (args[1] if event != "os.spawn" else args[2])]
    return [event] + [str(a) for a in args]


def _refuse_processes(event: str, args: tuple) -> None:
    if not _GUARD["on"] or event not in _PROCESS_EVENTS:
        return
    command = _process_command(event, args)
    if (Path(command[0]).name, *command[1:]) in _ALLOWED:
        return
    _GUARD["started"].append(" ".join(command))
    raise RuntimeError(f"this test starts a process ({' '.join(command)[:200]}): mark it "
                       "@pytest.mark.slow, so that `-m \"not slow\"` starts none")


sys.addaudithook(_refuse_processes)


def pytest_collection_finish(session) -> None:
    _GUARD["on"] = not any(item.get_closest_marker("slow") for item in session.items)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items) -> None:
    """Under `-n 2 --dist loadgroup` (the README's test command), a module's slow tests run
    on one worker, in order: what they spawn shares a module's fixtures, and the biggest
    groups are handed out first, so the slow modules start while the fast tests fill in.
    A heavy test (in-process, over ~2 s) is slow too, so the fast tier skips it, but it is
    not grouped: nothing it starts is shared, and xdist balances it test by test. (This hook
    runs before pytest's own, which deselects by `-m`.)"""
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.xdist_group(f"slow-{item.path.stem}"))
        elif item.get_closest_marker("heavy"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _no_process_unless_slow():
    """Fails the test too when the RuntimeError above was caught and swallowed."""
    _GUARD["started"].clear()
    yield
    if _GUARD["started"]:
        pytest.fail(f"started a process without @pytest.mark.slow: {_GUARD['started'][0]}")


@pytest.fixture(scope="session", autouse=True)
def _run_outside_the_checkout(tmp_path_factory):
    """Tests run in a temporary folder: what a run writes beside itself (MLflow's mlruns/,
    checkpoints/, Hydra's outputs/) never lands in the checkout, whatever a test forgets."""
    before = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("launch"))
    yield
    os.chdir(before)


# A builder of y = w x + b with fixed weights, for tests that tell which file of a module ran
FIXED_LINE = '''
import keras

def build(n_features, n_outputs):
    # y = {w}x + {b} (trained at a learning rate of 1e-9): the final loss says which ran
    x = keras.Input((n_features,))
    line = keras.layers.Dense(n_outputs, kernel_initializer=keras.initializers.Constant({w}),
                              bias_initializer=keras.initializers.Constant({b}))
    return keras.Model(x, line(x))
'''


def shadowed_line(module: str, where) -> str:
    """The line refusing a `module` the session imported from `where`, not the launch folder."""
    return (f"model._target_={module}.build: {module} is already imported in this session from "
            f"{where}, and Python would run that one, not the launch folder's {module}.py "
            f"(which `python -m gradexp` there runs): del sys.modules['{module}'] first, or "
            f"launch from {where}")
