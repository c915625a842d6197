"""KAI's SchedulingShard (and the Config's Prometheus) laid over a scheduler configuration."""

from __future__ import annotations

import pytest

from kai.common.errors import ConfigError
from kai.framework import DEFAULT_CONFIG, Plugins, parse_config
from kai.framework.shard import apply_shard
from kai.framework.usage import UsageDBConfig
from kai.plugin_loader import PluginError


def shard(spec: dict, name: str = "default") -> dict:
    return {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": name}, "spec": spec}


def plugins(settings) -> dict[str, dict]:
    return {p.name: p.arguments for p in settings.config.plugins}


def names(settings) -> list[str]:
    return [p.name for p in settings.config.plugins]


def test_no_shard_leaves_the_configuration_as_given():
    assert apply_shard(DEFAULT_CONFIG, None).config is DEFAULT_CONFIG


def test_an_empty_shard_keeps_the_plugins_and_actions_in_kai_s_priority_order():
    settings = apply_shard(DEFAULT_CONFIG, shard({}))
    assert set(names(settings)) == {p.name for p in DEFAULT_CONFIG.plugins}
    assert names(settings)[:5] == ["predicates", "proportion", "priority", "nodeavailability", "resourcetype"]
    assert names(settings)[-3:] == ["gpupack", "nodeplacement", "gpusharingorder"]
    assert settings.config.actions == DEFAULT_CONFIG.actions
    assert settings.ignored == ()


def test_gpu_spread_swaps_the_gpu_plugins_and_turns_consolidation_off():
    settings = apply_shard(DEFAULT_CONFIG, shard({"placementStrategy": {"gpu": "spread"}}))
    assert plugins(settings)["nodeplacement"] == {"gpu": "spread", "cpu": "binpack"}
    assert "gpuspread" in names(settings)
    assert not {"gpupack", "gpusharingorder"} & set(names(settings))
    assert "consolidation" not in settings.config.actions
    Plugins(settings.config)  # every plugin named is installed and takes its arguments


def test_cpu_spread_keeps_the_gpu_plugins_but_not_consolidation():
    settings = apply_shard(DEFAULT_CONFIG, shard({"placementStrategy": {"cpu": "spread"}}))
    assert plugins(settings)["nodeplacement"] == {"gpu": "binpack", "cpu": "spread"}
    assert {"gpupack", "gpusharingorder"} <= set(names(settings)) and "gpuspread" not in names(settings)
    assert "consolidation" not in settings.config.actions


def test_binpack_adds_the_gpu_plugins_a_configuration_lacks_and_keeps_its_actions():
    base = parse_config({"actions": "allocate, reclaim", "tiers": [{"plugins": [{"name": "predicates"}]}]})
    settings = apply_shard(base, shard({"placementStrategy": {"gpu": "binpack", "cpu": "binpack"}}))
    assert names(settings) == ["predicates", "gpupack", "nodeplacement", "gpusharingorder"]
    assert settings.config.actions == ("allocate", "reclaim")


def test_kvalue_and_min_runtime_become_plugin_arguments():
    settings = apply_shard(DEFAULT_CONFIG, shard({"kValue": 2.5, "minRuntime": {"preemptMinRuntime": "5m",
                                                                               "reclaimMinRuntime": "2m"}}))
    assert plugins(settings)["proportion"] == {"kValue": 2.5}
    assert plugins(settings)["minruntime"] == {"defaultPreemptMinRuntime": "5m", "defaultReclaimMinRuntime": "2m"}
    Plugins(settings.config)


def test_plugin_and_action_overrides():
    settings = apply_shard(DEFAULT_CONFIG, shard({
        "plugins": {"elastic": {"enabled": False}, "taskorder": {"priority": 5000},
                    "nodeplacement": {"arguments": {"gpu": "spread"}}},
        "actions": {"preempt": {"priority": 1000}, "stalegangeviction": {"enabled": False}}}))
    assert "elastic" not in names(settings)
    assert names(settings)[0] == "taskorder"
    assert plugins(settings)["nodeplacement"] == {"gpu": "spread"}  # arguments replace, as in KAI
    assert settings.config.actions == ("preempt", "allocate", "consolidation", "reclaim", "runtimelimit")


def test_queue_depth_usage_db_and_args():
    settings = apply_shard(DEFAULT_CONFIG, shard({
        "queueDepthPerAction": {"allocate": 3, "reclaim": 5},
        "usageDBConfig": {"clientType": "prometheus"},
        "args": {"max-consolidation-preemptees": "4", "use-scheduling-signatures": "false",
                 "allow-consolidating-reclaim": "F", "restrict-node-scheduling": "true",
                 "full-hierarchy-fairness": "false", "default-staleness-grace-period": "2m",
                 "schedule-period": "500ms", "bind-mode": "bindRequest", "detailed-fit-errors": "true"},
        "partitionLabelValue": "gpu-nodes"}),
        {"kind": "Config", "spec": {"namespace": "kai", "prometheus": {"enabled": True}}})
    config = settings.config
    assert config.queue_depth("allocate") == 3 and config.queue_depth("reclaim") == 5
    assert config.usage_db == UsageDBConfig("prometheus", "http://usage-prometheus.kai.svc.cluster.local:9090")
    assert config.max_consolidation_preemptees == 4
    assert config.use_scheduling_signatures is False and config.allow_consolidating_reclaim is False
    assert config.full_hierarchy_fairness is False and DEFAULT_CONFIG.full_hierarchy_fairness is True
    assert config.restrict_node_scheduling is True
    assert config.staleness_grace_period == 120.0
    assert settings.schedule_period == 0.5 and settings.bind_mode == "bindRequest"
    assert settings.ignored == ("args.detailed-fit-errors",)
    assert apply_shard(DEFAULT_CONFIG, shard({})).bind_mode is None  # the flag's stays


def test_external_prometheus_of_the_config():
    settings = apply_shard(DEFAULT_CONFIG, shard({"usageDBConfig": {"clientType": "prometheus"}}),
                           {"spec": {"prometheus": {"externalPrometheusUrl": "http://tsdb:9090"}}})
    assert settings.config.usage_db.connection_string == "http://tsdb:9090"


@pytest.mark.parametrize(("spec", "message"), [
    ({"placementStrategy": {"gpu": "pack"}}, "spec.placementStrategy: field 'gpu' must be one of binpack, spread"),
    ({"kValue": -1}, "field 'kValue'"),
    ({"minRuntime": {"reclaimMinRuntime": "2 minutes"}},
     "spec.minRuntime: field 'reclaimMinRuntime' must be a duration"),
    ({"plugins": {"elastic": {"enabled": "no"}}}, "spec.plugins.elastic: field 'enabled' must be"),
    ({"plugins": {"elastic": {"weight": 3}}}, "spec.plugins.elastic: field 'weight' is not known"),
    ({"actions": {a: {"enabled": False} for a in DEFAULT_CONFIG.actions}}, "disables every action"),
    ({"args": {"bind-mode": "binder"}}, "spec.args: field 'bind-mode' must be direct or bindRequest"),
    ({"queueDepthPerAction": {"allocate": "many"}}, "queueDepthPerAction.allocate must be a whole number"),
    ({"placementStrategy": {"gpu": "spread"}, "queueDepthPerAction": {"consolidation": 2}},
     "names action(s) consolidation, which are not enabled"),
    ({"usageDBConfig": {"clientType": "prometheus"}}, "needs the Config's prometheus"),
    ({"args": {"max-consolidation-preemptees": "lots"}}, "spec.args: field 'max-consolidation-preemptees' must be"),
    ({"args": {"use-scheduling-signatures": "yes"}}, "field 'use-scheduling-signatures' must be true or false"),
    ({"args": {"schedule-period": "0s"}}, "field 'schedule-period' must be a positive duration"),
], ids=lambda v: next(iter(v)) if isinstance(v, dict) else "")
def test_a_malformed_field_is_an_error_naming_it(spec, message):
    with pytest.raises(ConfigError) as err:
        apply_shard(DEFAULT_CONFIG, shard(spec, name="gpu-shard"))
    assert str(err.value).startswith("SchedulingShard gpu-shard: spec")
    assert message in str(err.value)


def test_kai_plugins_not_run_here_are_left_out_and_reported_as_ignored():
    settings = apply_shard(DEFAULT_CONFIG, shard({"plugins": {
        "snapshot": {"enabled": True}, "reflectjoborder": {}, "sg-nodelocalgreedy": {"priority": 360},
        "sg-multinodegang": {"enabled": False}, "proportion": {"arguments": {"kValue": 2}}}}))
    assert not {"reflectjoborder", "sg-nodelocalgreedy", "sg-multinodegang"} & set(names(settings))
    assert "snapshot" in names(settings)  # serves KAI's /get-snapshot here too
    assert plugins(settings)["proportion"] == {"kValue": 2}
    assert settings.ignored == ("plugins.sg-nodelocalgreedy", "plugins.reflectjoborder")
    Plugins(settings.config)  # every plugin left loads


def test_a_plugin_kai_does_not_know_is_still_an_error_when_loaded():
    settings = apply_shard(DEFAULT_CONFIG, shard({"plugins": {"snapshots": {}}}))
    with pytest.raises(PluginError, match="unknown plugin 'snapshots'"):
        Plugins(settings.config)
