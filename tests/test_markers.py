"""The suite's own rules for its two tiers.

`python -m pytest -n 2 --dist loadgroup` (CI) runs every test; `-m "not slow"` is the fast tier.

- A test that starts a process (`python -m gradexp`, an MLflow server, Ray, a helper script) is
  marked slow: conftest.py's audit hook fails any process start in a session that selects no
  slow test (tested below).
- A test whose own time is over ~2 s on the quiet 2-core machine under `-n 2` (pytest's
  `--durations`, call plus setup) is marked heavy, with its measured seconds beside the mark;
  under that it stays fast. conftest.py makes a heavy test slow too (so `-m "not slow"` skips
  it) but leaves it out of the module's slow group: it starts nothing, so xdist balances it
  test by test. That keeps the fast tier under 3 minutes (646 tests in 2 min 16 s on
  2026-12-03; 729 in 4 min 44 s under the earlier ~20 s rule). To re-measure: `python -m
  pytest -m "not slow" -n 2 --dist loadgroup -q --durations=0` on a quiet machine (and `-m
  heavy` for the ones that may have got cheaper). A module fixture that several tests read
  counts once for the module (test_compare's and test_replicates' stores stay fast).
  Before marking one slow: share the run through a module-scoped fixture where several tests
  only read it, train fewer epochs or tinier data where the assertion still holds and can
  still fail. The whole suite runs every test either way.
- What every test pays is kept out of its time: each `store` is a copy of one empty MLflow store
  made once a session (conftest.empty_store), not ~50 schema migrations a test.
- Both tiers run on both cores, `-n 2 --dist loadgroup` (pytest-xdist): each worker runs in
  its own launch folder and every test writes under its tmp_path, so nothing is shared between
  workers; a module whose tests read one module-scoped run carries an xdist_group mark, so that
  run is made on one worker, not once per worker; and each module's slow tests form one group
  (conftest.py), run in order on one worker, the biggest groups handed out first.
- The fast tier keeps at least one test of each area, over 2 s or not: config (test_config,
  test_every_key), the runner (test_runner), the checker (test_gradcheck, test_verification,
  test_op_suite, test_culprits' shared run), tracking (test_tracking), sweeps composed
  in-process (test_api's sweep, test_evaluation, test_replicates), packed programs (test_packed's
  stopped jobs) and compare (test_compare).
"""

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


def test_a_heavy_test_is_slow_but_not_in_its_modules_slow_group(request):
    heavy = [item for item in request.session.items if item.get_closest_marker("heavy")]
    for item in heavy:  # none when the session is `-m "not slow"`: they were deselected
        assert item.get_closest_marker("slow"), item.nodeid
        group = item.get_closest_marker("xdist_group")
        assert group is None or not group.args[0].startswith("slow-"), item.nodeid
