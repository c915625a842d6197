"""The chart's CRDs have exactly KAI Scheduler v0.17's fields and validations, and this project's additions.

kai_v017_crd_fields.json is the output of deploy/crd_field_paths.py on KAI's CRDs at v0.17 (the
script's docstring says how it was made); the same script reads the chart's CRDs here. The fields
this project adds (``PROJECT_FIELDS``) are listed here, each with its validations.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CRDS = ROOT / "deploy" / "chart" / "kai-scheduler" / "crds"
SCRIPT = ROOT / "deploy" / "crd_field_paths.py"
REFERENCE = Path(__file__).with_name("kai_v017_crd_fields.json")
KAI_V017 = "d5bc503a146317e51037d89775d77172c6d12f71"


def _script():
    spec = importlib.util.spec_from_file_location("crd_field_paths", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


crd_field_paths = _script()
REFERENCE_DATA = json.loads(REFERENCE.read_text())
KAI = REFERENCE_DATA["crds"]
#: The fields this project adds to KAI's CRDs, by CRD and version: a Queue's GPU quota per resource type.
PROJECT_FIELDS: dict[str, dict[str, dict]] = {"queues.scheduling.run.ai": {"v2": {
    ".spec.resourceTypes": {"type": "array"},
    ".spec.resourceTypes[]": {"required": ["name", "nodeSelector"], "type": "object"},
    ".spec.resourceTypes[].gpu": {"type": "object"},
    ".spec.resourceTypes[].gpu.limit": {"type": "number"},
    ".spec.resourceTypes[].gpu.overQuotaWeight": {"type": "number"},
    ".spec.resourceTypes[].gpu.quota": {"type": "number"},
    ".spec.resourceTypes[].name": {"minLength": 1, "type": "string"},
    ".spec.resourceTypes[].nodeSelector": {"minProperties": 1, "type": "object"},
    ".spec.resourceTypes[].nodeSelector{}": {"type": "string"},
}}}


def without_project_fields(crds: dict) -> dict:
    """``crds`` (the script's ``crds``) without the fields of :data:`PROJECT_FIELDS`."""
    out = json.loads(json.dumps(crds))
    for name, versions in PROJECT_FIELDS.items():
        for version, fields in versions.items():
            for path in fields:
                out[name]["versions"][version]["fields"].pop(path, None)
    return out


@pytest.fixture(scope="module")
def chart() -> dict:
    return crd_field_paths.folder_fields(CRDS)


def differences(want: dict, got: dict) -> list[str]:
    """How the field paths of ``got`` differ from ``want``: missing, extra, or with other validations."""
    found = [f"missing {p}" for p in sorted(set(want) - set(got))]
    found += [f"extra {p}" for p in sorted(set(got) - set(want))]
    found += [f"{p}: KAI has {want[p]}, the chart {got[p]}" for p in sorted(set(want) & set(got)) if want[p] != got[p]]
    return found


def test_reference_is_kai_v017():
    assert KAI_V017 in REFERENCE_DATA["source"]
    assert set(KAI) == {"queues.scheduling.run.ai", "podgroups.scheduling.run.ai", "bindrequests.scheduling.run.ai",
                        "topologies.kai.scheduler", "schedulingshards.kai.scheduler", "configs.kai.scheduler"}
    podgroup = KAI["podgroups.scheduling.run.ai"]["versions"]["v2alpha2"]["fields"]
    assert {".spec.minSubGroup", ".spec.preemptionDelay", ".spec.stalenessGracePeriod",
            ".spec.subGroups[].minSubGroup"} <= set(podgroup)
    assert podgroup[".spec.preemptibility"]["enum"] == ["non-preemptible", "preemptible"]
    assert ".spec.levels[].alias" in KAI["topologies.kai.scheduler"]["versions"]["v1alpha1"]["fields"]


def test_chart_ships_exactly_kai_s_crds(chart):
    assert sorted(chart) == sorted(KAI)


@pytest.mark.parametrize("name", sorted(KAI))
def test_crd_has_kai_v017_names_versions_fields_and_validations(name, chart):
    want, got = KAI[name], chart[name]
    assert {k: v for k, v in got.items() if k != "versions"} == {k: v for k, v in want.items() if k != "versions"}
    assert sorted(got["versions"]) == sorted(want["versions"])
    for version, expected in want["versions"].items():
        actual = got["versions"][version]
        assert (actual["served"], actual["storage"], actual["subresources"]) == \
            (expected["served"], expected["storage"], expected["subresources"]), version
        found = differences({**expected["fields"], **PROJECT_FIELDS.get(name, {}).get(version, {})}, actual["fields"])
        assert not found, f"{name} {version}:\n" + "\n".join(found)


def test_differences_name_missing_extra_and_changed_fields():
    want = KAI["podgroups.scheduling.run.ai"]["versions"]["v2alpha2"]["fields"]
    got = {p: dict(v) for p, v in want.items() if p != ".spec.minSubGroup"}
    got[".spec.parallelism"] = {"type": "integer"}
    got[".spec.preemptibility"]["enum"] = ["preemptible"]
    assert differences(want, got) == [
        "missing .spec.minSubGroup", "extra .spec.parallelism",
        ".spec.preemptibility: KAI has {'enum': ['non-preemptible', 'preemptible'], 'type': 'string'}, "
        "the chart {'enum': ['preemptible'], 'type': 'string'}"]


def test_field_paths_name_properties_items_and_map_values():
    schema = {"type": "object", "required": ["spec", "kind"], "properties": {
        "kind": {"type": "string"},
        "spec": {"type": "object", "description": "not a validation", "properties": {
            "mode": {"type": "string", "enum": ["b", "a"]},
            "groups": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "pattern": "^[a-z]+$"}}}},
            "usage": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        }},
    }}
    assert crd_field_paths.schema_fields(schema) == {
        ".": {"type": "object", "required": ["kind", "spec"]},
        ".kind": {"type": "string"},
        ".spec": {"type": "object"},
        ".spec.mode": {"type": "string", "enum": ["a", "b"]},
        ".spec.groups": {"type": "array"},
        ".spec.groups[]": {"type": "object", "required": ["name"]},
        ".spec.groups[].name": {"type": "string", "pattern": "^[a-z]+$"},
        ".spec.usage": {"type": "object"},
        ".spec.usage{}": {"type": "integer", "minimum": 0},
    }


def test_script_reproduces_the_reference_from_the_chart_s_crds(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), str(CRDS), "--source", REFERENCE_DATA["source"]],
                         capture_output=True, text=True, check=True)
    made = json.loads(run.stdout)
    assert {**made, "crds": without_project_fields(made["crds"])} == REFERENCE_DATA
    (tmp_path / "bad.yaml").write_text("kind: CustomResourceDefinition\nmetadata: {name: x}\nspec: {group: g}\n")
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 2 and "bad.yaml" in run.stderr and "'names'" in run.stderr
