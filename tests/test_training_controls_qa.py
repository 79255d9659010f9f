"""QA findings on the training controls (2026-12): piecewise schedules that trained at rates
nobody asked for, built-in callbacks removed while the config turned their job on, a replaced
optimizer recorded under its option's name, and the epoch a diverged run's callbacks were told."""

from __future__ import annotations

import json

import pytest

import conftest
from conftest import user_modules
from gradexp.endings import Diverged
from gradexp.schema import ConfigError


def run(store: str, *overrides: str, tmp_path=None):
    return conftest.run(store, "gradcheck=off", "tracking.log_model=false", *overrides,
                        launch_dir=tmp_path)


def refused(store: str, client, *overrides: str) -> str:
    """The one line a run is refused with, checking that no MLflow run was opened."""
    with pytest.raises(ConfigError) as error:
        conftest.run(store, "tracking.log_model=false", "trainer.epochs=3", *overrides)
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []
    line = str(error.value)
    assert "\n" not in line
    return line


# ---------------------------------------------------------------- A: piecewise schedules
PIECEWISE = "optimizer.schedule.name=piecewise"


@pytest.mark.parametrize(("boundaries", "factors", "line"), [
    # Keras summed the overlapping stretches: lr 0.101 at epoch 1, a rate nobody asked for
    ("[3,1]", "[1,0.1,0.01]", "optimizer.schedule.boundaries=[3, 1]: must be one or more epochs "
                              "> 0 in increasing order, e.g. [50,80]"),
    # the first stretch never trained
    ("[-1]", "[1,0.1]", "optimizer.schedule.boundaries=[-1]: must be one or more epochs > 0 in "
                        "increasing order, e.g. [50,80]"),
    ("[2,2]", "[1,0.1,0.01]", "optimizer.schedule.boundaries=[2, 2]: must be one or more epochs "
                              "> 0 in increasing order, e.g. [50,80]"),
    # IndexError inside the run
    ("[]", "[1]", "optimizer.schedule.boundaries=[]: must be one or more epochs > 0 in "
                  "increasing order, e.g. [50,80]"),
    # gradient ascent: the loss grew 17.99 -> 73.5, silently
    ("[1]", "[1,-1]", "optimizer.schedule.factors=[1, -1]: must be one or more numbers > 0, "
                      "e.g. [1,0.1,0.01]"),
])
def test_a_piecewise_schedule_trains_only_at_rates_it_was_given(store, client, boundaries,
                                                               factors, line):
    assert refused(store, client, PIECEWISE, f"optimizer.schedule.boundaries={boundaries}",
                   f"optimizer.schedule.factors={factors}") == line


@pytest.mark.parametrize(("boundaries", "after"), [
    # a full batch is one step an epoch: Keras was given steps [-1, -1] and trained at 0.001
    # (the last factor) from the first step
    ("[0.2,0.4]", "[0, 0]"),
    ("[1,1.4]", "[1, 1]"),  # the second stretch never trained
])
def test_piecewise_boundaries_that_share_a_step_are_refused(store, client, boundaries, after):
    line = refused(store, client, PIECEWISE, f"optimizer.schedule.boundaries={boundaries}",
                   "optimizer.schedule.factors=[1,0.1,0.01]", "gradcheck=off")
    given = boundaries.replace(",", ", ")
    assert line == (f"optimizer.schedule.boundaries={given}: an epoch is 1 step here, so these "
                    f"change the rate after steps {after}; each must be after at least one step "
                    "and after the one before (boundaries at least 1 epoch apart here)")


def test_fractional_piecewise_boundaries_train_on_mini_batches(store, client, tmp_path):
    """The same boundaries are distinct steps with mini-batches: the rate changes mid-epoch."""
    result = run(store, PIECEWISE, "optimizer.schedule.boundaries=[0.2,0.4]",
                 "optimizer.schedule.factors=[1,0.1,0.01]", "trainer.batch_size=10",
                 "trainer.epochs=2", tmp_path=tmp_path)
    rates = [m.value for m in sorted(client.get_metric_history(result.run_id, "lr"),
                                     key=lambda m: m.step)]
    # both changes within the first epoch (an epoch's lr is its first step's)
    assert rates == pytest.approx([0.1, 0.001])


# ---------------------------------------------------------------- B: callbacks removed
ES = "trainer.early_stopping.enabled=true"


