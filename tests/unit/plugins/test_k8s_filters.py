"""Kubernetes' filters and scores KAI applies: host ports, ConfigMaps, the largest node, restricted node roles,
preferred pod affinity, cordoned nodes."""

from __future__ import annotations

import attrs
import pytest

import kai.testing as kt
from kai.api import HostPort, LabelSelector, PodAffinityTerm, TaskStatus, Toleration, WeightedPodAffinityTerm
from kai.framework import DEFAULT_CONFIG, Plugins

PORT_80 = (HostPort("0.0.0.0", "TCP", 80),)
PORTS_MESSAGE = "node(s) didn't have free ports for the requested pod ports"


# --- host ports ---------------------------------------------------------------------------------------


def test_a_host_port_in_use_on_the_node_keeps_the_pod_off_it():
    running = kt.job("web", tasks=[kt.task("web-0", status="Running", node="n1", host_ports=PORT_80)])
    new = kt.job("new", tasks=[kt.task("new-0", host_ports=PORT_80)], creation=10)
    other_ip = kt.job("ip", tasks=[kt.task("ip-0", host_ports=(HostPort("0.0.0.0", "UDP", 80),))], creation=20)
    session = kt.run(kt.cluster(nodes=[kt.node("n1")], jobs=[running, new, other_ip]))
    assert kt.placements(session) == {"ip-0": "n1"}
    assert kt.fit_error(session, "new-0") == f"no nodes with enough resources were found: 1 {PORTS_MESSAGE}."


def test_ports_of_pods_outside_the_jobs_and_of_pods_placed_in_the_session_count():
    nodes = [kt.node("n1", host_ports=(HostPort("10.0.0.1", "TCP", 80),)), kt.node("n2"), kt.node("n3")]
    job = kt.job("ds", tasks=[kt.task(f"ds-{i}", host_ports=PORT_80) for i in range(3)], min_available=1)
    session = kt.run(kt.cluster(nodes=nodes, jobs=[job]))
    assert sorted(kt.placements(session).values()) == ["n2", "n3"]


def test_a_rolled_back_step_gives_its_ports_back():
    gang = kt.job("gang", tasks=[kt.task(f"gang-{i}", host_ports=PORT_80) for i in range(3)])
    single = kt.job("single", tasks=[kt.task("single-0", host_ports=PORT_80)], creation=10)
    session = kt.run(kt.cluster(nodes=[kt.node("n1"), kt.node("n2")], jobs=[gang, single]))
    assert set(kt.placements(session)) == {"single-0"}
    assert PORTS_MESSAGE in session.job_fit_message(session.jobs["default/gang"])


def test_a_releasing_pod_still_holds_its_port():
    leaving = kt.job("old", tasks=[kt.task("old-0", status="Releasing", node="n1", host_ports=PORT_80)])
    session = kt.run(kt.cluster(nodes=[kt.node("n1")], jobs=[leaving, kt.job("new", tasks=[
        kt.task("new-0", host_ports=PORT_80)])]))
    assert kt.placements(session) == {} and kt.placements(session, "pipeline") == {}


# --- cordoned nodes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("toleration", "placed"), [
    (None, {}),
    (Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"), {"diag-0": "n1"}),
    (Toleration("node.kubernetes.io/unschedulable"), {"diag-0": "n1"}),  # Equal to the taint's empty value
    (Toleration("", "Exists"), {"diag-0": "n1"}),
    (Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoExecute"), {}),
])
def test_a_cordoned_node_takes_only_pods_tolerating_its_unschedulable_taint(toleration, placed):
    # KAI after v0.17 (#2225), as kube-scheduler's NodeUnschedulable filter.
    tolerations = (toleration,) if toleration else ()
    job = kt.job("diag", tasks=[kt.task("diag-0", tolerations=tolerations)])
    session = kt.run(kt.cluster(nodes=[kt.node("n1", unschedulable=True)], jobs=[job]))
    assert kt.placements(session) == placed
    if not placed:
        assert kt.fit_error(session, "diag-0") == (
            "no nodes with enough resources were found: 1 node(s) were unschedulable.")


# --- ConfigMaps and the largest node ------------------------------------------------------------------


