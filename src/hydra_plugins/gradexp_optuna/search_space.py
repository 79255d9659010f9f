"""Hydra's sweep syntax as Optuna distributions, the way hydra-optuna-sweeper reads it:
`choice(a,b)` or `a,b` -> categorical; `range(1,10)` -> integers (floats with a float step);
`interval(0.1,1)` -> uniform, `tag(log, interval(...))` -> log-uniform; anything else is fixed.

A search space Optuna cannot take (`interval(1.0,0.1)`, `tag(log, interval(0,1))`, `range(1,0)`,
a tag it does not read such as `tag(lg, ...)`) is a gradexp ConfigError: one line naming the
override, the rule it breaks and what is accepted (gradexp.sweeps checks it before the sweep's
parent run opens, through hydra_plugins.gradexp_optuna.checks)."""

from __future__ import annotations

import difflib
from typing import Any, NamedTuple

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer

from gradexp.schema import ConfigError

TAGS = ("int", "log")  # the tags this sweeper reads on an interval, as hydra-optuna-sweeper


class Space(NamedTuple):
    distributions: dict[str, Any]  # key -> an Optuna distribution (what the study searches)
    fixed: dict[str, str]          # key -> the value every trial gets
    lines: dict[str, str]          # searched key -> its override as written (for error lines)


def searched(params: Any, arguments: list[str], loader: Any = None) -> Space:
    """The search of a sweep: hydra.sweeper.params, then the command line's overrides; a value
    on the command line fixes a searched key. `loader` (Hydra's config loader) lets a
    `glob(...)` of options be listed."""
    space = _parse([f"{key}={value}" for key, value in (params or {}).items()] + list(arguments),
                   loader)
    for key in space.fixed:
        space.distributions.pop(key, None)
        space.lines.pop(key, None)
    return space


