"""KaiObjects: the Config and SchedulingShard watched through informers against an in-memory API."""

from __future__ import annotations

import pytest

from kai.api import names
from kai.framework import DEFAULT_CONFIG, PluginError, Plugins
from kai.framework.shard import apply_shard
from kai.kube.client import object_path
from kai.kube.kaiconfig import KaiObjects, config_field
from kai.scheduler.settings import Settings, settings_builder
from support.kube import FakeApi
from support.waiting import wait_until

SHARDS = object_path(*names.SCHEDULINGSHARDS)
CONFIGS = object_path(*names.CONFIGS)
SHARD = f"{SHARDS}/default"


def shard(spec: dict, generation: int = 1) -> dict:
    return {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard",
            "metadata": {"name": "default", "uid": "u1", "generation": generation}, "spec": spec}


def cluster(*shards: dict) -> FakeApi:
    kube = FakeApi()
    for obj in shards:
        kube.add(SHARD, obj)
    return kube


def conditions(kube: FakeApi) -> dict[str, tuple[str, int]]:
    """The shard's conditions, (status, observedGeneration) by type; every write so far was of its status alone."""
    assert all(path == f"{SHARD}/status" and set(body) == {"status"} for method, path, body in kube.calls
               if method in ("PATCH", "PUT")), kube.calls
    return {c["type"]: (c["status"], c["observedGeneration"])
            for c in kube.objects[SHARD].get("status", {}).get("conditions", [])}


def placement(shard_obj, _config):
    return apply_shard(DEFAULT_CONFIG, shard_obj).config.plugins


def test_objects_listed_at_start_are_applied_and_changes_follow():
    kube = cluster(shard({"placementStrategy": {"gpu": "spread"}}))
    objects = KaiObjects(kube, placement, DEFAULT_CONFIG.plugins, component="test").start()
    try:
        assert objects.wait_applied(5)
        assert objects.version == 1
        assert "gpuspread" in {p.name for p in objects.value}
        assert conditions(kube)["Deployed"] == ("True", 1)
        kube.add(SHARD, shard({"placementStrategy": {"gpu": "binpack"}}, generation=2))
        wait_until(lambda: objects.version == 2, 5, "version 2", interval=0.01)
        assert "gpupack" in {p.name for p in objects.value}
        assert objects.describe() == "SchedulingShard/default@2"
        kube.delete(SHARD)
        wait_until(lambda: objects.version == 3, 5, "version 3", interval=0.01)
        assert objects.value == DEFAULT_CONFIG.plugins  # without the shard: the configuration given
    finally:
        objects.stop()


def test_absent_objects_leave_the_configuration_given():
    objects = KaiObjects(cluster(), placement, DEFAULT_CONFIG.plugins, component="test").start()
    try:
        assert objects.wait_applied(5)
        assert objects.value == DEFAULT_CONFIG.plugins and objects.version == 0
    finally:
        objects.stop()


def test_a_malformed_change_keeps_the_last_good_value_and_is_reported_on_the_object(caplog):
    kube = cluster(shard({"placementStrategy": {"gpu": "spread"}}))
    objects = KaiObjects(kube, placement, DEFAULT_CONFIG.plugins, component="kai-scheduler").start()
    try:
        assert objects.wait_applied(5)
        good = objects.value
        kube.add(SHARD, shard({"placementStrategy": {"gpu": "sideways"}}, generation=2))
        wait_until(lambda: kube.events, 5, "an event", interval=0.01)
        assert objects.value is good and objects.version == 1
        wait_until(lambda: conditions(kube)["Deployed"] == ("False", 2), 5, "Deployed False",
                   interval=0.01)
        assert conditions(kube)["Available"] == ("True", 2)
        (event,) = kube.events
        assert event["reason"] == names.REASON_INVALID_CONFIGURATION and event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "SchedulingShard" and event["involvedObject"]["name"] == "default"
        assert "spec.placementStrategy: field 'gpu'" in event["message"]
        assert any("spec.placementStrategy: field 'gpu'" in str(vars(r)) for r in caplog.records)
        kube.add(SHARD, shard({"kValue": 2}, generation=3))
        wait_until(lambda: objects.version == 2, 5, "version 2", interval=0.01)  # a later good change is applied
    finally:
        objects.stop()


def test_settings_rebuild_the_plugins_only_when_the_configuration_changed():
    now = Settings(Plugins(DEFAULT_CONFIG), None, 1.0)
    build = settings_builder(DEFAULT_CONFIG, 1.0, lambda: now)
    assert build(None, None) is now
    period_only = build(shard({"args": {"schedule-period": "3s"}}), None)
    assert period_only.period == 3.0 and period_only.plugins.config != now.plugins.config  # KAI's plugin order
    now = period_only
    assert build(shard({"args": {"schedule-period": "3s"}}), None) is now
    spread = build(shard({"placementStrategy": {"gpu": "spread"}, "args": {"schedule-period": "3s"}}), None)
    assert spread.plugins is not now.plugins and "consolidation" not in spread.plugins.config.actions
    assert spread.usage is None


