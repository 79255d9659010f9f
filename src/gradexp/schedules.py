"""Learning-rate schedules, counted in epochs in the config, built on Keras' own
LearningRateSchedules (which count optimizer steps: epochs x batches per epoch).

    optimizer.schedule.name = none | cosine | exponential | piecewise | warmup_cosine
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf


def learning_rate(cfg: DictConfig, steps_per_epoch: int, epochs: int) -> Any:
    """optimizer.learning_rate as it is (schedule none), or the schedule that starts from it."""
    import keras

    rate = cfg.learning_rate
    schedule = cfg.schedule
    name = schedule.name
    steps = lambda n_epochs: max(1, int(round(n_epochs * steps_per_epoch)))  # noqa: E731
    if name == "none":
        return rate
    if name == "cosine":  # from rate down to alpha·rate over the run
        return keras.optimizers.schedules.CosineDecay(rate, steps(epochs), alpha=schedule.alpha)
    if name == "warmup_cosine":  # alpha·rate up to rate over warmup_epochs, then cosine down
        warmup = steps(schedule.warmup_epochs)
        return keras.optimizers.schedules.CosineDecay(
            rate * schedule.alpha, max(1, steps(epochs) - warmup), alpha=schedule.alpha,
            warmup_target=rate, warmup_steps=warmup)
    if name == "exponential":  # rate · decay_rate^(epoch / decay_epochs)
        return keras.optimizers.schedules.ExponentialDecay(
            rate, steps(schedule.decay_epochs), schedule.decay_rate)
    if name == "piecewise":  # rate · factors[i] after boundaries[i-1] epochs
        return keras.optimizers.schedules.PiecewiseConstantDecay(
            _last_steps(schedule.boundaries, steps_per_epoch),
            [rate * factor for factor in schedule.factors])
    raise ValueError(f"unknown schedule {name}")  # the schema's enum stops this earlier


def _last_steps(boundaries: list[float], steps_per_epoch: int) -> list[int]:
    """A piecewise schedule's boundaries (epochs) as the 0-based index of each stretch's last
    step. A boundary b means "after b epochs": epochs 1..b train at the old rate and every step
    of epoch b+1 at the new one. Keras' PiecewiseConstantDecay keeps the old value while
    step <= boundary, and the step it is given counts the updates made so far (b epochs' steps
    at the first update of epoch b+1), so the boundary is the step before that: passing the
    step count itself moved every change one step late, i.e. one epoch late on a full batch."""
    return [int(round(epochs * steps_per_epoch)) - 1 for epochs in boundaries]


def check_boundary_steps(schedule: DictConfig, steps_per_epoch: int) -> None:
    """A piecewise schedule's boundaries must land on distinct steps after the first: with one
    step an epoch (a full batch), boundaries=[0.2,0.4] both fell before step 1, so Keras was
    given [-1, -1] and the run trained at the last factor from its first step while its params
    said otherwise. Refused in one line, before the run."""
    if getattr(schedule.name, "value", schedule.name) != "piecewise":
        return
    steps = _last_steps(list(schedule.boundaries), steps_per_epoch)
    if steps and (steps[0] < 0 or any(b <= a for a, b in zip(steps, steps[1:]))):
        from gradexp.schema import ConfigError

        given = ", ".join(f"{b:g}" for b in schedule.boundaries)
        after = [step + 1 for step in steps]
        raise ConfigError(
            f"optimizer.schedule.boundaries=[{given}]: an epoch is {steps_per_epoch} "
            f"step{'s' * (steps_per_epoch != 1)} here, so these change the rate after steps "
            f"{after}; each must be after at least one step and after the one before "
            f"(boundaries at least {1 / steps_per_epoch:g} "
            f"epoch{'s' * (steps_per_epoch != 1)} apart here)")


def build_optimizer(cfg: DictConfig, steps_per_epoch: int, epochs: int) -> Any:
    """The Keras optimizer `optimizer._target_` names, its learning rate a schedule if asked.
    `name` is gradexp's label for the run (the option, or a replaced `_target_`: user_code's
    label_by_target), as it is for the loss, never an argument: passed on, a person's own
    function refused it ("unexpected keyword argument 'name'", QA), and Keras' own optimizers
    would be named after a dotted path. They keep their own default names, which a checkpoint
    does not depend on (its optimizer state is restored by position, not by name)."""
    from gradexp.user_code import instantiate

    options = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    options.pop("schedule", None)
    options.pop("learning_rate")
    options.pop("name", None)
    return instantiate("optimizer._target_", options,
                       learning_rate=learning_rate(cfg, steps_per_epoch, epochs))
