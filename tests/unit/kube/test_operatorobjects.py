"""KAI's operator objects created where they are missing, against an in-memory API."""

from __future__ import annotations

import logging

from kai.api import names
from kai.kube.client import object_path
from kai.kube.operatorobjects import DEFAULT_SHARD_SPEC, create_missing, default_objects
from support.kube import FakeApi

CONFIG = object_path(*names.CONFIGS, name=names.KAI_CONFIG_NAME)
SHARD = object_path(*names.SCHEDULINGSHARDS, name=names.DEFAULT_SHARD)


def test_both_are_created_with_kai_s_default_values_and_kept_on_uninstall():
    kube = FakeApi()
    assert create_missing(kube, "kai-system") == ["Config/kai-config", "SchedulingShard/default"]
    enabled = {"service": {"enabled": True}}
    assert kube.objects[CONFIG]["spec"] == {  # KAI's defaults but the settings that replace flags here
        "namespace": "kai-system", "global": {}, "binder": enabled, "podGrouper": enabled,
        "podGroupController": enabled, "queueController": enabled, "admission": enabled, "scheduler": enabled}
    assert kube.objects[SHARD]["spec"] == {"partitionLabelValue": "", "goMemLimitRatio": 0.9,
                                           "placementStrategy": {"gpu": "binpack", "cpu": "binpack"}}
    for path in (CONFIG, SHARD):
        assert kube.objects[path]["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_an_existing_object_is_left_as_it_is():
    kube = FakeApi()
    custom = {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard",
              "metadata": {"name": "default"}, "spec": {"placementStrategy": {"gpu": "spread"}}}
    kube.add(SHARD, custom)
    assert create_missing(kube, "kai-scheduler") == ["Config/kai-config"]
    assert kube.objects[SHARD] is custom and kube.objects[SHARD]["spec"] == {"placementStrategy": {"gpu": "spread"}}
    assert kube.paths("PUT") == kube.paths("PATCH") == []


def test_a_create_lost_to_another_replica_is_no_error(caplog):
    kube = FakeApi()
    kube.fail(409, "Conflict", "POST", "/configs")
    with caplog.at_level(logging.INFO):
        assert create_missing(kube, "kai-scheduler") == ["SchedulingShard/default"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_missing_crd_is_a_log_line_and_a_refused_create_a_warning(caplog):
    kube = FakeApi()
    kube.fail(404, "Not Found", "POST", "/configs")
    kube.fail(403, "Forbidden", "POST", "/schedulingshards")
    with caplog.at_level(logging.INFO):
        assert create_missing(kube, "kai-scheduler") == []
    (missing,) = [r for r in caplog.records if "CRD is not installed" in r.getMessage()]
    assert missing.levelno == logging.INFO
    (refused,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "403" in str(vars(refused))
    assert not kube.objects


def test_the_default_spec_is_not_shared_between_calls():
    default_objects("a")[1]["spec"]["placementStrategy"]["gpu"] = "spread"
    assert DEFAULT_SHARD_SPEC["placementStrategy"]["gpu"] == "binpack"
    assert default_objects("a")[1]["spec"]["placementStrategy"]["gpu"] == "binpack"
