"""GPU sharing: device accounting (releasing, pipelined, rollback), device choice, reservation pod slots."""

import attrs
import pytest

from kai import testing as kt
from kai.api import ResourceRequest, TaskStatus
from kai.framework import Session

MIB = 1000


def shared(name, fraction=0.0, mib=0, devices=1, **fields):
    request = ResourceRequest(cpu=1000, memory=2**30, gpu_fraction=fraction, gpu_memory_mib=mib, gpu_devices=devices)
    return kt.task(name, request=request, **fields)


def gpu_node(name="n1", gpus=2, **fields):
    return kt.node(name, gpus=gpus, gpu_memory_mib=MIB, **fields)


def snap(tasks, nodes=None):
    """One job per task (so each is placed on its own), all in queue q."""
    jobs = [kt.job(t.name.rsplit("-", 1)[0], queue="q", tasks=[t]) for t in tasks]
    return kt.cluster(nodes=nodes or [gpu_node()], jobs=jobs)


def session_of(snapshot) -> Session:
    return Session(snapshot, kt.plugin_manager()).open()


def amounts(session, name="n1"):
    a, i = session.arrays, session.node_by_name[name].index
    return a.idle_gpu[i], a.rel_gpu[i], a.idle_pods[i], a.rel_pods[i]


def decision(session, name):
    return next(d for d in session.decisions if d.task.name == name)


# --- accounting ------------------------------------------------------------------------------------


def test_a_shared_device_is_one_used_gpu_and_holds_a_pod_slot_for_its_reservation_pod():
    s = session_of(snap([shared("a-0", 0.5, status="Running", node="n1", gpu_groups=("g",)),
                         shared("b-0", 0.25, status="Running", node="n1", gpu_groups=("g",))]))
    idle, rel, pods, _ = amounts(s)
    assert (idle, rel) == (1.0, 0.0)
    assert pods == 110 - 2 - 1  # two pods and one reservation pod
    assert s.node_by_name["n1"].used_gpu_portion("g") == pytest.approx(0.75)


def test_a_device_is_releasing_only_when_all_its_tasks_are():
    one = session_of(snap([shared("a-0", 0.5, status="Releasing", node="n1", gpu_groups=("g",)),
                           shared("b-0", 0.5, status="Running", node="n1", gpu_groups=("g",))]))
    assert amounts(one)[:2] == (1.0, 0.0)
    both = session_of(snap([shared("a-0", 0.5, status="Releasing", node="n1", gpu_groups=("g",)),
                            shared("b-0", 0.5, status="Releasing", node="n1", gpu_groups=("g",))]))
    assert amounts(both)[:2] == (1.0, 1.0)


def test_a_placed_shared_task_without_groups_has_a_device_of_its_own():
    s = session_of(snap([shared("a-0", 0.25, status="Running", node="n1"),
                         shared("b-0", 0.25, status="Running", node="n1")]))
    assert amounts(s)[0] == 0.0
    assert len(s.node_by_name["n1"].gpu_groups) == 2


def test_pipelining_onto_a_releasing_device_takes_it_from_the_releasing_gpus():
    s = kt.run(snap([shared("a-0", 0.5, status="Releasing", node="n1", gpu_groups=("g",)),
                     shared("p-0", 0.5)], nodes=[gpu_node(gpus=1)]))
    d = decision(s, "p-0")
    # The device of g is released as a whole: the task waits for it as a new device.
    assert d.kind == "pipeline" and d.gpu_groups != ("g",) and len(d.gpu_groups) == 1
    assert amounts(s)[:2] == (0.0, 0.0)


def test_every_move_of_a_shared_task_is_undone_exactly():
    s = session_of(snap([shared("a-0", 0.5, status="Running", node="n1", gpu_groups=("g",)),
                         shared("b-0", 0.25, status="Releasing", node="n1", gpu_groups=("h",)),
                         shared("p-0", 0.5), shared("q-0", 0.5, devices=2)], nodes=[gpu_node(gpus=3)]))
    node = s.node_by_name["n1"]
    before = (amounts(s), {k: repr(v) for k, v in node.gpu_groups.items()})
    tasks = {t.name: t for j in s.jobs.values() for t in j.tasks.values()}
    stmt = s.statement()
    stmt.place(tasks["p-0"], node, True, False)
    stmt.pipeline(tasks["q-0"], "n1")
    stmt.evict(tasks["a-0"], "test")
    stmt.pipeline(tasks["a-0"], "n1")
    assert amounts(s) != before[0]
    stmt.discard()
    assert (amounts(s), {k: repr(v) for k, v in node.gpu_groups.items()}) == before
    assert tasks["a-0"].gpu_groups == ("g",) and tasks["p-0"].gpu_groups == ()


