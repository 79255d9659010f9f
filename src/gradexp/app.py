"""The command line: Hydra composes the config, `task` runs one job of it.

    python -m gradexp optimizer=adam loss=mae     one run
    python -m gradexp -m optimizer=sgd,adam       a sweep: one MLflow parent run, a child per job

Nothing heavy is imported here, so `--help`, `--cfg job` and config errors answer in about a
second; TensorFlow and MLflow load inside the job.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from gradexp.console import error_line, note_line, quiet_libraries
from gradexp.endings import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED, RunFailed
from gradexp.errors import USER_ERRORS, one_line, target_error
from gradexp.objective import register_resolver
from gradexp.resources import resource_dir
from gradexp.schema import ConfigError, register_schemas


def register_experiments() -> None:
    """Offer every experiments/NAME.yaml as `experiment=NAME` (a `# @package _global_` preset).

    The presets live in their own top-level folder (not conf/experiment/), so they are handed to
    Hydra through its ConfigStore, which is always on the search path, wheel or checkout.
    """
    store = ConfigStore.instance()
    for preset in sorted(resource_dir("experiments").glob("*.yaml")):
        store.store(group="experiment", name=preset.stem, node=OmegaConf.load(preset),
                    package="_global_")


def error_message(error: BaseException, cfg: DictConfig | None = None,
                  overrides: Sequence[str] = ()) -> str | None:
    """The one `error:` line the command line says for `error`; None for a bug (a traceback).

    Without `cfg`: Hydra could not compose the config from `overrides`. With it: the job
    refused a value (ConfigError), failed (RunFailed), or could not import a `_target_`.
    """
    if cfg is None:
        return one_line(error, overrides)
    if isinstance(error, (ConfigError, RunFailed)):
        return str(error)
    return target_error(error, cfg) if isinstance(error, USER_ERRORS) else None


def task(cfg: DictConfig) -> float:
    """One job: run the experiment and return its sweep objective (sweep.objective, e.g. the
    final val/mse) to the sweeper; the final loss, said so, when the run has no such metric."""
    from gradexp.experiment import Terminated, run_experiment
    from gradexp.sweep import parent_run_file, resume_killed_run, reuse_finished_run

    # Again in the job: Hydra has set up its logging by now, and some launchers (Ray) run jobs
    # in processes that never ran main().
    quiet_libraries()
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    # From the launch folder: Ray and SLURM may run a job in another working folder (issue 4).
    sweep_dir = Path(hydra_cfg.runtime.cwd) / hydra_cfg.sweep.dir
    parent = parent_run_file(sweep_dir) if multirun else None
    try:
        # sweep.skip_finished (issue 4, gradexp/sweep.py): a config that FINISHED is not rerun.
        reused = reuse_finished_run(cfg, hydra_cfg) if multirun else None
        if reused is not None:
            return reused
        if multirun:  # sweep.resume_killed: continue this config's KILLED run, if it has one
            cfg = resume_killed_run(cfg, hydra_cfg)
        result = run_experiment(
            cfg,
            run_name=cfg.tracking.run_name or hydra_cfg.job.override_dirname or "defaults",
            launch_dir=Path(hydra_cfg.runtime.cwd),
            hydra_dir=Path(hydra_cfg.runtime.output_dir),
            parent_run_id=parent.read_text().strip() if parent and parent.exists() else None,
            show_config=not multirun,  # a sweep's jobs differ only in what Hydra prints per job
        )
    except (ConfigError, RunFailed, *USER_ERRORS) as failure:
        message = error_message(failure, cfg)
        if message is None:
            raise
        error_line(message)
        if multirun and cfg.sweep.continue_on_failure:
            return float("nan")  # the sweep goes on; its summary lists this job as FAILED
        sys.exit(getattr(failure, "exit_code", EXIT_BAD_INPUT))
    except Terminated:
        error_line("terminated (SIGTERM): the run is recorded as KILLED")
        sys.exit(EXIT_TERMINATED)
    except KeyboardInterrupt:
        error_line("interrupted (Ctrl-C): the run is recorded as KILLED")
        sys.exit(EXIT_INTERRUPTED)
    value = result.objective_value
    if value is None:
        if multirun:
            note_line(f"sweep.objective={result.objective}: this run has no such metric (is "
                      "there held-out data? data.n_val, data.val_fraction); the sweeper gets "
                      f"its final_loss instead ({result.final_loss:.6g})")
        return result.final_loss
    return value


def multirun_flag_first(args: list[str]) -> list[str]:
    """`-m`/`--multirun` anywhere on the line: Hydra's parser takes it only before the
    overrides (`experiment=lr_search -m trainer.epochs=50` would be a usage error)."""
    flags = [arg for arg in args if arg in ("-m", "--multirun")]
    return flags[:1] + [arg for arg in args if arg not in ("-m", "--multirun")]


@contextlib.contextmanager
def _mode_known(arguments: list[str]) -> Iterator[None]:
    """Spare Hydra one of its two compositions of the config (~0.15-0.3 s) on a plain run.

    Before running, Hydra composes the whole config once only to read `hydra.mode` (a config may
    ask for a multirun without -m), then composes it again for the job. Only hydra.* keys and a
    preset can set the mode, and gradexp's own config files do not: so when the command line
    has no option (-m, --cfg, -cd...), no hydra.* override and no preset, the answer is known
    (none: a single run) and the first composition is skipped.
    """
    from hydra._internal.hydra import Hydra

    plain = all(not arg.startswith("-") and "experiment" not in arg
                and not arg.lstrip("+~").startswith("hydra") for arg in arguments)
    original = Hydra.get_mode
    if plain:
        Hydra.get_mode = lambda self, config_name, overrides: None
    try:
        yield
    finally:
        Hydra.get_mode = original


def main() -> None:
    """The `gradexp` console script and `python -m gradexp`."""
    try:
        _main()
    finally:
        # The process ends next. Python's shutdown would walk TensorFlow's, Keras' and MLflow's
        # object graphs with its cycle collector: 1.4-2 s here, even after a bare `import
        # tensorflow, mlflow` (benchmarks/bench_fixed_cost.py). Frozen objects are skipped;
        # atexit handlers, finalizers and flushes still run, and the OS takes the memory back.
        gc.freeze()


def _main() -> None:
    # TensorFlow's C++ start-up chatter (CUDA probing, oneDNN notes) is noise here; its real
    # errors still surface as Python exceptions. A person can set their own level.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    quiet_libraries()
    if sys.argv[1:2] == ["compare"]:
        from gradexp.compare import main as compare

        sys.exit(compare(sys.argv[2:]))
    sys.argv[1:] = multirun_flag_first(sys.argv[1:])
    register_schemas()
    register_experiments()
    register_resolver()
    run = hydra.main(config_path=str(resource_dir("conf")), config_name="config",
                     version_base="1.3")(task)
    # Let Hydra's exceptions reach us (instead of its multi-line report) to say them in one line;
    # a person who asks for HYDRA_FULL_ERROR=1 gets Hydra's full traceback as usual.
    wants_traceback = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        arguments = sys.argv[1:]
        if "--help" in arguments or "-h" in arguments:  # ours: Hydra's takes ~3 s (gradexp.help)
            from gradexp.help import print_help

            print_help([a for a in arguments if a not in ("--help", "-h", "-m", "--multirun")])
            return
        with _mode_known(arguments):
            run()
    except USER_ERRORS as error:
        if wants_traceback:
            raise
        error_line(error_message(error, overrides=sys.argv[1:]))
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
