"""Replicates: the jobs of a sweep that differ only in a `sweep.aggregate_over` key (default
[seed]) are one configuration run n times. Each group gets the mean of the objective, its sample
std (ddof 1) and a 95% interval for the mean by Student's t with n - 1 degrees of freedom; groups
are ranked by the mean, and one line says when the best group's interval overlaps the next one's
(the two cannot be told apart at this n).

Only replicates that trained to the end count: a pruned job's objective is an early epoch's and a
failed job has none worth averaging, so both are left out of their group's values and counted
(`pruned`, `failed`); a configuration whose every replicate was left out is still a group, n=0,
ranked last. Runs of the same job (every param equal, sweep.* aside: a sweep run twice in one
folder) are one replicate, not two (distinct_runs).

Used by the sweep's parent (gradexp.sweeps: table, sweep_summary.json `groups`, the tag
gradexp.best_group, the error-bar plot) and by `gradexp compare --aggregate`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gradexp.seeds import PURPOSES, derived_seed

ERRORBAR_PLOT = "plots/sweep_groups.png"
SINGLE_NOTE = "n=1: no interval (run more seeds: -m seed=0,1,2,...)"


@dataclass
class Group:
    params: dict[str, str]  # the other swept keys' values: what the replicates share
    values: list[float]  # the objective of each FINISHED replicate with a finite value
    run_ids: list[str]
    pruned: int = 0  # replicates sweep.pruner stopped early: left out of values
    failed: int = 0  # replicates that did not finish (FAILED, KILLED): left out of values

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / self.n if self.n else math.nan

    @property
    def std(self) -> float | None:
        if self.n < 2:
            return None
        mean = self.mean
        return math.sqrt(sum((v - mean) ** 2 for v in self.values) / (self.n - 1))

    @property
    def ci95(self) -> list[float] | None:
        if self.n < 2:
            return None
        half = t_quantile(0.975, self.n - 1) * self.std / math.sqrt(self.n)
        return [self.mean - half, self.mean + half]

    @property
    def label(self) -> str:
        """key=value pairs sorted by key, comma-joined (`optimizer=adam`); "all" when nothing
        else is swept."""
        return ",".join(f"{key}={value}" for key, value in sorted(self.params.items())) or "all"

    @property
    def left_out(self) -> str:
        """What was left out of the values, e.g. `1 pruned, 2 failed`; "" when nothing."""
        return ", ".join(f"{count} {what}" for what, count in
                         (("pruned", self.pruned), ("failed", self.failed)) if count)

    def record(self) -> dict[str, Any]:
        return {"params": dict(sorted(self.params.items())), "n": self.n,
                "mean": self.mean if self.n else None,  # JSON has no NaN
                "std": self.std, "ci95": self.ci95, "runs": self.run_ids,
                "pruned": self.pruned, "failed": self.failed,
                **({"note": SINGLE_NOTE} if self.n == 1 else {})}


def swept_value(params: Mapping[str, str], key: str) -> str:
    """A run's value of a swept key: the param itself (optimizer.learning_rate, seed), or a
    group's option name (optimizer -> optimizer.name)."""
    if key in params:
        return params[key]
    return params.get(f"{key}.name", "-")


def group_runs(runs: Iterable[tuple[str, Mapping[str, str], float]], swept: Sequence[str],
               aggregate_over: Sequence[str], direction: str, *,
               pruned: Collection[str] = (), failed: Collection[str] = ()) -> list[Group]:
    """Group (run_id, params, objective) by the swept keys outside aggregate_over, best mean
    first (`direction` minimize | maximize). The runs whose ids are in `pruned` or `failed` are
    counted in their group, not averaged; a NaN objective (diverged) is left out of its group's
    values too. A group that left a replicate out ranks after every group whose replicates all
    trained to the end: its mean is its survivors' (a learning rate that diverged on 3 of 6
    seeds is not the best by the 3 that did not); a group with no value left (n=0) ranks
    last."""
    others = [key for key in swept if key not in aggregate_over]
    groups: dict[tuple[str, ...], Group] = {}
    for run_id, params, value in runs:
        values = tuple(swept_value(params, key) for key in others)
        group = groups.setdefault(values, Group(dict(zip(others, values)), [], []))
        if run_id in failed:
            group.failed += 1
        elif run_id in pruned:
            group.pruned += 1
        elif math.isfinite(value):
            group.values.append(float(value))
            group.run_ids.append(run_id)
        else:
            group.failed += 1  # finished, but no finite objective: diverged
    sign = -1.0 if direction == "maximize" else 1.0
    return sorted(groups.values(), key=lambda g: (not g.n, bool(g.left_out),
                                                  sign * g.mean if g.n else 0.0))


