"""The hamicore binder plugin: HAMi-core's limits from the node's GPU memory and the received portion, into the
capabilities ConfigMap; off by default and only after gpusharing; the webhook's env references; the chart value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kai.admission.pods import PodPolicy, prepared
from kai.binder.hamicore import MEMORY_LIMIT, SM_LIMIT, build, limits
from kai.binder.pluginconfig import default_config, enabled_plugins, parse_config, resolve
from kai.binder.plugins import BindContext, BindError, BindRequest
from kai.common.errors import ConfigError
from support.chart import render_chart
from support.kube import FakeApi

CHART = Path(__file__).resolve().parents[3] / "deploy" / "chart" / "kai-scheduler"
POD = {"metadata": {"name": "app", "namespace": "ns", "uid": "u",
                    "annotations": {"gpu-fraction": "0.5", "runai/shared-gpu-configmap": "app-abc-shared-gpu"}},
       "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main"}]}}


CAPABILITIES = "/api/v1/namespaces/ns/configmaps/app-abc-shared-gpu-0"


class Patches(FakeApi):
    """The in-memory API with the pod's capabilities ConfigMap, and the patches it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.add(CAPABILITIES, {"metadata": {"name": "app-abc-shared-gpu-0", "namespace": "ns"}, "data": {}})

    @property
    def patches(self) -> list[tuple[str, dict]]:
        return [(call.path, call.body) for call in self.calls if call.method == "PATCH"]


def bind(plugin, kube, kind="Fraction", portion="0.27", memory="15360"):
    request = BindRequest.from_object({"metadata": {"name": "app", "namespace": "ns"},
                                       "spec": {"podName": "app", "selectedNode": "n1", "receivedResourceType": kind,
                                                "receivedGPU": {"count": 1, "portion": portion}}})
    labels = {"nvidia.com/gpu.memory": memory} if memory else {}
    plugin.setup(kube)
    plugin.pre_bind(BindContext(request, {"metadata": {"name": "n1", "labels": labels}}, kube, read_pod=lambda: POD))


def test_the_limit_is_the_received_portion_of_the_nodes_gpu_memory_as_kai_writes_it():
    kube = Patches()
    bind(build({}), kube)
    # KAI's example: 4096 MiB of a 15360 MiB T4 is a 0.27 portion, enforced as 4147m
    assert kube.patches == [(CAPABILITIES, {"data": {MEMORY_LIMIT: "4147m"}})]
    assert kube.objects[CAPABILITIES]["data"] == {MEMORY_LIMIT: "4147m"}
    with_sm = Patches()
    bind(build({"smLimit": "true"}), with_sm, portion="0.50", memory="81920")
    assert with_sm.patches[0][1]["data"] == {MEMORY_LIMIT: "40960m", SM_LIMIT: "50"}


def test_whole_gpus_get_no_limit_and_a_fraction_on_a_node_without_gpu_memory_fails_its_bind():
    kube = Patches()
    bind(build({}), kube, kind="Regular")
    # KAI after v0.17 (#2157): fail closed, so the pod never runs uncapped; the bind is retried.
    with pytest.raises(BindError, match="cannot work out CUDA_DEVICE_MEMORY_LIMIT: node n1 has "
                                        "nvidia.com/gpu.memory=''"):
        bind(build({}), kube, memory="")
    assert kube.patches == [] and limits(0, 0.5) == {}
    with pytest.raises(ValueError, match="smLimit: 'maybe' is not a boolean"):
        build({"smLimit": "maybe"})


def test_off_by_default_and_on_only_after_gpusharing():
    assert "hamicore" not in dict(enabled_plugins(default_config()))
    on = resolve(default_config(), parse_config({"hamicore": {"enabled": True}}, "x"))
    assert [name for name, _ in enabled_plugins(on)][-2:] == ["gpusharing", "hamicore"]
    with pytest.raises(ConfigError, match="hamicore needs the gpusharing plugin enabled"):
        enabled_plugins(resolve(on, parse_config({"gpusharing": {"enabled": False}}, "x")))
    with pytest.raises(ConfigError, match="gpusharing.priority 100 must be above hamicore.priority 150"):
        enabled_plugins(resolve(on, parse_config({"hamicore": {"priority": 150}}, "x")))


def test_the_webhook_makes_the_fraction_container_read_the_limits_only_when_enabled():
    def env(policy):
        container = prepared(POD, policy)["spec"]["containers"][0]
        return {e["name"]: e["valueFrom"]["configMapKeyRef"] for e in container["env"]}

    assert MEMORY_LIMIT not in env(PodPolicy())
    refs = env(PodPolicy(hami_core=True))
    assert refs[MEMORY_LIMIT] == {"name": "app-abc-shared-gpu-0", "key": MEMORY_LIMIT, "optional": True}
    assert refs[SM_LIMIT]["optional"] is True


def test_the_chart_value_turns_the_binder_plugin_and_the_webhook_on():
    from kai.run import _parser

    values = {"components": {"binder": {"hamiCore": True}, "admission": {"enabled": True, "tls": {"caBundle": "Q0E="}}}}
    deployments = {d["metadata"]["name"]: d for d in render_chart(CHART, values=values) if d["kind"] == "Deployment"}
    binder = _parser().parse_args(deployments["kai-binder"]["spec"]["template"]["spec"]["containers"][0]["args"])
    assert parse_config(json.loads(binder.binder_plugins), "x")["hamicore"].enabled is True
    admission = _parser().parse_args(deployments["kai-admission"]["spec"]["template"]["spec"]["containers"][0]["args"])
    assert admission.hami_core_enabled is True
    plain = {d["metadata"]["name"]: d for d in render_chart(CHART) if d["kind"] == "Deployment"}
    args = plain["kai-binder"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _parser().parse_args(args).binder_plugins == ""
