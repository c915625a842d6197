"""The podgrouper's settings from its flags and KAI's ``Config kai-config``.

:func:`grouping_flags` is the translation, each field the Config sets winning over the flag:

* ``podGrouper.args.gangScheduleKnative``, ``.genericKartaFallback`` (``--knative-gang-schedule``,
  ``--generic-karta-fallback``);
* ``podGrouper.args.defaultPrioritiesConfigMapName`` and ``...Namespace``, together
  (``--default-priorities-configmap-name``, ``-namespace``);
* ``global.queueLabelKey``, ``global.nodePoolLabelKey`` (``--queue-label-key``, ``--nodepool-label-key``).

:func:`grouping_builder` makes the ``build`` of :class:`kai.kube.kaiconfig.KaiObjects`: the flags and the
grouping hub built from them, the current ones when nothing changed.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from kai.grouping.hub import GroupingConfig, PodGrouperHub, build_hub, podgrouper_arguments
from kai.grouping.objects import ObjectReader
from kai.kube.kaiconfig import config_field


@attrs.frozen
class GroupingFlags:
    """The podgrouper's settings: the grouping configuration and the podgroupers' switches."""

    config: GroupingConfig = GroupingConfig()
    search_legacy_pg: bool = True
    knative_gang_schedule: bool = True
    generic_karta_fallback: bool = True

    def arguments(self) -> dict[str, dict]:
        """The arguments of the shipped podgroupers."""
        return podgrouper_arguments(self.search_legacy_pg, self.knative_gang_schedule, self.generic_karta_fallback)


@attrs.frozen(eq=False)
class Grouping:
    """The settings in force and the hub built from them."""

    flags: GroupingFlags
    hub: PodGrouperHub


def grouping_flags(base: GroupingFlags, kai_config: dict | None) -> GroupingFlags:
    """``base`` (the flags) with the fields the Config sets; ValueError naming a malformed field."""
    switches = {}
    for field, attribute in (("gangScheduleKnative", "knative_gang_schedule"),
                             ("genericKartaFallback", "generic_karta_fallback")):
        value = config_field(kai_config, f"podGrouper.args.{field}", bool)
        if value is not None:
            switches[attribute] = value
    config = base.config
    for field, attribute in (("queueLabelKey", "queue_label_key"), ("nodePoolLabelKey", "node_pool_label_key")):
        value = config_field(kai_config, f"global.{field}", str)
        if value is not None:
            if not value.strip():
                raise ValueError(f"spec.global.{field}: a label key cannot be empty")
            config = attrs.evolve(config, **{attribute: value})
    name = config_field(kai_config, "podGrouper.args.defaultPrioritiesConfigMapName", str)
    namespace = config_field(kai_config, "podGrouper.args.defaultPrioritiesConfigMapNamespace", str)
    if bool(name) != bool(namespace):
        given, missing = ("Name", "Namespace") if name else ("Namespace", "Name")
        raise ValueError(f"spec.podGrouper.args.defaultPrioritiesConfigMap{given}: needs "
                         f"defaultPrioritiesConfigMap{missing} too")
    if name and namespace:
        config = attrs.evolve(config, defaults_configmap=(namespace, name))
    return attrs.evolve(base, config=config, **switches)


def grouping_builder(base: GroupingFlags, reader: ObjectReader,
                     current: Callable[[], Grouping]) -> Callable[[dict | None, dict | None], Grouping]:
    """``build(shard, kai_config)`` of the podgrouper (the shard is not read)."""

    def build(_shard: dict | None, kai_config: dict | None) -> Grouping:
        flags = grouping_flags(base, kai_config)
        now = current()
        return now if flags == now.flags else Grouping(flags, build_hub(reader, flags.config, flags.arguments()))

    return build
