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
