"""The per-session node accounting: copies are independent, and an accounting brought up to date in place
equals one worked out afresh."""

from __future__ import annotations

import attrs

from kai.api import Job, Node, PodSet, ResourceRequest, Resources, Task, TaskStatus
from kai.framework.nodes import place_tasks

MIG = "nvidia.com/mig-1g.10gb"


def node(name: str, cpu: float = 8000.0, mig: float = 4.0) -> Node:
    return Node(name, Resources(cpu, 64 * 2**30, 0.0, {MIG: mig}))


def job(uid: str, *placed: tuple[str, str, float]) -> Job:
    j = Job(uid=uid, name=uid, queue="q", pod_sets={"default": PodSet("default", 1)})
    for name, on, cpu in placed:
        j.add_task(Task(name, uid, ResourceRequest(cpu=cpu, scalars={MIG: 1.0}), TaskStatus.RUNNING, on, uid=name))
    return j


def amounts(arrays, infos) -> dict:
    return {n.name: ([arrays.idle_cpu[n.index], arrays.idle_pods[n.index], arrays.alloc_cpu[n.index]],
                     arrays.idle_scalars[n.index], arrays.rel_scalars[n.index], list(n.tasks), n.node.allocatable)
            for n in infos}


def test_a_copy_and_its_original_change_their_extended_resources_apart():
    arrays, infos = place_tasks([node("a"), node("b")], {"j": job("j", ("t1", "a", 100.0))})
    before = amounts(arrays, infos)
    copy = arrays.copy()
    copies = [n.copy(copy) for n in infos]
    extra = Task("t2", "j", ResourceRequest(cpu=50.0, scalars={MIG: 2.0}), TaskStatus.RUNNING, "a", uid="t2")
    copies[0].add_task(extra)
    assert copy.idle_scalars[0] == {MIG: 1.0}
    assert amounts(arrays, infos) == before  # the original is as it was
    infos[1].add_task(Task("t3", "j", ResourceRequest(cpu=10.0, scalars={MIG: 1.0}), TaskStatus.RUNNING, "b",
                           uid="t3"))
    assert arrays.idle_scalars[1] == {MIG: 3.0}
    assert copy.idle_scalars[1] == {MIG: 4.0}  # and the copy does not see the original's change


def test_an_accounting_brought_up_to_date_equals_one_worked_out_afresh():
    nodes = [node("a"), node("b"), node("c")]
    first = {"x": job("x", ("x0", "a", 100.0)), "y": job("y", ("y0", "b", 200.0), ("y1", "a", 300.0)),
             "z": job("z", ("z0", "c", 400.0))}
    before = place_tasks(nodes, first)
    # y is built again with its task on a moved to c, x is gone, w arrives on b, and node c grows
    second = {"y": job("y", ("y0", "b", 200.0), ("y1", "c", 300.0)), "z": first["z"], "w": job("w", ("w0", "b", 50.0))}
    grown = [nodes[0], nodes[1], attrs.evolve(nodes[2], allocatable=Resources(16000.0, 64 * 2**30, 0.0, {MIG: 4.0}))]
    changes = ({"x", "y", "w"}, {"x": first["x"], "y": first["y"]})
    followed = place_tasks(grown, second, before, changes)
    assert followed is before  # brought up to date, not built again
    assert [n.node for n in followed[1]] == grown
    assert amounts(*followed) == amounts(*place_tasks(grown, second))
    assert list(followed[1][2].tasks) == ["y1", "z0"]  # in the order of the jobs (y before z), not of arrival


def test_other_node_names_are_worked_out_afresh():
    jobs = {"x": job("x", ("x0", "a", 100.0))}
    before = place_tasks([node("a"), node("b")], jobs)
    again = place_tasks([node("a"), node("c")], jobs, before, (set(), {}))
    assert again is not before
    assert amounts(*again) == amounts(*place_tasks([node("a"), node("c")], jobs))