def search_space(arguments: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(distributions by key, fixed values by key) of `key=value` sweep arguments."""
    distributions, fixed, _ = _parse(arguments)
    return distributions, fixed


def _parse(arguments: list[str], loader: Any = None) -> Space:
    space = Space({}, {}, {})
    for override in OverridesParser.create(config_loader=loader).parse_overrides(arguments):
        key = override.get_key_element()
        if override.is_sweep_override():
            space.distributions[key] = distribution(override)
            space.lines[key] = override.input_line
        else:
            space.fixed[key] = override.get_value_element_as_str()
    return space


def job_overrides(params: dict[str, Any], fixed: dict[str, str]) -> tuple[str, ...]:
    """A trial's job: its chosen values, then the fixed ones (what the launcher composes)."""
    return (tuple(f"{key}={_as_written(value)}" for key, value in params.items())
            + tuple(f"{key}={value}" for key, value in fixed.items()))


def _as_written(value: Any) -> Any:
    """A chosen value as the override would write it: `true`, `null` (Python's `True` and
    `None` would name the child run differently from the command line's choice)."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else value


def distribution(override: Override) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    line = override.input_line
    sweep = override.value()
    _check_tags(override)
    try:
        if override.is_choice_sweep() or (override.is_range_sweep() and sweep.shuffle):
            values = list(override.sweep_iterator(transformer=Transformer.encode))
            if not values:
                raise ConfigError(f"{line}: it has no values{_range_rule(sweep)}")
            return CategoricalDistribution(values)
        if override.is_range_sweep():
            if sweep.step == 0:
                raise ConfigError(f"{line}: its step is 0, so it never reaches its stop; "
                                  "range(start, stop[, step]) takes a step other than 0 "
                                  "(1 when left out)")
            # The values Hydra's basic sweeper would run: start, start + step, ... before stop
            # (down from start for a negative step; Optuna takes them from low to high).
            values = [float(v) for v in override.sweep_iterator()]
            if not values:
                raise ConfigError(f"{line}: it has no values{_range_rule(sweep)}")
            low, high, step = min(values), max(values), abs(sweep.step)
            if any(isinstance(v, float) for v in (sweep.start, sweep.stop, sweep.step)):
                return FloatDistribution(low, high, step=float(step))
            return IntDistribution(int(low), int(high), step=int(step))
        if override.is_interval_sweep():
            return _interval(line, sweep)
    except ConfigError:
        raise
    except ValueError as error:  # any other rule of Optuna's: its own words, in one line
        raise ConfigError(f"{line}: {error}") from None
    raise ConfigError(f"{line}: not a sweep Optuna can search; accepted: choice(...), "
                      "range(...), interval(...), tag(log, interval(...))")


def _interval(line: str, sweep: Any) -> Any:
    from optuna.distributions import FloatDistribution, IntDistribution

    log = "log" in sweep.tags
    low, high = sweep.start, sweep.end
    if low > high:
        written = f"tag(log, interval({high}, {low}))" if log else f"interval({high}, {low})"
        raise ConfigError(f"{line}: its low end {low} is above its high end {high}; "
                          f"interval(low, high) takes low <= high, e.g. {written}")
    if log and low <= 0:
        example = f"{high / 1000:g}, {high}" if high > 0 else "0.0001, 0.1"
        raise ConfigError(
            f"{line}: a log-scale interval's low end must be > 0 (it is sampled by its log), "
            f"but it is {low}; tag(log, interval(low, high)) takes 0 < low <= high, "
            f"e.g. tag(log, interval({example}))")
    if "int" in sweep.tags:  # Hydra reads interval bounds as floats: integers only when told
        return IntDistribution(int(low), int(high), log=log)
    return FloatDistribution(float(low), float(high), log=log)


def _check_tags(override: Override) -> None:
    """Tags this sweeper does not read would be ignored in silence: `tag(lg, interval(...))`
    sampled linearly. So only `log` and `int`, and only on an interval."""
    sweep = override.value()
    tags = sorted(getattr(sweep, "tags", None) or ())
    if not tags:
        return
    line = override.input_line
    if not override.is_interval_sweep():
        raise ConfigError(
            f"{line}: tag({', '.join(tags)}, ...) is not read on a choice or range (Optuna "
            "samples their values as listed); the Optuna sweeper reads the tags log and int "
            "on an interval: tag(log, interval(low, high)), tag(int, interval(low, high))")
    unknown = [tag for tag in tags if tag not in TAGS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], TAGS, n=1, cutoff=0.5)
        raise ConfigError(
            f"{line}: unknown tag {unknown[0]}; the Optuna sweeper reads the tags log (a "
            "log scale) and int (integers) on an interval: "
            f"tag(log, interval({sweep.start}, {sweep.end})), tag(int, interval(...))"
            + (f"; did you mean {close[0]}?" if close else ""))


def _range_rule(sweep: Any) -> str:
    start, stop = sweep.start, sweep.stop
    step = sweep.step if sweep.step is not None else 1
    direction = "up" if step > 0 else "down"
    return (f" (it counts {direction} from {start} by {abs(step)} and stops before {stop}); "
            "range(start, stop[, step]) takes start < stop (start > stop with a negative step)")


def grid(distributions: dict[str, Any]) -> dict[str, list]:
    """Every value of each (discrete) distribution, for Optuna's GridSampler."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    values = {}
    for key, dist in distributions.items():
        if isinstance(dist, CategoricalDistribution):
            values[key] = list(dist.choices)
        elif isinstance(dist, IntDistribution) and not dist.log:
            values[key] = list(range(dist.low, dist.high + 1, dist.step))
        elif isinstance(dist, FloatDistribution) and dist.step is not None:
            count = int(round((dist.high - dist.low) / dist.step)) + 1
            values[key] = [dist.low + i * dist.step for i in range(count)]
        else:
            raise ConfigError(f"hydra/sweeper/sampler=grid: {key} is continuous; give it "
                              "choice(...) or range(...) values")
    return values