@pytest.mark.parametrize(("overrides", "line"), [
    # ran every epoch, while the params said early stopping was on
    (("gradcheck=off", ES, "callbacks.early_stopping=null"),
     "trainer.early_stopping.enabled=true, but callbacks.early_stopping is removed: put it "
     "back, or set trainer.early_stopping.enabled=false"),
    # no val/ metrics: early stopping never decided
    (("gradcheck=off", ES, "~callbacks.held_out_evaluation"),
     "trainer.early_stopping.enabled=true, but callbacks.held_out_evaluation is removed: put it "
     "back, or set trainer.early_stopping.enabled=false"),
    # no checkpoint written: a resume after SIGTERM started over from epoch 0
    (("gradcheck=off", "trainer.checkpoint_every=2", "~callbacks.checkpoints"),
     "trainer.checkpoint_every=2, but callbacks.checkpoints is removed: put it back, or set "
     "trainer.checkpoint_every=0"),
    (("~callbacks.gradient_checks",),
     "gradcheck.enabled=true, but callbacks.gradient_checks is removed: put it back, or use "
     "gradcheck=off"),
    # QA: recorded nothing, said nothing, exit 0
    (("gradcheck=off", "~callbacks.recorder"),
     "tracking=mlflow, but callbacks.recorder is removed: put it back, or use tracking=none"),
])
def test_a_built_in_callback_is_not_removed_while_its_job_is_on(store, client, overrides,
                                                                 line):
    assert refused(store, client, *overrides) == line


@pytest.mark.parametrize(("overrides", "line"), [
    # Optuna's pruner never judged a job
    (("sweep.pruner=median", "~callbacks.pruning"),
     "sweep.pruner=median, but callbacks.pruning is removed: put it back, or set "
     "sweep.pruner=none"),
    (("sweep.pruner=median", "~callbacks.held_out_evaluation"),
     "sweep.pruner=median, but callbacks.held_out_evaluation is removed: put it back, or set "
     "sweep.pruner=none"),
    # every job's val/mse missing: nothing to rank the sweep by
    (("~callbacks.held_out_evaluation",),
     "sweep.objective=auto (a held-out metric the sweep ranks its jobs by), but "
     "callbacks.held_out_evaluation is removed: put it back, or set sweep.objective=final_loss"),
])
def test_a_sweeps_job_keeps_the_callbacks_its_pruner_and_objective_read(overrides, line):
    from gradexp.callbacks import check_jobs_kept

    cfg = conftest.compose_config("gradcheck=off", *overrides)
    check_jobs_kept(cfg, sweep=False)  # a single run: no pruner, nothing to rank
    with pytest.raises(ConfigError) as error:
        check_jobs_kept(cfg, sweep=True)
    assert str(error.value) == line


@pytest.mark.heavy  # ~2.5 s
def test_a_built_in_callback_whose_job_is_off_can_be_removed(store, client, tmp_path):
    result = run(store, "trainer.epochs=3", "~callbacks.early_stopping",
                 "~callbacks.checkpoints", "~callbacks.gradient_checks",
                 "~callbacks.held_out_evaluation", tmp_path=tmp_path)
    assert client.get_run(result.run_id).info.status == "FINISHED"


# ---------------------------------------------------------------- C: a replaced optimizer
def test_a_replaced_optimizer_target_names_the_run(store, client, tmp_path):
    result = run(store, "optimizer=adam", "optimizer._target_=keras.optimizers.AdamW",
                 "trainer.epochs=2", tmp_path=tmp_path)
    params = client.get_run(result.run_id).data.params
    assert params["optimizer.name"] == "keras.optimizers.AdamW"  # was adam
    assert params["optimizer._target_"] == "keras.optimizers.AdamW"


MY_OPT = """
import keras


def build(learning_rate, momentum, nesterov):
    return keras.optimizers.SGD(learning_rate, momentum=momentum, nesterov=nesterov)
"""


def test_your_own_optimizer_function_is_not_given_a_name(store, client, tmp_path, monkeypatch):
    with user_modules(tmp_path, monkeypatch, my_opt=MY_OPT):
        # was: "my_opt.build refused its arguments (TypeError: ... unexpected keyword
        # argument 'name')"
        result = run(store, "optimizer._target_=my_opt.build", "trainer.epochs=2",
                     tmp_path=tmp_path)
    assert client.get_run(result.run_id).data.params["optimizer.name"] == "my_opt.build"


