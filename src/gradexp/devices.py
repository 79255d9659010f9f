"""Devices: turn `device=auto|cpu|gpu|mirrored` into where TensorFlow places the work."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from gradexp.schema import ConfigError


@dataclass
class DeviceChoice:
    requested: str
    used: str  # what actually runs, e.g. "/CPU:0", "/GPU:0", "mirrored(2 GPUs)"
    strategy: Any = None  # a tf.distribute strategy for device=mirrored

    def scope(self) -> contextlib.AbstractContextManager:
        """Where to create variables and run steps."""
        import tensorflow as tf

        return self.strategy.scope() if self.strategy else tf.device(self.used)


def select_device(requested: str) -> DeviceChoice:
    """Pick the device; asking for a GPU when none is visible is a ConfigError saying what is."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    if requested == "cpu" or (requested == "auto" and not gpus):
        return DeviceChoice(requested, "/CPU:0")
    if not gpus:
        seen = ", ".join(d.name for d in tf.config.list_logical_devices()) or "nothing"
        raise ConfigError(
            f"device={requested}: TensorFlow sees no GPU (it sees: {seen}); "
            "use device=auto or device=cpu"
        )
    if requested == "mirrored":
        strategy = tf.distribute.MirroredStrategy([d.name for d in gpus])
        return DeviceChoice(requested, f"mirrored({len(gpus)} GPUs)", strategy)
    return DeviceChoice(requested, gpus[0].name)


def check_device(requested: str) -> None:
    """Before a run is opened: asking for a GPU that is not there is refused, so no FAILED run is
    left in the store for it. (device=auto and cpu cannot fail; they load TensorFlow later.)"""
    if requested in ("gpu", "mirrored"):
        from gradexp.tensorflow_import import import_tensorflow

        import_tensorflow()  # quietly: its C++ start-up lines stay off the terminal
        select_device(requested)
