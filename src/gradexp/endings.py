"""How a run can end before its last epoch: exceptions whose message is the one line a person
reads (the run loop, gradexp.experiment, turns each into the MLflow status it stands for), and
the exit codes the command line ends with."""

from __future__ import annotations

EXIT_BAD_INPUT = 2  # as argparse: the command line asked for something that cannot be
EXIT_INTERRUPTED = 130  # Ctrl-C, the shell's convention (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + 15)


class RunFailed(Exception):
    """The run ended FAILED for a reason a person can act on; the message is one line."""

    exit_code = 1


class Diverged(RunFailed):
    """The loss or the gradients became NaN or infinite."""


class GradientCheckFailed(RunFailed):
    """A gradient check failed and `gradcheck.on_fail=fail`."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: the run ends KILLED, exit code 143."""
