"""KAI's own scheduling tests, replayed through the kernel: nothing may fail, and the number passing
may not drop below the baseline kept in ``baseline.json`` (raise it as features land)."""

import json
from pathlib import Path

import pytest

from kai.sim.conformance import run_paths

HERE = Path(__file__).parent
SCENARIOS = HERE / "kai"
BASELINE = json.loads((HERE / "baseline.json").read_text())


@pytest.fixture(scope="module")
def results():
    return run_paths([str(SCENARIOS)])


def test_no_scenario_fails(results):
    failed = [f"{r['name']}: {r['reason']}" for r in results if r["status"] == "failed"]
    assert not failed, "\n".join(failed)


def test_passing_count_not_below_baseline(results):
    passed = sum(1 for r in results if r["status"] == "passed")
    assert passed >= BASELINE["passed"], f"{passed} scenarios pass, baseline is {BASELINE['passed']}"


def test_every_skip_names_what_is_missing(results):
    for r in results:
        if r["status"] == "skipped":
            assert r["reason"].startswith("needs: ") and len(r["reason"]) > len("needs: ")
