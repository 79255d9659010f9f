"""Shared fixtures: compose configs in-process with Hydra's compose API (no subprocess, no
TensorFlow import just to build a config), and a real MLflow sqlite store in a temp folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from gradexp.app import register_experiments, resource_dir
from gradexp.objective import register_resolver
from gradexp.schema import register_schemas

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
register_schemas()
register_experiments()
register_resolver()

REPO = Path(__file__).resolve().parents[1]
CONF = resource_dir("conf")


def compose_config(*overrides: str) -> DictConfig:
    """The config `python -m gradexp OVERRIDES` would run, composed in-process."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A fresh MLflow sqlite store (MLflow's embedded default kind) in a temp folder."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.fixture
def client(store: str):
    from mlflow import MlflowClient

    return MlflowClient(store)


def run_cli(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None):
    """`python -m gradexp ARGS` as a person would type it, in folder `cwd`."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "gradexp", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
