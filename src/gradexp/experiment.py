"""One experiment: kept for the names other code imports; the run loop is gradexp.loop."""

from __future__ import annotations

from gradexp.loop import (
    Diverged,
    GradientCheckFailed,
    RunFailed,
    RunResult,
    Terminated,
    check_store,
    check_user_code,
    run_experiment,
    sigterm_as_interrupt,
)

__all__ = ["Diverged", "GradientCheckFailed", "RunFailed", "RunResult", "Terminated",
           "check_store", "check_user_code", "run_experiment", "sigterm_as_interrupt"]
