"""The grouping hub: from a pod to its PodGroup, through the podgroupers of the ``kai.podgroupers`` group.

One code path serves the control loop, the dry run and the tests:

1. :func:`kai.grouping.owners.resolve_owners` follows the pod's ``ownerReferences`` to the top owner;
2. :meth:`PodGrouperHub.metadata` picks the podgrouper registered for the top owner's
   GroupVersionKind (exact, then any version, then the fallback ``("*", "*", "*")``) and calls its
   ``kai_podgroup_metadata`` hook;
3. :meth:`PodGrouperHub.podgroup` adds the pod's node-pool label and builds the PodGroup object
   (:mod:`kai.grouping.podgroups`, which also gives the annotation and label KAI puts on the pod).

The control loop (``kai.controllers.podgrouper``) and the dry run (``kai-scheduler podgroup``) both
call :func:`kai.grouping.podgroups.skip_reason` and :meth:`PodGrouperHub.podgroup`.

Podgroupers build on the default grouping rules offered here (:meth:`PodGrouperHub.default_metadata`
and its parts: name, labels, annotations, queue, priority class, preemptibility, topology).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint
from typing import cast

import attrs
import pluggy

import kai.hookspecs
from kai import PROJECT
from kai.api.names import (
    NODE_POOL_LABEL,
    PREEMPTIBILITY_LABEL,
    PREEMPTION_DELAY_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    PROJECT_LABEL,
    QUEUE_LABEL,
    SKIP_PODGROUPER_ANNOTATION,
    STALENESS_GRACE_PERIOD_ANNOTATION,
    TOP_OWNER_METADATA_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
    USER_LABEL,
)
from kai.api.podgroup import (
    DEFAULT_QUEUE,
    TRAIN_PRIORITY,
    GroupingError,
    NotFoundError,
    OwnerReference,
    PodGroupMetadata,
    TopologyConstraint,
    parse_preemptibility,
)
from kai.common.durations import parse_duration
from kai.grouping.objects import ObjectReader
from kai.grouping.owners import resolve_owners
from kai.grouping.podgroups import GroupingSkipped, podgroup_object
from kai.grouping.topowner import top_owner_metadata
from kai.grouping.unstructured import annotations as annotations_of
from kai.grouping.unstructured import gvk, labels, meta_str
from kai.plugin_loader import PODGROUPER_GROUP, build_plugin, discover, register

log = logging.getLogger(__name__)

ANY = "*"
FALLBACK_KIND = (ANY, ANY, ANY)


@attrs.define(frozen=True)
class GroupingConfig:
    """The podgrouper flags shared by every podgrouper.

    ``defaults_configmap`` is ``(namespace, name)`` of the ConfigMap holding per-workload-type
    default priority classes and preemptibility (key ``types``), or ``None``.
    """

    queue_label_key: str = QUEUE_LABEL
    node_pool_label_key: str = NODE_POOL_LABEL
    defaults_configmap: tuple[str, str] | None = None


@functools.cache
def _installed() -> dict[str, EntryPoint]:
    return discover(PODGROUPER_GROUP)


def build_hub(
    reader: ObjectReader,
    config: GroupingConfig | None = None,
    arguments: Mapping[str, Mapping] | None = None,
    plugins: Mapping[str, object] | None = None,
) -> PodGrouperHub:
    """A hub over the installed podgroupers (entry-point group ``kai.podgroupers``), each built with
    ``arguments[name]`` (default ``{}``). Finding, loading and building them fails as for scheduling plugins
    (:mod:`kai.plugin_loader`).

    ``plugins`` adds already built podgrouper objects by name (tests, embedding).
    """
    arguments, plugins = arguments or {}, plugins or {}
    available = {name: ep for name, ep in _installed().items() if name not in plugins}
    built: dict[str, object] = {}
    for name in sorted(_installed()):
        built[name] = (plugins[name] if name in plugins
                       else build_plugin(name, arguments.get(name) or {}, available, kind="podgrouper"))
    built.update(plugins)
    return PodGrouperHub(built, reader, config or GroupingConfig(), available)


def _kind_key(kind) -> tuple[str, str, str]:
    group, version, name = kind
    return str(group), str(version), str(name)


class PodGrouperHub:
    """Chooses the podgrouper of a pod's top owner and offers the default grouping rules to podgroupers.

    ``available`` holds the entry point of each installed podgrouper, for the distributions error messages name.
    """

    def __init__(self, plugins: Mapping[str, object], reader: ObjectReader, config: GroupingConfig,
                 available: Mapping[str, EntryPoint] | None = None):
        self.reader = reader
        self.config = config
        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(kai.hookspecs)
        register(self._pm, plugins.items(), available or {}, kind="podgrouper")
        self._calls: dict[str, Callable[..., object]] = {}
        for impl in self._pm.hook.kai_podgroup_metadata.get_hookimpls():
            self._calls[impl.plugin_name] = impl.function
        missing = sorted(set(plugins) - set(self._calls))
        if missing:
            raise GroupingError(f"podgrouper(s) {', '.join(missing)} implement no kai_podgroup_metadata hook")
        self._table: dict[tuple[str, str, str], str] = {}
        for impl in self._pm.hook.kai_podgrouper_kinds.get_hookimpls():
            name = impl.plugin_name
            kinds = cast("Iterable[tuple[str, str, str]]", impl.function() or ())
            for kind in kinds:
                key = _kind_key(kind)
                other = self._table.setdefault(key, name)
                if other != name:
                    raise GroupingError(f"podgroupers {other!r} and {name!r} both claim {'/'.join(key)}")

    # --- choosing a podgrouper -------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Names of the registered podgroupers."""
        return sorted(self._calls)

    @property
    def table(self) -> dict[tuple[str, str, str], str]:
        """(group, version, kind) -> podgrouper name, as the podgroupers declared it."""
        return dict(self._table)

    def podgrouper_for(self, kind: tuple[str, str, str]) -> str | None:
        """The podgrouper name for a GroupVersionKind: exact match, then any version, then the fallback."""
        group, _, name = kind
        for key in (kind, (group, ANY, name), FALLBACK_KIND):
            if key in self._table:
                return self._table[key]
        return None

    def call(self, name: str, top_owner: dict | None, pod: dict, owners: list[dict]) -> PodGroupMetadata:
        """Run the podgrouper ``name``."""
        function = self._calls.get(name)
        if function is None:
            raise GroupingError(f"no podgrouper named {name!r} is installed")
        result = function(hub=self, top_owner=top_owner, pod=pod, owners=list(owners))
        if not isinstance(result, PodGroupMetadata):
            raise GroupingError(f"podgrouper {name!r} returned {type(result).__name__}, not PodGroupMetadata")
        return result

    def metadata(self, top_owner: dict, pod: dict, owners: list[dict]) -> PodGroupMetadata:
        """The PodGroup metadata from the podgrouper of the top owner's kind."""
        name = self.podgrouper_for(gvk(top_owner))
        if name is None:
            raise GroupingError(f"no podgrouper for {'/'.join(gvk(top_owner))} and no fallback podgrouper")
        return self.call(name, top_owner, pod, owners)

    def dispatch(
        self, top_owner: dict, pod: dict, owners: list[dict], table: Mapping[tuple[str, str, str], str] | None = None
    ) -> PodGroupMetadata:
        """Group with the podgrouper of the top owner's kind: exact, any version or the fallback, as
        :meth:`metadata`; with ``table``, its podgrouper for the exact kind, else the default rules.

        Used by podgroupers that hand a pod on to another owner's podgrouper (skip-top-owner).
        """
        if table is None:
            return self.metadata(top_owner, pod, owners)
        name = table.get(gvk(top_owner))
        if name is None:
            return self.default_metadata(top_owner, pod, owners)
        return self.call(name, top_owner, pod, owners)

    # --- the whole flow ---------------------------------------------------------------------------

    def group(self, pod: dict) -> PodGroupMetadata:
        """Resolve the pod's owners and return its PodGroup metadata.

        Raises :class:`~kai.grouping.podgroups.GroupingSkipped` when an owner carries
        ``kai.scheduler/skip-podgrouper: "true"``.
        """
        top_owner, owners = resolve_owners(self.reader, pod)
        for owner in owners:
            if annotations_of(owner).get(SKIP_PODGROUPER_ANNOTATION) == "true":
                raise GroupingSkipped(
                    f"{owner.get('kind', '')} {meta_str(owner, 'namespace')}/{meta_str(owner, 'name')} has "
                    f'{SKIP_PODGROUPER_ANNOTATION}: "true"'
                )
        return self.metadata(top_owner, pod, owners)

    def podgroup(self, pod: dict) -> tuple[dict, str | None]:
        """The PodGroup object for the pod, and the pod's sub-group (or ``None``).

        Adds the pod's node-pool label to the PodGroup when the podgrouper did not set it.
        """
        metadata = self.group(pod)
        key = self.config.node_pool_label_key
        if key and key not in metadata.labels and key in labels(pod):
            metadata.labels[key] = labels(pod)[key]
        subgroup = metadata.subgroup_for_pod(meta_str(pod, "namespace"), meta_str(pod, "name"))
        return podgroup_object(metadata), subgroup.name if subgroup else None

    # --- lookups ----------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict:
        """Read an object; raises :class:`kai.api.podgroup.NotFoundError`."""
        return self.reader.get(api_version, kind, namespace, name)

    def list_pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict]:
        """Pods of a namespace carrying every label of ``selector``."""
        return self.reader.list_pods(namespace, selector)

    def list_objects(self, api_version: str, kind: str, namespace: str, selector: Mapping[str, str]) -> list[dict]:
        """Objects of a kind (in ``namespace``, or anywhere for ``""``) carrying every label of ``selector``;
        empty when the reader cannot list other kinds than pods or the kind is not served."""
        lister = getattr(self.reader, "list", None)
        if lister is None:
            return []
        try:
            return list(lister(api_version, kind, namespace, selector))
        except NotFoundError:
            return []

    # --- the default grouping rules ---------------------------------------------------------------

    def default_metadata(
        self, top_owner: dict, pod: dict, owners: Iterable[dict] = (), fallback_priority: str = TRAIN_PRIORITY
    ) -> PodGroupMetadata:
        """KAI's default grouping: one PodGroup per top owner, minimum 1.

        ``owners`` (nearest first) decide the priority class and preemptibility; empty means the
        top owner alone.
        """
        owners = list(owners) or [top_owner]
        priority, defaults = self._priority_with_defaults(owners, pod, fallback_priority)
        owner_annotations = annotations_of(top_owner)
        return PodGroupMetadata(
            name=f"pg-{meta_str(top_owner, 'name')}-{meta_str(top_owner, 'uid')}",
            namespace=meta_str(pod, "namespace"),
            owner=OwnerReference.of(top_owner),
            min_available=1,
            queue=self.queue(top_owner, pod),
            priority_class=priority,
            preemptibility=self._preemptibility(owners, pod, defaults),
            preemption_delay=first_duration([*owners, pod], PREEMPTION_DELAY_ANNOTATION, negative=False),
            staleness_grace_period=first_duration([*owners, pod], STALENESS_GRACE_PERIOD_ANNOTATION),
            labels=self.labels(top_owner, pod),
            annotations=self.annotations(top_owner, pod),
            topology=TopologyConstraint(
                topology=owner_annotations.get(TOPOLOGY_ANNOTATION, ""),
                required_level=owner_annotations.get(TOPOLOGY_REQUIRED_ANNOTATION, ""),
                preferred_level=owner_annotations.get(TOPOLOGY_PREFERRED_ANNOTATION, ""),
            ),
        )

    def labels(self, top_owner: dict, pod: dict) -> dict[str, str]:
        """The top owner's labels, plus the pod's ``user`` label when the owner has none."""
        result = labels(top_owner)
        pod_labels = labels(pod)
        if USER_LABEL not in result and USER_LABEL in pod_labels:
            result[USER_LABEL] = pod_labels[USER_LABEL]
        return result

    def annotations(self, top_owner: dict, pod: dict) -> dict[str, str]:
        """The pod's ``user`` annotation, the top-owner metadata, then the top owner's annotations."""
        result = {}
        pod_annotations = annotations_of(pod)
        if USER_LABEL in pod_annotations:
            result[USER_LABEL] = pod_annotations[USER_LABEL]
        result[TOP_OWNER_METADATA_ANNOTATION] = top_owner_metadata(top_owner)
        result.update(annotations_of(top_owner))
        return result

    def queue(self, top_owner: dict, pod: dict) -> str:
        """Queue label of the top owner, else of the pod, else the ``project`` (with node pool), else the default."""
        key = self.config.queue_label_key
        owner_labels, pod_labels = labels(top_owner), labels(pod)
        if key in owner_labels:
            return owner_labels[key]
        if key in pod_labels:
            return pod_labels[key]
        project = owner_labels.get(PROJECT_LABEL, pod_labels.get(PROJECT_LABEL, ""))
        if not project:
            return DEFAULT_QUEUE
        node_pool = pod_labels.get(self.config.node_pool_label_key)
        return f"{project}-{node_pool}" if node_pool is not None else project

    def priority_class(self, top_owner: dict, pod: dict, fallback: str) -> str:
        """The priority class judged on the top owner alone, else ``fallback``."""
        return self._priority_with_defaults([top_owner], pod, fallback)[0]

    def kind_defaults(self, obj: dict) -> tuple[str, str]:
        """The defaults ConfigMap entry of the object's kind: its priority class (``""`` unless that class
        exists) and its preemptibility as written; ``("", "")`` without an entry.

        Raises :class:`GroupingError` when the ConfigMap cannot be read.
        """
        entry = _defaults_for(self._workload_defaults(), obj)
        if not entry:
            return "", ""
        priority = entry.get("priorityName", "")
        return (priority if self._priority_class_exists(priority) else ""), entry.get("preemptibility", "")

    def _priority_class_exists(self, name: str) -> bool:
        if not name:
            return False
        try:
            self.reader.get("scheduling.k8s.io/v1", "PriorityClass", "", name)
        except NotFoundError:
            return False
        return True

    def _priority_with_defaults(self, owners, pod, fallback):
        pod_labels = labels(pod)
        pod_spec_priority = str(((pod.get("spec") or {}).get("priorityClassName")) or "")
        for owner in owners:
            owner_labels = labels(owner)
            if PRIORITY_CLASS_LABEL in owner_labels:
                candidate = owner_labels[PRIORITY_CLASS_LABEL]
            elif PRIORITY_CLASS_LABEL in pod_labels:
                candidate = pod_labels[PRIORITY_CLASS_LABEL]
            else:
                candidate = pod_spec_priority
            if self._priority_class_exists(candidate):
                return candidate, None
        try:
            defaults = self._workload_defaults()
        except GroupingError:
            return fallback, None
        for owner in owners:
            entry = _defaults_for(defaults, owner)
            if entry and gvk(owner)[2] and self._priority_class_exists(entry.get("priorityName", "")):
                return entry["priorityName"], defaults
        return fallback, defaults

    def _preemptibility(self, owners, pod, defaults) -> str:
        for obj in [*owners, pod]:
            value = labels(obj).get(PREEMPTIBILITY_LABEL)
            if value is not None:
                try:
                    return parse_preemptibility(value)
                except GroupingError:
                    pass
        if not defaults:
            try:
                defaults = self._workload_defaults()
            except GroupingError:
                return ""
        for owner in owners:
            entry = _defaults_for(defaults, owner)
            if entry and entry.get("preemptibility"):
                try:
                    return parse_preemptibility(entry["preemptibility"].lower())
                except GroupingError:
                    pass
        return ""

    def _workload_defaults(self) -> dict[str, dict]:
        """Per GroupKind defaults from the defaults ConfigMap; ``{}`` when none is configured."""
        if self.config.defaults_configmap is None:
            return {}
        namespace, name = self.config.defaults_configmap
        if not namespace or not name:
            return {}
        configmap = self.reader.get("v1", "ConfigMap", namespace, name)
        data = configmap.get("data") or {}
        if "types" not in data:
            raise GroupingError("default priorities configmap Data does not contain <types> key")
        try:
            entries = json.loads(data["types"]) or []
        except (TypeError, ValueError) as err:
            raise GroupingError(f"failed to unmarshal default priorities configmap data: {err}") from err
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise GroupingError("failed to unmarshal default priorities configmap data")
        result = {}
        for entry in entries:
            entry = {k: "" if v is None else v for k, v in entry.items()}
            if not all(
                isinstance(entry.get(k, ""), str) for k in ("typeName", "group", "priorityName", "preemptibility")
            ):
                raise GroupingError("failed to unmarshal default priorities configmap data")
            result[_group_kind(entry.get("group", ""), entry.get("typeName", ""))] = entry
        return result


