"""MLflow's source tags for a run (mlflow.utils.mlflow_tags), which the runs view's Source column
shows: what started the process, LOCAL, and the git commit of the launch folder."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path


def git_commit(folder: Path) -> str | None:
    """The commit checked out in `folder`, when it is a git work tree."""
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True,
                                text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None


def entry_point() -> str:
    """What started this process, for the run's Source: `gradexp` for the command line (python
    -m gradexp, the gradexp script), else the script (or kernel) sys.argv[0] names."""
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    if started.name == "gradexp" or (started.name == "__main__.py"
                                     and started.parent.name == "gradexp"):
        return "gradexp"
    return str(started)


def source_tags(folder: Path, parent_run_id: str | None = None) -> dict[str, str | None]:
    """MLflow's own source tags (mlflow.utils.mlflow_tags), which the runs view's Source column
    shows: the entry point, LOCAL, and the git commit of the launch folder (None: not in git).
    A sweep's jobs in one process run one checkout's code: git is asked once a sweep (a
    subprocess, ~10 ms a job), not once a job."""
    commit = (git_commit(folder) if parent_run_id is None
              else _sweep_git_commit(folder.resolve(), parent_run_id))
    return {"mlflow.source.name": entry_point(), "mlflow.source.type": "LOCAL",
            "mlflow.source.git.commit": commit}


@functools.lru_cache(maxsize=16)
def _sweep_git_commit(folder: Path, parent_run_id: str) -> str | None:
    return git_commit(folder)
