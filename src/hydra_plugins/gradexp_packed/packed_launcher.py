"""`hydra/launcher=packed`: Hydra's basic launcher, with the training of packable jobs done
ahead, together, in one compiled program per group of one shape (gradexp.packed.plan).

The launcher composes every job's config, sorts the jobs into packed groups and a sequential rest
(one line says which jobs run sequentially and why), trains the groups, and then runs each job
in order exactly as the basic launcher does: Hydra's `run_job`, gradexp's task, the loop and its
callbacks, which record the job as its own child run. A packed job's loop replays its packed
training (gradexp.packed.replay) instead of training again; a sequential job trains as usual.
With `processes` above 1, helper processes run jobs beside this one
(gradexp.packed.replay_processes): the replays are most of a packed sweep's time."""

# No `from __future__ import annotations`: Hydra loads plugins without registering the module,
# and dataclasses then cannot resolve string annotations.
import contextlib
import functools
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

log = logging.getLogger(__name__)


@dataclass
class PackedLauncherConf:
    _target_: str = "hydra_plugins.gradexp_packed.packed_launcher.PackedLauncher"
    # Processes that run the jobs, this one included: 2 or more starts helpers as the sweep
    # begins (gradexp.packed.replay_processes; the first plans and trains the packed groups),
    # each a process start (~5 s of a core, ~0.6 GB); at most the machine's cores. A quarter
    # faster on an idle 2-core machine, slower on a busy one (docs/sweeps.md). The command
    # line's basic sweeper only, with no sweep.pruner.
    processes: int = 1


ConfigStore.instance().store(group="hydra/launcher", name="packed", node=PackedLauncherConf,
                             provider="gradexp")


