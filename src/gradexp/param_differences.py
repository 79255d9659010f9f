"""Which params differ between runs, and why: the ones worth a column, the ones that only follow
from a group's option (Adam's beta_1 when optimizer.name differs), and the ones a sweep swept.
gradexp compare's table and a sweep's summary ("besides the swept keys, these differ") ask it."""

from __future__ import annotations


def differing_params(runs: list) -> tuple[list[str], list[str], int]:
    """Which param keys to list: (keys whose value differs between the runs, keys that differ but
    only follow from a group's option, number of keys the same everywhere). A missing key counts
    as a value of its own. sweep.* keys steer a sweep, not its jobs (a rerun with
    sweep.resume_killed=true is the same job): never listed."""
    keys = sorted({key for run in runs for key in run.data.params if not key.startswith("sweep.")})
    differ = [key for key in keys if len({run.data.params.get(key) for run in runs}) > 1]
    implied = [key for key in differ if follows_from_option(runs, key)]
    return [key for key in differ if key not in implied], implied, len(keys) - len(differ)


def follows_from_option(runs: list, key: str) -> bool:
    """optimizer.beta_1 (only Adam has it) or optimizer._target_ when optimizer.name differs:
    the value is fixed by which option was chosen, so the `.name` column already says it."""
    group, _, leaf = key.partition(".")
    name_key = f"{group}.name"
    if leaf in ("", "name") or not all(name_key in run.data.params for run in runs):
        return False
    if leaf != "_target_" and all(key in run.data.params for run in runs):
        return False  # a value every option has (learning_rate): worth a column
    by_option: dict[str, set] = {}
    for run in runs:
        by_option.setdefault(run.data.params[name_key], set()).add(run.data.params.get(key))
    return all(len(values) == 1 for values in by_option.values())


def is_swept(key: str, swept: list[str]) -> bool:
    """optimizer.learning_rate is swept by `optimizer.learning_rate`; optimizer._target_ and
    optimizer.name by the group `optimizer`, but not the keys every option of the group has:
    `-m optimizer=sgd,rmsprop` compares sgd at its 0.1 with rmsprop at its 0.01, which the
    comparison must say (it said "no param differs"). A swept dotted key covers its own
    sub-keys (`model.kwargs`). sweep.* keys steer the sweep, not a job: swept too."""
    def covers(name: str) -> bool:
        if "." not in name:  # a group (or a top-level key: seed)
            return key in (name, f"{name}.name", f"{name}._target_")
        return key == name or key.startswith(name + ".")

    return key.startswith("sweep.") or any(covers(name) for name in swept)
