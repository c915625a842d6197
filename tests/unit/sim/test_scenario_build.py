"""A scenario's builds: the facts are read once per content, yet every build is fresh and follows the facts."""

import copy
import datetime

from kai.api import TaskStatus
from kai.sim.scenario import NOW, Scenario, job_uid

DATA = {
    "name": "s", "actions": ["allocate"], "mode": "single_session",
    "nodes": {"n0": {"gpus": 2, "labels": {"zone": "a"}}},
    "queues": [{"name": "q", "deserved_gpus": 2}],
    "jobs": [{"name": "j", "queue": "q", "created_minutes_ago": 2, "gpus_per_task": 1, "stale_for_seconds": 30,
              "tasks": [{"state": "Running", "node": "n0"}, {"state": "Pending"}]}],
}


def scenario(data=None) -> Scenario:
    return Scenario("s", "s.yaml", copy.deepcopy(data or DATA))


def test_builds_make_fresh_objects_with_equal_facts():
    sc = scenario()
    first, second = sc.build(NOW), sc.build(NOW)
    a, b = first.jobs[job_uid("j")], second.jobs[job_uid("j")]
    assert a is not b and a.tasks is not b.tasks and a.pod_sets["default"] is not b.pod_sets["default"]
    assert [repr(t) for t in a.tasks.values()] == [repr(t) for t in b.tasks.values()]
    a.tasks["j-1"].status = TaskStatus.PIPELINED
    a.tasks["j-0"].labels["x"] = "y"
    first.nodes[0].labels["zone"] = "b"
    third = sc.build(NOW)
    assert third.jobs[job_uid("j")].tasks["j-1"].status is TaskStatus.PENDING
    assert "x" not in third.jobs[job_uid("j")].tasks["j-0"].labels
    assert third.nodes[0].labels["zone"] == "a"


def test_times_follow_now():
    sc = scenario()
    job = sc.build(NOW + 10).jobs[job_uid("j")]
    assert (job.creation, job.last_start, job.stale_since) == (NOW + 10 - 120, NOW + 10 - 60, NOW + 10 - 30)


def test_a_change_of_the_facts_in_place_shows_in_the_next_build():
    sc = scenario()
    sc.build(NOW)
    task = sc.data["jobs"][0]["tasks"][1]
    task["state"], task["node"] = "Running", "n0"
    sc.data["nodes"]["n0"]["gpus"] = 4
    snapshot = sc.build(NOW)
    assert snapshot.jobs[job_uid("j")].tasks["j-1"].status is TaskStatus.RUNNING
    assert snapshot.nodes[0].allocatable.gpu == 4


def test_facts_marshal_cannot_take_are_read_on_every_build():
    data = dict(DATA, created=datetime.date(2026, 1, 1))
    sc = scenario(data)
    sc.build(NOW)
    sc.data["nodes"]["n0"]["gpus"] = 4
    assert sc.build(NOW).nodes[0].allocatable.gpu == 4


def test_unchanged_facts_are_read_once(monkeypatch):
    reads = []
    read = Scenario._read_facts

    def counted(self):
        reads.append(self.name)
        return read(self)

    monkeypatch.setattr(Scenario, "_read_facts", counted)
    sc = scenario()
    for now in (NOW, NOW + 1, NOW):
        sc.build(now)
    assert reads == ["s"]
    sc.data["jobs"][0]["tasks"][1]["state"] = "Pending"  # written again, unchanged
    sc.build(NOW)
    assert reads == ["s"]
    sc.data["jobs"][0]["priority"] = 7
    assert sc.build(NOW).jobs[job_uid("j")].priority == 7 and reads == ["s", "s"]