class PackedLauncher(Launcher):
    def __init__(self, processes: int = 1) -> None:
        super().__init__()
        self.processes = processes
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self.said_one_trial = False
        self.said_one_process = False  # said why hydra.launcher.processes cannot apply

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        # Planning sets each job's Hydra config in turn (its interpolations resolve against
        # it); the caller gets back the one it had, as Hydra's run_job leaves it (gradexp.sweep
        # in a notebook, then gradexp.run, must not find a finished job's config set).
        before = HydraConfig.instance().cfg
        try:
            return self._launch(job_overrides, initial_job_idx)
        finally:
            HydraConfig.instance().cfg = before

    def _launch(self, job_overrides: Sequence[Sequence[str]],
                initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra.core.singleton import Singleton

        from gradexp.console import note_line
        from gradexp.interrupts import interrupts_deferred
        from gradexp.packed.plan import plan_sweep, task_configs
        from gradexp.pruning import fail_unfinished

        setup_globals()
        assert self.hydra_context is not None and self.config is not None
        assert self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally, packed where they can be")
        configs: dict[int, DictConfig] = {}
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            sweep_config = self.hydra_context.config_loader.load_sweep_config(
                self.config, list(overrides))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = idx
                sweep_config.hydra.job.num = idx
            configs[idx] = sweep_config
        launch_dir = Path(self.config.hydra.runtime.cwd)
        numbers = range(initial_job_idx, initial_job_idx + len(job_overrides))
        say = functools.partial(_say_job, dict(zip(numbers, job_overrides)))
        run_one = functools.partial(_run_one, self.hydra_context, self.task_function)
        helpers = self._start_helpers(configs)
        queue = _JobQueue(numbers, helpers.count if helpers is not None else 0)
        trained: dict = {}  # job number -> its packed training (gradexp.packed.program.Trained)
        trials: dict = {}
        try:
            # one region from the plan to the trained groups: a signal anywhere in it says
            # "during the packed training"
            with self._interrupts_end_the_sweep(lambda: helpers is not None and helpers.taken):
                if helpers is not None:
                    # The first helper plans and trains, and the helpers start their jobs as
                    # soon as it has, while this process imports what its own jobs need
                    # (TensorFlow: ~3.5 s). One that cannot plan is stopped: this process plans.
                    context = {"sys_path": list(sys.path),
                               "singleton_state": Singleton.get_state(),
                               "config": self.config, "say": say, "run_job": run_one}
                    if helpers.plan_and_replay(context, queue.for_helpers,
                                               lambda n: (configs[n], trained.pop(n, None)),
                                               configs, launch_dir, trained) is None:
                        helpers.close()
                        note_line(f"hydra.launcher.processes={self.processes}: every job runs "
                                  "in this process: its helper could not plan the sweep "
                                  f"({helpers.plan_failure})")
                        helpers, queue = None, _JobQueue(numbers, 0)
                if helpers is None:
                    plan = plan_sweep(task_configs(configs), launch_dir)
                    self._say(plan.line(), len(job_overrides))
                    trials.update(self._group_trials(plan, configs))
                    # Held while the groups train, landing at its stretches' ends: raised
                    # anywhere in TensorFlow's eager Python code, an interrupt was once
                    # swallowed there (a SystemError printed) and the training went on
                    # (gradexp.interrupts)
                    with interrupts_deferred():
                        trained.update(self._train(plan, trials))
            return self._run_jobs(numbers, configs, trained, helpers, queue, say, run_one)
        except BaseException:
            # Ctrl-C, SIGTERM, a job that stops the sweep: the trials the groups asked for are not
            # left RUNNING in the study (a job that ended told its own).
            fail_unfinished(trials.values())
            raise
        finally:
            if helpers is not None:  # their running jobs end KILLED (SIGTERM), as this one's
                helpers.close()

    def _start_helpers(self, configs: dict[int, DictConfig]):
        """The helper processes that will run jobs beside this one (hydra.launcher.processes
        above 1): those the sweep started as it began (their imports overlap the jobs' checks
        and the parent run's opening), or started now; None for none, said in one line where
        the setting cannot apply."""
        from gradexp.app import task
        from gradexp.console import note_line
        from gradexp.packed.replay_processes import ReplayHelpers, started_early, why_not_here
        from gradexp.pruning import pruner_name
        from gradexp.sweep_checks import plugin_name

        assert self.config is not None
        if self.processes < 2:
            return None
        why = why_not_here(command_line=self.task_function is task,
                           pruned=pruner_name(next(iter(configs.values()))) != "none",
                           sweeper=plugin_name(self.config.hydra.sweeper))
        if why is not None:
            if not self.said_one_process:
                self.said_one_process = True
                note_line(f"hydra.launcher.processes={self.processes}: every job runs in this "
                          f"process: {why}")
            return None
        launch_dir = str(self.config.hydra.runtime.cwd)
        return started_early(self.processes - 1, launch_dir) or \
            ReplayHelpers(self.processes - 1, launch_dir)

    @staticmethod
    def _train(plan, trials: dict) -> dict:
        """Train the packed groups: job number -> its gradexp.packed.program.Trained."""
        from gradexp.console import note_line
        from gradexp.interrupts import interrupt_pending
        from gradexp.packed.plan import Planned, train_groups

        started = time.perf_counter()
        trained = train_groups(plan, trials)
        if interrupt_pending():
            return trained  # cut short: the signal lands as the caller's block ends
        for line, noted in Planned(plan.line(), len(plan.groups), trained,
                                   time.perf_counter() - started).lines():
            (note_line if noted else log.info)(line)
        return trained

    def _run_jobs(self, numbers: range, configs: dict[int, DictConfig], trained: dict, helpers,
                  queue: "_JobQueue", say, run_one) -> list[JobReturn]:
        """Run every job (a packed one replays its training, a sequential one trains), in
        order, here and in the helpers (if any, already taking theirs), each taking the next
        job waiting."""
        from gradexp.packed.replay import handed_over

        assert self.config is not None
        runs: dict[int, JobReturn] = {}
        while (number := queue.take()) is not None:
            if helpers is not None:
                helpers.exit_if_stopped()  # a helper's job stopped the sweep
            job = trained.pop(number, None)
            say(number, job)
            with handed_over(job):
                runs[number] = run_one(configs[number])
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        if helpers is not None:
            runs.update(helpers.finish())
        return [runs[number] for number in numbers]

    @contextlib.contextmanager
    def _interrupts_end_the_sweep(self, helpers_started) -> Iterator[None]:
        """Ctrl-C and SIGTERM while the groups are planned and trained, outside any job (whose
        run would say them): the sweep stops as a sequential one does, with its one line and
        exit code (130/143) and no traceback, and the sweep callback's exit hook ends the parent
        run KILLED (gradexp.sweeps). Without this, SIGTERM ended the process where it stood and
        left the parent RUNNING, and Ctrl-C printed a traceback. `helpers_started()`: a helper
        process took a job meanwhile (it ends KILLED, said in its own line)."""
        from gradexp.app import Stop, interrupt_failure
        from gradexp.interrupts import sigterm_as_interrupt
        from gradexp.sweeps import parent_left_open

        try:
            with sigterm_as_interrupt():
                yield
        except KeyboardInterrupt as error:
            if helpers_started():
                recorded = ("the sweep's parent run is recorded as KILLED, and the jobs a "
                            "replay process had started end KILLED")
            else:
                recorded = ("the sweep's parent run is recorded as KILLED; no job had opened "
                            "its run yet, so none is recorded" if parent_left_open()
                            else "no job had opened its run yet, so nothing is recorded")
            raise Stop(interrupt_failure(error, recorded, "the packed training")) from error

    def _say(self, line: str, jobs: int) -> None:
        """The plan's one line; under the Optuna sweeper launching one trial a batch
        (hydra.sweeper.n_jobs=1), one line for the whole sweep instead of one a trial."""
        from gradexp.console import note_line

        assert self.config is not None
        sweeper = str(self.config.hydra.sweeper._target_).rsplit(".", 1)[-1]
        if jobs != 1 or sweeper != "OptunaSweeper":
            note_line(line)
        elif not self.said_one_trial:
            self.said_one_trial = True
            note_line("packed nothing: hydra.sweeper.n_jobs=1 launches one trial at a time, "
                      "and a job alone runs sequentially (raise n_jobs to pack a batch)")

    @staticmethod
    def _group_trials(plan, configs: dict) -> dict:
        """sweep.pruner=asha or hyperband: each packed job's Optuna trial, asked in job order
        (the trial numbers, and so hyperband's brackets, a sequential sweep's), for its group to
        judge it as it trains. median and percentile judge a job against the jobs finished,
        which a group has none of until it ends: their groups train to the end and each job is
        judged in its replayed run, one after another, as a sequential sweep judges it."""
        from gradexp.pruning import LOCKSTEP_PRUNERS, open_trial, pruner_name

        trials = {}
        for number in sorted(n for group in plan.groups for n in group):
            task_cfg = plan.prepared[number].cfg
            if pruner_name(task_cfg) in LOCKSTEP_PRUNERS:
                trial = open_trial(task_cfg, configs[number].hydra)
                if trial is not None:
                    trials[number] = trial
        return trials


class _JobQueue:
    """One queue, in order, which this process and the helpers take jobs from: a packed job
    replays, a sequential one trains, wherever it runs. The last jobs wait for the helpers
    whenever they are ready, one each, so a helper slow to start still records a job (this
    process does not take them); and one waits for this process, which starts on its jobs
    after the helper that planned (its TensorFlow import), so that it records one too."""

    def __init__(self, numbers: range, helpers: int) -> None:
        self._ours = deque(numbers)
        self._theirs = deque(self._ours.pop() for _ in range(min(len(self._ours) // 2, helpers)))
        self._mine = deque([self._ours.pop()] if helpers and len(self._ours) > 1 else [])
        self._lock = threading.Lock()

    def take(self, *, helper: bool = False) -> int | None:
        with self._lock:
            for waiting in (self._ours, self._theirs) if helper else (self._ours, self._mine):
                if waiting:
                    return waiting.popleft()
            return None

    def for_helpers(self) -> int | None:
        return self.take(helper=True)


def _say_job(overrides: dict[int, Sequence[str]], number: int, job) -> None:
    """The line Hydra's basic launcher logs as it starts a job, and how a packed one trained."""
    log.info(f"\t#{number} : {' '.join(filter_overrides(overrides[number]))}"
             + ("" if job is None else " (packed)" if job.pruned_at is None else
                f" (packed; sweep.pruner stopped it at epoch {job.pruned_at} while its group "
                "trained on)"))


def _run_one(hydra_context: HydraContext, task_function: TaskFunction,
             config: DictConfig) -> JobReturn:
    """One job, as Hydra's basic launcher runs it (here or in a helper process)."""
    return run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                   job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
