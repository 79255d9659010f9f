"""Ctrl-C and SIGTERM land between training stretches, never inside one (gradexp.interrupts):
a signal raised into TensorFlow's or a checkpoint's Python code once ended a run in a segfault."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from conftest import cli_env, compose_config, run
from gradexp.app import job_failure
from gradexp.endings import Terminated
from gradexp.interrupts import interrupt_pending, interrupts_deferred, sigterm_as_interrupt

SELF_TERMINATING = '''
import os
import signal


class TermAt:
    """Sends this process SIGTERM at the first stretch end at or past `epoch`."""

    def __init__(self, epoch):
        self.epoch = epoch
        self.sent_at = None

    def stops(self, epochs):
        return {self.epoch}

    def on_stretch_end(self, run, stretch, logs):
        if self.sent_at is None and run.trainer.epoch >= self.epoch:
            self.sent_at = run.trainer.epoch
            os.kill(os.getpid(), signal.SIGTERM)
            logs["mine/after_signal"] = float(self.sent_at)  # still runs: the signal waits

    def on_train_end(self, run, status):
        run.set_tags({"mine.sent_at": self.sent_at})
'''


def test_a_signal_in_a_deferred_block_lands_when_the_block_ends():
    reached = []
    with sigterm_as_interrupt(), pytest.raises(Terminated):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            reached.append("after the signal")
    assert reached == ["after the signal"]


def test_work_held_for_long_stops_at_its_next_safe_point_and_the_signal_lands_after_it():
    # The packed training is held as a whole (an interrupt raised inside TensorFlow's eager
    # Python code was once swallowed there, a SystemError printed, and the training went on);
    # it asks between its stretches whether a signal is held, and stops there.
    stretches = []
    with sigterm_as_interrupt(), pytest.raises(Terminated):
        with interrupts_deferred():
            for stretch in range(1000):
                if interrupt_pending():
                    break
                with interrupts_deferred():  # a stretch, as PackedProgram.train holds each
                    if stretch == 3:
                        os.kill(os.getpid(), signal.SIGTERM)
                    stretches.append(stretch)
            stretches.append("after the stretches")
    assert stretches == [0, 1, 2, 3, "after the stretches"]
    assert not interrupt_pending()


class _SignalledWhileCollected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside the finalizer


def test_sigterm_landing_in_a_finalizer_is_not_lost():
    # Python drops an exception raised in a __del__ ("Exception ignored in ..."): a SIGTERM that
    # landed in a ZipFile's let a sweep run on to its end. It is delivered again after it.
    import time

    with sigterm_as_interrupt(), pytest.raises(Terminated):
        _SignalledWhileCollected()  # collected at once
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.01)  # where the signal delivered again lands
    assert time.monotonic() < deadline


def test_an_ignored_ctrl_c_stays_ignored_through_a_deferred_block():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under `nohup ... &`
    try:
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            # nothing pending: held work (the packed training) must not stop for it
            assert not interrupt_pending()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigterm_during_a_stretch_ends_the_run_killed_after_that_stretch(store, client,
                                                                         tmp_path):
    (tmp_path / "term_at.py").write_text(SELF_TERMINATING)
    with pytest.raises(Terminated) as error:
        run(store, "trainer.epochs=40", "trainer.checkpoint_every=0", "gradcheck=off",
            "tracking.log_model=false", "+callbacks.term._target_=term_at.TermAt",
            "+callbacks.term.epoch=10", launch_dir=tmp_path)
    (killed,) = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    assert killed.info.status == "KILLED"
    sent_at = int(killed.data.tags["mine.sent_at"])
    # The callback's own line after the signal ran, the recorder (after it) recorded the
    # stretch, and no further stretch was trained.
    assert [m.value for m in client.get_metric_history(killed.info.run_id,
                                                       "mine/after_signal")] == [sent_at]
    loss = client.get_metric_history(killed.info.run_id, "loss")
    assert max(m.step for m in loss) == sent_at >= 10
    assert "the run is recorded as KILLED" in job_failure(error.value, compose_config()).line


INTERRUPTED_AT_START = '''
class InterruptAtStart:
    """Ctrl-C before the recorder (after every callback of yours) has opened the run."""

    def on_run_begin(self, run):
        raise KeyboardInterrupt
'''


def test_an_interrupt_before_the_run_opens_says_nothing_was_recorded(store, client, tmp_path):
    (tmp_path / "interrupt_at_start.py").write_text(INTERRUPTED_AT_START)
    overrides = ("gradcheck=off", "+callbacks.early._target_=interrupt_at_start.InterruptAtStart")
    with pytest.raises(KeyboardInterrupt) as error:
        run(store, *overrides, launch_dir=tmp_path)
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []
    failure = job_failure(error.value, compose_config(*overrides))
    assert failure.line == "interrupted (Ctrl-C): nothing was recorded (no run had opened)"
    assert failure.exit_code == 130


# A child that makes a new store and signals itself in the middle of MLflow's migrations: right
# after alembic has made the temporary table of a batch migration, where a signal that lands at
# once leaves the store half-migrated (no later process could open it).
SIGNALLED_WHILE_THE_STORE_IS_MADE = '''
import os
import signal
import sys

import sqlalchemy
from sqlalchemy import event

signal.signal(signal.SIGINT, signal.default_int_handler)  # not ignored, even under nohup
sent = []


@event.listens_for(sqlalchemy.engine.Engine, "after_cursor_execute")
def signal_mid_migration(conn, cursor, statement, parameters, context, executemany):
    if not sent and statement.lstrip().upper().startswith("CREATE TABLE _ALEMBIC_TMP_"):
        sent.append(statement)
        print("signalled", flush=True)
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))


from gradexp.mlflow_store import open_client

try:
    open_client("sqlite:///" + sys.argv[1])
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("opened, not interrupted", flush=True)
'''


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "said"), [("SIGINT", 130, "signalled\ninterrupted\n"),
                                                   ("SIGTERM", -signal.SIGTERM, "signalled\n")])
def test_an_interrupt_while_a_store_is_made_lands_after_it_and_leaves_it_whole(tmp_path, sig,
                                                                             code, said):
    from mlflow import MlflowClient

    database = tmp_path / "mlflow.db"
    child = subprocess.run([sys.executable, "-c", SIGNALLED_WHILE_THE_STORE_IS_MADE,
                            str(database), sig], cwd=tmp_path, env=cli_env(), text=True,
                           capture_output=True, timeout=300, check=False)
    # the signal arrived inside the migrations and still ended the process (SIGTERM: its own
    # default action, as with no handler)
    assert (child.returncode, child.stdout) == (code, said), child.stderr[-3000:]
    experiments = MlflowClient(f"sqlite:///{database}").search_experiments()
    assert [experiment.name for experiment in experiments] == ["Default"]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_right_after_the_run_is_created_ends_it_killed(store, client, sig):
    # The run's row is committed, but the recorder has not yet been handed its id: a signal
    # landing there once left the run RUNNING until a later run found its process gone.
    import sqlalchemy.orm
    from sqlalchemy import event

    created: list[bool] = []

    def note_insert(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("INSERT INTO RUNS"):
            created.append(True)

    def signal_after_commit(session):
        if created and created.pop():
            os.kill(os.getpid(), getattr(signal, sig))

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # even under nohup
    event.listen(sqlalchemy.engine.Engine, "after_cursor_execute", note_insert)
    event.listen(sqlalchemy.orm.Session, "after_commit", signal_after_commit)
    try:
        with pytest.raises(KeyboardInterrupt) as error:
            run(store, "gradcheck=off", "tracking.log_model=false")
    finally:
        event.remove(sqlalchemy.orm.Session, "after_commit", signal_after_commit)
        event.remove(sqlalchemy.engine.Engine, "after_cursor_execute", note_insert)
        signal.signal(signal.SIGINT, previous)
    (killed,) = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    assert killed.info.status == "KILLED"
    assert "the run is recorded as KILLED" in job_failure(error.value, compose_config()).line


# A sweep that signals itself right after its parent run's row is committed, before the exit
# hook that ends an interrupted parent KILLED is in place.
SIGNALLED_AS_THE_PARENT_OPENS = '''
import os
import signal
import sys

import sqlalchemy
import sqlalchemy.orm
from sqlalchemy import event

signal.signal(signal.SIGINT, signal.default_int_handler)  # not ignored, even under nohup
created = []


@event.listens_for(sqlalchemy.engine.Engine, "after_cursor_execute")
def note_insert(conn, cursor, statement, *args):
    if statement.lstrip().upper().startswith("INSERT INTO RUNS"):
        created.append(True)


@event.listens_for(sqlalchemy.orm.Session, "after_commit")
def signal_after_commit(session):
    if created and created.pop():
        os.kill(os.getpid(), getattr(signal, SIGNAL))


from gradexp.app import main

SIGNAL = sys.argv[1]
sys.argv = ["gradexp", *sys.argv[2:]]
main()
'''


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "said"), [("SIGINT", 130, "interrupted (Ctrl-C)"),
                                                   ("SIGTERM", 143, "terminated (SIGTERM)")])
def test_a_signal_right_after_a_sweeps_parent_is_created_ends_it_killed(tmp_path, sig, code,
                                                                        said):
    from mlflow import MlflowClient

    from conftest import empty_store

    store = empty_store(tmp_path)
    child = subprocess.run([sys.executable, "-c", SIGNALLED_AS_THE_PARENT_OPENS, sig, "-m",
                            f"tracking.uri={store}", "gradcheck=off", "trainer.epochs=2",
                            "optimizer=sgd,adam"], cwd=tmp_path, env=cli_env(), text=True,
                           capture_output=True, timeout=300, check=False)
    assert child.returncode == code, child.stderr[-3000:]
    assert "Traceback" not in child.stderr
    assert child.stderr.strip().splitlines()[-1] == (
        f"error: {said}: the sweep's parent run is recorded as KILLED; the jobs "
        "that ended keep their runs")
    client = MlflowClient(store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [(r.data.tags.get("gradexp.sweep"), r.info.status) for r in runs] == [
        ("true", "KILLED")]  # the parent alone: no job had started


# A sweep that signals itself just after its first job returned to Hydra: that job's run is
# still ending in the background (gradexp.callbacks.recorder) when the process starts to exit.
SIGNALLED_AFTER_THE_FIRST_JOB = '''
import os
import signal
import sys

import gradexp.app

signal.signal(signal.SIGINT, signal.default_int_handler)  # not ignored, even under nohup
returned = gradexp.app.sweeper_value


def sweeper_value(outcome):
    value = returned(outcome)
    os.kill(os.getpid(), getattr(signal, SIGNAL))  # lands here, between the two jobs
    return value


gradexp.app.sweeper_value = sweeper_value
SIGNAL = sys.argv[1]
sys.argv = ["gradexp", *sys.argv[2:]]
gradexp.app.main()
'''


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "launcher", "code"), [("SIGTERM", "basic", 143),
                                                       ("SIGINT", "packed", 130)])
def test_a_signal_between_jobs_keeps_every_metric_of_the_job_that_finished(tmp_path, sig,
                                                                           launcher, code):
    # The process used to leave the finished job's background end to an atexit hook, after
    # concurrent.futures had stopped its threads: the run stayed FINISHED without its last
    # metrics, and a line said its writes failed and that it was FAILED.
    from mlflow import MlflowClient

    from conftest import empty_store

    store = empty_store(tmp_path)
    child = subprocess.run([sys.executable, "-c", SIGNALLED_AFTER_THE_FIRST_JOB, sig, "-m",
                            f"tracking.uri={store}", f"hydra/launcher={launcher}",
                            "gradcheck=off", "tracking.log_model=false", "trainer.epochs=12",
                            "optimizer=sgd,adam"], cwd=tmp_path, env=cli_env(), text=True,
                           capture_output=True, timeout=300, check=False)
    assert child.returncode == code, child.stderr[-3000:]
    assert "Traceback" not in child.stderr and "failed" not in child.stderr, child.stderr
    assert child.stderr.strip().splitlines()[-1].endswith(
        "the sweep's parent run is recorded as KILLED; the jobs that ended keep their runs")
    client = MlflowClient(store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (parent,) = [r for r in runs if r.data.tags.get("gradexp.sweep") == "true"]
    (job,) = [r for r in runs if r is not parent]
    assert (parent.info.status, job.info.status) == ("KILLED", "FINISHED")
    assert parent.data.tags["gradexp.status_reason"] == (
        "interrupted (Ctrl-C or SIGTERM): the jobs that ended keep their runs")
    assert {"final_loss", "val/mse", "val/mae", "val/r2", "loss"} <= set(job.data.metrics)
    assert max(m.step for m in client.get_metric_history(job.info.run_id, "loss")) == 12


def test_a_signal_while_a_finished_job_hands_its_end_over_leaves_it_finished(tmp_path,
                                                                           monkeypatch):
    # The recorder marked itself ended, then saved the model and handed the end to the
    # background: a Ctrl-C in between left the run RUNNING with no metrics (1 in 3 tries).
    from mlflow import MlflowClient

    import gradexp
    from conftest import empty_store
    from gradexp.callbacks.recorder import MlflowRecorder, wait_for_ends
    from gradexp.sweeps import _OPENED

    store = empty_store(tmp_path)
    saves = MlflowRecorder.save_models

    def save_models(self, run):
        os.kill(os.getpid(), signal.SIGINT)  # lands in the hand-off, or held over it
        return saves(self, run)

    monkeypatch.setattr(MlflowRecorder, "save_models", save_models)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # even under nohup
    try:
        with pytest.raises(KeyboardInterrupt):
            gradexp.sweep(f"tracking.uri={store}", "optimizer=sgd,adam", "trainer.epochs=3",
                          "gradcheck=off", launch_dir=tmp_path)
        wait_for_ends()
    finally:
        signal.signal(signal.SIGINT, previous)
        for sweep in _OPENED:  # the parent, KILLED as the command line ends it on its way out
            sweep._end_if_interrupted()
    client = MlflowClient(store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (job,) = [r for r in runs if r.data.tags.get("gradexp.sweep") != "true"]
    assert job.info.status == "FINISHED"
    assert {"final_loss", "val/mse", "loss"} <= set(job.data.metrics)


@pytest.mark.slow
def test_ctrl_c_under_the_joblib_launcher_ends_the_workers_running_jobs_killed(tmp_path):
    # joblib kills its workers (SIGKILL) as the interrupt lands in the sweep's process: the
    # jobs training there stayed RUNNING until a later run found their processes gone. Ctrl-C
    # at a terminal reaches the whole process group, as here.
    import time

    from mlflow import MlflowClient

    from conftest import empty_store, finish, spawn_cli

    store = empty_store(tmp_path)
    sweep = spawn_cli("-m", f"tracking.uri={store}", "hydra/launcher=joblib",
                      "hydra.launcher.n_jobs=2", "optimizer=sgd,adam,rmsprop", "gradcheck=off",
                      "tracking.log_model=false", "trainer.epochs=100000", cwd=tmp_path,
                      start_new_session=True)
    client = MlflowClient(store)
    try:
        deadline = time.monotonic() + 240
        while True:  # until a job trains in a worker: its run RUNNING, with loss points
            assert sweep.poll() is None, sweep.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no job was seen training"
            found = client.get_experiment_by_name("gradexp")
            training = found and client.search_runs(
                [found.experiment_id], "attributes.status = 'RUNNING' and metrics.loss > -1")
            if training and any("gradexp.sweep" not in r.data.tags for r in training):
                break
            time.sleep(0.1)
        os.killpg(sweep.pid, signal.SIGINT)
        done = finish(sweep, 300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sweep.pid, signal.SIGKILL)  # a worker left behind
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "error: interrupted (Ctrl-C): the sweep's parent run is recorded as KILLED; the jobs "
        "that ended keep their runs")
    runs = client.search_runs([found.experiment_id])
    assert [r for r in runs if r.info.status == "RUNNING"] == []
    # each job that was training ended itself KILLED, said in its own line (not marked later)
    killed = [r for r in runs if "gradexp.sweep" not in r.data.tags]
    assert killed and {r.info.status for r in killed} == {"KILLED"}
    assert {r.data.tags["gradexp.status_reason"] for r in killed} == {
        "interrupted (Ctrl-C or SIGTERM)"}
    assert done.stderr.count("error: terminated (SIGTERM): the run is recorded as KILLED") == \
        len(killed)