def job_params(params: Mapping[str, str]) -> dict[str, str]:
    """A run's params without sweep.* (those steer the sweep, e.g. skip_finished, not the job):
    what makes two runs the same job."""
    return {key: value for key, value in params.items() if not key.startswith("sweep.")}


def distinct_runs(runs: Sequence[Any]) -> tuple[list[Any], int]:
    """(the newest MLflow run of each distinct job, how many older runs of the same jobs were
    left out). A sweep run twice in one folder records each job twice: same seed, same params,
    same values; counted twice they would double n and narrow the interval for nothing."""
    newest: dict[tuple, Any] = {}
    for run in sorted(runs, key=lambda run: run.info.start_time or 0, reverse=True):
        newest.setdefault(tuple(sorted(job_params(run.data.params).items())), run)
    kept = set(map(id, newest.values()))
    return [run for run in runs if id(run) in kept], len(runs) - len(newest)


def duplicates_note(count: int) -> str | None:
    """One line saying how many re-runs of a job distinct_runs left out; None for none."""
    if not count:
        return None
    return (f"left out {count} duplicate run{'s' if count > 1 else ''} (the same params as a "
            "newer run: a job run again is one replicate, its newest run counts)")


def aggregates(swept: Sequence[str], aggregate_over: Sequence[str]) -> bool:
    """True when the sweep has replicates: a swept key is listed in aggregate_over."""
    return any(key in aggregate_over for key in swept)


def unswept_note(swept: Sequence[str], aggregate_over: Sequence[str]) -> str | None:
    """One line when sweep.aggregate_over was set to keys none of which the sweep sweeps: it
    asked for replicates, and no table of them follows (the default, [seed], goes unsaid: most
    sweeps sweep no seed and ask for no replicates). None otherwise."""
    if aggregates(swept, aggregate_over) or list(aggregate_over) in ([], ["seed"]):
        return None
    keys = ", ".join(aggregate_over)
    verb = "is" if len(aggregate_over) == 1 else "are"
    return (f"note: sweep.aggregate_over=[{keys}]: {keys} {verb} not swept, so there are no "
            f"replicates to group (sweep it too, e.g. -m {aggregate_over[0]}=0,1,2)")


def inert_keys_note(runs: Iterable[tuple[Mapping[str, str], tuple[float, float]]],
                    swept: Sequence[str], aggregate_over: Sequence[str]) -> str | None:
    """One line when a swept key outside aggregate_over changes nothing the runs compute: every
    set of FINISHED runs that differ only in it gave one objective and one final loss, to the
    last digit (the loss too: an accuracy of 1.0 reached by two widths is no such sign) (QA:
    `trainer.seed=0,1,2,3` on full-batch data, which has no batch order to shuffle, made four
    identical copies of each job in silence). None when no key is so."""
    runs = [(params, values) for params, values in runs if all(map(math.isfinite, values))]
    inert = []
    for key in (key for key in swept if key not in aggregate_over and key != "seed"):
        others = [other for other in swept if other != key]
        sets: dict[tuple[str, ...], dict[str, tuple[float, float]]] = {}
        for params, value in runs:
            rest = tuple(swept_value(params, other) for other in others)
            sets.setdefault(rest, {})[swept_value(params, key)] = value
        compared = [values for values in sets.values() if len(values) > 1]
        if compared and all(len(set(values.values())) == 1 for values in compared):
            inert.append(key)
    if not inert:
        return None
    keys = " or ".join(inert)
    return (f"note: runs that differ only in {keys} gave one objective and loss to the last "
            "digit: it changes nothing these runs compute (trainer.seed on full-batch data "
            "orders no batches); for replicates, sweep the master seed= instead")


