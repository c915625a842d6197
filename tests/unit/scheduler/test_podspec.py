"""What the scheduler reads of a pod spec: requests as the kubelet counts them, host ports, needed ConfigMaps,
preferred pod affinity."""

from __future__ import annotations

import pytest

from kai.api import HostPort
from kai.scheduler import podspec, views


def c(cpu=None, memory=None, gpu=None, restart=None, **more):
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory), ("nvidia.com/gpu", gpu)) if v is not None}
    container = {"resources": {"requests": requests}, **more}
    if restart:
        container["restartPolicy"] = restart
    return container


def amounts(containers, init=(), overhead=None):
    spec = {"containers": list(containers), "initContainers": list(init)}
    if overhead:
        spec["overhead"] = overhead
    return podspec.pod_amounts(spec)


def test_a_native_sidecar_runs_beside_the_containers():
    got = amounts([c(cpu="3")], init=[c(cpu="2", restart="Always")])
    assert got["cpu"] == 5.0


def test_a_regular_init_container_runs_beside_the_sidecars_started_before_it():
    before = amounts([c(cpu="1")], init=[c(cpu="2", restart="Always"), c(cpu="4")])
    assert before["cpu"] == 6.0  # init 4 + sidecar 2 > containers 1 + sidecar 2
    after = amounts([c(cpu="1")], init=[c(cpu="4"), c(cpu="2", restart="Always")])
    assert after["cpu"] == 4.0  # the init container runs before the sidecar starts


def test_each_resource_takes_its_own_larger_phase_and_overhead_is_added():
    got = amounts([c(cpu="1", memory="4Gi"), c(cpu="1", memory="1Gi")], init=[c(cpu="8", memory="1Gi")],
                  overhead={"cpu": "250m", "memory": "1Gi"})
    assert got == {"cpu": pytest.approx(8.25), "memory": 6 * 2**30}


def test_sidecar_gpus_and_extended_resources_count_too():
    request = podspec.pod_request({"containers": [c(gpu="1")],
                                 "initContainers": [{"restartPolicy": "Always", "resources": {
                                     "limits": {"nvidia.com/gpu": "1", "example.com/nic": "2"}}}]}, {})
    assert request.gpus == 2 and request.scalars == {"example.com/nic": 2.0}


def test_host_ports_of_containers_and_sidecars_with_defaults():
    spec = {"containers": [{"ports": [{"containerPort": 80, "hostPort": 8080},
                                      {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                                      {"containerPort": 9000}]}],
            "initContainers": [{"ports": [{"hostPort": 7000}]},
                               {"restartPolicy": "Always", "ports": [{"hostPort": 7001}]}]}
    assert podspec.host_ports(spec) == (HostPort("0.0.0.0", "TCP", 7001), HostPort("0.0.0.0", "TCP", 8080),
                                      HostPort("10.0.0.1", "UDP", 53))


@pytest.mark.parametrize("a, b, conflict", [
    (HostPort("0.0.0.0", "TCP", 80), HostPort("10.0.0.1", "TCP", 80), True),
    (HostPort("10.0.0.1", "TCP", 80), HostPort("10.0.0.1", "TCP", 80), True),
    (HostPort("10.0.0.1", "TCP", 80), HostPort("10.0.0.2", "TCP", 80), False),
    (HostPort("0.0.0.0", "TCP", 80), HostPort("0.0.0.0", "UDP", 80), False),
    (HostPort("0.0.0.0", "TCP", 80), HostPort("0.0.0.0", "TCP", 81), False),
])
def test_host_port_conflicts_follow_kubernetes(a, b, conflict):
    assert a.conflicts(b) is conflict and b.conflicts(a) is conflict


def test_required_config_maps_are_mounted_or_referenced_and_not_optional():
    spec = {
        "volumes": [{"name": "cfg", "configMap": {"name": "app"}},
                    {"name": "unmounted", "configMap": {"name": "never"}},
                    {"name": "opt", "configMap": {"name": "maybe", "optional": True}},
                    {"name": "proj", "projected": {"sources": [{"configMap": {"name": "projected"}},
                                                               {"secret": {"name": "s"}}]}},
                    {"name": "gpu", "configMap": {"name": "p-abc-shared-gpu-0"}}],
        "containers": [{"volumeMounts": [{"name": "cfg"}, {"name": "opt"}, {"name": "gpu"}],
                        "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "env-ref", "key": "k"}}},
                                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "x", "optional": True}}}],
                        "envFrom": [{"configMapRef": {"name": "env-from"}}]}],
        "initContainers": [{"volumeMounts": [{"name": "proj"}]}],
    }
    got = podspec.required_config_maps(spec, {"runai/shared-gpu-configmap": "p-abc-shared-gpu"})
    assert got == ("app", "env-from", "env-ref", "projected")


def test_preferred_pod_affinity_terms_are_read_with_their_weights():
    raw = {"metadata": {"name": "p", "namespace": "ns"},
           "spec": {"schedulerName": "kai-scheduler", "containers": [{}], "affinity": {
               "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                   {"weight": 30, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "db"}},
                                                      "topologyKey": "zone"}}]},
               "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                   {"weight": 5, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}},
                                                     "topologyKey": "kubernetes.io/hostname",
                                                     "namespaces": ["other"]}}]}}},
           "status": {}}
    view = views.pod_view(raw)
    (aff,), (anti,) = view.preferred_pod_affinity, view.preferred_pod_anti_affinity
    assert (aff.weight, aff.term.topology_key, aff.term.selector.match_labels) == (30, "zone", (("app", "db"),))
    assert (anti.weight, anti.term.namespaces) == (5, ("other",))
    assert view.pod_affinity == () and view.pod_anti_affinity == ()