def test_the_reservation_pods_app_label_comes_from_the_config_else_the_flag():
    now = Settings(Plugins(DEFAULT_CONFIG), None, 1.0, "flagged")
    build = settings_builder(DEFAULT_CONFIG, 1.0, lambda: now, reservation_app="flagged")
    assert build(None, None) is now
    config = {"spec": {"binder": {"resourceReservation": {"appLabel": "from-config"}}}}
    assert build(None, config).reservation_app == "from-config"
    with pytest.raises(ValueError, match="spec.binder.resourceReservation.appLabel"):
        build(None, {"spec": {"binder": {"resourceReservation": {"appLabel": 7}}}})


def test_the_bind_mode_comes_from_the_shards_args_else_the_flag():
    now = Settings(Plugins(DEFAULT_CONFIG), None, 1.0, bind_mode="bindRequest")
    build = settings_builder(DEFAULT_CONFIG, 1.0, lambda: now, bind_mode="bindRequest")
    assert build(None, None) is now
    assert build(shard({"args": {"bind-mode": "direct"}}), None).bind_mode == "direct"


def test_a_plugin_refusing_its_arguments_is_an_error_of_the_build():
    now = Settings(Plugins(DEFAULT_CONFIG), None, 1.0)
    build = settings_builder(DEFAULT_CONFIG, 1.0, lambda: now)
    with pytest.raises(PluginError, match="unknown plugin 'nosuchplugin'"):
        build(shard({"plugins": {"nosuchplugin": {}}}), None)


CONFIG = f"{CONFIGS}/kai-config"


def kai_config(spec: dict, generation: int = 1) -> dict:
    return {"apiVersion": "kai.scheduler/v1", "kind": "Config",
            "metadata": {"name": "kai-config", "uid": "c1", "generation": generation}, "spec": spec}


def config_conditions(kube: FakeApi) -> dict[str, tuple[str, int, str]]:
    """The Config's conditions by type (none while a test has just replaced the object, status and all)."""
    return {c["type"]: (c["status"], c["observedGeneration"], c["message"])
            for c in kube.objects[CONFIG].get("status", {}).get("conditions", [])}


def deployed(kube: FakeApi) -> tuple:
    return config_conditions(kube).get("Deployed", ())[:2]


def gpu_sharing(_shard, config):
    return config_field(config, "admission.gpuSharing", bool)


def test_the_config_s_conditions_follow_each_attempt_of_the_component_reporting_them():
    kube = FakeApi()
    kube.add(CONFIG, kai_config({"admission": {"gpuSharing": False}}))
    objects = KaiObjects(kube, gpu_sharing, True, component="binder", shard=None, report_config=True).start()
    try:
        assert objects.wait_applied(5) and objects.value is False
        assert config_conditions(kube) == {
            "Deployed": ("True", 1, "Resources deployed"), "Available": ("True", 1, "System available"),
            "DependenciesFulfilled": ("True", 1, "Dependencies are fulfilled"), "Ready": ("True", 1, "System is ready"),
            "Reconciling": ("False", 1, "Reconciliation completed successfully")}
        kube.add(CONFIG, kai_config({"admission": {"gpuSharing": "yes"}}, generation=2))
        wait_until(lambda: deployed(kube) == ("False", 2), 5, "Deployed False", interval=0.01)
        assert "spec.admission.gpuSharing: expected true or false" in config_conditions(kube)["Deployed"][2]
        assert config_conditions(kube)["Available"][:2] == ("True", 2) and objects.value is False
        kube.add(CONFIG, kai_config({"admission": {"gpuSharing": True}}, generation=3))
        wait_until(lambda: deployed(kube) == ("True", 3), 5, "Deployed True", interval=0.01)
        assert objects.value is True
        assert all(path == f"{CONFIG}/status" for path in kube.paths("PATCH"))
    finally:
        objects.stop()


def test_a_component_not_reporting_leaves_the_config_s_status_alone():
    kube = FakeApi()
    kube.add(CONFIG, kai_config({"admission": {"gpuSharing": False}}))
    objects = KaiObjects(kube, gpu_sharing, True, component="podgrouper", shard=None).start()
    try:
        assert objects.wait_applied(5) and objects.value is False
        assert kube.paths("PATCH") == [] and "status" not in kube.objects[CONFIG]
    finally:
        objects.stop()


def test_the_config_disabling_the_scheduler_is_a_setting_of_its_own():
    now = Settings(Plugins(DEFAULT_CONFIG), None, 1.0)
    build = settings_builder(DEFAULT_CONFIG, 1.0, lambda: now)
    assert build(None, {"spec": {"scheduler": {"service": {"enabled": True}}}}) is now
    off = build(None, {"spec": {"scheduler": {"service": {"enabled": False}}}})
    assert not off.enabled and off.plugins is now.plugins
    with pytest.raises(ValueError, match="spec.scheduler.service.enabled"):
        build(None, {"spec": {"scheduler": {"service": {"enabled": "no"}}}})
