"""Hydra's sweep syntax as Optuna distributions, the way hydra-optuna-sweeper reads it:
`choice(a,b)` or `a,b` -> categorical; `range(1,10)` -> integers (floats with a float step);
`interval(0.1,1)` -> uniform, `tag(log, interval(...))` -> log-uniform; anything else is fixed."""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer


def search_space(arguments: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(distributions by key, fixed values by key) of `key=value` sweep arguments."""
    distributions, fixed = {}, {}
    for override in OverridesParser.create().parse_overrides(arguments):
        key = override.get_key_element()
        if override.is_sweep_override():
            distributions[key] = distribution(override)
        else:
            fixed[key] = override.get_value_element_as_str()
    return distributions, fixed


def distribution(override: Override) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    sweep = override.value()
    if override.is_choice_sweep() or (override.is_range_sweep() and sweep.shuffle):
        values = override.sweep_iterator(transformer=Transformer.encode)
        return CategoricalDistribution(list(values))
    if override.is_range_sweep():
        # The values Hydra's basic sweeper would run: start, start + step, ... below stop.
        values = [float(v) for v in override.sweep_iterator()]
        if any(isinstance(v, float) for v in (sweep.start, sweep.stop, sweep.step)):
            return FloatDistribution(values[0], values[-1], step=float(sweep.step))
        return IntDistribution(int(values[0]), int(values[-1]), step=int(sweep.step))
    if override.is_interval_sweep():
        log = "log" in sweep.tags
        if isinstance(sweep.start, int) and isinstance(sweep.end, int):
            return IntDistribution(sweep.start, sweep.end, log=log)
        return FloatDistribution(float(sweep.start), float(sweep.end), log=log)
    raise ValueError(f"{override.input_line}: not a sweep Optuna can search "
                     "(use choice, range or interval)")


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
            raise ValueError(f"hydra/sweeper/sampler=grid: {key} is continuous; give it "
                             "choice(...) or range(...) values")
    return values
