"""The tracking URI a run writes to: resolved against the launch folder, checked before
TensorFlow loads (a sqlite store's folder, a scheme MLflow has a store for, a server that
answers), and shown with its credentials masked.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from gradexp.schema import ConfigError

# Stores MLflow names by a bare word, not a URI (tracking.uri=databricks): not folders.
BARE_SCHEMES = ("databricks", "databricks-uc", "uc")
MASK = "***"


def redact_uri(uri: str) -> str:
    """The URI without credentials: http://user:pw@host -> http://***@host."""
    parts = urllib.parse.urlsplit(uri)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{MASK}@{host}" + (f":{parts.port}" if parts.port else "")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return uri


def resolve_uri(uri: str | None, base_dir: Path) -> str:
    """None -> MLflow's own default (MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in base_dir);
    a relative sqlite path is made absolute, so sweep workers in other folders share the store."""
    if not uri:
        uri = os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = f"sqlite:///{(base_dir / uri[len('sqlite:///'):]).resolve()}"
    elif "://" not in uri and uri not in BARE_SCHEMES:  # a plain folder: MLflow's file store
        uri = str((base_dir / uri).resolve())
    return uri


def check_server(uri: str, timeout: float = 5.0) -> None:
    """Fail fast (one line, no retry storm) when an http tracking server does not answer, or
    answers but is not an MLflow tracking server (a plain web server, a wrong path)."""
    if not uri.startswith(("http://", "https://")):
        return
    probe = uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1"
    request = _request_without_credentials(probe)
    shown = f"tracking.uri={redact_uri(uri)}"
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            body = answer.read(65536)
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            return  # a server that wants credentials; MLflow sends them (MLFLOW_TRACKING_*)
        raise ConfigError(
            f"{shown}: a server answers but not as an MLflow tracking server (its MLflow API "
            f"answers HTTP {error.code} {error.reason}); check the address and the port"
        ) from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ConfigError(
            f"{shown}: no MLflow server answers ({reason}); "
            "start one (mlflow server) or use the local store (omit tracking.uri)"
        ) from None
    try:
        json.loads(body)
    except ValueError:
        raise ConfigError(
            f"{shown}: a server answers but not as an MLflow tracking server (its MLflow API "
            "does not answer in JSON); check the address and the port") from None


def _request_without_credentials(url: str) -> urllib.request.Request:
    """urllib cannot take user:password@ in a URL: move it to a basic-auth header."""
    parts = urllib.parse.urlsplit(url)
    if not (parts.username or parts.password):
        return urllib.request.Request(url)
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    plain = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    token = base64.b64encode(
        f"{urllib.parse.unquote(parts.username or '')}:"
        f"{urllib.parse.unquote(parts.password or '')}".encode()).decode()
    return urllib.request.Request(plain, headers={"Authorization": f"Basic {token}"})


def sqlite_file(uri: str) -> Path | None:
    """The database file a sqlite:/// URI names; None for other stores and in-memory sqlite."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def check_store_folder(uri: str) -> None:
    """A sqlite store's folder must exist: MLflow would silently create the whole folder tree
    (a typo in tracking.uri would scatter stores over the disk)."""
    database = sqlite_file(uri)
    if database is not None and not database.parent.is_dir():
        raise ConfigError(f"tracking.uri={uri}: the folder {database.parent} does not exist; "
                          "create it first or pick a store in an existing folder")


def check_store_kind(uri: str, shown: str | None = None) -> None:
    """A URI MLflow has no store for (a typo: sqllite://, postgres://) is one line, and so is a
    folder store where MLflow refuses one (MLflow 3 keeps them in maintenance mode unless
    MLFLOW_ALLOW_FILE_STORE=true): both are MLflow tracebacks otherwise. `shown`: the value as
    the person typed it (the URI is resolved against the launch folder)."""
    from mlflow.utils.uri import get_uri_scheme

    key = f"tracking.uri={redact_uri(shown or uri)}"
    scheme = uri if uri in BARE_SCHEMES else get_uri_scheme(uri)
    try:  # MLflow's own table of store schemes, plugins' included
        from mlflow.tracking._tracking_service.utils import _tracking_store_registry

        known = set(_tracking_store_registry._registry)
    except (ImportError, AttributeError):  # moved in another MLflow: MLflow says it later
        return
    typed = shown or uri
    if scheme == "sqlite" and uri.startswith("sqlite://") and uri[len("sqlite://"):] \
            and not uri.startswith("sqlite:///"):  # sqlite://mlflow.db: SQLAlchemy's traceback
        raise ConfigError(f"{key}: a sqlite URI has three slashes before a relative path "
                          f"(sqlite:///{uri[len('sqlite://'):]}) and four before an absolute "
                          "one (sqlite:////home/you/mlflow.db)")
    if scheme in ("", "file") and (Path(uri.removeprefix("file:")).is_file()
                                   or typed.endswith((".db", ".sqlite", ".sqlite3"))):
        raise ConfigError(f"{key}: a path to a database file, not a store URI: write "
                          f"sqlite:///{typed.removeprefix('file:')} (three slashes before a "
                          "relative path, four before an absolute one)")
    server = server_uri(typed) if scheme in ("", "file") else None
    if server:  # QA: 127.0.0.1:5000 was taken for a folder, and MLflow refuses folders
        raise ConfigError(f"{key}: HOST:PORT without a scheme is read as a folder; for a tracking "
                          f"server write {server}")
    if scheme not in known:
        accepted = ", ".join(f"{name}://" for name in sorted(known - _refused_kinds()) if name)
        raise ConfigError(f"{key}: MLflow has no store for {scheme}:// URIs; accepted: "
                          f"{accepted}, or null (sqlite:///mlflow.db in the launch folder)")
    if scheme in _refused_kinds():
        raise ConfigError(f"{key}: MLflow refuses a folder as a store (its file store is in "
                          "maintenance mode); use sqlite:///PATH/mlflow.db or null "
                          "(./mlflow.db), or set MLFLOW_ALLOW_FILE_STORE=true")


# HOST:PORT and perhaps a path, with no scheme: localhost:5000, 10.0.0.2:5000/mlflow
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):\d{1,5}(/.*)?")


def server_uri(typed: str) -> str | None:
    """http://HOST:PORT for a tracking.uri typed as HOST:PORT without its scheme, which MLflow
    would take for a folder; None for anything else."""
    return f"http://{typed}" if _HOST_PORT.fullmatch(typed) else None


def _refused_kinds() -> set[str]:
    """The schemes MLflow knows but refuses as they are: its folder store (file://, a bare
    path), in maintenance mode since MLflow 3 unless MLFLOW_ALLOW_FILE_STORE=true. Left out
    of the accepted kinds a typo's line lists."""
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:  # an MLflow that still takes folder stores as they are
        return set()
    return set() if MLFLOW_ALLOW_FILE_STORE.get() else {"", "file"}
