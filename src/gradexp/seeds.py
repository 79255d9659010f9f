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
"""

from __future__ import annotations

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
