"""The podGrouper and global sections of Config kai-config over the podgrouper's flags."""

from __future__ import annotations

import pytest

from kai.controllers.grouping_settings import Grouping, GroupingFlags, grouping_builder, grouping_flags
from kai.grouping.hub import GroupingConfig, build_hub
from kai.grouping.objects import MemoryObjects

FLAGS = GroupingFlags(GroupingConfig(), search_legacy_pg=False)


def config(podgrouper_args: dict | None = None, **global_) -> dict:
    return {"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"},
            "spec": {"podGrouper": {"args": podgrouper_args or {}}, "global": global_}}


def test_without_a_config_or_its_fields_the_flags_stay():
    assert grouping_flags(FLAGS, None) == FLAGS
    assert grouping_flags(FLAGS, config()) == FLAGS


def test_each_field_set_replaces_its_flag():
    flags = grouping_flags(FLAGS, config(
        {"gangScheduleKnative": False, "genericKartaFallback": False, "defaultPrioritiesConfigMapName": "prio",
         "defaultPrioritiesConfigMapNamespace": "kai"}, queueLabelKey="team/queue", nodePoolLabelKey="team/pool"))
    assert flags == GroupingFlags(GroupingConfig("team/queue", "team/pool", ("kai", "prio")), search_legacy_pg=False,
                                  knative_gang_schedule=False, generic_karta_fallback=False)
    arguments = flags.arguments()
    assert arguments["knative"] == {"gangSchedule": False} and arguments["default"] == {"kartaFallback": False}


@pytest.mark.parametrize(("kai_config", "message"), [
    (config({"gangScheduleKnative": "false"}), "spec.podGrouper.args.gangScheduleKnative: expected true or false"),
    (config({"defaultPrioritiesConfigMapName": "prio"}),
     "spec.podGrouper.args.defaultPrioritiesConfigMapName: needs defaultPrioritiesConfigMapNamespace too"),
    (config(queueLabelKey=""), "spec.global.queueLabelKey: a label key cannot be empty"),
    (config(nodePoolLabelKey=3), "spec.global.nodePoolLabelKey: expected a string, not 3"),
    ({"spec": {"podGrouper": {"args": ["x"]}}}, "spec.podGrouper.args: expected a mapping"),
])
def test_a_malformed_field_is_an_error_naming_it(kai_config, message):
    with pytest.raises(ValueError, match="^" + message):
        grouping_flags(FLAGS, kai_config)


def test_the_builder_makes_a_new_hub_only_when_the_settings_change():
    reader = MemoryObjects([])
    current = Grouping(FLAGS, build_hub(reader, FLAGS.config, FLAGS.arguments()))
    build = grouping_builder(FLAGS, reader, lambda: current)
    assert build(None, None) is current and build(None, config()) is current
    changed = build(None, config(queueLabelKey="team/queue"))
    assert changed.hub is not current.hub and changed.hub.config.queue_label_key == "team/queue"
