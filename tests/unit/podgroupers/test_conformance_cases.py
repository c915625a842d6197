"""The podgrouper case runner: the case files are there and a failure names the first mismatch.

Each case runs as its own conformance item (tests/conformance/conftest.py)."""

from pathlib import Path

from kai.sim.podgroup_cases import run_case, run_case_file

CASES = Path(__file__).resolve().parents[2] / "conformance" / "podgrouper"
FILES = sorted(CASES.glob("*.yaml"))


def test_case_files_are_present():
    assert len(FILES) >= 19


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


def test_a_hub_case_without_top_owner_is_skipped():
    """The hub dispatches on the top owner's kind: without one the case cannot run."""
    case = {"name": "no owner", "grouper": "hub", "pod": {"metadata": {"name": "p", "namespace": "ns"}}}
    result = run_case(case, "cases.yaml")
    assert (result["status"], result["reason"]) == ("skipped", "a hub case needs a top owner")


def test_hub_dispatch_picks_the_podgrouper_each_case_names():
    """Rerun every case whose top owner's kind is claimed by the case's podgrouper, as a ``hub`` case."""
    import yaml

    from kai.grouping.hub import build_hub
    from kai.grouping.objects import MemoryObjects
    from kai.grouping.unstructured import gvk
    from kai.sim.podgroup_cases import run_case

    table_hub = build_hub(MemoryObjects())
    rerun = 0
    for path in FILES:
        for case in yaml.safe_load(path.read_text()):
            index = case["top_owner"]
            if index is None or table_hub.podgrouper_for(gvk(case["objects"][index])) != case["grouper"]:
                continue
            result = run_case({**case, "grouper": "hub"}, str(path))
            assert result["status"] == "passed", result
            rerun += 1
    assert rerun >= 40
