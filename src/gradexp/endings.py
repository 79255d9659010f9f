"""How a run can end before its last epoch: exceptions whose message is the one line a person
reads (the run loop, gradexp.loop, turns each into the MLflow status it stands for: status_of), and
the exit codes the command line ends with."""

from __future__ import annotations

import re
from collections.abc import Iterator

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


class NoGradient(RunFailed):
    """The model computes an op TensorFlow has no gradient for: it cannot train."""

    exit_code = EXIT_BAD_INPUT


def chained(error: BaseException) -> Iterator[BaseException]:
    """`error` and the errors it came from (each one's __cause__, else its __context__), each
    once: a chain can loop (QA: re-raising a wrapper's cause, `raise error.__cause__ from None`
    inside its `except`, makes the cause's context the wrapper whose cause it is), and a walk
    that followed it spun forever."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def missing_gradient(error: BaseException) -> tuple[str, str | None] | None:
    """TensorFlow's "no gradient" LookupError read: (the op's type, its place in the graph when
    traced), or None for any other error. Eager: "gradient registry has no entry for: OP";
    traced: "No gradient defined for operation'NAME' (op type: OP)"; the checker's own
    NoGradientError carries the op as `.op`. The run (no_gradient) and the standalone checker
    (gradexp.gradcheck.checker) say it each in their words."""
    if not isinstance(error, LookupError):
        return None
    text = str(error).strip()
    eager = re.fullmatch(r"gradient registry has no entry for: (\S+)", text)
    if eager:
        return eager.group(1), None
    traced = re.match(r"No gradient defined for operation ?'([^']+)' \(op type: (\w+)\)", text)
    if traced:
        return traced.group(2), traced.group(1)
    checked = getattr(error, "op", None)
    return (checked, None) if isinstance(checked, str) else None


def no_gradient(error: BaseException, cfg) -> NoGradient | None:
    """A model computing an op TensorFlow has no gradient for (tf.image.resize(method="area"),
    tf.linalg.lu) cannot train: one line naming the op and the model, for the console and the
    run's status reason, not the 35-frame traceback of the first training step or check (QA).
    None for any other error."""
    found = missing_gradient(error)
    if found is None:
        return None
    op, where = found
    target = cfg.model.get("_target_") if cfg is not None else None
    model = f"model._target_={target}" if target else "the model"
    at = f" (at {where})" if where else ""
    return NoGradient(f"{model}: TensorFlow has no gradient for the op {op}{at} it computes, so "
                      "it cannot train; compute that step with ops that have one, or give it one "
                      "(tf.custom_gradient, tf.RegisterGradient)")


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: the run ends KILLED, exit code 143."""


# Terminal styling (ANSI CSI sequences): Keras puts bold escapes (\x1b[1m) into its layers'
# messages; a line for a person or a tag stored in MLflow must be plain text.
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def plain(text: str) -> str:
    """`text` without terminal styling."""
    return ANSI.sub("", text)


def reason_of(error: BaseException) -> str:
    """An exception's message as one plain line: its first line, or, for Keras' "Exception
    encountered when calling Layer.call()." header, the layer and the line that says why."""
    lines = [line.strip() for line in plain(str(error)).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    header = re.match(r"Exception encountered when calling (?:layer '?)?(\w+)", lines[0])
    if header and len(lines) > 1:
        layer = header.group(1).removesuffix('.call')
        if lines[1].startswith("Could not automatically infer the output shape") \
                and len(lines) > 2:  # the cause is the line after Keras' "Error encountered:"
            return f"{layer}: Keras could not infer its output shape: {lines[2].rstrip('.')}"
        return f"{layer}: {lines[1]}"
    return lines[0]


def status_of(error: BaseException) -> tuple[str, str, str | None]:
    """The MLflow status an exception ends a run with, the reason recorded with it, and the
    traceback worth keeping (None for the failures a person caused: their message says it)."""
    import traceback

    from gradexp.schema import ConfigError

    if isinstance(error, KeyboardInterrupt):
        return "KILLED", "interrupted (Ctrl-C or SIGTERM)", None
    if isinstance(error, (RunFailed, ConfigError)):  # e.g. device=gpu with no GPU visible
        return "FAILED", plain(str(error)), None
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    # The stored reason is plain text (an MLflow tag: no terminal renders it); the traceback
    # artifact keeps the message as raised.
    return "FAILED", plain(f"{type(error).__name__}: {error}"), trace