def test_a_pod_waits_for_its_config_maps():
    job = kt.job("app", tasks=[kt.task("app-0", config_maps=("settings", "extra"))])
    missing = kt.run(kt.cluster(nodes=[kt.node("n1")], jobs=[job], config_maps=["default/settings", "other/extra"]))
    assert kt.placements(missing) == {}
    assert kt.fit_error(missing, "app-0") == ("Scheduling conditions were not met for pod default/app-0:\n"
                                              "ConfigMap: Missing required configmaps: [extra].\n")
    assert missing.job_fit_message(missing.jobs["default/app"]).startswith(
        "PodSchedulingErrors: Resources were not found for pod default/app-0 due to: "
        "Scheduling conditions were not met")
    job = kt.job("app", tasks=[kt.task("app-0", config_maps=("settings", "extra"))])
    present = kt.run(kt.cluster(nodes=[kt.node("n1")], jobs=[job],
                                config_maps=["default/settings", "default/extra"]))
    assert kt.placements(present) == {"app-0": "n1"}


def test_a_pod_bigger_than_any_node_is_told_the_largest_node():
    nodes = [kt.node("n1", cpu=4000, memory=2e9), kt.node("n2", cpu=2000, memory=8e9, gpus=2)]
    cpu = kt.job("cpu", tasks=[kt.task("cpu-0", cpu=6000, memory=1e9)])
    gpu = kt.job("gpu", tasks=[kt.task("gpu-0", gpus=4)])
    nic = kt.job("nic", tasks=[kt.task("nic-0", request=attrs.evolve(
        kt.task("x").request, scalars={"example.com/nic": 1.0}))])
    session = kt.run(kt.cluster(nodes=nodes, jobs=[cpu, gpu, nic]))
    head = ("Scheduling conditions were not met for pod default/{0}:\n"
            "MaxNodePoolResources: The pod default/{0} requires ")
    assert kt.fit_error(session, "cpu-0") == head.format("cpu-0") + (
        "GPU: 0, CPU: 6 (cores), memory: 1 (GB), pods: 1. Max CPU resources available in a single node in the "
        "default node-pool is topped at 4 cores.\n")
    assert kt.fit_error(session, "gpu-0").endswith(
        "GPU: 4, CPU: 1 (cores), memory: 1.074 (GB), pods: 1. Max GPU resources available in a single node in the "
        "default node-pool is topped at 2.\n")
    assert kt.fit_error(session, "nic-0").endswith(
        "example.com/nic: 1, pods: 1. No node in the default node-pool has example.com/nic resources.\n")


def test_the_largest_node_is_measured_by_its_whole_allocatable():
    node = kt.node("n1", cpu=1000, capacity=kt.node("x", cpu=8000).allocatable)  # other pods hold 7 cores
    session = kt.run(kt.cluster(nodes=[node], jobs=[kt.job("j", cpu=4000)]))
    assert kt.fit_error(session, "j-0") == ("no nodes with enough resources were found: "
                                            "1 node(s) didn't have enough resources: CPU cores.")


# --- restricted node roles ------------------------------------------------------------------------------


def restricted(snapshot):
    config = attrs.evolve(DEFAULT_CONFIG, actions=("allocate",), restrict_node_scheduling=True)
    return kt.run_session(snapshot, Plugins(config))


def test_restricted_scheduling_sends_gpu_pods_to_gpu_workers_and_the_others_to_cpu_workers():
    nodes = [kt.node("gpu", gpus=4, labels={"node-role.kubernetes.io/gpu-worker": "true"}),
             kt.node("cpu", gpus=4, labels={"node-role.kubernetes.io/cpu-worker": "true"})]
    jobs = [kt.job("g", gpus=1), kt.job("c", creation=10)]
    assert kt.placements(restricted(kt.cluster(nodes=nodes, jobs=jobs))) == {"g-0": "gpu", "c-0": "cpu"}
    unrestricted = kt.run(kt.cluster(nodes=nodes, jobs=[kt.job("g", gpus=1), kt.job("c", creation=10)]))
    assert set(kt.placements(unrestricted).values()) == {"cpu"}  # binpack: one node


def test_restricted_scheduling_names_the_node_a_gpu_pod_cannot_use():
    nodes = [kt.node("c1", gpus=4, labels={"node-role.kubernetes.io/cpu-worker": ""})]
    session = restricted(kt.cluster(nodes=nodes, jobs=[kt.job("g", gpus=1)]))
    assert kt.fit_error(session, "g-0") == ("no nodes with enough resources were found: 1 gpu task: <default/g-0> "
                                            "can't run on non gpu nodes, node: <c1>.")


