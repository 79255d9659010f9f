"""How a run can end before its last epoch: exceptions whose message is the one line a person
reads (the run loop, gradexp.loop, turns each into the MLflow status it stands for: status_of), and
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


def status_of(error: BaseException) -> tuple[str, str, str | None]:
    """The MLflow status an exception ends a run with, the reason recorded with it, and the
    traceback worth keeping (None for the failures a person caused: their message says it)."""
    import traceback

    from gradexp.schema import ConfigError

    if isinstance(error, KeyboardInterrupt):
        return "KILLED", "interrupted (Ctrl-C or SIGTERM)", None
    if isinstance(error, (RunFailed, ConfigError)):  # e.g. device=gpu with no GPU visible
        return "FAILED", str(error), None
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return "FAILED", f"{type(error).__name__}: {error}", trace