def derived_keys(params: Iterable[Mapping[str, str]]) -> set[str]:
    """The seed keys (model.seed, trainer.seed, data.seed, data.split_seed) a master seed set in
    these runs: in every run that has the key, its value is the one derived from the run's
    `seed`. Such a key is no difference of its own between runs. Read from each run's params,
    not assumed from a swept `seed`: data.resample=false keeps data.seed the person's (QA:
    `gradexp compare --aggregate` averaged data.seed=0 and 1 together), and `seed=0,1,2
    trainer.seed=0,1` replaced trainer.seed's values by derived ones, which the parent then
    grouped by as if they were configurations."""
    params = list(params)
    derived = set()
    for purpose, key in PURPOSES.items():
        having = [values for values in params if key in values]
        if having and all(_derived_from_master(values, purpose, key) for values in having):
            derived.add(key)
    return derived


def _derived_from_master(params: Mapping[str, str], purpose: str, key: str) -> bool:
    try:
        return int(params[key]) == derived_seed(int(params["seed"]), purpose)
    except (KeyError, TypeError, ValueError):  # no master seed (None), or not a number
        return False


def derived_note(swept: Sequence[str], derived: Collection[str]) -> str | None:
    """One line when a swept key's values were replaced by the master seed's (seed= derives
    it): the runs are grouped without it. None when no swept key is so."""
    replaced = [key for key in swept if key in derived]
    if not replaced:
        return None
    keys = ", ".join(replaced)
    return (f"note: {keys} {'is' if len(replaced) == 1 else 'are'} derived from the master seed "
            f"in every run (seed= sets {'it' if len(replaced) == 1 else 'them'}), so the values "
            f"swept were replaced and the runs are not grouped by them; to vary "
            f"{'it' if len(replaced) == 1 else 'them'} alone, leave seed unset")


def overlap_note(groups: Sequence[Group]) -> str | None:
    """One line when the best group's interval overlaps the next one's; None when they are
    apart or there is no second group with an interval."""
    ranked = [group for group in groups if group.n]
    if len(ranked) < 2:
        return None
    best, next_ = ranked[0], ranked[1]
    if best.ci95 is None or next_.ci95 is None:
        return (f"{best.label} and {next_.label}: not distinguishable at this n "
                "(a group has n=1, no interval)")
    if best.ci95[0] <= next_.ci95[1] and next_.ci95[0] <= best.ci95[1]:
        # with each one's range: a few replicates far off the rest (QA: 3 of 6 at lr=0.8 went
        # to 1e12 without a NaN) widen an interval to overlap, which the range makes plain
        spans = " and ".join(f"{number(min(g.values))} to {number(max(g.values))}"
                             for g in (best, next_))
        return (f"{best.label} and {next_.label}: 95% intervals overlap, not distinguishable "
                f"at this n (n={best.n}, {next_.n}; values {spans})")
    return None


def identical_note(groups: Sequence[Group], aggregate_over: Sequence[str],
                   final_losses: Mapping[str, float]) -> str | None:
    """One line when some configuration's replicates all gave the same value and the same final
    loss (`final_losses`: run id -> final_loss): what they differ in changes nothing these runs
    compute (trainer.seed on a full-batch run seeds only the batch order), so their std of 0
    and interval of one point say nothing of the noise. The loss too: an accuracy of 1.0 that
    every seed reaches is no such sign (QA: it said "seed changes nothing")."""
    same = [group for group in groups if group.n > 1 and len(set(group.values)) == 1
            and len({final_losses.get(run_id) for run_id in group.run_ids}) == 1]
    if not same:
        return None
    whose = f"its {same[0].n} replicates" if len(same) == 1 else "each one's replicates"
    hint = "" if "seed" in aggregate_over else (
        " (the master seed= varies the weights, dropout, batch order and data too)")
    return (f"{', '.join(group.label for group in same[:3])}{' ...' if len(same) > 3 else ''}: "
            f"{whose} gave one value and one final loss; {', '.join(aggregate_over)} changes "
            f"nothing these runs compute{hint}")


def number(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.6g}"


def interval(group: Group) -> str:
    """The group's 95% interval as `[low, high]`, or "-" with one replicate."""
    return "-" if group.ci95 is None else f"[{number(group.ci95[0])}, {number(group.ci95[1])}]"


