"""Jobs of one shape in one process share their traced programs (issue 20, items 1 and 7).

A sequential sweep runs every job in one process. Each job used to build its own model,
optimizer, evaluator and trainer, and so trace its own training call and its checks' float64
functions: ~0.3 s a job, and ~4 MiB of memory a job (the rest of the 8.8 MiB was frozen garbage).
Here a job whose program would be traced the same as an earlier job's (the same model, loss,
optimizer apart from its learning rate, data, batch size, metrics and compile flags; a person's
own code within one launch only: `shape_key`)
takes the earlier job's parts instead: the model's variables get this job's freshly built
initial values (weights, seed generators, statistics), the optimizer's variables their values
before the first step and this job's learning rate (a variable the trace reads), the batch
order generator this job's seed. The compiled calls never see a difference, so the job records
what it would record alone (tests/test_shared_programs.py).

Keras keeps beta_1, momentum, rho and weight_decay as Python floats in the trace: jobs that
differ in them have different keys and trace apart. At most MAX_SHARED shapes are kept (least
recently used first out), so a sweep over many shapes holds a bounded number of programs.
"""

from __future__ import annotations

import hashlib
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

MAX_SHARED = 4  # shapes whose parts stay in memory for the next job of that shape


@dataclass
class SharedParts:
    """What one shape's jobs share: the model and the evaluator and trainer traced on it."""

    model: Any  # gradexp.models.Model
    evaluator: Any  # gradexp.evaluation.Evaluator
    trainer: Any  # gradexp.trainer.Trainer
    jobs: int = 1  # jobs that used these parts (the first included)
    nodes: tuple[int, int] = (0, 0)  # the network's Keras graph nodes (in, out) when kept


_SHARED: OrderedDict[tuple, SharedParts] = OrderedDict()


def data_fingerprint(data: Any) -> str:
    """A digest of a data set's training rows and held-out splits (kept on the Dataset: a
    dataclass, unhashable, so no weak dictionary can hold it)."""
    kept = getattr(data, "_gradexp_fingerprint", None)
    if kept is not None:
        return kept
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{data.task}|{data.batch_size}".encode())
    for name, split in [("train", data), *sorted(data.splits().items())]:
        for array in (split.x, split.y):
            array = np.ascontiguousarray(array)
            digest.update(f"{name}|{array.dtype}|{array.shape}".encode())
            digest.update(array.tobytes())
    data._gradexp_fingerprint = digest.hexdigest()
    return data._gradexp_fingerprint


def shape_key(cfg: DictConfig, data: Any, device: Any, eval_metrics: Any) -> tuple | None:
    """What the traced programs of a run depend on; None when its parts are not shared (a
    resumed run, a streamed data set, a distribution strategy, eager training). A person's own
    code is part of it only within the launch that ran it (user_code.user_code_launch)."""
    from gradexp.user_code import user_code_launch

    if (cfg.trainer.resume or data.stream is not None or device.strategy is not None
            or not cfg.trainer.compile):
        return None

    def plain(node: Any) -> str:
        return repr(OmegaConf.to_container(node, resolve=True, enum_to_str=True)
                    if OmegaConf.is_config(node) else node)

    optimizer = OmegaConf.to_container(cfg.optimizer, resolve=True, enum_to_str=True)
    schedule = optimizer.get("schedule", {}).get("name", "none")
    if schedule == "none":
        optimizer.pop("learning_rate")  # a variable of the optimizer: set per job
        epochs = None
    else:  # a schedule bakes its rates and steps into the trace
        epochs = cfg.trainer.epochs
    # The model under Keras' dtype policy; a person's code's launch last (forget_user_code)
    return ((plain(cfg.model), _keras_dtypes()), plain(cfg.loss), repr(optimizer), epochs,
            data_fingerprint(data), cfg.trainer.batch_size, cfg.trainer.jit_compile,
            plain(eval_metrics), device.used, bool(cfg.trainer.deterministic),
            user_code_launch(cfg))


def _keras_dtypes() -> tuple[str, str]:
    """Keras' global dtype policy and floatx, which a person may change between two calls
    (mixed_float16): a model built under another trains in another dtype, yet its variables
    stay float32, so `take` cannot tell (the next call trained the earlier policy's model)."""
    import keras

    try:  # read, not made: keras.config.dtype_policy() sets a policy where none is, and the
        # next job of the shape then traced anew
        from keras.src.backend.common import global_state

        policy = global_state.get_global_attribute("dtype_policy")
    except ImportError:  # moved in another Keras
        policy = keras.config.dtype_policy()
    return getattr(policy, "name", None) or keras.config.floatx(), keras.config.floatx()


def take(key: tuple | None, fresh_model: Any) -> SharedParts | None:
    """The parts an earlier job of this shape left, set to this job's start (its freshly built
    model's variables); None when there are none (the caller builds its own and `keep`s them)."""
    if key is None or key not in _SHARED:
        return None
    parts = _SHARED[key]
    mine, theirs = parts.model.network.variables, fresh_model.network.variables
    if len(mine) != len(theirs) or any(a.shape != b.shape or a.dtype != b.dtype
                                       for a, b in zip(mine, theirs)):
        del _SHARED[key]  # a builder that made another model from the same config: trace anew
        return None
    for variable, start in zip(mine, theirs):
        variable.assign(start)
    if not _computes_the_same(parts.model, fresh_model):
        del _SHARED[key]  # state outside its variables: this job's model, traced anew
        return None
    _forget_later_graphs(parts)
    parts.model.sync_twins()  # the float64 twin of the checks: the new seeds and statistics
    parts.evaluator.calls = 0
    parts.jobs += 1
    _SHARED.move_to_end(key)
    return parts


