"""The suite's own rule: a test that starts a process is marked slow (conftest.py's audit hook
fails any process start in a session that selects no slow test, e.g. `-m "not slow"`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import conftest


def test_a_process_start_is_refused_while_the_guard_is_on():
    was = conftest._GUARD["on"]
    conftest._GUARD["on"] = True  # as in a `-m "not slow"` session
    try:
        with pytest.raises(RuntimeError, match=r'mark it @pytest.mark.slow, so that `-m "not '):
            subprocess.run([sys.executable, "-c", "pass"], check=False)  # refused before fork
        assert conftest._GUARD["started"] == [f"{sys.executable} -c pass"]
    finally:
        conftest._GUARD["on"] = was
        conftest._GUARD["started"].clear()