def test_a_failed_gang_step_leaves_no_device_behind():
    gang = kt.job("g", queue="q", tasks=[shared("g-0", 0.5), shared("g-1", 1.0, devices=2)])
    s = kt.run(kt.cluster(nodes=[gpu_node(gpus=2)], jobs=[gang]))
    assert s.decisions == []
    assert "GPUs" in kt.fit_error(s, "g-1")
    assert amounts(s) == (2.0, 0.0, 110.0, 0.0) and not s.node_by_name["n1"].gpu_groups


# --- device choice ---------------------------------------------------------------------------------


def _two_shared_devices(pending):
    return snap([shared("a-0", 0.5, status="Running", node="n1", gpu_groups=("half",)),
                 shared("b-0", 0.25, status="Running", node="n1", gpu_groups=("quarter",)), pending],
                nodes=[gpu_node(gpus=3)])


def test_gpupack_fills_the_fullest_shared_device():
    s = kt.run(_two_shared_devices(shared("p-0", 0.5)))
    assert decision(s, "p-0").gpu_groups == ("half",)
    s = kt.run(_two_shared_devices(shared("p-0", 0.6)))
    assert decision(s, "p-0").gpu_groups == ("quarter",)


def test_gpupack_opens_a_new_device_only_when_no_shared_one_fits():
    s = kt.run(_two_shared_devices(shared("p-0", 0.8)))
    d = decision(s, "p-0")
    assert d.kind == "bind" and d.gpu_groups[0] not in ("half", "quarter")
    assert amounts(s)[0] == 0.0


def test_gpuspread_prefers_new_devices_then_the_emptiest_shared_one():
    plugins = ["predicates", "proportion", "gpuspread"]
    s = kt.run(_two_shared_devices(shared("p-0", 0.25)), plugins)
    assert decision(s, "p-0").gpu_groups[0] not in ("half", "quarter")
    full = snap([shared("a-0", 0.5, status="Running", node="n1", gpu_groups=("half",)),
                 shared("b-0", 0.25, status="Running", node="n1", gpu_groups=("quarter",)), shared("p-0", 0.25)])
    assert decision(kt.run(full, plugins), "p-0").gpu_groups == ("quarter",)


def test_a_multi_device_request_gets_one_group_per_device():
    s = kt.run(snap([shared("p-0", 0.5, devices=2)]))
    d = decision(s, "p-0")
    assert d.kind == "bind" and len(set(d.gpu_groups)) == 2
    assert amounts(s)[0] == 0.0


def test_gpu_memory_requests_are_converted_with_the_device_memory():
    s = kt.run(snap([shared("a-0", mib=500), shared("b-0", mib=500), shared("c-0", mib=500)], nodes=[gpu_node(gpus=1)]))
    binds = {d.task.name: d.gpu_groups for d in s.decisions if d.kind == "bind"}
    assert set(binds) == {"a-0", "b-0"} and binds["a-0"] == binds["b-0"]
    # As KAI: a GPU-memory request is sized by CPU and memory, so a node whose devices are full names no reason.
    assert kt.fit_error(s, "c-0") == "no nodes with enough resources were found"
    too_big = kt.run(snap([shared("a-0", mib=2000)], nodes=[gpu_node(gpus=1)]))
    assert "GPU memory" in kt.fit_error(too_big, "a-0")


def test_gpusharingorder_prefers_a_node_with_a_fitting_shared_device():
    def cluster():
        return snap([shared("a-0", 0.5, status="Running", node="n2", gpu_groups=("g",)), shared("p-0", 0.5)],
                    nodes=[gpu_node("n1", gpus=1), gpu_node("n2", gpus=2)])

    assert decision(kt.run(cluster()), "p-0").node == "n2"
    without = ["predicates", "proportion", "gpupack", "nodeplacement"]
    assert decision(kt.run(cluster(), without), "p-0").node == "n1"


