"""Callbacks: everything a run does besides training observes the trainer through these.

The run loop (gradexp.experiment) trains in compiled stretches of epochs and tells each callback,
in order: training begins · a stretch of epochs ended (its per-epoch arrays) · training ended,
however it ended (FINISHED, FAILED, KILLED). A callback also names the epochs at which it needs
the host (`stops`): a gradient check, an evaluation, a checkpoint; the trainer's compiled calls end
there and nowhere else. A new feature is a new callback and its config keys.
"""

from gradexp.callbacks.base import Callback, build_callbacks

__all__ = ["Callback", "build_callbacks"]