# ---------------------------------------------------------------- D: a diverged run's epoch
TRACER = """
import json


class Tracer:
    def __init__(self, path):
        self.path = path

    def on_train_end(self, run, status):
        with open(self.path, "w") as handle:
            json.dump({"epoch": run.epoch, "status": status}, handle)
"""


def test_a_diverged_runs_callbacks_end_at_the_last_epoch_it_recorded(store, client, tmp_path,
                                                                     monkeypatch):
    told = tmp_path / "told.json"
    with user_modules(tmp_path, monkeypatch, tracer=TRACER), pytest.raises(Diverged) as error:
        run(store, "optimizer.learning_rate=1000", "trainer.epochs=20",
            "+callbacks.t._target_=tracer.Tracer", f"+callbacks.t.path={told}",
            tmp_path=tmp_path)
    tags = client.get_run(error.value.run_id).data.tags
    failed_at = int(tags["gradexp.failure_epoch"])
    last_logged = max(m.step for m in client.get_metric_history(error.value.run_id, "loss"))
    # was 16: the end of the compiled call the NaN epoch was in
    assert json.loads(told.read_text()) == {"epoch": failed_at - 1, "status": "FAILED"}
    assert last_logged == failed_at - 1


def test_a_keras_loss_options_constructor_arguments_are_taken_with_plus():
    # QA: `loss=categorical_crossentropy +loss.label_smoothing=0.1` was refused ("gradexp would
    # not read it") though build_loss passes every key to the class, and the same class reached
    # by loss._target_ took it. A key the constructor lacks is still refused, listing what is.
    from gradexp.config_checks import check_known_keys
    from gradexp.losses import build_loss

    cfg = conftest.compose_config("loss=categorical_crossentropy", "+loss.label_smoothing=0.1")
    check_known_keys(cfg)
    assert build_loss(cfg.loss).label_smoothing == pytest.approx(0.1)
    typo = conftest.compose_config("loss=huber", "+loss.labl_smoothing=0.1")
    with pytest.raises(ConfigError) as error:
        check_known_keys(typo)
    assert str(error.value).startswith("loss.labl_smoothing=0.1: no such key, gradexp would not "
                                       "read it (loss=huber accepts: _target_, name, delta, "
                                       "reduction")


# ---------------------------------------------------------------- XLA (QA, devices and compilation)
@pytest.mark.parametrize(("overrides", "line"), [
    # ran eagerly, no XLA, while the params said trainer.jit_compile=True
    (("trainer.compile=false",), "trainer.jit_compile=true needs trainer.compile=true: XLA "
                                 "compiles the compiled training step, and an eager run has none"),
    # a traceback for every model: "Trying to access resource ... located in device CPU:1"
    (("device=mirrored",), "trainer.jit_compile=true does not run under device=mirrored (XLA "
                           "would compile every replica's step on one device): use one of them"),
])
def test_xla_with_settings_it_does_not_combine_with_is_refused(store, client, overrides, line):
    assert refused(store, client, "trainer.jit_compile=true", *overrides) == line


def test_a_model_op_xla_cannot_compile_is_named_in_one_line():
    """~150 lines of "tf2xla conversion failed" and exit 1: now the op and where it is."""
    from gradexp.xla_checks import XlaRefused, xla_refused

    said = ("Detected unsupported operations when trying to compile graph while_body[] on "
            "XLA_CPU_JIT: PyFunc (No registered 'PyFunc' OpKernel for XLA_CPU_JIT devices "
            "compatible with node {{node while/while/functional_1/py_fn_1/PyFunc}})"
            "{{node while/while/functional_1/py_fn_1/PyFunc}}")
    failure = xla_refused(ValueError(said), conftest.compose_config(
        "model=custom", "model._target_=my_models.build"))
    assert isinstance(failure, XlaRefused) and failure.exit_code == 2
    assert str(failure) == ("trainer.jit_compile=true: XLA cannot compile PyFunc (at "
                            "functional_1/py_fn_1/PyFunc) in model._target_=my_models.build; "
                            "set trainer.jit_compile=false")
    assert xla_refused(ValueError("something else"), None) is None
