"""`gradexp compare` against a real MLflow store: runs logged with MlflowClient in the shape gradexp
logs them (no TensorFlow), then what a person sees: the table, its order, the plot, the errors."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gradexp.compare import main

T0 = 1_760_000_000_000  # ms; runs start one second apart, the standalone run last
COMMON = {"data.name": "linear", "data.noise": "0.1", "loss.name": "mse",
          "loss._target_": "keras.losses.MeanSquaredError", "model.name": "linear",
          "trainer.epochs": "10", "trainer.seed": "0", "gradcheck.method": "both",
          "tracking.experiment": "gradexp"}
OPTIMIZERS = {  # option -> params only that option has (they follow from optimizer.name)
    "sgd": {"optimizer._target_": "keras.optimizers.SGD", "optimizer.momentum": "0.0"},
    "adam": {"optimizer._target_": "keras.optimizers.Adam", "optimizer.beta_1": "0.9"},
    "rmsprop": {"optimizer._target_": "keras.optimizers.RMSprop", "optimizer.rho": "0.9"},
}
# name, learning rate, final loss, grad norm, gradient check passed, status
CHILDREN = [("sgd", "0.1", 0.015, 0.05, 1.0, "FINISHED"),
            ("adam", "0.05", 0.5, 0.9, 1.0, "FINISHED"),
            ("rmsprop", "0.01", 2.0, 0.3, 0.0, "FAILED")]


def log_run(client, experiment_id: str, name: str, start: int, params: dict, *,
            parent: str | None = None, history: list[float] = (), final: dict | None = None,
            tags: dict | None = None, status: str = "FINISHED") -> str:
    """One run as gradexp records it: params, per-epoch loss/grad_norm (step = epoch), finals."""
    from mlflow.entities import Metric, Param

    all_tags = {**(tags or {}), **({"mlflow.parentRunId": parent} if parent else {})}
    run_id = client.create_run(experiment_id, start_time=start, tags=all_tags,
                               run_name=name).info.run_id
    metrics = [Metric(key, value, start, epoch) for epoch, loss in enumerate(history)
               for key, value in (("loss", loss), ("grad_norm", loss / 10))]
    metrics += [Metric(key, value, start, len(history)) for key, value in (final or {}).items()]
    client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()], metrics=metrics)
    client.set_terminated(run_id, status, end_time=start + 500)
    return run_id


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """A sweep (parent + 3 children differing in optimizer.name/learning_rate), a standalone run
    (KILLED after 3 epochs, no final metrics), and a second experiment."""
    from mlflow import MlflowClient

    folder = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("gradexp")
    client.create_experiment("optimizer_comparison")
    parent = log_run(client, exp, "sweep: optimizer=sgd,adam,rmsprop", T0,
                     {"sweep.overrides": "optimizer=sgd,adam,rmsprop"},
                     tags={"gradexp.sweep": "true"}, final={"best_final_loss": 0.015})
    ids = {"parent": parent}
    for i, (opt, lr, final_loss, grad_norm, passed, status) in enumerate(CHILDREN):
        params = {**COMMON, **OPTIMIZERS[opt], "optimizer.name": opt,
                  "optimizer.learning_rate": lr}
        history = [final_loss * (10 - epoch) for epoch in range(10)]
        ids[opt] = log_run(client, exp, f"optimizer={opt}", T0 + 1000 * (i + 1), params,
                           parent=parent, history=history, status=status,
                           final={"final_loss": final_loss, "grad_norm": grad_norm,
                                  "gradcheck/passed": passed, "gradcheck/max_abs_error": 1e-9})
    ids["standalone"] = log_run(
        client, exp, "trainer.epochs=3", T0 + 10_000,
        {**COMMON, **OPTIMIZERS["sgd"], "optimizer.name": "sgd", "optimizer.learning_rate": "0.1",
         "trainer.epochs": "3"}, history=[3.0, 2.0, 1.0], status="KILLED")
    return {"uri": uri, "folder": folder, **ids}


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # what a wide terminal shows; rows are not folded


def compare(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def table(out: str) -> tuple[list[str], list[list[str]]]:
    """(header cells, row cells) of the rich table in `out`."""
    header = next(line for line in out.splitlines() if line.startswith("┃"))
    rows = [line for line in out.splitlines() if line.startswith("│")]
    cells = [[cell.strip() for cell in row.strip("│").split("│")] for row in rows]
    return [cell.strip() for cell in header.strip("┃").split("┃")], cells


def test_default_shows_every_run_but_sweep_parents_and_only_params_that_differ(capsys, runs):
    code, out, err = compare(capsys, "--tracking-uri", runs["uri"])
    assert code == 0, err
    header, rows = table(out)
    params = [h for h in header if "." in h]
    assert params == ["optimizer.learning_rate", "optimizer.name", "trainer.epochs"]
    assert [row[0] for row in rows] == [runs[k][:8] for k in ("sgd", "adam", "rmsprop",
                                                              "standalone")]
    assert runs["parent"][:8] not in [row[0] for row in rows]
    assert [row[header.index("sweep")] for row in rows] == [runs["parent"][:8]] * 3 + ["-"]
    sgd = dict(zip(header, rows[0]))
    assert sgd["final_loss ↑"] == "0.015" and sgd["gradcheck"] == "passed"
    assert dict(zip(header, rows[2]))["gradcheck"] == "failed"
    assert dict(zip(header, rows[3]))["status"] == "KILLED"
    assert "not listed: 8 params the same in every run" in out
    assert "follow from optimizer.name" in out  # beta_1, momentum, rho, _target_
    assert f"--sweep {runs['parent'][:8]}" in out


@pytest.mark.parametrize(("args", "order"), [
    ((), ["sgd", "adam", "rmsprop"]),
    (("--desc",), ["rmsprop", "adam", "sgd"]),
    (("--sort", "grad_norm"), ["sgd", "rmsprop", "adam"]),
])
def test_sweep_shows_its_children_in_sort_order(capsys, runs, args, order):
    code, out, err = compare(capsys, "--tracking-uri", runs["uri"], "--sweep",
                             runs["parent"][:8], *args)
    assert code == 0, err
    header, rows = table(out)
    assert [row[0] for row in rows] == [runs[name][:8] for name in order]
    assert [h for h in header if "." in h] == ["optimizer.learning_rate", "optimizer.name"]
    assert "sweep" not in header and out.startswith(f"sweep {runs['parent'][:8]}: optimizer=")
    if "--sort" in args:
        assert "grad_norm ↑" in header


def test_a_narrow_terminal_drops_the_run_name_not_the_params(capsys, runs, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = compare(capsys, "--tracking-uri", runs["uri"], "--sweep", "latest")
    table_lines = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert code == 0 and max(len(line) for line in table_lines) <= 100
    header, rows = table(out)
    assert "run" not in header and "optimizer.learning_rate" in header
    assert {row[header.index("optimizer.name")] for row in rows} == {"sgd", "adam", "rmsprop"}


def test_runs_without_the_sort_metric_come_last_either_way(capsys, runs):
    for extra in ((), ("--desc",)):
        _, out, _ = compare(capsys, "--tracking-uri", runs["uri"], "--sort", "final_loss", *extra)
        assert table(out)[1][-1][0] == runs["standalone"][:8]


def test_plot_writes_the_loss_curves_of_the_runs_shown(capsys, runs, tmp_path):
    target = tmp_path / "curves.png"
    code, out, err = compare(capsys, "--tracking-uri", runs["uri"], "--sweep", "latest",
                             "--plot", str(target))
    assert code == 0, err
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and target.stat().st_size > 10_000
    assert f"wrote the loss curves of 3 runs: {target}" in out


@pytest.mark.parametrize(("args", "says"), [
    (("--experiment", "nope"), "--experiment nope: no such experiment; existing: Default, "
                               "gradexp, optimizer_comparison"),
    (("--sweep", "deadbeef"), "--sweep deadbeef: no sweep with that id in experiment gradexp; "
                              "its sweeps, newest first: "),
    (("--sort", "accuracy"), "--by accuracy: no run shown has that metric; available: "),
    (("--limit", "0"), "--limit 0: must be"),
    (("--plot", "curves.txt"), "--plot curves.txt: the file name must end in .png"),
    (("--frobnicate",), "unrecognized arguments: --frobnicate"),
])
def test_bad_input_is_exit_2_and_one_line_naming_the_value(capsys, runs, args, says):
    code, out, err = compare(capsys, "--tracking-uri", runs["uri"], *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and says in err, err
    if args[0] == "--sort":
        assert "final_loss, grad_norm, gradcheck/max_abs_error, gradcheck/passed, loss" in err
    if args[0] == "--sweep":
        assert f"{runs['parent'][:8]} (optimizer=sgd,adam,rmsprop)" in err


def test_a_job_is_not_a_sweep(capsys, runs):
    code, _, err = compare(capsys, "--tracking-uri", runs["uri"], "--sweep", runs["sgd"])
    assert code == 2 and f"it is a job of sweep {runs['parent']}" in err


def test_default_store_is_mlflow_db_here_and_a_missing_one_is_not_created(
        capsys, runs, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(runs["folder"])
    assert compare(capsys, "--sweep", runs["parent"])[0] == 0
    monkeypatch.chdir(tmp_path)
    code, _, err = compare(capsys)
    assert code == 2 and "no MLflow store at sqlite:///" in err
    assert not (tmp_path / "mlflow.db").exists()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", runs["uri"])
    assert compare(capsys, "--sweep", "latest")[0] == 0


# ---------------------------------------------------------------- a real tracking server
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(runs, request):
    """`mlflow server` on the same sqlite store; it boots (10-40 s) while the other tests run."""
    if not any(item.get_closest_marker("slow") and item.module is request.module
               for item in request.session.items):  # `-m "not slow"`: no server
        yield None
        return
    port, folder = free_port(), Path(runs["folder"])
    log = (folder / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", runs["uri"],
         "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})  # no job runner
    try:
        yield {"url": f"http://127.0.0.1:{port}", "process": process, "log": folder / "server.log"}
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # its own session: the server and its workers
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module", autouse=True)
def _start_server_early(server):
    """Requested by every test, so the server starts with the first one."""


@pytest.mark.slow
def test_http_tracking_uri_reads_a_real_mlflow_server(capsys, server, runs):
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(server["url"] + "/health", timeout=2):
                break
        except OSError:
            assert server["process"].poll() is None, server["log"].read_text()[-2000:]
            assert time.monotonic() < deadline, "mlflow server did not answer /health in 90 s"
            time.sleep(0.3)
    code, out, err = compare(capsys, "--tracking-uri", server["url"], "--sweep",
                             runs["parent"][:8])
    assert code == 0, err
    assert [row[0] for row in table(out)[1]] == [runs[k][:8] for k in ("sgd", "adam", "rmsprop")]
    assert f"in the MLflow UI: {server['url']}/#/experiments/" in out
