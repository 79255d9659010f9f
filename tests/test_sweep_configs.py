"""A sweep's jobs composed from an earlier job of the same choices (gradexp.sweep_configs) are
the configs Hydra itself composes for them, key by key, the hydra node included."""

from __future__ import annotations

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from conftest import CONF
from gradexp import sweep_configs

# In the order a basic sweep composes them: the later job of each choice is made from the first
JOBS = [
    ["optimizer=adam", "optimizer.learning_rate=0.01", "trainer.seed=0"],
    ["optimizer=sgd", "optimizer.learning_rate=0.01", "trainer.seed=0"],
    ["optimizer=adam", "optimizer.learning_rate=0.3", "trainer.seed=2"],
    ["optimizer=sgd", "optimizer.learning_rate=0.1", "trainer.seed=5"],
    ["optimizer=adam", "optimizer.learning_rate=0.3", "seed=7"],  # other keys: composed anew
    ["optimizer=adam", "optimizer.learning_rate=0.03", "seed=8"],
    ["optimizer=adam", "optimizer.learning_rate=0.1", "+trainer.extra=1"],  # an addition
]


@pytest.mark.heavy  # ~2.4 s
def test_jobs_made_from_an_earlier_job_are_what_hydra_composes():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["trainer.epochs=3"], RunMode.MULTIRUN)
        original = sweep_configs._patch()
        try:
            mine = [sweep_configs.compose_job(loader, master, job) for job in JOBS]
            made = len(sweep_configs._KEPT[id(loader)].templates)
            hydras = [original(loader, master, list(job)) for job in JOBS]
        finally:
            sweep_configs.forget()
    assert made == 4  # adam and sgd with trainer.seed, adam with seed, adam with the addition
    for job, ours, theirs in zip(JOBS, mine, hydras):
        assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(theirs), job
        assert OmegaConf.is_struct(ours) and not OmegaConf.is_readonly(ours.hydra)
    assert mine[2].optimizer.learning_rate == 0.3 and mine[2].trainer.seed == 2
    assert mine[2].hydra.overrides.task == JOBS[2]
    assert mine[3].hydra.job.override_dirname == \
        "optimizer.learning_rate=0.1,optimizer=sgd,trainer.seed=5"