def test_gpusharingorder_does_not_pull_a_pod_asking_for_no_gpu_onto_gpu_nodes():
    """KAI #2154 (after v0.17): the shared-device score is for tasks asking for a GPU share; a CPU-only pod
    getting it crowded the GPU nodes and left CPU-only nodes idle."""
    busy = kt.task("b-0", request=ResourceRequest(cpu=2000, memory=2**30), status="Running", node="cpu")
    s = kt.run(snap([shared("a-0", 0.5, status="Running", node="n1", gpu_groups=("g",)), busy,
                     kt.task("c-0", request=ResourceRequest(cpu=1000, memory=2**30))],
                    nodes=[gpu_node("n1", gpus=1), kt.node("cpu", gpus=0)]))
    assert decision(s, "c-0").node == "cpu"  # bin-packing's choice; n1 with the sharing score


def test_a_device_with_only_releasing_room_is_pipelined_onto():
    s = kt.run(snap([shared("a-0", 0.5, status="Releasing", node="n1", gpu_groups=("g",)),
                     shared("b-0", 0.5, status="Running", node="n1", gpu_groups=("g",)), shared("p-0", 0.5)],
                    nodes=[gpu_node(gpus=1)]))
    d = decision(s, "p-0")
    assert (d.kind, d.gpu_groups) == ("pipeline", ("g",))


def test_a_new_device_needs_a_free_pod_slot_for_its_reservation_pod():
    busy = kt.job("busy", queue="q", tasks=1, status="Running", node="n1")
    pending = kt.job("p", queue="q", tasks=[shared("p-0", 0.5)])
    s = kt.run(kt.cluster(nodes=[gpu_node(max_pods=2)], jobs=[busy, pending]))
    assert s.decisions == []
    assert "pod number exceeded" in kt.fit_error(s, "p-0")
    joins = kt.run(kt.cluster(nodes=[gpu_node(max_pods=3)], jobs=[
        kt.job("a", queue="q", tasks=[shared("a-0", 0.5, status="Running", node="n1", gpu_groups=("g",))]),
        kt.job("p", queue="q", tasks=[shared("p-0", 0.5)])]))
    assert decision(joins, "p-0").gpu_groups == ("g",)


def test_task_status_moves_do_not_touch_devices_of_whole_gpu_tasks():
    s = kt.run(kt.cluster(nodes=[gpu_node()], jobs=[kt.job("w", queue="q", gpus=1)]))
    assert decision(s, "w-0").gpu_groups == () and not s.node_by_name["n1"].gpu_groups
    assert s.jobs["default/w"].tasks["w-0"].status is TaskStatus.BINDING


def test_a_gpu_memory_request_waits_for_a_node_whose_gpu_memory_is_synced():
    unsynced = attrs.evolve(gpu_node("n1", gpus=1), gpu_memory_synced=False)
    s = kt.run(snap([shared("a-0", mib=500)], nodes=[unsynced]))
    assert s.decisions == []
    assert "gpu memory count on the node was not synced yet" in kt.fit_error(s, "a-0")
    assert decision(kt.run(snap([shared("a-0", mib=500)], nodes=[gpu_node("n1", gpus=1)])), "a-0").node == "n1"


def test_consolidation_does_not_put_a_third_half_on_a_full_device():
    """Node n1's two devices are full of halves that must stay on n1; the pending half (the oldest job) has no
    room there, whatever moves (n2's free GPUs only let the action try). A victim placed back onto a new
    device while the pending half took its freed share is moved, not un-evicted onto that full device."""
    on_n1 = {"kubernetes.io/hostname": "n1"}
    halves = [shared(f"{name}-0", 0.5, status="Running", node="n1", gpu_groups=(group,), node_selector=on_n1)
              for name, group in (("a", "g1"), ("b", "g1"), ("c", "g2"), ("d", "g2"))]
    jobs = [kt.job(t.name[0], queue="q", tasks=[t], priority=50, creation=created)
            for t, created in zip([*halves, shared("p-0", 0.5, node_selector=on_n1)], (1, 2, 3, 4, 0), strict=True)]
    nodes = [gpu_node(labels=on_n1), gpu_node("n2")]
    s = kt.run(kt.cluster(nodes=nodes, jobs=jobs, queues=[kt.queue("q", deserved_gpus=-1)]),
               actions=("allocate", "consolidation"))
    assert s.decisions == []
