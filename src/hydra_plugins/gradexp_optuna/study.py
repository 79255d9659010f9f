"""The study a `hydra/sweeper=optuna` search runs in: where it is stored (hydra.sweeper.storage,
else a journal file beside mlflow.db), the study it continues, and what that study already holds.

checks.check_search_space looks at it before the sweep's parent run opens (QA: a storage Optuna
cannot open, or a named study whose choices changed, was a traceback after the parent opened,
left KILLED and empty; a grid study run again repeated one point n_trials times), and the
sweeper opens it the same way. Looking creates nothing: a journal or sqlite file that does not
exist yet holds no study."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradexp.pruning import JOURNAL_FILE, store_folder
from gradexp.schema import ConfigError

STORAGE = "hydra.sweeper.storage"
ACCEPTED_STORAGE = ("accepted: a database URL such as sqlite:///optuna.db (in an existing folder) "
                    "or postgresql://user@host/db, or null (optuna.journal beside mlflow.db)")


def check_storage(storage: Any) -> None:
    """A ConfigError (one line naming hydra.sweeper.storage) for a storage Optuna cannot open:
    not a database URL, a database whose driver is not installed, an sqlite file in a folder
    that does not exist."""
    if not storage:
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(str(storage))
    except ArgumentError:
        raise ConfigError(f"{STORAGE}={storage}: not a database URL; {ACCEPTED_STORAGE}") from None
    shown = url.render_as_string(hide_password=True)
    try:
        dialect = url.get_dialect()
        getattr(dialect, "import_dbapi", getattr(dialect, "dbapi", None))()
    except Exception as error:  # noqa: BLE001 - no such database kind, or its driver is missing
        raise ConfigError(f"{STORAGE}={shown}: SQLAlchemy cannot open this kind of database "
                          f"({type(error).__name__}: {error}); {ACCEPTED_STORAGE}") from None
    database = _sqlite_file(url)
    if database is not None and not database.parent.is_dir():
        raise ConfigError(f"{STORAGE}={shown}: the folder {database.parent} of its database file "
                          f"does not exist; {ACCEPTED_STORAGE}")


def _sqlite_file(url: Any) -> Path | None:
    """The file of an sqlite URL (relative to the launch folder, as sqlite opens it)."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database).expanduser()


def open_storage(config: DictConfig, storage: Any) -> tuple[Any, str]:
    """(the storage Optuna opens, how to name it in one line): hydra.sweeper.storage as given,
    else the journal file beside the MLflow store."""
    if storage:
        return str(storage), str(storage)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = store_folder(config) / JOURNAL_FILE
    return JournalStorage(JournalFileBackend(str(path))), str(path)


def stored_study(config: DictConfig, storage: Any, name: str) -> Any | None:
    """The study `name` as stored, None when there is none yet (and then nothing is created)."""
    import optuna

    if storage:
        from sqlalchemy.engine import make_url

        database = _sqlite_file(make_url(str(storage)))
        if database is not None and not database.is_file():
            return None
    elif not (store_folder(config) / JOURNAL_FILE).is_file():
        return None
    try:
        return optuna.load_study(study_name=name, storage=open_storage(config, storage)[0])
    except KeyError:  # no study of that name
        return None
    except Exception as error:  # noqa: BLE001 - a server that does not answer, a locked file
        raise ConfigError(f"{STORAGE}={storage}: Optuna could not open it ({type(error).__name__}"
                          f": {error}); {ACCEPTED_STORAGE}") from None


def changed_key(study: Any, distributions: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """(key, the study's distribution, this search's) for the first searched key whose choices
    or kind changed since the study's trials were asked (Optuna refuses such a trial)."""
    from optuna.distributions import check_distribution_compatibility

    stored: dict[str, Any] = {}
    for trial in study.get_trials(deepcopy=False):
        for key, dist in trial.distributions.items():
            stored.setdefault(key, dist)
    for key, new in distributions.items():
        if key in stored:
            try:
                check_distribution_compatibility(stored[key], new)
            except ValueError:
                return key, stored[key], new
    return None


def as_written(dist: Any) -> str:
    """A distribution as the command line would write it (for a one-line message)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return f"choice({','.join(str(choice) for choice in dist.choices)})"
    kind = "int, " if isinstance(dist, IntDistribution) else ""
    text = f"interval({dist.low},{dist.high})"
    if dist.log:
        return f"tag({kind}log, {text})"
    return f"tag(int, {text})" if kind else text


def untried_points(study: Any | None, values: dict[str, list]) -> int:
    """How many points of a grid (key -> its values) the study has not finished a trial of (as
    Optuna's GridSampler counts them: a failed or pruned point is tried)."""
    keys = sorted(values)
    points = list(itertools.product(*(values[key] for key in keys)))
    if study is None:
        return len(points)
    tried = {tuple(trial.params[key] for key in keys)
             for trial in study.get_trials(deepcopy=False)
             if trial.state.is_finished() and all(key in trial.params for key in keys)}
    return sum(1 for point in points if point not in tried)


def study_label(config: DictConfig, name: str) -> str:
    """How a line names the study: the setting a person wrote, else the study's own name."""
    if OmegaConf.select(config, "hydra.sweeper.study_name", default=None):
        return f"hydra.sweeper.study_name={name}"
    return f"the Optuna study {name}"


def grid_done_line(label: str, points: int) -> str:
    """The one line for a grid study that has tried every point of its grid."""
    return (f"{label} has tried every point of its grid ({points}): nothing to run; "
            "hydra.sweeper.study_name=NEW for a new study")
