"""Import TensorFlow (and Keras) without its start-up chatter on the terminal.

TensorFlow 2.21 writes C++ log lines (CUDA probing, oneDNN notes) to stderr while it loads, before
TF_CPP_MIN_LOG_LEVEL takes effect, and Keras' first import repeats them. They say nothing a
gradexp user can act on, so stderr's file descriptor is pointed at /dev/null during the import
alone. Python errors raised by the import are not lost: they propagate after stderr is restored.
Set GRADEXP_TF_CHATTER=1 to see the lines.

Once loaded, TensorFlow's Python side logs through absl, whose logger feeds Python's root logger;
under Hydra that prints INFO lines such as "Sharding callback duration: 9 microseconds" (at every
checkpoint) on stdout. Only its warnings and errors are kept.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from types import ModuleType


def import_tensorflow() -> ModuleType:
    """`import tensorflow as tf; import keras`, quietly the first time; returns tf."""
    if "tensorflow" in sys.modules or os.environ.get("GRADEXP_TF_CHATTER") == "1":
        import tensorflow as tf

        _quiet_absl()  # however TensorFlow came in
        return tf
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            import keras  # noqa: F401  (loads the same C++ runtime: its chatter goes too)
            import tensorflow as tf
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    _quiet_absl()
    freeze_imported_objects("tensorflow")
    return tf


def _quiet_absl() -> None:
    """absl's logger at WARNING (after absl made it: created earlier, it would not be absl's)."""
    logging.getLogger("absl").setLevel(logging.WARNING)


_FROZEN: set[str] = set()  # the imports whose objects were frozen in this process


def freeze_imported_objects(after: str) -> None:
    """Take the objects alive now out of the cycle collector's full passes, once a process for
    each import (`after`: "tensorflow", "the MLflow store").

    After TensorFlow (and, later, MLflow's store) is imported, the heap holds millions of module
    objects that live until the process ends. Each full collection walks all of them: 0.2-0.3 s
    of a default run's MLflow store open alone went to that (benchmarks/bench_fixed_cost.py).
    Frozen objects are still freed by reference counting; only their cycles are never collected.
    That is why it is done once: a sweep opens the store in every job, and freezing there froze
    whatever the jobs before had left to the cycle collector (a model, the served model, MLflow's
    entities) for good: 5 MiB a job of a sequential sweep (issue 20 item 7,
    benchmarks/bench_sweep_memory.py).
    """
    if after not in _FROZEN:
        _FROZEN.add(after)
        gc.freeze()
