"""Callbacks from config (conf/callbacks/): a person's own callback from the launch folder gets
the run's events and what it puts in `logs` lands in MLflow; a built-in one turns off; a bad
`_target_` is one line before any run opens."""

from __future__ import annotations

import re
import textwrap

import pytest

from conftest import REPO, compose_config, run_cli
from gradexp.loop import run_experiment
from gradexp.schema import ConfigError

USER_CALLBACK = '''
class ValTimes:
    """Puts scale * val/mse in logs at every stretch end; notes the events it saw."""

    def __init__(self, scale=1.0):
        self.scale = scale
        self.events = []

    def stops(self, epochs):  # the host at every evaluation, so each stretch ends at one
        return set(range(5, epochs, 5))

    def on_train_begin(self, run):
        self.events.append("train_begin")

    def on_stretch_end(self, run, stretch, logs):
        self.events.append("stretch_end")
        latest = run.latest_evaluation()
        if "val/mse" in latest:
            logs["mine/val_mse_scaled"] = self.scale * latest["val/mse"]

    def on_check(self, run, check):
        self.events.append("check")

    def on_train_end(self, run, status):
        events = [e for i, e in enumerate(self.events) if i == 0 or e != self.events[i - 1]]
        run.set_tags({"mine.events": ",".join(events) + "," + status})
'''


def run(store, launch, *overrides):
    cfg = compose_config(f"tracking.uri={store}", "trainer.epochs=20", "eval.every=5",
                         *overrides)
    return run_experiment(cfg, quiet=True, launch_dir=launch)


def test_a_user_callback_from_the_launch_folder_adds_a_metric_that_mlflow_records(
        store, client, tmp_path):
    (tmp_path / "mine_a.py").write_text(USER_CALLBACK)
    result = run(store, tmp_path, "+callbacks.mine._target_=mine_a.ValTimes",
                 "+callbacks.mine.scale=2")
    val = {m.step: m.value for m in client.get_metric_history(result.run_id, "val/mse")}
    mine = {m.step: m.value for m in client.get_metric_history(result.run_id,
                                                                "mine/val_mse_scaled")}
    # It runs after held-out evaluation (it sees each val/mse, at the stretch ends it asked
    # for, and at any other a busy machine makes) and before the recorder.
    assert {5, 10, 15, 20} <= set(mine)
    for step, value in mine.items():
        assert value == pytest.approx(2 * val[max(s for s in val if s <= step)]), step
    tags = client.get_run(result.run_id).data.tags
    assert tags["mine.events"] == "train_begin,check,stretch_end,check,FINISHED"
    # Its settings are the run's params; the built-in callbacks' entries are not.
    params = client.get_run(result.run_id).data.params
    assert params["callbacks.mine._target_"] == "mine_a.ValTimes"
    assert params["callbacks.mine.scale"] == "2"
    assert not any(key.startswith("callbacks.recorder") for key in params)


def test_the_docs_example_records_the_gap_at_every_evaluation_epoch(store, client, tmp_path):
    """docs/callbacks.md's ValGap, as written there: it said "at the evaluation epochs" and
    recorded the latest evaluation's gap at each stretch end (3 of 10, at the wrong steps)."""
    page = (REPO / "docs" / "callbacks.md").read_text()
    (tmp_path / "gap_doc.py").write_text(
        re.search(r"```python\n(class ValGap:.*?)```", page, re.S).group(1))
    result = run(store, tmp_path, "+callbacks.gap._target_=gap_doc.ValGap", "gradcheck=off")
    def history(key):
        return {m.step: m.value for m in client.get_metric_history(result.run_id, key)}

    val, train, gap = history("val/mse"), history("train/mse"), history("gap/mse")
    assert set(gap) == set(val) == {5, 10, 15, 20}
    for step, value in gap.items():
        assert value == pytest.approx(val[step] - train[step]), step


def test_a_built_in_callback_turns_off(store, client, tmp_path):
    on = run(store, tmp_path, "gradcheck=off")
    off = run(store, tmp_path, "gradcheck=off", "~callbacks.artifacts",
              "callbacks.model_logger=null")
    def artifacts(run_id):
        return {item.path for item in client.list_artifacts(run_id)}

    def models(run_id):
        outputs = client.get_run(run_id).outputs
        return len(outputs.model_outputs) if outputs else 0

    assert {"history.parquet", "config.yaml"} <= artifacts(on.run_id) and models(on.run_id) == 1
    assert artifacts(off.run_id) == {"config.yaml"} and models(off.run_id) == 0
    assert off.final_loss == pytest.approx(on.final_loss)  # training itself is the same


@pytest.mark.parametrize("overrides, message", [
    (("+callbacks.mine._target_=no_such_module.Thing",),
     "callbacks.mine._target_=no_such_module.Thing"),
    (("+callbacks.mine._target_=mine_b.ValTimes", "+callbacks.mine.scael=2"),
     "callbacks.mine: mine_b.ValTimes does not take these arguments (scael)"),
    (("+callbacks.mine.scale=2",), "callbacks.mine={'scale': 2}: a callback needs a _target_"),
])
def test_a_bad_callback_is_one_line_before_any_run_opens(store, client, tmp_path, overrides,
                                                         message):
    (tmp_path / "mine_b.py").write_text(USER_CALLBACK)
    with pytest.raises(ConfigError) as raised:
        run(store, tmp_path, *overrides)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []


@pytest.mark.slow
def test_a_bad_callback_target_on_the_command_line_is_one_line_and_no_run(tmp_path):
    (tmp_path / "mine_c.py").write_text(textwrap.dedent(USER_CALLBACK))
    done = run_cli("+callbacks.mine._target_=mine_c.NoSuchCallback", cwd=tmp_path)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "callbacks.mine._target_=mine_c.NoSuchCallback" in lines[0], \
        done.stderr
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []
