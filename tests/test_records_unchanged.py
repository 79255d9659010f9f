"""Refactoring leaves what runs record alone: the same runs as tests/baselines/records.json
(written by tests/baselines/record_baseline.py on the code before) record the same params,
metrics (names, steps; values equal or within 1e-6 relative), tags, artifact paths and models.

A change that records more or other things on purpose reruns the script:
    python tests/baselines/record_baseline.py
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "baselines"))
import record_baseline  # noqa: E402

BASELINE = json.loads(record_baseline.BASELINE.read_text())


def differences(expected: dict, found: dict) -> list[str]:
    """What differs between two run records, one line each."""
    lines = []
    for part in ("status", "params", "tags", "artifacts", "models"):
        if expected[part] != found[part]:
            if isinstance(expected[part], dict):
                keys = set(expected[part]) | set(found[part])
                lines += [f"{part}.{key}: {expected[part].get(key)!r} -> {found[part].get(key)!r}"
                          for key in sorted(keys)
                          if expected[part].get(key) != found[part].get(key)]
            else:
                lines.append(f"{part}: {expected[part]!r} -> {found[part]!r}")
    for key in sorted(set(expected["metrics"]) | set(found["metrics"])):
        before, after = expected["metrics"].get(key), found["metrics"].get(key)
        if before is None or after is None:
            lines.append(f"metric {key}: {'added' if before is None else 'gone'}")
        elif [s for s, _ in before] != [s for s, _ in after]:
            lines.append(f"metric {key}: steps {[s for s, _ in before]} -> {[s for s, _ in after]}")
        else:
            for (step, a), (_, b) in zip(before, after):
                if not (a == b or (math.isnan(a) and math.isnan(b))
                        or math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0)):
                    lines.append(f"metric {key} at step {step}: {a!r} -> {b!r}")
                    break
    return lines


@pytest.mark.parametrize("name", list(record_baseline.IN_PROCESS))
@pytest.mark.heavy  # ~3 s
def test_an_in_process_run_records_what_it_recorded_before(name):
    found = record_baseline.in_process_records(name, record_baseline.IN_PROCESS[name])
    assert differences(BASELINE[name], found) == []


@pytest.mark.slow
def test_a_four_job_sweep_records_what_it_recorded_before():
    found = record_baseline.sweep_records()
    expected = {name: record for name, record in BASELINE.items() if name.startswith("sweep:")}
    assert sorted(found) == sorted(expected)
    for name, record in expected.items():
        assert differences(record, found[name]) == [], name