def groups_table(groups: Sequence[Group], metric: str, arrow: str, title: str):
    """A rich Table: one row a group, best mean first."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title), title_justify="left")
    left_out = any(group.left_out for group in groups)  # the column only when it says something
    for column in ("group", "n", f"mean {metric} {arrow}", "std", "95% interval",
                   *(["left out"] if left_out else [])):
        table.add_column(escape(column), overflow="fold")
    for group in groups:
        # A label is override text: `model.hidden=[64,64]` or a `[name]` must not read as markup.
        table.add_row(escape(group.label), str(group.n), number(group.mean), number(group.std),
                      interval(group), *([group.left_out or "-"] if left_out else []))
    return table


def errorbar_figure(groups: Sequence[Group], metric: str):
    """The objective's mean of each group with its 95% interval as error bars (a point alone at
    n=1) against the swept key: a numeric one (optimizer.learning_rate) along x, one line for
    each value of the other keys (optimizer=adam); without a numeric key, one point a group.
    Log scales where x spans a decade or more, the means more than two."""
    from matplotlib.figure import Figure

    shown = [group for group in groups if group.n]
    keys = sorted(shown[0].params) if shown else []
    numeric = [key for key in keys if all(_is_number(g.params[key]) for g in shown)]
    x_key = numeric[-1] if numeric else None
    series: dict[str, list[Group]] = {}
    for group in shown:
        rest = ",".join(f"{k}={v}" for k, v in sorted(group.params.items()) if k != x_key)
        series.setdefault(rest or metric, []).append(group)
    figure = Figure(figsize=(7.5, 4.2), layout="constrained")
    axis = figure.add_subplot()
    for index, (label, members) in enumerate(series.items()):
        if x_key is not None:
            members = sorted(members, key=lambda g: float(g.params[x_key]))
            xs = [float(g.params[x_key]) for g in members]
        else:
            xs = [float(index)]
        means = [g.mean for g in members]
        low = [g.mean - g.ci95[0] if g.ci95 else 0.0 for g in members]
        high = [g.ci95[1] - g.mean if g.ci95 else 0.0 for g in members]
        axis.errorbar(xs, means, yerr=[low, high], fmt="o-" if len(xs) > 1 else "o",
                      capsize=3, label=label)
    if x_key is None:
        axis.set_xticks(range(len(series)), list(series), rotation=30, ha="right")
    else:
        axis.set_xlabel(x_key)
        values = [float(g.params[x_key]) for g in shown]
        if min(values) > 0 and max(values) / min(values) >= 10:
            axis.set_xscale("log")
        if len(series) > 1:
            axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    means = [g.mean for g in shown]
    if means and min(means) > 0 and max(means) / min(means) > 100:
        axis.set_yscale("log")  # the interval's lower end may be <= 0: matplotlib clips it
    axis.set_ylabel(f"{metric} (mean, 95% interval)")
    counts = sorted({group.n for group in shown})
    axis.set_title(f"{metric} by configuration (n={','.join(map(str, counts))})")
    axis.grid(alpha=0.3)
    return figure


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


# ---------------------------------------------------------------- Student's t, without scipy
def t_quantile(p: float, dof: int) -> float:
    """The p-quantile of Student's t with `dof` degrees of freedom (p in (0.5, 1)): bisection on
    the distribution function (scipy is not a dependency; agrees with scipy.stats.t.ppf to 1e-9)."""
    low, high = 0.0, 1.0
    while t_cdf(high, dof) < p:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2
        if t_cdf(middle, dof) < p:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def t_cdf(t: float, dof: int) -> float:
    """P(T <= t) for t >= 0: 1 - I_x(dof/2, 1/2) / 2 with x = dof / (dof + t²)."""
    x = dof / (dof + t * t)
    return 1.0 - 0.5 * _incomplete_beta(x, dof / 2.0, 0.5)


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b) by its continued fraction (Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side only
        return 1.0 - _incomplete_beta(1.0 - x, b, a)
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            numerator = 1.0
        elif i % 2 == 0:
            numerator = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            numerator = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + numerator * d
        d = 1.0 / (tiny if abs(d) < tiny else d)
        c = 1.0 + numerator / c
        c = tiny if abs(c) < tiny else c
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return front * (f - 1.0) / a
