"""Devices: turn `device=auto|cpu|gpu|mirrored` into where TensorFlow places the work."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from gradexp.schema import CPU_REPLICAS_MAX, ConfigError


@dataclass
class DeviceChoice:
    requested: str
    used: str  # what actually runs, e.g. "/CPU:0", "/GPU:0", "mirrored(2 GPUs)"
    strategy: Any = None  # a tf.distribute strategy for device=mirrored
    replicas: int = 1

    def scope(self) -> contextlib.AbstractContextManager:
        """Where to create the variables (mirrored on every replica for device=mirrored)."""
        import tensorflow as tf

        return self.strategy.scope() if self.strategy else tf.device(self.used)

    def run_scope(self) -> contextlib.AbstractContextManager:
        """Where to train, evaluate and check. For mirrored: outside the strategy's scope, where
        Keras would divide every loss by the replica count; its steps enter it by
        strategy.run."""
        return contextlib.nullcontext() if self.strategy else self.scope()


def select_device(requested: str, cpu_replicas: int = 0) -> DeviceChoice:
    """Pick the device; asking for a GPU when none is visible is a ConfigError saying what is.

    device=mirrored with cpu_replicas=N and no GPU splits the CPU into N logical devices and
    mirrors over them: the same code path as several GPUs, testable on any machine."""
    import tensorflow as tf

    if requested == "mirrored" and cpu_replicas:
        return DeviceChoice(requested, f"mirrored({cpu_replicas} CPU replicas)",
                            _mirrored(_logical_cpus(cpu_replicas)), replicas=cpu_replicas)
    gpus = tf.config.list_logical_devices("GPU")
    if requested == "cpu" or (requested == "auto" and not gpus):
        return DeviceChoice(requested, "/CPU:0")
    if not gpus:
        seen = ", ".join(d.name for d in tf.config.list_logical_devices()) or "nothing"
        mirror = (" (or device.cpu_replicas=N to mirror over N parts of the CPU)"
                  if requested == "mirrored" else "")
        raise ConfigError(
            f"device={requested}: TensorFlow sees no GPU (it sees: {seen}); "
            f"use device=auto or device=cpu{mirror}"
        )
    if requested == "mirrored":
        strategy = _mirrored([d.name for d in gpus])
        return DeviceChoice(requested, f"mirrored({len(gpus)} GPUs)", strategy,
                            replicas=len(gpus))
    return DeviceChoice(requested, gpus[0].name)


# One MirroredStrategy per set of devices in a process: each new strategy numbered its
# all-reduces from the same collective keys, so a second run of another model shape (a sweep,
# a notebook's next gradexp.run) met the first's programs: "Shape mismatch in the collective
# instance 100", and every later mirrored run failed too (QA). Runs share it as they share the
# devices; what it holds of a run (its variables) goes with the run's model.
_STRATEGIES: dict[tuple[str, ...], Any] = {}


def _mirrored(devices: list[str]) -> Any:
    import tensorflow as tf

    key = tuple(devices)
    if key not in _STRATEGIES:
        _STRATEGIES[key] = tf.distribute.MirroredStrategy(devices)
    return _STRATEGIES[key]


def _logical_cpus(count: int) -> list[str]:
    """The CPU as `count` logical devices. TensorFlow allows this only before its runtime starts,
    so once per process; asking again for another count is a ConfigError."""
    import tensorflow as tf

    # The schema's range, for a caller that did not check the config: TensorFlow would be asked
    # for one device configuration per replica (10**20 of them: minutes of growing memory, QA).
    if not 1 <= count <= CPU_REPLICAS_MAX:
        raise ConfigError(f"device.cpu_replicas={count}: must be an integer >= 0 and <= "
                          f"{CPU_REPLICAS_MAX} (0: GPUs only)")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError:  # the runtime has started: fine if it already has that many
        pass
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(names) != count:
        raise ConfigError(f"device.cpu_replicas={count}: this process already runs TensorFlow "
                          f"with {len(names)} CPU device(s); set it in a fresh process")
    return names


def check_device(requested: str, cpu_replicas: int = 0) -> None:
    """Before a run is opened: asking for a GPU that is not there is refused, so no FAILED run is
    left in the store for it; device=mirrored's CPU replicas are made. (device=auto and cpu
    cannot fail; they load TensorFlow later.)"""
    if cpu_replicas and requested != "mirrored":
        raise ConfigError(f"device.cpu_replicas={cpu_replicas}: only device=mirrored uses it "
                          f"(device={requested})")
    if requested == "mirrored" and cpu_replicas:
        from gradexp.tensorflow_import import import_tensorflow

        # Now, before the model checks (gradexp.setup_checks) build a model and so start
        # TensorFlow's runtime, after which the CPU can no longer be split.
        import_tensorflow()
        _logical_cpus(cpu_replicas)
    if requested == "gpu" or (requested == "mirrored" and not cpu_replicas):
        from gradexp.tensorflow_import import import_tensorflow

        import_tensorflow()  # quietly: its C++ start-up lines stay off the terminal
        select_device(requested)
