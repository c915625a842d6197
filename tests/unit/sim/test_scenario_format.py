"""The conformance runner skips a scenario that sets a field it does not build, instead of ignoring it."""

import copy

import pytest

from kai.sim.conformance import Runner
from kai.sim.scenario import load_scenarios
from kai.sim.scenario_format import FIELDS, UNBUILT, needs

BASE = {
    "name": "s", "actions": ["allocate"], "mode": "single_session", "config": {},
    "nodes": {"n0": {"gpus": 2}},
    "queues": [{"name": "q", "priority": 100, "deserved_gpus": 2, "max_allowed_gpus": -1, "over_quota_weight": 1}],
    "jobs": [{"name": "j", "queue": "q", "priority": 0, "preemptible": True, "created_minutes_ago": 1,
              "gpus_per_task": 1, "tasks": [{"state": "Pending"}]}],
    "expected": {"jobs": {"j": {"status": "Binding", "gpus_required": 1}}},
}


def scenario(**changes):
    data = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = data
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        target[key] = value
    return data


def run(data, tmp_path):
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump([data]))
    [sc] = load_scenarios(str(path))
    return Runner().run(sc)


def test_a_scenario_of_built_fields_runs(tmp_path):
    assert needs(BASE) == []
    assert run(BASE, tmp_path) == ("passed", "")


@pytest.mark.parametrize("entry, changes", [
    ("node.gpu_memory_mib", {"nodes__n0__gpu_memory_mib": 400}),
    ("job.deleting", {"jobs__0__deleting": True}),
    ("task.gpus", {"jobs__0__tasks__0__gpus": 1}),
    ("result.node", {"expected__jobs__j__node": "n0"}),
    ("node_result.idle_gpus", {"expected__nodes": {"n0": {"idle_gpus": 1}}}),
    ("state.Failed", {"jobs__0__tasks__0__state": "Failed"}),
    ("state.Releasing", {"expected__jobs__j__status": "Releasing"}),
])
def test_an_unbuilt_field_or_state_skips_the_scenario_naming_its_feature(tmp_path, monkeypatch, entry, changes):
    monkeypatch.setitem(UNBUILT, entry, "a_feature")
    data = scenario(**changes)
    assert needs(data) == ["a_feature"]
    status, reason = run(data, tmp_path)
    assert (status, reason) == ("skipped", "needs: a_feature")


def test_a_field_outside_the_format_skips_the_scenario_naming_the_field(tmp_path):
    data = scenario(jobs__0__tasks__0__annotations={"a": "b"})
    status, reason = run(data, tmp_path)
    assert status == "skipped"
    assert "field jobs[].tasks[].annotations (not in the scenario format)" in reason


def test_every_unbuilt_entry_names_a_field_of_the_format():
    for entry in UNBUILT:
        part, field = entry.split(".", 1)
        assert part == "state" or field in FIELDS[part], entry
