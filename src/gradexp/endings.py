"""How a run can end before its last epoch: exceptions whose message is the one line a person
reads. The run loop (gradexp.experiment) turns each into the MLflow status it stands for."""

from __future__ import annotations


class RunFailed(Exception):
    """The run ended FAILED for a reason a person can act on; the message is one line."""

    exit_code = 1


class Diverged(RunFailed):
    """The loss or the gradients became NaN or infinite."""


class GradientCheckFailed(RunFailed):
    """A gradient check failed and `gradcheck.on_fail=fail`."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: the run ends KILLED, exit code 143."""
