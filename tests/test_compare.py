"""`gradexp compare` against runs gradexp itself recorded: a real sweep (gradexp.sweep, which
runs `python -m gradexp -m`'s Hydra multirun in-process: its parent and child runs as the sweep
callback tags them) and single runs made in-process with `run_experiment`, all in one sqlite
store. Then what a person sees: the table, its order, the plot, the errors. Metric, param and
tag names are gradexp's own: renaming one breaks a test here.

The store, in the order the runs were made:
  experiment "gradexp":    a buggy_linear run whose gradient check fails (the run finishes)
  experiment "lr_search":  a sweep optimizer=sgd,adam x optimizer.learning_rate=0.1,LONG_LR
                           (4 children), then a single run (sgd) that diverges (FAILED, no
                           final metrics) -- the newest run of all
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.entities import Metric

import conftest
import gradexp
from conftest import compose_config
from gradexp.compare import main

# `-n 2 --dist loadgroup` (the fast tier on both cores): this module's tests on one xdist worker,
# so its module-scoped store of runs is made once, not once a worker.
pytestmark = pytest.mark.xdist_group("compare")

LONG_LR = "0.06460685963831937"  # what Optuna proposes; a legend shows 0.06461
EPOCHS = "10"


def run_in_process(uri: str, folder: Path, *overrides: str, run_name: str):
    from gradexp.loop import RunFailed

    try:
        return conftest.run(uri, f"trainer.epochs={EPOCHS}", *overrides, run_name=run_name,
                            launch_dir=folder).run_id
    except RunFailed:
        return None


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Run ids by role, the store's URI and folder, and each run as MLflow holds it."""
    from mlflow import MlflowClient

    folder = tmp_path_factory.mktemp("store")
    uri = conftest.empty_store(folder)
    run_in_process(uri, folder, "model=buggy_linear", "gradcheck=jacobian",
                   "tracking.experiment=gradexp", run_name="model=buggy_linear")
    gradexp.sweep("optimizer=sgd,adam", f"optimizer.learning_rate=0.1,{LONG_LR}",
                  f"trainer.epochs={EPOCHS}", f"tracking.uri={uri}",
                  "tracking.experiment=lr_search", f"hydra.sweep.dir={folder / 'sweep'}",
                  launch_dir=folder)  # as `python -m gradexp -m` records it (test_api.py)
    run_in_process(uri, folder, "optimizer.learning_rate=50",
                   "tracking.experiment=lr_search", run_name="optimizer.learning_rate=50")

    client = MlflowClient(uri)
    experiments = {e.name: e.experiment_id for e in client.search_experiments()}
    every = client.search_runs(list(experiments.values()), order_by=["attributes.start_time"])
    parent = next(run for run in every if run.data.tags.get("gradexp.sweep") == "true")
    children = [run for run in every
                if run.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    single = [run for run in every if run is not parent and run not in children]
    assert len(children) == 4 and [run.info.status for run in single] == ["FINISHED", "FAILED"]
    return {"uri": uri, "folder": folder, "client": client, "parent": parent,
            "children": {run.info.run_id: run for run in children},
            "buggy": single[0], "diverged": single[1]}


def ids(runs_: list) -> list[str]:
    return [run.info.run_id[:8] for run in runs_]


def ranked(runs_: list, metric: str, desc: bool = False) -> list:
    """`runs_` best first by `metric` as the store holds it: what the table's order must be."""
    return sorted(runs_, key=lambda run: run.data.metrics[metric], reverse=desc)


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # what a wide terminal shows; rows are not folded


def compare(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def table(out: str) -> tuple[list[str], list[list[str]]]:
    """(header cells, row cells) of the rich table in `out`; a cell folded over several lines
    (a narrow terminal) is joined back together."""
    def cells(line: str, bar: str) -> list[str]:
        return [cell.strip() for cell in line.strip(bar).split(bar)]

    def joined(lines: list[list[str]]) -> list[str]:
        return ["".join(parts) for parts in zip(*lines)]

    header = joined([cells(line, "┃") for line in out.splitlines() if line.startswith("┃")])
    rows: list[list[list[str]]] = []
    for line in out.splitlines():
        if line.startswith("│"):
            row = cells(line, "│")
            if row[0] or not rows:  # a new run (its id); else the rest of the one above
                rows.append([row])
            else:
                rows[-1].append(row)
    return header, [joined(parts) for parts in rows]


def test_default_is_the_newest_runs_experiment_and_says_so(capsys, runs):
    """After `python -m gradexp -m experiment=lr_search`, a bare `gradexp compare` shows
    lr_search (presets record into their own experiment), not "no such experiment gradexp"."""
    code, out, err = compare(capsys, "--tracking-uri", runs["uri"])
    assert code == 0, err
    assert out.startswith("experiment lr_search (the newest run's; --experiment NAME for "
                          "another) · 5 runs")
    header, rows = table(out)
    children = list(runs["children"].values())
    # ranked by the runs' sweep objective (tag gradexp.objective = val/mse); the diverged run
    # has no val/mse and comes last
    assert "val/mse ↑" in header
    assert [row[0] for row in rows] == ids(ranked(children, "val/mse") + [runs["diverged"]])
    assert runs["parent"].info.run_id[:8] not in [row[0] for row in rows]  # parents: a summary
    parent = runs["parent"].info.run_id[:8]
    assert [row[header.index("sweep")] for row in rows] == [parent] * 4 + ["-"]
    cells = {row[0]: dict(zip(header, row)) for row in rows}
    diverged = cells[runs["diverged"].info.run_id[:8]]
    assert diverged["status"] == "FAILED"
    assert diverged["optimizer.learning_rate"] == "50.0" and diverged["val/mse ↑"] == "-"
    for run in children:
        row = cells[run.info.run_id[:8]]
        assert row["status"] == "FINISHED" and row["gradcheck"] == "passed"
        assert row["final_loss"] == f"{run.data.metrics['final_loss']:.6g}"
    assert f"one sweep's runs only: gradexp compare --sweep {parent}" in out  # no --experiment


def test_only_the_params_that_differ_are_columns(capsys, runs):
    code, out, err = compare(capsys, "--tracking-uri", runs["uri"], "--experiment", "lr_search")
    assert code == 0, err
    assert out.startswith("experiment lr_search · 5 runs")  # named: no "(the newest run's)"
    header, _ = table(out)
    assert [h for h in header if "." in h] == ["optimizer.learning_rate", "optimizer.name"]
    shown = [runs["diverged"], *runs["children"].values()]
    keys = {key for run in shown for key in run.data.params if not key.startswith("sweep.")}
    same = [key for key in keys if len({run.data.params.get(key) for run in shown}) == 1]
    assert f"not listed: {len(same)} params the same in every run" in out
    assert "follow from optimizer.name" in out  # beta_1, epsilon, _target_, ...: Adam's only
    assert "optimizer.beta_1" not in header and "optimizer._target_" not in header
    assert "trainer.epochs" not in header and "loss.name" not in header
    assert "different data" not in out  # every run drew the same line: one digest per split


def test_another_experiment_by_name(capsys, runs):
    code, out, err = compare(capsys, "--tracking-uri", runs["uri"], "--experiment", "gradexp")
    assert code == 0, err
    header, rows = table(out)
    assert [row[0] for row in rows] == ids([runs["buggy"]])
    assert rows[0][header.index("gradcheck")] == "failed"  # gradcheck/passed = 0
    assert rows[0][header.index("status")] == "FINISHED"
    assert "no param differs" in out


@pytest.mark.parametrize(("args", "metric", "desc"), [
    ((), "val/mse", False),
    (("--desc",), "val/mse", True),
    (("--sort", "grad_norm"), "grad_norm", False),
    (("--by", "final_loss", "--desc"), "final_loss", True),
])
def test_sweep_shows_its_children_in_sort_order(capsys, runs, args, metric, desc):
    parent = runs["parent"].info.run_id
    code, out, err = compare(capsys, "--tracking-uri", runs["uri"], "--sweep", parent[:8], *args)
    assert code == 0, err
    header, rows = table(out)
    assert [row[0] for row in rows] == ids(ranked(list(runs["children"].values()), metric, desc))
    assert f"{metric} {'↓' if desc else '↑'}" in header
    assert [h for h in header if "." in h] == ["optimizer.learning_rate", "optimizer.name"]
    assert "sweep" not in header
    assert out.startswith(f"sweep {parent[:8]}: optimizer=sgd,adam optimizer.learning_rate=")
    assert "besides the swept keys (optimizer, optimizer.learning_rate), no param differs" in out


def test_a_narrow_terminal_drops_the_run_name_not_the_params(capsys, runs, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = compare(capsys, "--tracking-uri", runs["uri"], "--sweep", "latest")
    table_lines = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert code == 0 and max(len(line) for line in table_lines) <= 100
    header, rows = table(out)
    assert "run" not in header and "optimizer.learning_rate" in header
    assert {row[header.index("optimizer.name")] for row in rows} == {"sgd", "adam"}


def test_runs_without_the_sort_metric_come_last_either_way(capsys, runs):
    for extra in ((), ("--desc",)):
        _, out, _ = compare(capsys, "--tracking-uri", runs["uri"], "--sort", "final_loss", *extra)
        assert table(out)[1][-1][0] == runs["diverged"].info.run_id[:8]


def test_plot_writes_the_loss_curves_with_rounded_numbers(capsys, runs, tmp_path, monkeypatch):
    import gradexp.plots

    drawn = {}
    real = gradexp.plots.loss_curves

    def spy(curves, *args, **kwargs):
        drawn.update(curves)
        return real(curves, *args, **kwargs)

    monkeypatch.setattr(gradexp.plots, "loss_curves", spy)
    target = tmp_path / "curves.png"
    code, out, err = compare(capsys, "--tracking-uri", runs["uri"], "--sweep", "latest",
                             "--plot", str(target))
    assert code == 0, err
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and target.stat().st_size > 10_000
    assert f"wrote the loss curves of 4 runs: {target}" in out
    assert sorted(drawn) == ["optimizer.learning_rate=0.06461 optimizer=adam",
                             "optimizer.learning_rate=0.06461 optimizer=sgd",
                             "optimizer.learning_rate=0.1 optimizer=adam",
                             "optimizer.learning_rate=0.1 optimizer=sgd"]
    for run in runs["children"].values():  # one point per epoch, from the run's `loss` history
        label = next(name for name in drawn if run.data.params["optimizer.name"] in name
                     and run.data.params["optimizer.learning_rate"][:6] in name)
        epochs, values = drawn[label]
        history = sorted(runs["client"].get_metric_history(run.info.run_id, "loss"),
                         key=lambda m: m.step)
        assert list(values) == [m.value for m in history] and len(epochs) == int(EPOCHS)


def test_plot_draws_every_epoch_from_the_history_artifact_and_mlflow_without_it(
        capsys, tmp_path, monkeypatch):
    """A run whose MLflow `loss` was thinned (tracking.max_points) is drawn at every epoch, from
    its history.parquet; a run recorded without that file is drawn from MLflow's history."""
    import numpy as np
    from mlflow import MlflowClient

    import gradexp.plots
    from gradexp.loop import run_experiment

    uri = conftest.empty_store(tmp_path)
    cfg = compose_config(f"tracking.uri={uri}", "trainer.epochs=30", "tracking.max_points=5",
                         "gradcheck=off", "tracking.log_model=false", "optimizer=adam")
    thinned = run_experiment(cfg, run_name="thinned", launch_dir=tmp_path, quiet=True)
    client = MlflowClient(uri)
    assert len(client.get_metric_history(thinned.run_id, "loss")) == 5
    older = client.create_run(client.get_experiment_by_name("gradexp").experiment_id,
                              run_name="older")  # as a gradexp without the artifact left it
    client.log_batch(older.info.run_id, metrics=[
        Metric("loss", 1.0 / step, 0, step) for step in range(1, 8)])
    client.log_param(older.info.run_id, "optimizer.name", "sgd")
    client.set_terminated(older.info.run_id)

    drawn = {}
    real = gradexp.plots.loss_curves
    monkeypatch.setattr(gradexp.plots, "loss_curves",
                        lambda curves, *a, **k: drawn.update(curves) or real(curves, *a, **k))
    code, out, err = compare(capsys, "--tracking-uri", uri, "--plot", str(tmp_path / "c.png"))
    assert code == 0, err
    assert "wrote the loss curves of 2 runs" in out and "Downloading" not in err  # no tqdm
    steps, values = next(curve for label, curve in drawn.items() if "optimizer=adam" in label)
    assert list(steps) == list(range(1, 31))
    assert np.array_equal(values, thinned.history["loss"])
    steps, values = next(curve for label, curve in drawn.items() if "optimizer=sgd" in label)
    assert list(steps) == list(range(1, 8)) and values[-1] == pytest.approx(1 / 7)


@pytest.mark.parametrize(("names", "labels"), [
    (["optimizer.learning_rate=0.06460685963831937,trainer.epochs=100"],
     ["optimizer.learning_rate=0.06461,trainer.epochs=100"]),  # integers stay whole
    (["lr=1.2345678e-05", "lr=-0.123456789", "hidden=[32,32]", "run 1a2b3c4d"],
     ["lr=1.235e-05", "lr=-0.1235", "hidden=[32,32]", "run 1a2b3c4d"]),
    (["lr=0.064606859", "lr=0.064612"], ["lr=0.064607", "lr=0.064612"]),  # kept apart
])
def test_legend_labels_round_long_numbers(names, labels):
    from gradexp.plots import short_labels

    assert short_labels(names) == labels


@pytest.mark.parametrize(("args", "says"), [
    (("--experiment", "nope"), "--experiment nope: no such experiment; existing: Default, "
                               "gradexp, lr_search"),
    (("--sweep", "deadbeef"), "--sweep deadbeef: no sweep with that id in any experiment; the "
                              "store's sweeps, newest first: "),
    (("--experiment", "gradexp", "--sweep", "latest"),
     "--sweep latest: no sweep with that id in experiment gradexp; its sweeps, newest first: "
     "(none)"),
    (("--sort", "accuracy"), "--by accuracy: no run shown has that metric; available: "),
    (("--limit", "0"), "--limit 0: must be"),
    (("--plot", "curves.txt"), "--plot curves.txt: the file name must end in .png"),
    (("--frobnicate",), "unrecognized arguments: --frobnicate"),
])
def test_bad_input_is_exit_2_and_one_line_naming_the_value(capsys, runs, args, says):
    code, out, err = compare(capsys, "--tracking-uri", runs["uri"], *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and says in err, err
    if args[0] == "--sort":  # gradexp's own metric names, as the runs recorded them
        available = err.strip().split("available: ")[1].split(", ")
        assert {"loss", "grad_norm", "final_loss", "W", "b", "final_W", "final_b",
                "gradcheck/max_abs_error", "gradcheck/max_rel_error", "gradcheck/passed",
                "train/mse", "val/mse", "val/mae", "val/r2"} <= set(available), available
    if args[0] == "--sweep":
        parent = runs["parent"]
        assert f"{parent.info.run_id[:8]} ({parent.info.run_name.removeprefix('sweep: ')})" in err


def test_a_job_is_not_a_sweep(capsys, runs):
    child = next(iter(runs["children"]))
    code, _, err = compare(capsys, "--tracking-uri", runs["uri"], "--sweep", child)
    assert code == 2 and f"it is a job of sweep {runs['parent'].info.run_id}" in err


def test_default_store_is_mlflow_db_here_and_a_missing_one_is_not_created(
        capsys, runs, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(runs["folder"])
    assert compare(capsys, "--sweep", runs["parent"].info.run_id)[0] == 0
    monkeypatch.chdir(tmp_path)
    code, _, err = compare(capsys)
    assert code == 2 and "no MLflow store at sqlite:///" in err
    assert not (tmp_path / "mlflow.db").exists()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", runs["uri"])
    assert compare(capsys, "--sweep", "latest")[0] == 0


def test_a_store_without_runs_says_so(capsys, tmp_path):

    uri = conftest.empty_store(tmp_path)  # the tables and the Default experiment, no run
    code, out, err = compare(capsys, "--tracking-uri", uri)
    assert code == 2 and out == ""
    assert err.strip().endswith("the store has no runs yet: record one with python -m gradexp "
                                "first")


@pytest.fixture(scope="module")
def other_data(tmp_path_factory) -> dict:
    """Runs in a store of their own. Experiment "seeds": one on seed 004's line and one on the
    same line drawn with another seed (data.seed=7: a param differs, other rows, other digests).
    Experiment "gradexp": one on the line, then two on rows.csv with the same params, the file
    rewritten between them (other rows, other digests, no param to show it)."""
    from mlflow import MlflowClient

    folder = tmp_path_factory.mktemp("other_data")
    uri = conftest.empty_store(folder)
    csv = ("data=csv", "data.path=rows.csv", "data.target=y")

    def rows(slope: float) -> str:
        return "x,y\n" + "".join(f"{x / 10},{slope * x / 10 + 1}\n" for x in range(20))

    made = {}
    seeds = ("tracking.experiment=seeds",)
    for name, overrides, slope in [("seed 0", seeds, None),
                                   ("seed 7", (*seeds, "data.seed=7"), None),
                                   ("line", (), None), ("csv before", csv, 3.0),
                                   ("csv after", csv, -2.0)]:
        if slope is not None:
            (folder / "rows.csv").write_text(rows(slope))
        made[name] = conftest.run(uri, "trainer.epochs=2", "gradcheck=off",
                                  "tracking.log_model=false", *overrides, run_name=name,
                                  launch_dir=folder).run_id
    client = MlflowClient(uri)
    digests = {name: {next(tag.value for tag in item.tags if tag.key == "mlflow.data.context"):
                      item.dataset.digest for item in client.get_run(run_id).inputs.dataset_inputs}
               for name, run_id in made.items()}
    return {"uri": uri, "ids": made, "digests": digests}


def test_runs_on_different_data_with_the_same_data_params_get_one_line_naming_them(
        capsys, other_data):
    """val/mse of runs on other rows does not compare. Where a data.* param differs
    (data.seed=7, a sweep over data.standardize or data.features) the table's columns show it:
    no line. Where the params are the same (a csv file that changed between runs), one line
    says which of those runs saw which data (the digests MLflow shows in each run's Datasets)."""
    code, out, err = compare(capsys, "--tracking-uri", other_data["uri"])
    assert code == 0, err
    rows = [row[0] for row in table(out)[1]]
    assert len(rows) == 3  # every run still listed; the line's data.name differs: not named
    digests, ids = other_data["digests"], {k: v[:8] for k, v in other_data["ids"].items()}
    assert digests["seed 0"]["train"] != digests["seed 7"]["train"]
    assert digests["csv before"]["train"] != digests["csv after"]["train"]
    (line,) = [line for line in out.splitlines() if line.startswith("note:")]
    sets = {name: f"rows (train {digests[name]['train']}, val {digests[name]['val']}): 1 run "
                  f"({ids[name]})"
            for name in ("csv before", "csv after")}
    shown = [name for row in rows for name, short in ids.items() if short == row
             and name in sets]
    assert line == (
        "note: runs with the same data.* params were trained or evaluated on 2 different data "
        "sets (their MLflow dataset digests differ: a data file changed between them, or a "
        "loader draws its own data), so their metrics do not compare: "
        + "; ".join(sets[name] for name in shown)), line  # in the table's order


def test_runs_whose_data_differ_by_a_data_param_get_no_line(capsys, other_data):
    """A sweep over data.* keys (docs/sweeps.md: data.standardize, data.features) trains each
    job on other data by design; its columns say so."""
    code, out, err = compare(capsys, "--tracking-uri", other_data["uri"], "--experiment",
                             "seeds")
    assert code == 0, err
    assert len(table(out)[1]) == 2
    assert "note:" not in out


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
    conftest.wait_for_mlflow_server(server["url"], server["process"], server["log"], 90)
    code, out, err = compare(capsys, "--tracking-uri", server["url"], "--sweep",
                             runs["parent"].info.run_id[:8])
    assert code == 0, err
    children = list(runs["children"].values())
    assert [row[0] for row in table(out)[1]] == ids(ranked(children, "val/mse"))
    assert f"in the MLflow UI: {server['url']}/#/experiments/" in out


# ---------------------------------------------------------------- hand-made records
# Runs written straight into a store as gradexp tags them (no training: each case's few params,
# metrics and tags are what compare reads), one experiment a case.
def record(client, experiment_id: str, name: str, params: dict, metrics: dict, *,
           parent=None, status: str = "FINISHED", tags: dict | None = None,
           start: int = 0) -> str:
    tags = {"gradexp.objective": "val/mse", "gradexp.direction": "minimize", **(tags or {})}
    if parent is not None:
        tags["mlflow.parentRunId"] = parent
    run = client.create_run(experiment_id, start_time=1_700_000_000_000 + start, tags=tags,
                            run_name=name)
    run_id = run.info.run_id
    for key, value in params.items():
        client.log_param(run_id, key, value)
    for key, value in metrics.items():
        client.log_metric(run_id, key, value)
    client.set_terminated(run_id, status)
    return run_id


def sweep_parent(client, experiment_id: str, overrides: str, swept: str, start: int,
                 tags: dict | None = None) -> str:
    return record(client, experiment_id, f"sweep: {overrides}", {"sweep.overrides": overrides},
                  {}, tags={"gradexp.sweep": "true", "gradexp.swept": swept, **(tags or {})},
                  start=start)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    from mlflow import MlflowClient

    folder = tmp_path_factory.mktemp("made")
    uri = conftest.empty_store(folder)
    client = MlflowClient(uri)
    ids_: dict = {"uri": uri}

    # "twice": the same replicate sweep run twice in one folder (same params, same values)
    twice = client.create_experiment("twice")
    for sweep in range(2):
        parent = sweep_parent(client, twice, "optimizer=sgd,adam seed=0,1,2", "optimizer,seed",
                              start=100 * sweep)
        for job, (optimizer, seed) in enumerate((o, s) for o in ("sgd", "adam")
                                                for s in range(3)):
            record(client, twice, f"optimizer={optimizer},seed={seed}",
                   {"optimizer.name": optimizer, "seed": str(seed),
                    "sweep.skip_finished": "false"},
                   {"val/mse": (1.0 if optimizer == "sgd" else 1.3) + 0.2 * seed},
                   parent=parent, start=100 * sweep + job + 1)

    # "fit": a sweep objective that is best largest, by sweep.direction=maximize
    fit = client.create_experiment("fit")
    for start, (rate, value) in enumerate([("0.3", 0.2), ("0.01", 0.9), ("0.1", 0.5)]):
        record(client, fit, f"lr={rate}", {"optimizer.learning_rate": rate},
               {"val/fit": value, "val/mse": 1 - value},
               tags={"gradexp.objective": "val/fit", "gradexp.direction": "maximize"},
               start=start)
    ids_["fit"] = {value: rate for rate, value in [("0.3", 0.2), ("0.01", 0.9), ("0.1", 0.5)]}

    # "reused": a sweep rerun with sweep.skip_finished reusing the first sweep's sgd job
    reused = client.create_experiment("reused")
    first = sweep_parent(client, reused, "optimizer=sgd", "optimizer", start=0)
    ids_["reused_run"] = record(client, reused, "optimizer=sgd", {"optimizer.name": "sgd"},
                                {"val/mse": 0.5}, parent=first, start=1)
    ids_["second"] = sweep_parent(client, reused, "optimizer=sgd,adam", "optimizer", start=10,
                                  tags={"gradexp.reused.0": ids_["reused_run"]})
    ids_["new_run"] = record(client, reused, "optimizer=adam", {"optimizer.name": "adam"},
                             {"val/mse": 0.7}, parent=ids_["second"], start=11)

    # "brackets": a sweep whose overrides hold brackets
    brackets = client.create_experiment("brackets")
    parent = sweep_parent(client, brackets, "optimizer=sgd,adam sweep.best_per=[optimizer.name]",
                          "optimizer", start=0)
    for start, optimizer in enumerate(("sgd", "adam")):
        record(client, brackets, f"optimizer={optimizer}", {"optimizer.name": optimizer},
               {"val/mse": 1.0 + start}, parent=parent, start=start + 1)

    # "pruned": replicates of three rates; sweep.pruner stopped 0.0001's, 1000's all failed
    pruned = client.create_experiment("pruned")
    parent = sweep_parent(client, pruned, "optimizer.learning_rate=0.3,0.0001,1000 seed=0,1",
                          "optimizer.learning_rate,seed", start=0)
    start = 0
    for rate, value, outcome in [("0.3", 0.01, "FINISHED"), ("0.0001", 30.0, "pruned"),
                                 ("1000", 1e30, "FAILED")]:
        for seed in range(2):
            start += 1
            record(client, pruned, f"optimizer.learning_rate={rate},seed={seed}",
                   {"optimizer.learning_rate": rate, "seed": str(seed)},
                   {"val/mse": value + 0.001 * seed}, parent=parent, start=start,
                   status="FAILED" if outcome == "FAILED" else "FINISHED",
                   tags={"gradexp.pruned_at_epoch": "10"} if outcome == "pruned" else None)

    # "replicates": optimizer=sgd,adam x seed=0,1, each seed its own draw (data.resample=true)
    replicates = client.create_experiment("replicates")
    for start, (optimizer, seed) in enumerate((o, s) for o in ("sgd", "adam") for s in (0, 1)):
        run_id = record(client, replicates, f"optimizer={optimizer},seed={seed}",
                        {"optimizer.name": optimizer, "seed": str(seed)}, {"val/mse": 1.0 + start},
                        start=start)
        log_data(client, run_id, {"train": f"aaaa000{seed}", "val": f"bbbb000{seed}"})
    return ids_


def log_data(client, run_id: str, digests: dict[str, str]) -> None:
    """Dataset inputs as gradexp logs them (mlflow_store.log_datasets): one a split, its digest,
    the split as its context."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    client.log_inputs(run_id, datasets=[
        DatasetInput(Dataset("linear", digest, "code", "{}"),
                     [InputTag("mlflow.data.context", split)])
        for split, digest in digests.items()])


def group_rows(out: str) -> dict[str, list[str]]:
    """The --aggregate table's rows by group label (its first cell)."""
    title = out.index("groups over")
    rows = [[cell.strip() for cell in line.strip("│").split("│")]
            for line in out[title:].splitlines() if line.startswith("│")]
    return {row[0]: row for row in rows}


def test_aggregate_counts_a_job_run_twice_once_and_says_so(capsys, made):
    code, out, err = compare(capsys, "--tracking-uri", made["uri"], "--experiment", "twice",
                             "--aggregate")
    assert code == 0, err
    rows = group_rows(out)
    assert rows["optimizer.name=sgd"][1] == "3" and rows["optimizer.name=adam"][1] == "3"
    assert rows["optimizer.name=sgd"][2] == f"{1.2:.6g}"  # the mean of seeds 0, 1, 2
    assert "left out 6 duplicate runs" in out
    # n=3 a side: the intervals overlap, as the sweep itself said at n=3
    assert ("95% intervals overlap, not distinguishable at this n (n=3, 3; values 1 to 1.4 and "
            "1.3 to 1.7)") in out


def test_the_direction_the_runs_recorded_ranks_them(capsys, made):
    code, out, err = compare(capsys, "--tracking-uri", made["uri"], "--experiment", "fit")
    assert code == 0, err
    header, rows = table(out)
    assert "val/fit ↓" in header
    column = header.index("optimizer.learning_rate")
    assert [row[column] for row in rows] == [made["fit"][0.9], made["fit"][0.5],
                                             made["fit"][0.2]]


def test_a_sweep_lists_the_runs_it_reused_marked(capsys, made):
    code, out, err = compare(capsys, "--tracking-uri", made["uri"], "--experiment", "reused",
                             "--sweep", made["second"][:8])
    assert code == 0, err
    assert "· 2 runs" in out
    header, rows = table(out)
    status = {row[0]: row[header.index("status")] for row in rows}
    assert status == {made["reused_run"][:8]: "FINISHED (reused)",
                      made["new_run"][:8]: "FINISHED"}


def test_brackets_in_overrides_and_params_are_shown_as_typed(capsys, made):
    code, out, err = compare(capsys, "--tracking-uri", made["uri"], "--experiment", "brackets",
                             "--sweep", "latest")
    assert code == 0, err
    assert "optimizer=sgd,adam sweep.best_per=[optimizer.name] · 2 runs" in out


def test_aggregate_leaves_pruned_and_failed_replicates_out_and_counts_them(capsys, made):
    code, out, err = compare(capsys, "--tracking-uri", made["uri"], "--experiment", "pruned",
                             "--sweep", "latest", "--aggregate")
    assert code == 0, err
    rows = group_rows(out)
    assert list(rows) == ["optimizer.learning_rate=0.3", "optimizer.learning_rate=0.0001",
                          "optimizer.learning_rate=1000"]
    assert rows["optimizer.learning_rate=0.3"][1] == "2"
    assert rows["optimizer.learning_rate=0.3"][-1] == "-"
    assert rows["optimizer.learning_rate=0.0001"][1:3] == ["0", "-"]
    assert rows["optimizer.learning_rate=0.0001"][-1] == "2 pruned"
    assert rows["optimizer.learning_rate=1000"][1:3] == ["0", "-"]
    assert rows["optimizer.learning_rate=1000"][-1] == "2 failed"


def test_replicates_of_a_master_seed_are_told_to_compare_their_means(capsys, made):
    """Each seed draws its own rows by design (data.resample): not a list of digests, but how
    such runs compare."""
    code, out, err = compare(capsys, "--tracking-uri", made["uri"], "--experiment", "replicates")
    assert code == 0, err
    assert len(table(out)[1]) == 4
    (line,) = [line for line in out.splitlines() if line.startswith("note:")]
    assert line == ("note: each master seed drew its own data (data.resample=true), so runs of "
                    "different seeds do not compare one to one; their means over seeds do "
                    "(--aggregate)")


def test_runs_that_did_not_train_to_the_end_rank_after_the_finished_ones(capsys, tmp_path):
    """A run that diverged at epoch 64 keeps the val/mse of its last evaluation (248693), lower
    than a finished run's that trained on past it; a pruned run's is an early epoch's. Ranked by
    value alone, the diverged run topped `gradexp compare` as the best; the sweep's own table
    ranks the finished runs first, and so does compare now."""
    from mlflow import MlflowClient

    uri = conftest.empty_store(tmp_path)
    client = MlflowClient(uri)
    experiment = client.create_experiment("ended")
    finished = record(client, experiment, "lr=0.79", {"optimizer.learning_rate": "0.79"},
                      {"val/mse": 2.2e10}, start=1)
    diverged = record(client, experiment, "lr=0.97", {"optimizer.learning_rate": "0.97"},
                      {"val/mse": 248693.0}, status="FAILED", start=2)
    pruned = record(client, experiment, "lr=0.5", {"optimizer.learning_rate": "0.5"},
                    {"val/mse": 3.0}, tags={"gradexp.pruned_at_epoch": "10"}, start=3)
    killed = record(client, experiment, "lr=0.1", {"optimizer.learning_rate": "0.1"},
                    {"val/mse": 1.0}, status="KILLED", start=4)
    best = record(client, experiment, "lr=0.3", {"optimizer.learning_rate": "0.3"},
                  {"val/mse": 5e9}, start=5)
    code, out, err = compare(capsys, "--tracking-uri", uri, "--experiment", "ended")
    assert code == 0, err
    _, rows = table(out)
    assert [row[0] for row in rows] == [run_id[:8] for run_id in
                                        (best, finished, pruned, killed, diverged)]


def test_sweep_keys_are_never_columns(capsys, tmp_path):
    # a rerun with sweep.resume_killed=true listed sweep.resume_killed as a differing column,
    # right above "besides the swept keys, no param differs"
    from mlflow import MlflowClient

    uri = conftest.empty_store(tmp_path)
    client = MlflowClient(uri)
    experiment = client.create_experiment("rerun")
    for start, (optimizer, resume) in enumerate([("sgd", "false"), ("adam", "true")]):
        record(client, experiment, f"optimizer={optimizer}",
               {"optimizer.name": optimizer, "sweep.resume_killed": resume},
               {"val/mse": 1.0 + start}, start=start)
    code, out, err = compare(capsys, "--tracking-uri", uri, "--experiment", "rerun")
    assert code == 0, err
    header, _ = table(out)
    assert "optimizer.name" in header and "sweep.resume_killed" not in header


@pytest.mark.heavy  # ~2.7 s
def test_a_swept_group_does_not_hide_a_setting_its_options_give_differently(tmp_path, capsys):
    # -m optimizer=sgd,rmsprop: sgd's learning rate 0.1 against rmsprop's 0.01. The sweep and
    # compare said "besides the swept keys (optimizer), no param differs", which is what
    # a fair comparison would say. (QA)
    import gradexp
    from conftest import empty_store

    store = empty_store(tmp_path)
    gradexp.sweep(f"tracking.uri={store}", "optimizer=sgd,rmsprop", "trainer.epochs=2",
                  "gradcheck=off", "tracking.log_model=false", launch_dir=tmp_path)
    assert ("besides the swept keys, these differ between the runs: optimizer.learning_rate"
            in capsys.readouterr().out)
    code, out, err = compare(capsys, "--tracking-uri", store, "--sweep", "latest")
    assert code == 0, err
    assert "besides the swept keys (optimizer), these differ: optimizer.learning_rate" in out
