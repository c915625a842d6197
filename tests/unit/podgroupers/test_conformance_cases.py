"""Every podgrouper conformance case (KAI's own podgrouper tests) passes through the hub."""

from pathlib import Path

import pytest

from kai.sim.podgroup_cases import run_case_file

CASES = Path(__file__).resolve().parents[2] / "conformance" / "podgrouper"
FILES = sorted(CASES.glob("*.yaml"))


def test_case_files_are_present():
    assert len(FILES) >= 19


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_case_file_passes(path):
    results = run_case_file(path)
    assert results
    assert [r for r in results if r["status"] != "passed"] == []
    assert {r["file"] for r in results} == {str(path)}


def test_failures_are_reported_with_the_first_mismatch(tmp_path):
    case = (CASES / "podgrouper__podgrouper_test.yaml").read_text().replace("minAvailable: 1", "minAvailable: 7")
    (tmp_path / "bad.yaml").write_text(case)
    [result] = run_case_file(tmp_path / "bad.yaml")
    assert result["status"] == "failed"
    assert result["reason"] == "minAvailable: expected 7, got 1"


def test_unknown_grouper_is_skipped(tmp_path):
    case = (CASES / "spark__spark_test.yaml").read_text().replace("grouper: spark", "grouper: no-such-grouper")
    (tmp_path / "unknown.yaml").write_text(case)
    results = run_case_file(tmp_path / "unknown.yaml")
    assert results[0]["status"] == "skipped"
    assert "no-such-grouper" in results[0]["reason"]
