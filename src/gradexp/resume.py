"""`trainer.resume=RUN_ID`: continue a run from its last checkpoint, as the same MLflow run.

The run's recorded config (its config.yaml artifact, written when the run started) is what runs
again, to its recorded trainer.epochs; from the command line only a larger `trainer.epochs` is
taken, to train on (then written into config.yaml and tag gradexp.resumed_to_epoch: the param
keeps the first value), and the store to find the run in. Any other override that changes a
recorded value is refused in one line before the run is touched: it would otherwise be ignored
without a word. The checkpoint (model, its layers' seed generators such as dropout's, optimizer
state, epoch, shuffling generator: gradexp.trainer.Trainer.checkpoint) is in
checkpoints/RUN_ID/ in the launch folder; metrics already recorded are not written twice
(gradexp.mlflow_store). A run KILLED before its first checkpoint (kill -9: gradexp.liveness
marks it) starts again from epoch 0 as a new run, tagged gradexp.restart_of=RUN_ID, once: a
second resume of it points at that restart; one KILLED with its checkpoint at its last epoch
trains nothing more and only records its end. Refused in one line, the run untouched: a run
still RUNNING in a live process (gradexp.liveness), a raised trainer.epochs under a schedule
that spans the run's epochs, and a checkpoint whose variables the model built now does not fit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from gradexp.schema import ConfigError
from gradexp.tag_keys import HOST_TAG, RESTART_OF_TAG, STOPPED_EARLY_TAG

CHECKPOINTS = "checkpoints"


def checkpoint_folder(launch_dir: Path, run_id: str) -> Path:
    return launch_dir / CHECKPOINTS / run_id


@dataclass
class Resume:
    run_id: str
    cfg: DictConfig  # the recorded config, trainer.resume set, trainer.epochs perhaps raised
    folder: Path
    checkpoint: str | None = None  # the checkpoint it continues from (its path prefix)
    earlier_checks: int = 0  # gradient checks the run made up to its checkpoint
    restart: bool = False  # KILLED before its first checkpoint: a new run from epoch 0
    run_name: str | None = None  # the killed run's name, which its restart takes
    # The recorded config.yaml with trainer.epochs raised (None: not raised), which replaces
    # the run's: its param trainer.epochs cannot change, and a later resume reads this file.
    raised_config: str | None = None

    def restore(self, trainer) -> dict[str, dict]:
        """Put the trainer back where the checkpoint left it; returns the callbacks' states
        saved with it (save_states), {} for none."""
        import tensorflow as tf

        # QA: a builder edited since the run (Dense(16) -> Dense(32)) ended in TensorFlow's
        # traceback ("Shapes (1, 32) and (1, 16) are incompatible"), naming no variable.
        self.check_model(trainer.model.network)
        trainer.checkpoint().restore(tf.train.latest_checkpoint(str(self.folder))).expect_partial()
        trainer.epoch = int(trainer.epoch_variable.numpy())
        return load_states(self.folder, trainer.epoch)

    def check_model(self, network) -> None:
        """ConfigError (one line) when the checkpoint's model variables do not fit `network`,
        the model built now: a shape that differs, a variable only one side has."""
        if self.checkpoint is None:
            return
        misfits = model_misfits(self.checkpoint, network)
        if misfits:
            target = str(self.cfg.model.get("_target_", ""))
            where = f"model={self.cfg.model.get('name')}" if target.startswith("gradexp.") \
                else "model._target_"
            more = f"; {len(misfits) - 1} more" if len(misfits) > 1 else ""
            raise ConfigError(
                f"trainer.resume={self.run_id}: the checkpoint's variables do not fit the model "
                f"{where} builds now ({misfits[0]}{more}); put the model back as the run had "
                "it, or start a new run")

    def check_builder(self, n_features: int, n_outputs: int) -> None:
        """check_model on a model built now only to be checked (Keras' layer names kept), for
        the run loop to call before the run reopens: refused there, it stays as it was."""
        from gradexp.models import build_model
        from gradexp.setup_checks import keras_names_kept

        if self.checkpoint is None:
            return
        with keras_names_kept():
            self.check_model(build_model(self.cfg.model, n_features, n_outputs).network)


def _shape(shape) -> str:
    return str(tuple(int(n) for n in shape))


def saved_model_variables(checkpoint: str) -> dict[str, tuple[str, str]]:
    """The model's variables in a checkpoint (Trainer.checkpoint's `model`), read from its
    object graph without building anything: object path -> (the variable's name, its shape).
    {} when it has no such graph (the restore then says what it finds)."""
    import tensorflow as tf
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    try:
        reader = tf.train.load_checkpoint(checkpoint)
        graph = trackable_object_graph_pb2.TrackableObjectGraph()
        graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    except Exception:  # noqa: BLE001 - an unreadable graph: nothing to compare
        return {}
    shapes = reader.get_variable_to_shape_map()
    found: dict[str, tuple[str, str]] = {}
    roots = [child.node_id for child in graph.nodes[0].children if child.local_name == "model"]
    seen = set(roots)

    def walk(node: int, path: list[str]) -> None:
        for attribute in graph.nodes[node].attributes:
            if attribute.name == "VARIABLE_VALUE" and attribute.checkpoint_key in shapes:
                found["/".join(path)] = (attribute.full_name,
                                         _shape(shapes[attribute.checkpoint_key]))
        for child in graph.nodes[node].children:
            if child.node_id not in seen:
                seen.add(child.node_id)
                walk(child.node_id, [*path, child.local_name])

    for root in roots:
        walk(root, [])
    return found


def built_model_variables(network) -> dict[str, tuple[str, str]]:
    """The same for a built network: the object paths a checkpoint of it would have."""
    import keras
    import tensorflow as tf

    view = tf.train.TrackableView(network)
    found: dict[str, tuple[str, str]] = {}
    seen = {id(network)}

    def walk(node, path: list[str]) -> None:
        for name, child in view.children(node).items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            if isinstance(child, (tf.Variable, keras.Variable)):
                found["/".join([*path, name])] = (getattr(child, "path", child.name),
                                                  _shape(child.shape))
            else:
                walk(child, [*path, name])

    walk(network, [])
    return found


def model_misfits(checkpoint: str, network) -> list[str]:
    """Each variable of `network` the checkpoint cannot restore as it is, in words:
    "hidden/kernel: (1, 16) saved, (1, 32) built". Matched by object path, as TensorFlow's
    restore matches them (a layer added shifts the later ones)."""
    saved = saved_model_variables(checkpoint)
    if not saved:
        return []
    built = built_model_variables(network)
    misfits = []
    for path in [*built, *(path for path in saved if path not in built)]:
        was, now = saved.get(path), built.get(path)
        if was is not None and now is not None and was[1] == now[1]:
            continue
        name = (now or was)[0]
        old = "none saved" if was is None else f"{was[1]} saved" + (
            f" as {was[0]}" if now is not None and was[0] != name else "")
        misfits.append(f"{name}: {old}, {'none built' if now is None else now[1] + ' built'}")
    return misfits


def _states_file(folder: Path, epoch: int) -> Path:
    return folder / f"callbacks-{epoch}.npz"


def save_states(folder: Path, epoch: int, states: dict[str, dict]) -> None:
    """Callbacks' states (name -> {key: a number, an array or a list of arrays}) for the
    checkpoint of `epoch`, as arrays (no pickle), written before it."""
    import numpy as np

    arrays = {}
    for name, state in states.items():
        for key, value in state.items():
            if isinstance(value, list):
                arrays.update({f"{name}/{key}/{i}": np.asarray(v) for i, v in enumerate(value)})
                arrays[f"{name}/{key}/len"] = np.asarray(len(value))
            else:
                arrays[f"{name}/{key}"] = np.asarray(value)
    # whole or not at all: a kill -9 while writing leaves the last file as it was
    partial = folder / f".callbacks-{epoch}.npz"
    np.savez(partial, **arrays)
    os.replace(partial, _states_file(folder, epoch))


def prune_states(folder: Path, kept: list[int]) -> None:
    """The states of checkpoints no longer kept (their epochs not in `kept`) go."""
    for old in folder.glob("callbacks-*.npz"):
        if int(old.stem.split("-")[1]) not in kept:
            old.unlink(missing_ok=True)


def load_states(folder: Path, epoch: int) -> dict[str, dict]:
    """save_states' states of the checkpoint of `epoch` ({} if it has none: saved before)."""
    import numpy as np

    path = _states_file(folder, epoch)
    if not path.exists():
        return {}
    states: dict[str, dict] = {}
    with np.load(path, allow_pickle=False) as arrays:
        for key in arrays.files:
            name, field, *index = key.split("/")
            if index == ["len"]:
                states.setdefault(name, {})[field] = [
                    arrays[f"{name}/{field}/{i}"] for i in range(int(arrays[key]))]
            elif not index:
                value = arrays[key]
                states.setdefault(name, {})[field] = value.item() if value.ndim == 0 else value
    return states


def prepare_resume(cfg: DictConfig, launch_dir: Path) -> Resume:
    """The run to continue, checked before anything is built (restart=True: a killed run with
    no checkpoint, to run again as a new run); ConfigError (one line) if it cannot be: no such
    run, no checkpoint of a run that was not killed, nothing left to train (a killed run at its
    last epoch has its end left: it resumes to record it)."""
    from gradexp.mlflow_store import download_artifact, metric_history, open_client, read_run
    from gradexp.tensorflow_import import import_tensorflow
    from gradexp.tracking_uri import resolve_uri

    run_id = str(cfg.trainer.resume)
    key = f"trainer.resume={run_id}"
    if cfg.tracking.name == "none":
        raise ConfigError(f"{key}: needs tracking=mlflow (the run to continue is an MLflow run)")
    uri = resolve_uri(cfg.tracking.uri, launch_dir)
    client = open_client(uri)
    try:
        run = read_run(client, run_id)
    except Exception:  # noqa: BLE001 - MLflow raises its own kinds for a missing run
        raise ConfigError(f"{key}: no such run in {uri}") from None
    refuse_if_running(key, run, cfg.tracking.stale_after)
    stopped = run.data.tags.get(STOPPED_EARLY_TAG)
    # QA: it trained on from the best epoch's weights to 2050. (A run interrupted as it
    # stopped ends KILLED, tagged: it resumes, to stop again at once.)
    if stopped is not None and run.info.status == "FINISHED":
        raise ConfigError(f"{key}: the run stopped early ({stopped}, "
                          "trainer.early_stopping): it has nothing to continue")
    try:
        text = Path(download_artifact(client, run_id, "config.yaml")).read_text()
    except Exception:  # noqa: BLE001
        raise ConfigError(f"{key}: the run has no config.yaml artifact to resume from") from None
    recorded = OmegaConf.create(text)
    overrides = command_line_overrides()
    check_overrides(key, cfg, recorded, overrides)
    folder = checkpoint_folder(launch_dir, run_id)
    # Quietly (TensorFlow's start-up chatter would break the one-line answer), and only
    # once the run is known: `trainer.resume=<a typo>` answers without it.
    latest = import_tensorflow().train.latest_checkpoint(str(folder))
    # Where it stopped: the recorded epochs, unless more were asked for. On a command line
    # that means trainer.epochs among its overrides; a plain `trainer.resume=ID` trained a
    # 20-epoch run on to the default 100. (A config composed some other way says its epochs.)
    asked = not HydraConfig.initialized() or "trainer.epochs" in _keys(overrides)
    epochs = max(recorded.trainer.epochs, cfg.trainer.epochs) if asked \
        else recorded.trainer.epochs
    if latest is None:
        if _killed(client, run, cfg.tracking.stale_after):
            # QA: each resume of it made another restart (same name, same restart_of tag)
            again = restarted_as(client, run)
            if again is not None:
                raise ConfigError(f"{key}: run {run_id} was already restarted as {again}; "
                                  f"resume that: trainer.resume={again}")
            # Nothing to continue from: the same config again, as a new run (the killed one
            # keeps its points); its recorded config has trainer.resume=null, so its params are
            # the killed run's and sweep.skip_finished finds it once it finishes.
            name = run.info.run_name
            if epochs != recorded.trainer.epochs and not recorded.tracking.get("run_name"):
                # made of its overrides: the one of trainer.epochs says the new number (QA: it
                # said the old one, its param and its training the new)
                from gradexp.run_params import renamed

                name = renamed(name, "trainer.epochs", epochs,
                               HydraConfig.get() if HydraConfig.initialized() else None)
            recorded.trainer.epochs = epochs
            return Resume(run_id, recorded, folder, restart=True, run_name=name)
        every = recorded.trainer.get("checkpoint_every")
        why = "trainer.checkpoint_every=0: it saved none" if every == 0 else (
            "it ended before its first: trainer.checkpoint_every=null saves about once a minute "
            "and at Ctrl-C or SIGTERM; trainer.checkpoint_every=N every N epochs")
        raise ConfigError(f"{key}: no checkpoint in {folder} ({why})")
    done = int(latest.rsplit("-", 1)[-1])
    # A run killed at its last epoch (an interrupt while its end was recorded: QA, a packed
    # sweep's job) trained everything but never recorded its end. Resumed, it trains no epoch
    # and ends as it would have: the final evaluation, the model, FINISHED. Refused, a sweep
    # with sweep.resume_killed failed that job on every re-run. A run that ended otherwise
    # (FINISHED) has nothing left to do.
    if done > epochs or (done == epochs and not _killed(client, run, cfg.tracking.stale_after)):
        raise ConfigError(f"{key}: its checkpoint is at epoch {done} of {epochs}; raise "
                          f"trainer.epochs above {done} to train on")
    raised = epochs > recorded.trainer.epochs
    schedule = str(OmegaConf.select(recorded, "optimizer.schedule.name", default="none"))
    if raised and schedule in SPANS_THE_RUN:
        # QA: rebuilt over the new total, cosine's rate jumped back up 20x after the old end,
        # and the epochs already trained followed a schedule the run no longer describes.
        raise ConfigError(
            f"{key}: cannot raise trainer.epochs to {epochs} (recorded: "
            f"{recorded.trainer.epochs}) with optimizer.schedule.name={schedule}, which decays "
            f"over the run's trainer.epochs: stretched, its learning rate would jump back up "
            f"after epoch {done}; for a longer schedule start a new run with "
            f"trainer.epochs={epochs} (a constant rate, exponential or piecewise can train on)")
    recorded.trainer.epochs = epochs
    # As recorded but for the epochs: trainer.resume stays null there (a restart of this run
    # would otherwise record it as a param).
    raised_config = OmegaConf.to_yaml(recorded) if raised else None
    recorded.trainer.resume = run_id
    # The checks made up to the checkpoint (gradcheck/passed, step = epoch) count in the run's
    # summary; those after it are made again.
    checks = metric_history(client, run_id, "gradcheck/passed")
    return Resume(run_id, recorded, folder, latest,
                  earlier_checks=sum(1 for check in checks if check.step <= done),
                  raised_config=raised_config)


# The schedules built over the run's trainer.epochs (gradexp.schedules.learning_rate): a
# resume cannot raise the epochs under them. exponential and piecewise count epochs from the
# start, whatever the total.
SPANS_THE_RUN = ("cosine", "warmup_cosine")


def refuse_if_running(key: str, run, stale_after: float) -> None:
    """ConfigError (one line) for a run still RUNNING in a live process (gradexp.liveness):
    resumed, two processes wrote one run (QA: steps 3-10 twice, both saving checkpoints). A
    RUNNING run that is dead (its process gone, its heartbeat stale elsewhere) resumes."""
    import socket

    from gradexp.liveness import still_running

    where = still_running(run, stale_after)
    if where is None:
        return
    elsewhere = run.data.tags.get(HOST_TAG) != socket.gethostname()
    raise ConfigError(
        f"{key}: the run is still RUNNING in {where}; wait for it, or stop it first"
        + (f" (from another host it counts as dead once its heartbeat is "
           f"tracking.stale_after={stale_after:g} minutes old)" if elsewhere else ""))


def restarted_as(client, run) -> str | None:
    """The run a restart of `run` (killed before its first checkpoint) became, following
    restarts of restarts to the newest; None if it was never restarted."""
    from gradexp.mlflow_store import find_runs

    found, seen = None, {run.info.run_id}
    while True:
        restarts = find_runs(client, [run.info.experiment_id],
                             f"tags.`{RESTART_OF_TAG}` = '{found or run.info.run_id}'",
                             order_by=["attributes.start_time DESC"], max_results=1)
        if not restarts or restarts[0].info.run_id in seen:
            return found
        found = restarts[0].info.run_id
        seen.add(found)


# What a resume reads from the command line rather than from the run's record: the run, the
# store it is in (and how old a heartbeat makes a run there dead), the epochs to train to; and a
# sweep's own keys (sweep.resume_killed resumes a job whose config is the recorded one).
TAKEN = ("trainer.resume", "trainer.epochs", "tracking.uri", "tracking.stale_after")


def _keys(overrides: list[str]) -> list[str]:
    return [override.split("=", 1)[0].lstrip("+~") for override in overrides]


def command_line_overrides() -> list[str]:
    """The job's overrides as Hydra parsed them (the command line, gradexp.run); none when the
    config was composed some other way (a test's compose: nothing to check)."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def check_overrides(key: str, cfg: DictConfig, recorded: DictConfig,
                    overrides: list[str]) -> None:
    """ConfigError naming each override that would change the recorded run, with its recorded
    value (secrets masked, as the run's params show them): `optimizer.learning_rate=0.5` would
    otherwise train on at the recorded rate without a word. Restating a recorded value is no
    change; a smaller trainer.epochs is one when the resume was asked for (trainer.resume among
    the overrides). A sweep's job that sweep.resume_killed set to resume found the run by its
    params, whose trainer.epochs keeps its first value where a resume raised it: it trains to
    the recorded, larger number."""
    from gradexp.run_params import as_recorded, masked_value

    given = as_recorded(cfg)  # the config as the run recorded it
    names = _keys(overrides)
    asked = "trainer.resume" in names
    changes = []
    for override, name in zip(overrides, names):
        if name == "trainer.epochs":
            if given.trainer.epochs >= recorded.trainer.epochs or not asked:
                continue
        elif name in TAKEN or name.startswith("sweep."):
            continue
        now, then = _compared(given, name), _compared(recorded, name)
        if now != then:
            shown = now if now is _ABSENT else masked_value(name, now)
            if shown != now:  # the override as the params show it
                override = f"{override.split('=', 1)[0]}={shown}"
            was = "nothing" if then is _ABSENT else as_typed(masked_value(name, then))
            changes.append(f"{override} (recorded: {was})")
    if changes:
        raise ConfigError(_cannot_change(key, changes))


def _cannot_change(key: str, changes: list[str]) -> str:
    return (f"{key}: a resume continues the run as it was recorded, so it cannot change "
            f"{', '.join(changes)}; beside trainer.resume it takes only a larger trainer.epochs "
            "(to train on) and tracking.uri; for other values start a new run")


def as_typed(value) -> str:
    """A config value as a person types it in an override: null, true, [16, 16], {a: 1}
    (QA: "seed=3 (recorded: None)")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(as_typed(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {as_typed(v)}" for k, v in value.items()) + "}"
    return str(value)


def refusal_of_overrides(overrides: list[str], launch_dir: Path) -> str | None:
    """The resume's own line for a command line `trainer.resume=ID ...` that Hydra could not
    compose, judged against the run's recorded config instead of the default one: QA, for an
    mlp run `model.dropout=0.2` said "model=linear has no key dropout", `~callbacks.killer`
    "Could not delete ... does not exist". For the command line's composition errors
    (gradexp.app.launch_failure); None where Hydra's own line stands: no resume, a sweep, a
    run or config.yaml not found, a key the recorded config lacks either (a typo)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not any(override.lstrip("+").startswith("trainer.resume=") for override in overrides):
        return None  # every other composition error: nothing more to load
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001 - Hydra's parse error is its own line
        return None
    given = {o.key_or_group: o for o in parsed}
    resume = given.get("trainer.resume")
    if resume is None or resume.value() is None or any(o.is_sweep_override() for o in parsed):
        return None
    from gradexp.mlflow_store import download_artifact, open_client
    from gradexp.run_params import masked_override, masked_value
    from gradexp.tracking_uri import resolve_uri

    run_id = str(resume.value())
    uri = given["tracking.uri"].value() if "tracking.uri" in given else None
    try:
        client = open_client(resolve_uri(uri, launch_dir))
        recorded = OmegaConf.create(Path(download_artifact(client, run_id, "config.yaml"))
                                    .read_text())
    except Exception:  # noqa: BLE001 - no such run, no store: prepare_resume's to say
        return None
    changes, restated = [], []
    for override in parsed:
        name = override.key_or_group
        if name in TAKEN or name.startswith(("sweep.", "hydra.")):
            continue
        then = _compared(recorded, name)
        if override.is_delete():
            if then is not _ABSENT:
                changes.append(f"{override.input_line} (recorded: "
                               f"{as_typed(masked_value(name, then))})")
            continue
        if then is _ABSENT and not (override.is_add() or override.is_force_add()):
            return None  # unknown to the run too: Hydra's line (did you mean ...) stands
        now = override.value()
        if now == then:
            restated.append(masked_override(override.input_line))
        else:
            was = "nothing" if then is _ABSENT else as_typed(masked_value(name, then))
            shown = as_typed(masked_value(name, now))
            changes.append(f"{override.input_line.split('=', 1)[0]}={shown} (recorded: {was})")
    if changes:
        return _cannot_change(f"trainer.resume={run_id}", changes)
    if restated:
        return (f"trainer.resume={run_id}: {', '.join(restated)} restate"
                f"{'s' if len(restated) == 1 else ''} what the run recorded; leave "
                f"{'it' if len(restated) == 1 else 'them'} out (a resume runs the recorded "
                "config, but the command line is first composed on the default one)")
    return None


_ABSENT = object()


def _compared(cfg: DictConfig, name: str):
    """The value of key `name` to compare; for a group (`optimizer=adam`) its option's name, so
    restating the option does not count the run's other overrides of that group as changes."""
    from enum import Enum

    value = OmegaConf.select(cfg, name, default=_ABSENT)
    if isinstance(value, DictConfig) and "name" in value:
        value = value.name
    if isinstance(value, Enum):
        return value.name
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    return value


def _killed(client, run, stale_after: float) -> bool:
    """KILLED, or RUNNING with its process dead (then marked KILLED here, said in one line)."""
    from gradexp.console import note_line
    from gradexp.liveness import mark_dead_runs, why_dead
    from gradexp.mlflow_store import read_run

    if run.info.status == "RUNNING" and why_dead(run, stale_after) is not None:
        mark_dead_runs(client, [run.info.experiment_id], stale_after, say=note_line)
        run = read_run(client, run.info.run_id)
    return run.info.status == "KILLED"