def first_duration(objects: Iterable[dict], key: str, negative: bool = True) -> float | None:
    """Seconds of the first valid Go-duration annotation ``key`` of ``objects``; invalid values are logged
    and skipped (negative ones too unless ``negative``)."""
    for obj in objects:
        text = annotations_of(obj).get(key)
        if text is None:
            continue
        try:
            seconds = parse_duration(text, key)
        except ValueError as err:
            log.warning("invalid %s annotation on %s: %s", key, meta_str(obj, "name"), err)
            continue
        if seconds < 0 and not negative:
            log.warning("invalid %s annotation on %s: %s must be non-negative", key, meta_str(obj, "name"), text)
            continue
        return seconds
    return None


def _group_kind(group: str, kind: str) -> str:
    return f"{kind}.{group}" if group else kind


def _defaults_for(defaults: Mapping[str, dict] | None, owner: dict) -> dict | None:
    if not defaults:
        return None
    group, _, kind = gvk(owner)
    key = _group_kind(group, kind)
    if not key:
        return None
    return defaults.get(key) or defaults.get(kind)


def podgrouper_arguments(
    search_legacy_pg: bool = True, knative_gang_schedule: bool = True, generic_karta_fallback: bool = True
) -> dict[str, dict]:
    """Arguments of the shipped podgroupers from the podgrouper flags ``--search-legacy-pg``,
    ``--knative-gang-schedule`` and ``--generic-karta-fallback``."""
    return {
        "job": {"searchForLegacyPodGroups": search_legacy_pg},
        "runaijob": {"searchForLegacyPodGroups": search_legacy_pg},
        "knative": {"gangSchedule": knative_gang_schedule},
        "default": {"kartaFallback": generic_karta_fallback},
    }


__all__ = ["ANY", "FALLBACK_KIND", "GroupingConfig", "PodGrouperHub", "build_hub", "podgrouper_arguments"]
