"""Checks of the launchers before a sweep's parent run opens (sweep_checks.check_launcher):
the sweep's folder can be made; joblib's n_jobs means something; the Ray that ray.init would
join is found as Ray finds it (RAY_ADDRESS, the address file `ray start` writes) without
importing Ray, and asked over TCP whether it answers.

QA: hydra.sweep.dir=/proc/forbidden, or hydra/launcher=joblib hydra.launcher.n_jobs=0, ended in
a traceback (FileNotFoundError, joblib's ValueError) and a FAILED parent run.

QA: hydra/launcher=ray beside a running `ray start` ended in a ValueError traceback and a KILLED
empty parent (the plugin asks for an object-store size, which Ray refuses when it joins a
cluster); hydra/launcher=ray_cluster with an address where no Ray runs hung for minutes, its
parent open.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from gradexp.schema import ConfigError

ADDRESS_KEY = "hydra.launcher.ray.init.address"
MEMORY_KEY = "hydra.launcher.ray.init.object_store_memory"
_MISSING = object()


def check_sweep_dir(config: DictConfig) -> None:
    """hydra.sweep.dir, where the sweeper writes and each job makes its folder."""
    check_output_dir(config, "sweep", "the sweep's folder", "multirun/my_sweep")


def check_run_dir(config: DictConfig) -> None:
    """hydra.run.dir, a single run's folder (its .hydra/ and log), which Hydra makes next (QA:
    one that cannot be made was a FileNotFoundError's traceback)."""
    check_output_dir(config, "run", "the run's folder", "outputs/my_run")


def check_output_dir(config: DictConfig, mode: str, what: str, example: str) -> None:
    """hydra.{mode}.dir can be made and written to: tried now (a folder made in it, then
    everything this check made removed again, so a refusal leaves no folder), with the OS's
    reason in one line."""
    where = Path(str(OmegaConf.select(config, f"hydra.{mode}.dir")))
    made = [folder for folder in (where, *where.parents) if not folder.exists()]  # deepest first
    try:
        where.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(dir=where))  # a job's folder: the folder is writable
    except OSError as error:
        reason = "a file is there" if where.is_file() else error.strerror or str(error)
        if error.filename and Path(error.filename) != where:
            reason = f"{reason}: {error.filename}"
        raise ConfigError(
            f"hydra.{mode}.dir={where}: {what} cannot be made there ({reason}); give a folder "
            f"this user can create and write, e.g. hydra.{mode}.dir={example} (relative to the "
            "launch folder)") from None
    finally:
        for folder in made:
            try:
                folder.rmdir()
            except FileNotFoundError:
                continue  # the mkdir stopped above it
            except OSError:
                break  # something else made it meanwhile and wrote in it: left as it is


def check_joblib_launcher(config: DictConfig) -> None:
    """hydra/launcher=joblib: n_jobs is joblib's, where 0 has no meaning (joblib's ValueError
    came as a traceback after the parent run opened)."""
    n_jobs = OmegaConf.select(config, "hydra.launcher.n_jobs", default=None)
    if n_jobs == 0:
        raise ConfigError(
            f"hydra.launcher.n_jobs={n_jobs}: the jobs joblib runs at once; accepted: a "
            "positive count, or -1 for every core (the default; -2 every core but one)")


def ray_address_file() -> Path:
    """Where `ray start` leaves the address of the cluster it started, and where ray.init()
    with no address looks (ray._common.utils.get_ray_address_file, default temp folder)."""
    if "RAY_TMPDIR" in os.environ:
        temp = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        temp = os.environ["TMPDIR"]
    else:
        temp = "/tmp"
    return Path(temp) / "ray" / "ray_current_cluster"


def joined_address(address: str | None) -> tuple[str | None, str]:
    """The HOST:PORT of the running Ray that ray.init(address=`address`) would join, and where
    that address comes from (the key, RAY_ADDRESS, the address file); None when ray.init would
    start a Ray of its own (no address anywhere, or "local"). Ray's own order
    (ray._private.services.get_ray_address_from_environment): RAY_ADDRESS replaces a null or
    "auto" address; then a null or "auto" one is the address file's."""
    source = f"{ADDRESS_KEY}={address}"
    environment = os.environ.get("RAY_ADDRESS", "")
    if address in (None, "auto") and environment:
        address, source = environment, f"RAY_ADDRESS={environment}"
    if address in (None, "auto"):
        file = ray_address_file()
        try:
            found = file.read_text().strip()
        except OSError:
            return None, source  # none: a new Ray ("auto": Ray says it found none)
        return (found or None), f"the Ray started on this machine ({found}, in {file})"
    if address == "local":
        return None, source
    return str(address), source


def check_ray_launcher(config: DictConfig, timeout: float = 5.0) -> None:
    """hydra/launcher=ray or ray_cluster: the Ray the jobs would run on answers, and a Ray
    started for the sweep alone (plain `ray`) is not a running cluster's. One line each."""
    address = OmegaConf.select(config, ADDRESS_KEY, default=None)
    joined, source = joined_address(None if address is None else str(address))
    if joined is None or joined.startswith("ray://"):
        return  # a Ray of its own; Ray Client addresses are Ray's to check
    host, _, port = joined.rpartition(":")
    if not port.isdigit() or not host:
        raise ConfigError(f"{source}: not a Ray address; write HOST:PORT of the Ray head "
                          "(ray start --head --port=6379 prints it), e.g. 127.0.0.1:6379")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as error:
        stale = "" if source.startswith((ADDRESS_KEY, "RAY_ADDRESS")) else \
            " (a Ray that ended without `ray stop`: `ray stop --force` clears it)"
        raise ConfigError(
            f"{source}: no Ray answers there ({error.strerror or error}){stale}; start one "
            f"(ray start --head --port={port}) or give {ADDRESS_KEY}=HOST:PORT of a running "
            "head") from None
    memory = OmegaConf.select(config, MEMORY_KEY, default=_MISSING)
    if memory is None:
        return  # hydra/launcher=ray_cluster: the cluster's own object store
    if memory is not _MISSING:
        raise ConfigError(
            f"{MEMORY_KEY}={memory}: Ray refuses an object-store size when it joins a running "
            f"cluster ({source}); leave it null (the cluster's own setting)")
    choices = OmegaConf.select(config, "hydra.runtime.choices", default=None) or {}
    launcher = choices.get("hydra/launcher", "ray")
    raise ConfigError(
        f"hydra/launcher={launcher} starts a Ray for the sweep alone, but ray.init would join "
        f"{source} (and refuse the object store {launcher} asks for): run the jobs on it with "
        "hydra/launcher=ray_cluster, or stop it (ray stop)")
