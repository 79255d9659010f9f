"""What a QA pass of `gradexp compare`, the sweep's table and the console found: --aggregate
said the runs "do not differ" in a key they differ in, and labelled groups by derived seeds; the
run's config line dropped `[area,rooms]`; compare ranked by final_loss in silence, and a mixed-task
sweep the other way round from its own table; an 8-character --sweep id was looked for in one
experiment only; the sweep's table showed `nan` and a second final-loss column; an empty
experiment exited 0 where an empty store exits 2.

Runs are written straight into a store as gradexp tags them (test_compare.record): no training.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient
from test_compare import group_rows, record, sweep_parent, table

import conftest
from gradexp.compare import main as compare_main
from gradexp.seeds import PURPOSES, derived_seed


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: no row is folded


def compare(capsys, *args: str) -> tuple[int, str, str]:
    code = compare_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def seeded(seed: int) -> dict[str, str]:
    """The seed params of a run with master seed=N: each derived as gradexp.seeds derives it."""
    return {"seed": str(seed), **{key: str(derived_seed(seed, purpose))
                                  for purpose, key in PURPOSES.items() if key != "data.split_seed"}}


@pytest.fixture(scope="module")
def replicates(tmp_path_factory) -> str:
    """Experiment "grid": a sweep `optimizer=sgd,adam seed=0,1` (swept: the group optimizer and
    seed). Experiment "mixed": the same four runs outside a sweep, and one run without a master
    seed (its seeds the config's 0): a store of a person's runs over days."""
    uri = conftest.empty_store(tmp_path_factory.mktemp("replicates"))
    client = MlflowClient(uri)
    grid = client.create_experiment("grid")
    parent = sweep_parent(client, grid, "optimizer=sgd,adam seed=0,1", "optimizer,seed", start=0)
    mixed = client.create_experiment("mixed")
    start = 0
    for optimizer in ("sgd", "adam"):
        for seed in (0, 1):
            start += 1
            params = {"optimizer.name": optimizer, **seeded(seed)}
            value = (1.0 if optimizer == "sgd" else 2.0) + 0.1 * seed
            record(client, grid, f"optimizer={optimizer},seed={seed}", params,
                   {"val/mse": value}, parent=parent, start=start)
            record(client, mixed, f"optimizer={optimizer},seed={seed}", params,
                   {"val/mse": value}, start=start)
    record(client, mixed, "optimizer=sgd", {"optimizer.name": "sgd", "seed": "None",
                                            "model.seed": "0", "data.seed": "0",
                                            "trainer.seed": "0"},
           {"val/mse": 1.2}, start=10)
    return uri


# ---------------------------------------------------------------- 1: --aggregate
@pytest.mark.parametrize("experiment", ["grid", "mixed"])
@pytest.mark.parametrize("key", ["optimizer", "optimizer.name"])
def test_aggregate_groups_by_a_config_group_or_its_option_key_alike(capsys, replicates,
                                                                     experiment, key):
    """`--sweep latest --aggregate optimizer.name` said "the runs shown do not differ in
    optimizer.name" beside an optimizer.name column; outside --sweep `--aggregate optimizer`
    said the same. Averaged over the optimizers, each seed is a group of two."""
    sweep = ["--sweep", "latest"] if experiment == "grid" else []
    code, out, err = compare(capsys, "--tracking-uri", replicates, "--experiment", experiment,
                             *sweep, "--aggregate", key)
    assert code == 0, err
    assert "do not differ" not in out
    rows = group_rows(out)
    assert rows["seed=0"][1:3] == ["2", f"{1.5:.6g}"] and rows["seed=1"][1:3] == ["2", "1.6"]


def test_aggregate_outside_a_sweep_leaves_a_master_seeds_derived_seeds_out(capsys, replicates):
    """One run without a master seed (model.seed=0) made every derived seed a grouping key: each
    seeded run a group of its own, labelled data.seed=...,model.seed=...,trainer.seed=...
    (docs: "a master seed's derived seeds aside")."""
    code, out, err = compare(capsys, "--tracking-uri", replicates, "--experiment", "mixed",
                             "--aggregate")
    assert code == 0, err
    rows = group_rows(out)
    assert sorted(rows) == ["optimizer.name=adam", "optimizer.name=sgd"]
    assert rows["optimizer.name=sgd"][1] == "3" and rows["optimizer.name=adam"][1] == "2"


def test_seeds_set_by_hand_without_a_master_seed_stay_configurations():
    """Runs without a master seed that differ in model.seed differ in their configuration."""
    from gradexp.compare_groups import derived_seed_keys

    by_hand = [{"seed": "None", "model.seed": "0"}, {"seed": "None", "model.seed": "1"},
               seeded(0)]
    assert "model.seed" not in derived_seed_keys(by_hand)
    assert derived_seed_keys(by_hand[:1] + [seeded(0), seeded(1)]) >= {"model.seed",
                                                                       "trainer.seed"}


# ---------------------------------------------------------------- 2: the config line
def test_the_config_line_shows_list_overrides_as_typed(capsys, monkeypatch):
    """`data.features=[area,rooms]` printed as `data.features=`: rich read the list as a tag."""
    from hydra.core.hydra_config import HydraConfig

    from gradexp.console import print_config

    overrides = ["data=csv", "data.features=[area,rooms]", "eval.metrics=[mse,mae]",
                 "+model.kwargs.note=[bold]x"]
    monkeypatch.setattr(HydraConfig, "initialized", staticmethod(lambda: True))
    monkeypatch.setattr(HydraConfig, "get", staticmethod(
        lambda: SimpleNamespace(overrides=SimpleNamespace(task=overrides))))
    print_config(None, {"data.name": "csv", "model.name": "[linear]"})
    (line,) = capsys.readouterr().out.splitlines()
    assert line == ("config: data=csv model=[linear] · overrides: data=csv "
                    "data.features=[area,rooms] eval.metrics=[mse,mae] +model.kwargs.note=[bold]x "
                    "(every key: --cfg job)")


# ---------------------------------------------------------------- 3: what compare ranks by
def test_runs_of_different_objectives_rank_by_final_loss_and_say_so(capsys, tmp_path):
    uri = conftest.empty_store(tmp_path)
    client = MlflowClient(uri)
    experiment = client.create_experiment("objectives")
    record(client, experiment, "loss=mse", {"loss.name": "mse"},
           {"val/mse": 1.0, "val/mae": 0.8, "final_loss": 1.1}, start=1)
    record(client, experiment, "loss=mae", {"loss.name": "mae"},
           {"val/mse": 2.0, "val/mae": 0.9, "final_loss": 0.9}, start=2,
           tags={"gradexp.objective": "val/mae"})
    code, out, err = compare(capsys, "--tracking-uri", uri, "--experiment", "objectives")
    assert code == 0, err
    assert out.splitlines()[0] == (
        "note: the runs shown were recorded with different sweep objectives (val/mae, "
        "val/mse): ranked by final_loss, the training loss, which differs in meaning between "
        "losses (--by METRIC for another)")
    assert "final_loss ↑" in table(out)[0]
    assert "note:" not in compare(capsys, "--tracking-uri", uri, "--experiment", "objectives",
                                  "--by", "val/mse")[1]


def test_a_mixed_task_sweep_ranks_by_its_objective_as_its_own_table_does(capsys, tmp_path):
    """`-m data=linear,blobs`: the sweep's table ranks by val/mse (the launch config's
    objective), the classification job last; compare ranked by final_loss, blobs first."""
    uri = conftest.empty_store(tmp_path)
    client = MlflowClient(uri)
    experiment = client.create_experiment("mixed_task")
    parent = sweep_parent(client, experiment, "data=linear,blobs", "data", start=0)
    record(client, experiment, "data=linear", {"data.name": "linear"},
           {"val/mse": 4.99, "final_loss": 5.27}, parent=parent, start=1)
    record(client, experiment, "data=blobs", {"data.name": "blobs"},
           {"val/accuracy": 0.34, "final_loss": 1.51}, parent=parent, start=2,
           tags={"gradexp.objective": "val/accuracy", "gradexp.direction": "maximize"})
    code, out, err = compare(capsys, "--tracking-uri", uri, "--sweep", "latest")
    assert code == 0, err
    header, rows = table(out)
    assert "val/mse ↑" in header and "note:" not in out
    assert [row[header.index("data.name")] for row in rows] == ["linear", "blobs"]


# ---------------------------------------------------------------- 4: --sweep PREFIX
def test_an_8_character_sweep_id_is_found_in_any_experiment(capsys, tmp_path):
    """After a run in another experiment, `--sweep 85f035ed` (from the sweep's own table) said
    "no sweep with that id in experiment noval"; the full id worked."""
    uri = conftest.empty_store(tmp_path)
    client = MlflowClient(uri)
    sweeps = client.create_experiment("sweeps")
    parent = sweep_parent(client, sweeps, "optimizer=sgd,adam", "optimizer", start=0)
    for start, optimizer in enumerate(("sgd", "adam"), start=1):
        record(client, sweeps, f"optimizer={optimizer}", {"optimizer.name": optimizer},
               {"val/mse": float(start)}, parent=parent, start=start)
    record(client, client.create_experiment("noval"), "later", {"optimizer.name": "sgd"},
           {"final_loss": 1.0}, start=100)  # the newest run, in another experiment
    code, out, err = compare(capsys, "--tracking-uri", uri, "--sweep", parent[:8])
    assert code == 0, err
    assert out.startswith(f"sweep {parent[:8]}: optimizer=sgd,adam · 2 runs")
    code, out, err = compare(capsys, "--tracking-uri", uri, "--sweep", "0123abcd")
    assert code == 2 and out == ""
    assert err.strip() == (f"error: --sweep 0123abcd: no sweep with that id in any experiment; "
                           f"the store's sweeps, newest first: {parent[:8]} (optimizer=sgd,adam) "
                           "in experiment sweeps")


# ---------------------------------------------------------------- 5: the small ones
def summary(metric: str, rows: list[dict]):
    from gradexp.sweeps import SweepSummary

    return SweepSummary(rows, metric, "minimize", fell_back=metric == "final_loss")


def row(name: str, status: str, objective: float, final_loss: float) -> dict:
    return {"run_id": None, "run_name": name, "status": status, "objective": objective,
            "final_loss": final_loss, "gradcheck": None, "reused": False,
            "pruned_at_epoch": None, "packed_drift": None}


def sweep_table(capsys, metric: str, rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    from gradexp.sweep_table import print_sweep

    tags = {"gradexp.objective": "val/mse"}
    client = SimpleNamespace(get_run=lambda run_id: SimpleNamespace(data=SimpleNamespace(
        tags=tags)))
    print_sweep(summary(metric, rows), SimpleNamespace(run_id="f" * 32, uri="sqlite:///x.db",
                                                       experiment_id="1", client=client))
    return table(capsys.readouterr().out)


def test_the_sweep_table_shows_a_failed_jobs_missing_values_as_dash(capsys):
    header, rows = sweep_table(capsys, "val/mse", [
        row("optimizer=sgd", "FINISHED", 0.5, 0.6),
        row("optimizer=adam", "FAILED", math.nan, math.nan)])
    assert header == ["run", "status", "val/mse ↑", "final loss", "gradient check"]
    assert rows[1] == ["optimizer=adam", "FAILED", "-", "-", "-"]


def test_a_sweep_ranked_by_final_loss_shows_it_once(capsys):
    """data.n_val=0: `final_loss ↑` and `final loss`, two identical columns."""
    header, rows = sweep_table(capsys, "final_loss", [row("optimizer=sgd", "FINISHED", 0.6,
                                                          0.6)])
    assert header == ["run", "status", "final_loss ↑", "gradient check"]
    assert rows == [["optimizer=sgd", "FINISHED", "0.6", "-"]]


def test_nothing_to_show_is_exit_2_in_an_empty_experiment_and_sweep_as_in_an_empty_store(
        capsys, tmp_path):
    """An empty experiment printed "no runs yet" and exited 0, a store without runs 2."""
    uri = conftest.empty_store(tmp_path)
    client = MlflowClient(uri)
    client.create_experiment("empty")
    code, out, err = compare(capsys, "--tracking-uri", uri, "--experiment", "empty")
    assert code == 2 and out == ""
    assert err.strip() == ("error: --experiment empty: no runs yet in that experiment: record "
                           "one with python -m gradexp tracking.experiment=empty")
    parent = sweep_parent(client, client.create_experiment("started"), "seed=0,1", "seed",
                          start=0)
    code, out, err = compare(capsys, "--tracking-uri", uri, "--sweep", parent)
    assert code == 2 and out == ""
    assert err.strip() == (f"error: --sweep {parent}: sweep {parent[:8]} (seed=0,1) has no runs "
                           "yet: none of its jobs has opened one")


def test_a_server_that_does_not_answer_is_told_by_compares_own_option(capsys):
    """QA: `--tracking-uri http://127.0.0.1:PORT` where no server runs advised to "omit
    tracking.uri", the run's key, not compare's."""
    uri = f"http://127.0.0.1:{conftest.free_port()}"
    code, _, err = compare(capsys, "--tracking-uri", uri)
    assert code == 2
    assert err.strip().startswith(f"error: --tracking-uri {uri}: no MLflow server answers")
    assert err.strip().endswith("start one (mlflow server) or use the local store (omit "
                                "--tracking-uri)")
