"""What XLA (trainer.jit_compile=true) can compile of a run, said before the run opens, and its
refusal of a model's op said in one line when it is met inside the run (QA, 2026-12)."""

from __future__ import annotations

import re
from typing import Any

from omegaconf import DictConfig

from gradexp.endings import EXIT_BAD_INPUT, RunFailed
from gradexp.schema import ConfigError


def check_xla_settings(cfg: DictConfig) -> None:
    """The settings trainer.jit_compile=true does not combine with: without trainer.compile
    nothing is compiled, so XLA never ran while the params said it did; under device=mirrored
    XLA compiled the whole epoch, strategy.run included, and failed reading the replicas'
    variables from one device ("Trying to access resource ... located in device CPU:1")."""
    if not cfg.trainer.jit_compile:
        return
    if not cfg.trainer.compile:
        raise ConfigError("trainer.jit_compile=true needs trainer.compile=true: XLA compiles the "
                          "compiled training step, and an eager run has none")
    device = getattr(cfg.device.name, "value", cfg.device.name)
    if device == "mirrored":
        raise ConfigError("trainer.jit_compile=true does not run under device=mirrored (XLA "
                          "would compile every replica's step on one device): use one of them")


def check_xla_batches(cfg: DictConfig, rows: int, batch_size: int | None) -> None:
    """Under XLA the slice of a short last mini-batch comes out a whole batch long, padded with
    other rows: iris's 120 rows in batches of 16 trained 8 extra rows every epoch and counted
    the last batch as a full one (weights 1.8e-2 off a hand-written loop). Refused unless the
    batches divide the training rows (a full batch is one batch)."""
    if not cfg.trainer.jit_compile or not batch_size or batch_size >= rows \
            or rows % batch_size == 0:
        return
    divisors = [d for d in range(1, rows) if rows % d == 0]
    near = sorted(divisors, key=lambda d: abs(d - batch_size))[:4]
    raise ConfigError(
        f"trainer.jit_compile=true: the {rows} training rows leave a last mini-batch of "
        f"{rows % batch_size} rows at trainer.batch_size={batch_size}, and XLA pads a short "
        f"batch with other rows: use a batch size that divides {rows} (e.g. "
        f"{', '.join(map(str, sorted(near)))}), or trainer.jit_compile=false")


class XlaRefused(RunFailed):
    """XLA cannot compile an op of the model (a tf.numpy_function, a tf.py_function)."""

    exit_code = EXIT_BAD_INPUT


def xla_refused(error: BaseException, cfg: Any) -> XlaRefused | None:
    """A model op XLA cannot compile, as one line naming it, instead of ~150 lines of
    "tf2xla conversion failed"; None for any other error."""
    text = str(error)
    if "Detected unsupported operations when trying to compile graph" not in text \
            and "tf2xla conversion failed" not in text:
        return None
    found = re.findall(r"No registered '(\w+)' OpKernel for XLA\w* devices compatible with "
                       r"node \{\{node ([^}]+)\}\}", text)
    # the op's place in the model, without the training loops' while/ prefixes
    ops = dict.fromkeys(f"{op} (at {re.sub(r'^(while/)+', '', node)})" for op, node in found)
    named = ", ".join(ops) if ops else "an op of the model"
    target = cfg.model.get("_target_") if cfg is not None else None
    model = f"model._target_={target}" if target else "the model"
    return XlaRefused(f"trainer.jit_compile=true: XLA cannot compile {named} in {model}; set "
                      "trainer.jit_compile=false")
