"""The master seed: one top-level `seed` from which every seed of a run derives.

`seed: null` (the default) leaves each seed key as it is set (model.seed, trainer.seed, data.seed
or data.split_seed), so today's runs are unchanged. With `seed=N`, each of them is replaced by a
seed derived from N for its purpose, through numpy's SeedSequence (one child stream a purpose, so
the weights' seed and the batch order's never coincide, and seed=1's are not seed=0's shifted):

    model.seed       the initial weights, and dropout (Keras layers seeded from it)
    trainer.seed     the batch order and TensorFlow's global seed (Keras' seed state)
    data.seed        a synthetic set's draw            } only with data.resample=true (default);
    data.split_seed  a table's train / val / test split } false keeps the data fixed across seeds

The derived values are written into the run's config, so they are recorded as the run's params
(model.seed=...) beside `seed` itself: a run is reproduced from its params alone.

A person's builder (model=custom) has no model.seed: with `seed=N`, the global random state its
unseeded Keras initializers (and numpy) draw from is seeded from N's "weights" stream right
before it is called (builder_seeded), as keras.utils.set_random_seed does, so its first weights
repeat too; after it, that state is put back as trainer.seed left it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from omegaconf import DictConfig, open_dict

# Purpose -> the config key it seeds. The order is the SeedSequence's spawn key: append only,
# never reorder (a reorder changes every derived seed of every recorded run).
PURPOSES: dict[str, str] = {
    "weights": "model.seed",
    "batches": "trainer.seed",
    "data": "data.seed",
    "split": "data.split_seed",
}


def derived_seed(master: int, purpose: str) -> int:
    """The seed for `purpose` (a key of PURPOSES) under master seed `master`: a 32-bit integer,
    in numpy's and TensorFlow's range."""
    import numpy as np

    index = list(PURPOSES).index(purpose)
    return int(np.random.SeedSequence(master, spawn_key=(index,)).generate_state(1)[0])


def derive_seeds(cfg: DictConfig) -> dict[str, int]:
    """With `seed` set, write the derived seed into each seed key the run's options have (a
    custom model has no model.seed; data.resample=false leaves the data's seed); return what was
    set, {key: seed}. Without `seed`, change nothing and return {}. Deriving twice gives the same
    config (a resumed run, a skip_finished lookup)."""
    master = cfg.get("seed")
    if master is None:
        return {}
    derived: dict[str, int] = {}
    for purpose, key in PURPOSES.items():
        group, name = key.split(".")
        node = cfg.get(group)
        if not isinstance(node, DictConfig) or name not in node:
            continue
        if group == "data" and not node.get("resample", True):
            continue
        derived[key] = derived_seed(int(master), purpose)
        with open_dict(node):
            node[name] = derived[key]
    return derived


@contextmanager
def builder_seeded(cfg: DictConfig) -> Iterator[None]:
    """With `seed` set and a builder that is not gradexp's own (those take model.seed), seed the
    global state a builder draws from while it is called (the `with` block): Python's `random`
    (Keras' unseeded initializers and layers take their seeds from it), numpy's and Keras'
    global SeedGenerator, through keras.utils.set_random_seed, from the master seed's weights
    stream. Afterwards they are put back as they were, as trainer.seed left them (with
    trainer.deterministic, keras.utils.set_random_seed(trainer.seed)): unseeded keras.random
    ops in the model's call, numpy's and Python's draws in the run follow trainer.seed, not the
    weights stream. TensorFlow's global seed stays trainer.seed too (set_random_seed sets it).
    Without `seed`, nothing changes: an unseeded builder stays as random as the person wrote
    it."""
    master = cfg.get("seed")
    if master is None or str(cfg.model["_target_"]).startswith("gradexp."):
        yield
        return
    import keras

    saved = _global_random_state()
    keras.utils.set_random_seed(derived_seed(int(master), "weights"))
    try:
        yield
    finally:
        _restore_global_random_state(saved)
        seed_tensorflow(cfg.trainer.seed, cfg)  # TensorFlow's global seed back to trainer.seed


@contextmanager
def python_random_kept() -> Iterator[None]:
    """Python's `random` state as it was after the block: for imports that draw from it (rich
    draws random.getrandbits(24) when first imported, for its styles' ids)."""
    import random

    state = random.getstate()
    try:
        yield
    finally:
        random.setstate(state)


def _keras_seed_attributes() -> tuple[str, str]:
    """Keras 3's global attributes that keras.utils.set_random_seed sets: the seed, and the
    SeedGenerator unseeded keras.random ops draw from (None: made anew from Python's random
    state at its next use)."""
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED

    return GLOBAL_RANDOM_SEED, GLOBAL_SEED_GENERATOR


def _global_random_state() -> tuple:
    """Python's and numpy's random states and Keras' global seed attributes, to be restored."""
    import random

    import numpy as np
    from keras.src.backend.common import global_state

    return (random.getstate(), np.random.get_state(),
            [global_state.get_global_attribute(name) for name in _keras_seed_attributes()])


def _restore_global_random_state(saved: tuple) -> None:
    import random

    import numpy as np
    from keras.src.backend.common import global_state

    python, numpy, keras_attributes = saved
    random.setstate(python)
    np.random.set_state(numpy)
    for name, value in zip(_keras_seed_attributes(), keras_attributes):
        global_state.set_global_attribute(name, value)


def session_random_state() -> dict[str, Any]:
    """The process's global random state a run changes, to be put back after it
    (restore_session_random_state; gradexp.run and gradexp.sweep): Python's `random`, numpy's
    global RandomState, Keras' global seed and SeedGenerator (keras.utils.set_random_seed, a
    deterministic run, model=keras), TensorFlow's global seed and the stream its unseeded ops
    take their op seeds from (tf.random.set_seed, seed_tensorflow). A library not imported yet
    is not imported here: its state after the run is put back to what a fresh import has."""
    import random
    import sys

    saved: dict[str, Any] = {"python": random.getstate()}
    if "numpy" in sys.modules:
        import numpy as np

        saved["numpy"] = np.random.get_state()
    if "keras" in sys.modules:
        from keras.src.backend.common import global_state

        seed, generator = (global_state.get_global_attribute(name)
                           for name in _keras_seed_attributes())
        # The generator's draws advance its state variable: its value, not just the object.
        saved["keras"] = (seed, generator,
                          None if generator is None else generator.state.numpy())
    if "tensorflow" in sys.modules:
        context = _eager_context()
        if context is not None:
            rng = getattr(context, "_rng", None)
            saved["tensorflow"] = (getattr(context, "_seed", None), rng,
                                   None if rng is None else rng.getstate())
        saved["op_determinism"] = _op_determinism()
    return saved


def restore_session_random_state(saved: dict[str, Any]) -> None:
    """Put back what session_random_state saved (see there)."""
    import random
    import sys

    random.setstate(saved["python"])
    if "numpy" in sys.modules:
        import numpy as np

        if "numpy" in saved:
            np.random.set_state(saved["numpy"])
        else:  # imported during the run, perhaps seeded by it: unseeded, as a fresh import
            np.random.seed()
    if "keras" in sys.modules:
        from keras.src.backend.common import global_state

        seed, generator, state = saved.get("keras", (None, None, None))
        for name, value in zip(_keras_seed_attributes(), (seed, generator)):
            global_state.set_global_attribute(name, value)
        if generator is not None:
            generator.state.assign(state)
    if "tensorflow" in sys.modules:
        _restore_tensorflow_seed(*saved.get("tensorflow", (None, None, None)))
        # trainer.deterministic turns op determinism on; left on with the caller's seed put
        # back (none, often), the caller's next unseeded tf.random op would raise.
        now, before = _op_determinism(), saved.get("op_determinism", False)
        if now is not None and before is not None and now != before:
            from tensorflow.python.framework import config

            (config.enable_op_determinism if before else config.disable_op_determinism)()


def _op_determinism() -> bool | None:
    """Whether TensorFlow's op determinism is on (tf.config.experimental.enable_op_determinism;
    TensorFlow has no public getter); None where this TensorFlow does not say."""
    from tensorflow.python.framework import config

    getter = getattr(config, "is_op_determinism_enabled", None)
    return None if getter is None else bool(getter())


def _restore_tensorflow_seed(seed: int | None, rng: Any, state: Any) -> None:
    """TensorFlow's global seed and op-seed stream as they were. Set directly, as
    seed_tensorflow sets them, not through tf.random.set_seed: that would draw the caller's
    op seeds from the start of `seed`'s stream again, and clear the kernel cache (traced
    programs the next call reuses). Where TensorFlow lays the context out otherwise,
    tf.random.set_seed(seed) is the nearest. A stream that did not exist yet (no seed ever set)
    needs none: TensorFlow reads it only while a seed is set, and setting one makes it anew.

    Where the run set a seed of its own (tf.random.set_seed, for code of yours), the kernel
    cache is cleared after all: it holds the stateful random kernels the run's draws advanced,
    and a caller seeded as the run was (both 0) would draw on from where the run stopped."""
    context = _eager_context()
    if context is None:
        return
    if not hasattr(context, "_seed"):
        import tensorflow as tf

        tf.random.set_seed(seed)
        return
    if getattr(context, "_rng", None) is not rng and hasattr(context, "_set_global_seed"):
        context._set_global_seed(seed)  # a new stream means the run seeded: clear its kernels
    context._seed = seed
    if rng is not None:
        rng.setstate(state)
        context._rng = rng


# Packages whose random ops are stateless (Keras 3 draws from seed variables, gradexp's batch order
# from a tf.random.Generator): their numbers do not depend on TensorFlow's kernel cache.
STATELESS_RANDOM_PACKAGES = frozenset({"gradexp", "keras"})


def seed_tensorflow(seed: int, cfg: DictConfig) -> None:
    """TensorFlow's global seed for this run, as `tf.random.set_seed(seed)` sets it.

    `tf.random.set_seed` also clears TensorFlow's kernel cache, so that stateful random kernels
    (`tf.random.normal` and friends, which keep their stream in the kernel) restart. That makes
    every traced function a later job of a sweep reuses (gradexp.shared_programs) instantiate
    again, graph optimization included: ~0.2 s of CPU a job here. When every `_target_` of the
    run's data, model and loss is gradexp's or Keras' own, no such kernel runs, and the seed is set
    without the clearing (the same two values `set_seed` sets: a job records what it records
    alone, tests/test_shared_programs.py). A person's own code may draw from stateful kernels,
    so it gets `tf.random.set_seed` itself."""
    import tensorflow as tf

    context = _eager_context()
    if (context is None or not _only_stateless_code(cfg)
            or not (hasattr(context, "_seed") and hasattr(context, "_rng"))):
        tf.random.set_seed(seed)
        return
    import random

    # What Context._set_global_seed does, less TFE_ContextClearCaches (private: checked above,
    # and tf.random.set_seed is the fallback wherever TensorFlow lays these out otherwise, and
    # for a process's first seed, before which `_rng` does not exist and no cache is filled).
    context._seed = seed
    context._rng = random.Random(seed)


def _eager_context() -> Any:
    from tensorflow.python.eager import context

    return context.context() if context.executing_eagerly() else None


def _only_stateless_code(cfg: DictConfig) -> bool:
    """Every `_target_` under data, model and loss (layers written in YAML included) is gradexp's
    or Keras' own."""
    from gradexp.user_code import packages_of

    return packages_of(cfg, ("data", "model", "loss")) <= STATELESS_RANDOM_PACKAGES


def replaced_seeds_note(cfg: DictConfig, derived: dict[str, int],
                        overrides: list[str]) -> str | None:
    """One line when `seed=N` replaced a seed key the command line (`overrides`) also set: the
    run uses the derived value, which the config line shows as if typed (QA: `seed=1
    trainer.seed=5` ran with trainer.seed=1454127163, and said nothing)."""
    given = dict(item.lstrip("+~").split("=", 1) for item in overrides if "=" in item)
    replaced = [f"{key}={given[key]} (now {derived[key]})" for key in derived if key in given]
    if not replaced:
        return None
    return (f"seed={cfg.get('seed')} derives every seed of the run, so {', '.join(replaced)} "
            "from the command line is replaced; leave seed unset to set the seeds yourself "
            "(data.resample=false keeps the data's seed)")