def _computes_the_same(shared: Any, fresh: Any) -> bool:
    """Do the shared model, its variables set to the fresh one's, and the fresh model give the
    same outputs on a few fixed rows? Not where a builder keeps state outside variables (QA: a
    random projection made as a tf.constant in build(): every seed's replicate trained the
    first job's projection, its val/mse 4.8 where alone it was 631). Two eager forward passes
    on 4 rows, inference mode."""
    import numpy as np

    rows = np.random.default_rng(0).standard_normal((4, fresh.n_features)).astype(np.float32)
    try:
        return bool(np.array_equal(np.asarray(shared(rows)), np.asarray(fresh(rows)),
                                   equal_nan=True))
    except Exception:  # noqa: BLE001 - a model that cannot be called so: not shared
        return False


def check_shape(key: tuple) -> tuple:
    """The part of a shape_key the gradient checks' float64 functions depend on: the model,
    the loss, the data, the device and the launch of a person's code, not the optimizer, the
    batch size or the metrics. Jobs of other optimizers share them (gradexp.run_checks,
    `shared_check_functions`)."""
    return (key[0], key[1], key[4], key[8], key[10])


def keep(key: tuple | None, model: Any, evaluator: Any, trainer: Any) -> None:
    """Keep a new shape's parts for the next job of that shape, dropping the least recently
    used shape beyond MAX_SHARED. The model is marked with its check_shape, so jobs of another
    optimizer find the checks' functions traced on it."""
    if key is None:
        return
    model._gradexp_check_shape = check_shape(key)
    network = model.network
    _SHARED[key] = SharedParts(model, evaluator, trainer, nodes=(
        len(getattr(network, "_inbound_nodes", ())), len(getattr(network, "_outbound_nodes", ()))))
    _SHARED.move_to_end(key)
    while len(_SHARED) > MAX_SHARED:
        _SHARED.popitem(last=False)


def _forget_later_graphs(parts: SharedParts) -> None:
    """Drop the Keras graph nodes earlier jobs added to the shared network by calling it on
    symbolic inputs (the served model, gradexp.export, calls it as a layer): Keras appends a
    node per call to the network's `_inbound_nodes` (and to `_outbound_nodes` for what came
    after it), and each holds that job's whole served model. A network built per job died with
    them; a shared one kept one served model a job (issue 20 item 7). Private Keras 3 lists,
    hence getattr: a network without them has nothing to forget."""
    network = parts.model.network
    for name, kept in zip(("_inbound_nodes", "_outbound_nodes"), parts.nodes):
        nodes = getattr(network, name, None)
        if isinstance(nodes, list):
            del nodes[kept:]


# The checks' float64 functions (gradexp.run_checks._Losses) by (check_shape, the run's key of
# them): a job of another optimizer (another shared model of the same architecture, loss and
# data) uses the ones traced on the first such job's model instead of tracing its own, its own
# model's state copied into that model's float64 twin before each check (run_checks._losses).
# The traces are the ones its own would be, so it records what it records alone. Only weak
# references: the functions belong to the model they were traced on (its _check_losses, which
# closes over it), and go with it once _SHARED lets it go (at most MAX_SHARED models).
_CHECKS: dict[tuple, weakref.ref] = {}


def keep_check_functions(model: Any, key: tuple, losses: Any) -> None:
    """Offer a shared model's check functions (`losses`, whose `owner` is the model) to later
    models of its check shape."""
    shape = getattr(model, "_gradexp_check_shape", None)
    if shape is not None:
        _CHECKS[(shape, key)] = weakref.ref(losses)


def check_functions(model: Any, key: tuple) -> Any:
    """The check functions of `key` traced on another model of this model's check shape (of
    the same variables), or None."""
    shape = getattr(model, "_gradexp_check_shape", None)
    if shape is None:
        return None
    for stale in [k for k, losses in _CHECKS.items() if losses() is None]:
        del _CHECKS[stale]
    found = _CHECKS.get((shape, key))
    losses = found() if found else None
    owner = None if losses is None else losses.owner
    if owner is None or owner is model:
        return None
    mine, theirs = model.network.variables, owner.network.variables
    if len(mine) != len(theirs) or any(a.shape != b.shape or a.dtype != b.dtype
                                       for a, b in zip(mine, theirs)):
        return None
    return losses


def forget_user_code() -> None:
    """Let go of the parts traced on a person's code (a key whose last element, its launch, is
    not None): a later launch never reuses them, and each held a model and its programs."""
    for key in [key for key in _SHARED if key[-1] is not None]:
        del _SHARED[key]
    for key in [key for key in _CHECKS if key[0][-1] is not None]:
        del _CHECKS[key]


def clear() -> None:
    """Forget every shared part (the next job of any shape traces anew)."""
    _SHARED.clear()
    _CHECKS.clear()
