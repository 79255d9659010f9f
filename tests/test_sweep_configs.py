"""A sweep's jobs composed from an earlier job of the same choices (gradexp.sweep_configs) are
the configs Hydra itself composes for them, key by key, the hydra node included; the check's
copy of each is the job's task config; the sweeper's validation of a kept job is the check's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from hydra.plugins.sweeper import Sweeper
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict

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
            tasks = [sweep_configs.compose_job(loader, master, job) for job in JOBS]
            made = len(sweep_configs._KEPT[id(loader)].templates)
            # the launcher's request: what was kept, once
            mine = [loader.load_sweep_config(master, list(job)) for job in JOBS]
            assert not sweep_configs._KEPT[id(loader)].configs
            hydras = [original(loader, master, list(job)) for job in JOBS]
        finally:
            sweep_configs.forget()
    assert made == 4  # adam and sgd with trainer.seed, adam with seed, adam with the addition
    for job, ours, task, theirs in zip(JOBS, mine, tasks, hydras):
        assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(theirs), job
        assert OmegaConf.is_struct(ours) and not OmegaConf.is_readonly(ours.hydra)
        # the check's copy: the task's config, as Hydra's run_job makes it, the kept one whole
        with open_dict(theirs):
            del theirs["hydra"]
        assert OmegaConf.to_yaml(task) == OmegaConf.to_yaml(theirs), job
        assert "hydra" not in task and OmegaConf.is_struct(task) and "hydra" in ours
        assert OmegaConf.get_type(task) is OmegaConf.get_type(ours)  # gradexp's schema
    assert mine[2].optimizer.learning_rate == 0.3 and mine[2].trainer.seed == 2
    assert mine[2].hydra.overrides.task == JOBS[2]
    assert mine[3].hydra.job.override_dirname == \
        "optimizer.learning_rate=0.1,optimizer=sgd,trainer.seed=5"


def test_the_sweepers_validation_skips_only_the_jobs_the_check_composed():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["trainer.epochs=3"], RunMode.MULTIRUN)
        sweeper = SimpleNamespace(hydra_context=SimpleNamespace(config_loader=loader),
                                  config=master)
        sweep_configs._patch()
        try:
            sweep_configs.compose_job(loader, master, JOBS[0])
            kept = sweep_configs._KEPT[id(loader)]
            Sweeper.validate_batch_is_legal(sweeper, [JOBS[0]])
            assert list(kept.configs) == [tuple(JOBS[0])]  # still kept for the launcher
            # a job nobody composed is still composed, and refused, by the validation
            with pytest.raises(ConfigCompositionException, match="adamm"):
                Sweeper.validate_batch_is_legal(sweeper, [JOBS[0], ["optimizer=adamm"]])
        finally:
            sweep_configs.forget()
