"""The scenario format's DRA extension: device classes, node devices, claims, and claims fed back by rounds."""

import copy

import pytest
import yaml

from kai.common.errors import ConfigError
from kai.sim.conformance import Runner
from kai.sim.rounds import feed_back, run_round
from kai.sim.scenario import load_scenarios
from kai.sim.scenario_format import needs

BASE = {
    "name": "s", "actions": ["allocate"], "mode": "single_session", "config": {},
    "device_classes": [{"name": "nvidia.com/gpu"}],
    "nodes": {"n0": {"gpus": 0, "devices": [{"driver": "nvidia.com/gpu", "count": 2}]}},
    "queues": [{"name": "q", "priority": 100, "deserved_gpus": 2, "max_allowed_gpus": -1, "over_quota_weight": 1}],
    "resource_claims": [{"name": "c", "device_class": "nvidia.com/gpu", "count": 2,
                         "labels": {"kai.scheduler/queue": "q"}}],
    "jobs": [{"name": "j", "queue": "q", "priority": 0, "preemptible": True, "created_minutes_ago": 1,
              "tasks": [{"state": "Pending", "resource_claims": ["c"]}]}],
    "expected": {"jobs": {"j": {"status": "Binding", "node": "n0", "gpus_required": 0}}},
}


def load(data, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump([data]))
    [sc] = load_scenarios(str(path))
    return sc


def test_a_claim_of_the_node_devices_is_allocated_and_its_gpus_count_for_the_pod(tmp_path):
    assert needs(BASE) == []
    sc = load(BASE, tmp_path)
    assert Runner().run(sc) == ("passed", "")
    [job] = sc.build().jobs.values()
    assert [t.request.dra_gpus for t in job.tasks.values()] == [2]


def test_a_claim_asking_more_devices_than_the_node_has_keeps_the_pod_pending(tmp_path):
    data = copy.deepcopy(BASE)
    data["resource_claims"][0]["count"] = 3
    data["expected"]["jobs"]["j"] = {"status": "Pending"}
    assert Runner().run(load(data, tmp_path)) == ("passed", "")


def test_a_round_writes_the_claims_allocation_and_consumer_back_and_an_eviction_takes_them_away(tmp_path):
    sc = load(BASE, tmp_path)
    runner = Runner()
    feed_back(sc, run_round(sc, runner.plugins(sc), sc.actions))
    claim = sc.data["resource_claims"][0]
    assert claim["allocation"] == {"node": "n0", "devices": ["nvidia-0", "nvidia-1"]}
    assert claim["reserved_for"] == ["j-0"]
    assert sc.data["jobs"][0]["tasks"][0]["state"] == "Running"
    # the pod is gone from the node (evicted and waiting): the claim is free again
    sc.data["jobs"][0]["tasks"][0].update(state="Pending")
    del sc.data["jobs"][0]["tasks"][0]["node"]
    session = run_round(sc, runner.plugins(sc), actions=())
    feed_back(sc, session)
    assert "allocation" not in claim and "reserved_for" not in claim


@pytest.mark.parametrize(("change", "message"), [
    ({"allocation": {"node": "n0", "devices": ["nvidia-7"]}}, "names 'nvidia-7', not a device of node 'n0'"),
    ({"device_class": "nic"}, "names unknown device class 'nic'"),
    ({"count": 0}, "count"),
])
def test_a_malformed_claim_is_an_error_naming_it(tmp_path, change, message):
    data = copy.deepcopy(BASE)
    data["resource_claims"][0].update(change)
    with pytest.raises(ConfigError, match="resource_claims") as error:
        load(data, tmp_path)
    assert message in str(error.value)


def test_a_task_naming_an_unknown_claim_is_an_error(tmp_path):
    data = copy.deepcopy(BASE)
    data["jobs"][0]["tasks"][0]["resource_claims"] = ["missing"]
    with pytest.raises(ConfigError, match="names unknown resource claim 'missing'"):
        load(data, tmp_path)


def test_a_claim_field_outside_the_format_skips_the_scenario_naming_it():
    data = copy.deepcopy(BASE)
    data["resource_claims"][0]["shared"] = True
    assert needs(data) == ["field resource_claims[].shared (not in the scenario format)"]