def test_restricted_scheduling_counts_only_gpu_workers_gpus_for_fair_share():
    from kai.framework.usage import cluster_capacity

    nodes = [kt.node("gpu", gpus=4, labels={"node-role.kubernetes.io/gpu-worker": ""}),
             kt.node("cpu", gpus=4, labels={"node-role.kubernetes.io/cpu-worker": ""})]
    assert cluster_capacity(restricted(kt.cluster(nodes=nodes)))[2] == 4.0
    assert cluster_capacity(kt.run(kt.cluster(nodes=nodes)))[2] == 8.0


# --- preferred pod affinity ------------------------------------------------------------------------------


def prefer(weight, key, **labels):
    return WeightedPodAffinityTerm(weight, PodAffinityTerm(LabelSelector(tuple(labels.items())), key))


def zones():
    return [kt.node("a1", labels={"zone": "a", "kubernetes.io/hostname": "a1"}),
            kt.node("b1", labels={"zone": "b", "kubernetes.io/hostname": "b1"}),
            kt.node("b2", cpu=1000, labels={"zone": "b", "kubernetes.io/hostname": "b2"})]


def test_preferred_affinity_draws_the_pod_to_the_zone_of_matching_pods():
    db = kt.job("db", tasks=[kt.task("db-0", cpu=1000, status="Running", node="b2", labels={"app": "db"})])
    filler = kt.job("fill", tasks=[kt.task("fill-0", status="Running", node="a1")])  # binpack prefers a1
    web = kt.job("web", tasks=[kt.task("web-0", preferred_pod_affinity=(prefer(10, "zone", app="db"),))])
    session = kt.run(kt.cluster(nodes=zones(), jobs=[db, filler, web]))
    assert kt.placements(session) == {"web-0": "b1"}
    without = kt.run(kt.cluster(nodes=zones(), jobs=[
        kt.job("db", tasks=[kt.task("db-0", cpu=1000, status="Running", node="b2", labels={"app": "db"})]),
        kt.job("fill", tasks=[kt.task("fill-0", status="Running", node="a1")]), kt.job("web")]))
    assert kt.placements(without) == {"web-0": "a1"}


def test_an_existing_pods_preferred_anti_affinity_pushes_the_new_pod_away():
    lonely = kt.task("solo-0", status="Running", node="a1",
                     preferred_pod_anti_affinity=(prefer(50, "zone", app="web"),))
    web = kt.job("web", tasks=[kt.task("web-0", cpu=2000, labels={"app": "web"})])
    session = kt.run(kt.cluster(nodes=zones(), jobs=[kt.job("solo", tasks=[lonely]), web]))
    assert kt.placements(session) == {"web-0": "b1"}
    plain = kt.task("solo-0", status="Running", node="a1")
    without = kt.run(kt.cluster(nodes=zones(), jobs=[kt.job("solo", tasks=[plain]), kt.job("web", cpu=2000)]))
    assert kt.placements(without) == {"web-0": "a1"}


def test_scores_sum_the_weights_of_every_matching_term_over_the_domains():
    running = [kt.task("db-0", status="Running", node="a1", labels={"app": "db"}),
               kt.task("db-1", status="Running", node="b1", labels={"app": "db"}),
               kt.task("web-0", status="Running", node="b1", labels={"app": "web"})]
    new = kt.task("new-0", labels={"app": "new"}, preferred_pod_affinity=(prefer(30, "zone", app="db"),),
                  preferred_pod_anti_affinity=(prefer(5, "kubernetes.io/hostname", app="web"),))
    session = kt.run(kt.cluster(nodes=zones(), jobs=[kt.job("run", tasks=running), kt.job("new", tasks=[new])]),
                     plugins=["podaffinity"])
    plugin = session.plugins.plugin("podaffinity")
    task = session.jobs["default/new"].tasks["new-0"]
    task.status, task.node = TaskStatus.PENDING, None
    for n in session.nodes:
        n.tasks.pop(task.uid, None)
    assert plugin.kai_node_scores(session, task, session.nodes) == pytest.approx([3e6, 3e6 - 5e5, 3e6])


def test_without_preferred_terms_the_plugin_scores_nothing():
    session = kt.run(kt.cluster(nodes=zones(), jobs=[kt.job("a", tasks=2)]), plugins=["podaffinity"])
    plugin = session.plugins.plugin("podaffinity")
    task = session.jobs["default/a"].tasks["a-0"]
    assert plugin.preferring == [] and plugin.kai_node_scores(session, task, session.nodes) is None
