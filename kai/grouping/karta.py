"""Karta: grouping a kind no podgrouper knows from a ``run.ai/v1alpha1`` Karta object ("no-code" grouping).

A Karta describes a workload kind as a tree of components (the root is the kind itself); each
component may say where its replica count is (``scaleDefinition``), which instances it has
(``instanceIdPath``) and which pods belong to it (``podSelector.componentTypeSelector``). Its
``optimizationInstructions.gangScheduling.podGroup`` says how the workload's pods form one PodGroup:
``pg-<uid>-<name>``, with a sub-group per listed component and optional topology constraints. KAI v0.17
consults the Kartas labelled with a kind (``run.ai/karta-group``, ``-version``, ``-kind``) before its
default rules.

Without ``podGroup``, the deprecated ``podGroups`` instruction groups a pod by the member naming its
component (or an ancestor) whose filters it passes, in a PodGroup named by its group-by keys.

Supported here: paths made of keys, indexes and ``[]`` (``.spec.worker.replicas``,
``.metadata.labels["job-name"]``, ``.spec.items[0]``, ``.spec.pools[].replicas``) and member filters that are
such a path or its comparison (``==``, ``!=``) with a JSON literal. A Karta using other JQ is skipped with a
warning, as KAI skips an invalid Karta, and the kind gets the default rules.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping

import attrs

from kai.api.podgroup import GroupingError, NotFoundError, PodGroupMetadata, SubGroupMetadata, TopologyConstraint
from kai.grouping.unstructured import gvk, meta_str

log = logging.getLogger(__name__)

KARTA_API_VERSION = "run.ai/v1alpha1"
KARTA_GROUP_LABEL = "run.ai/karta-group"
KARTA_VERSION_LABEL = "run.ai/karta-version"
KARTA_KIND_LABEL = "run.ai/karta-kind"


class UnsupportedKarta(Exception):
    """The Karta is invalid or uses a feature this implementation does not evaluate."""


# --- JQ paths -------------------------------------------------------------------------------------

_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\.?\[\s*("(?:[^"\\]|\\.)*"|-?[0-9]+)?\s*\]|\.("(?:[^"\\]|\\.)*")')

#: A path step: a key, an index, or ``None`` for ``[]`` (every element of a list, every value of a map).
Step = str | int | None


def parse_path(path: str) -> tuple[Step, ...]:
    """The steps of a JQ path (``.`` is the identity); raises :class:`UnsupportedKarta` for other JQ."""
    text = (path or "").strip()
    if text == ".":
        return ()
    steps: list[Step] = []
    position = 0
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None or match.end() == position:
            raise UnsupportedKarta(f"JQ expression {path!r} is not a path")
        name, index, quoted = match.groups()
        if name is not None:
            steps.append(name)
        elif quoted is not None:
            steps.append(json.loads(quoted))
        else:
            steps.append(None if index is None else json.loads(index))
        position = match.end()
    if not steps:
        raise UnsupportedKarta(f"JQ expression {path!r} is not a path")
    return tuple(steps)


def _jq_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, Mapping):
        return "object"
    return "array" if isinstance(value, list) else "string" if isinstance(value, str) else "number"


def evaluate(obj, path: str) -> list:
    """The values a JQ path yields, as JQ's stream: one value (``None``, JQ's null, for a missing key)
    per path without ``[]``, one per element for each ``[]``; iterating what is not a list or a map is an error."""
    stream = [obj]
    for step in parse_path(path):
        values = []
        for value in stream:
            if step is None:
                if isinstance(value, list):
                    values.extend(value)
                elif isinstance(value, Mapping):
                    values.extend(value.values())
                else:
                    raise GroupingError(f"cannot iterate over {_jq_type(value)} in JQ path {path}")
            elif value is None:
                values.append(None)
            elif isinstance(step, str) and isinstance(value, Mapping):
                values.append(value.get(step))
            elif isinstance(step, int) and isinstance(value, list):
                values.append(value[step] if -len(value) <= step < len(value) else None)
            else:
                raise GroupingError(f"cannot index {_jq_type(value)} with {step!r} in JQ path {path}")
        stream = values
    return stream


# --- the Karta structure -------------------------------------------------------------------------------


@attrs.define
class Component:
    """One component of a Karta's structure."""

    name: str
    parent: str | None
    has_pod_definition: bool
    scale_paths: tuple[str | None, str | None] | None  # (replicas, minReplicas); None without scaleDefinition
    selector: tuple[str, str | None] | None  # (keyPath, value); None without componentTypeSelector
    instance_path: str | None = None  # instanceIdPath: the ids of the component's instances
    has_pod_selector: bool = False
    instance_selector: str | None = None  # componentInstanceSelector.idPath: a pod's instance id


@attrs.define
class Karta:
    """A validated Karta: its components (root first) and its ``podGroup`` or ``podGroups`` instruction."""

    name: str
    components: dict[str, Component]
    root: str
    pod_group: dict | None  # the podGroup instruction; None when the Karta has the deprecated podGroups
    pod_groups: list[dict] = attrs.field(factory=list)  # the deprecated podGroups instruction

    def children(self, name: str) -> list[str]:
        return [c.name for c in self.components.values() if c.parent == name]

    @property
    def has_scale_definition(self) -> bool:
        return any(c.scale_paths is not None for c in self.components.values())


def _str(value, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise UnsupportedKarta(f"{what} must be a non-empty string")
    return value


def _component(definition, root: bool) -> Component:
    if not isinstance(definition, Mapping):
        raise UnsupportedKarta("a component must be a map")
    name = _str(definition.get("name"), "component name")
    instance_path = definition.get("instanceIdPath")
    if instance_path is not None:
        parse_path(_str(instance_path, f"component {name}: instanceIdPath"))
    scale = definition.get("scaleDefinition")
    scale_paths = None
    if isinstance(scale, Mapping):
        scale_paths = (scale.get("replicasPath"), scale.get("minReplicasPath"))
        for path in scale_paths:
            if path is not None:
                parse_path(path)
    selector = None
    pod_selector = definition.get("podSelector") or {}
    instance_selector = (pod_selector.get("componentInstanceSelector") or {}).get("idPath")
    if instance_selector is not None:
        parse_path(_str(instance_selector, f"component {name}: componentInstanceSelector.idPath"))
    type_selector = pod_selector.get("componentTypeSelector")
    if type_selector:
        key = _str(type_selector.get("keyPath"), f"component {name}: keyPath")
        parse_path(key)
        value = type_selector.get("value")
        selector = (key, None if value is None else str(value))
    parent = None if root else _str(definition.get("ownerRef"), f"component {name}: ownerRef")
    return Component(name, parent, bool(definition.get("specDefinition")), scale_paths, selector, instance_path,
                     bool(definition.get("podSelector")), instance_selector)


def parse_karta(obj: dict) -> Karta:
    """The Karta of ``obj``; raises :class:`UnsupportedKarta` for what cannot be evaluated here."""
    spec = obj.get("spec") or {}
    structure = spec.get("structureDefinition") or {}
    root = _component(structure.get("rootComponent") or {}, root=True)
    components = {root.name: root}
    for definition in structure.get("childComponents") or []:
        component = _component(definition, root=False)
        if component.name in components:
            raise UnsupportedKarta(f"component {component.name} is defined twice")
        components[component.name] = component
    for component in components.values():
        seen, current = set(), component
        while current.parent is not None:
            if current.parent not in components or current.name in seen:
                raise UnsupportedKarta(f"component {component.name} does not lead to the root component")
            seen.add(current.name)
            current = components[current.parent]
    gang = (spec.get("optimizationInstructions") or {}).get("gangScheduling") or {}
    pod_group = gang.get("podGroup")
    if isinstance(pod_group, Mapping):
        _str(pod_group.get("name"), "podGroup name")
        return Karta(meta_str(obj, "name"), components, root.name, dict(pod_group))
    pod_groups = gang.get("podGroups")
    if not isinstance(pod_groups, list) or not pod_groups:
        raise UnsupportedKarta("no gangScheduling.podGroup or podGroups instruction")
    for definition in pod_groups:
        check_pod_group_definition(definition, components)
    return Karta(meta_str(obj, "name"), components, root.name, None, list(pod_groups))


# --- finding the Karta of a kind -------------------------------------------------------------------------


def _at(obj: object, *keys: str) -> object:
    """``obj[keys[0]][keys[1]]...``; None where a level is missing or not a mapping (a malformed Karta)."""
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _root_kind(obj: dict) -> tuple[str, str, str] | None:
    kind = _at(obj, "spec", "structureDefinition", "rootComponent", "kind")
    if not isinstance(kind, Mapping):
        return None
    return str(kind.get("group") or ""), str(kind.get("version") or ""), str(kind.get("kind") or "")


def _has_instructions(obj: dict) -> bool:
    structure = _at(obj, "spec", "structureDefinition")
    if not _at(structure, "rootComponent", "name") and not _at(structure, "childComponents"):
        return False
    gang = _at(obj, "spec", "optimizationInstructions", "gangScheduling")
    return bool(_at(gang, "podGroup") or _at(gang, "podGroups"))


def find_karta(hub, kind: tuple[str, str, str]) -> Karta | None:
    """The one usable Karta for ``kind``, or ``None`` (none, several, or the reader cannot list Kartas).

    As KAI: Kartas being deleted, without gang-scheduling instructions or invalid are skipped; two
    usable ones for a kind are an error that leaves the kind to the default rules.
    """
    group, version, name = kind
    selector = {KARTA_GROUP_LABEL: group, KARTA_VERSION_LABEL: version, KARTA_KIND_LABEL: name}
    lister = getattr(hub.reader, "list", None)
    if lister is None:
        return None
    found = lister(KARTA_API_VERSION, "Karta", "", selector)
    if not found:
        return None
    usable = []
    for obj in found:
        if _root_kind(obj) != kind or _at(obj, "metadata", "deletionTimestamp"):
            continue
        if not _has_instructions(obj):
            continue
        try:
            usable.append(parse_karta(obj))
        except UnsupportedKarta as err:
            log.warning("Karta %s skipped for %s: %s", meta_str(obj, "name"), "/".join(kind), err)
        except GroupingError as err:
            log.warning("Karta %s skipped for %s: %s", meta_str(obj, "name"), "/".join(kind), err)
    if len(usable) > 1:
        log.error("found multiple Kartas with gang scheduling instructions for %s", "/".join(kind))
        return None
    return usable[0] if usable else None


# --- grouping with a Karta ---------------------------------------------------------------------------------


def _scale_values(karta: Karta, component: Component, top_owner: dict, path: str | None) -> list[int | None]:
    values = evaluate(top_owner, path) if path is not None else []
    for value in values:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise GroupingError(f"Karta {karta.name}: {path} of component {component.name} is not an integer")
    return values


def instance_ids(karta: Karta, component: Component, top_owner: dict) -> list[str]:
    """The ids of a component's instances (``instanceIdPath``); one instance with id ``""`` without it."""
    if component.instance_path is None:
        return [""]
    ids = evaluate(top_owner, component.instance_path)
    if not all(isinstance(i, str) and i for i in ids):
        raise GroupingError(f"Karta {karta.name}: instance ids of component {component.name} must be non-empty "
                            f"strings, got {ids}")
    return ids


def _component_scales(karta: Karta, component: Component, top_owner: dict) -> dict[str, int]:
    """KAI's effective minimum of each instance of a component: minReplicas when positive, else replicas when
    positive, else 0. Each instance id needs its scale (the paths yield one value per instance)."""
    if component.scale_paths is None:
        return {}
    replicas_path, min_path = component.scale_paths
    replicas = _scale_values(karta, component, top_owner, replicas_path)
    minimums = _scale_values(karta, component, top_owner, min_path)
    count = max(len(replicas), len(minimums))
    ids = instance_ids(karta, component, top_owner)
    if len(ids) != count:
        raise GroupingError(f"Karta {karta.name}: component {component.name} has {len(ids)} instance ids "
                            f"but {count} scales")
    scales = {}
    for i, instance in enumerate(ids):
        minimum = minimums[i] if i < len(minimums) else None
        replica = replicas[i] if i < len(replicas) else None
        scales[instance] = minimum if minimum and minimum > 0 else replica if replica and replica > 0 else 0
    return scales


def subtree_scale(karta: Karta, name: str, top_owner: dict, instance: str | None = None) -> int:
    """Pods a component's subtree needs at once (KAI's CalculateSubtreeScale), for all its instances or for
    ``instance`` of the component ``name``.

    With scale definitions: a leaf's scale; a parent's scale times the sum of its children's
    (either alone when the other is 0). Without any: the number of component instances with a pod definition.
    """
    return _subtree_scale(karta, name, top_owner, name, instance)


def _subtree_scale(karta: Karta, name: str, top_owner: dict, root: str, instance: str | None) -> int:
    component = karta.components[name]
    children = karta.children(name)
    if not karta.has_scale_definition:
        if component.has_pod_definition:
            ids = instance_ids(karta, component, top_owner)
            if name == root and instance is not None and component.instance_path is not None:
                if instance not in ids:
                    raise GroupingError(f"instance id {instance} not found")
                return 1
            return len(ids)
        return sum(_subtree_scale(karta, child, top_owner, root, instance) for child in children)
    scales = _component_scales(karta, component, top_owner)
    if len(scales) > 1 and name == root and instance is not None:
        if instance not in scales:
            raise GroupingError(f"instance id {instance} not found")
        own = scales[instance]
    else:
        own = sum(scales.values())
    if not children:
        return own
    below = sum(_subtree_scale(karta, child, top_owner, root, instance) for child in children)
    if below == 0:
        return own
    return below if own == 0 else own * below


def _pod_matches(component: Component, pod: dict) -> bool:
    if component.selector is None:
        return False
    key, expected = component.selector
    values = evaluate(pod, key)
    if expected is None:
        return any(value is not None for value in values)
    return expected in values


def pod_in_subtree(karta: Karta, name: str, pod: dict) -> bool:
    """Whether the pod matches the component's selector or one of its descendants'."""
    if _pod_matches(karta.components[name], pod):
        return True
    return any(pod_in_subtree(karta, child, pod) for child in karta.children(name))


def _topology(value) -> TopologyConstraint | None:
    if not value:
        return None
    if not value.get("topologyName"):
        raise GroupingError("topology constraint must include topology name")
    required, preferred = value.get("requiredTopologyLevel") or "", value.get("preferredTopologyLevel") or ""
    if not required and not preferred:
        raise GroupingError("topology constraint must include preferred or required topology level")
    return TopologyConstraint(topology=value["topologyName"], required_level=required, preferred_level=preferred)


# --- the deprecated podGroups format ---------------------------------------------------------------------

_FILTER = re.compile(
    r'^(?P<path>.*?)\s*(?P<op>==|!=)\s*(?P<value>"(?:[^"\\]|\\.)*"|-?[0-9]+(?:\.[0-9]+)?|true|false|null)$')
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def parse_filter(text: str) -> tuple[str, str | None, object]:
    """A member filter: ``(path, None, None)`` for a path, ``(path, "==" or "!=", literal)`` for a comparison
    with a JSON literal; raises :class:`UnsupportedKarta` for other JQ."""
    match = _FILTER.match((text or "").strip())
    if match is None:
        parse_path(text)
        return text, None, None
    parse_path(match["path"])
    return match["path"], match["op"], json.loads(match["value"])


def check_pod_group_definition(definition, components: Mapping[str, Component]) -> None:
    """A ``podGroups`` entry: a name and members naming components, with path group-by keys and filters."""
    if not isinstance(definition, Mapping):
        raise UnsupportedKarta("a podGroups entry must be a map")
    _str(definition.get("name"), "podGroups name")
    for member in definition.get("members") or []:
        name = _str((member or {}).get("componentName"), "podGroups member componentName")
        if name not in components:
            raise UnsupportedKarta(f"podGroups member {name} names no component")
        for path in member.get("groupByKeyPaths") or []:
            parse_path(path)
        for text in member.get("filters") or []:
            parse_filter(text)


def _single_value(pod: dict, path: str, what: str):
    values = evaluate(pod, path)
    if len(values) != 1 or values[0] is None or values[0] == "":
        raise GroupingError(f"{what} {path!r} returned an invalid value {values}: expected a single non-empty value")
    return values[0]


def _go_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _passes(pod: dict, text: str) -> bool:
    path, op, literal = parse_filter(text)
    if op is None:
        return _single_value(pod, path, "filter") is True
    values = [(value == literal) == (op == "==") for value in evaluate(pod, path)]
    if len(values) != 1:
        raise GroupingError(f"filter {text!r} returned an invalid value {values}: expected a single value")
    return values[0]


def pod_component(karta: Karta, pod: dict) -> str:
    """The component a pod belongs to: the only component with pods, else the first whose type selector matches."""
    leaves = [c for c in karta.components.values() if c.has_pod_definition]
    if len(leaves) == 1:
        return leaves[0].name
    for component in leaves:
        if _pod_matches(component, pod):
            return component.name
    raise GroupingError(f"no component found for pod {meta_str(pod, 'name')}")


def _effective_member(karta: Karta, component: str, pod: dict) -> tuple[str, dict] | None:
    """The first member naming the pod's component (then its parent, ...) whose filters the pod passes."""
    direct: list[tuple[str, dict]] = []
    inherited: list[tuple[str, dict]] = []
    current: str | None = component
    while current is not None:
        for definition in karta.pod_groups:
            for member in definition.get("members") or []:
                if member.get("componentName") == current:
                    (direct if current == component else inherited).append((current, member))
        current = karta.components[current].parent
    for name, member in direct + inherited:
        if all(_passes(pod, text) for text in member.get("filters") or []):
            return name, member
    return None


def _pod_instance(karta: Karta, component: Component, top_owner: dict, pod: dict) -> str | None:
    ids = instance_ids(karta, component, top_owner)
    if not ids or not ids[0] or not component.has_pod_selector:
        return None
    if component.instance_selector is None:
        raise GroupingError("no instance selector provided but instance ids are not empty")
    instance = _go_text(_single_value(pod, component.instance_selector, "instance id path"))
    if instance not in ids:
        raise GroupingError(f"could not match instance id {instance!r}. existing instance ids [{' '.join(ids)}]")
    return instance


def member_metadata(karta: Karta, metadata: PodGroupMetadata, top_owner: dict, pod: dict) -> PodGroupMetadata:
    """``metadata`` shaped by the deprecated ``podGroups`` instruction: the member of the pod's component (or
    of an ancestor) names the PodGroup by the pod's group-by keys, ``pg-<uid>[-<key>...]``, and its minimum is
    the scale of that component's subtree (of the pod's instance, when the member is the pod's own component)."""
    component = pod_component(karta, pod)
    found = _effective_member(karta, component, pod)
    if found is None:
        raise GroupingError(f"pod {meta_str(pod, 'namespace')}/{meta_str(pod, 'name')} does not match any Karta "
                            f"pod group member definition")
    effective, member = found
    instance = _pod_instance(karta, karta.components[component], top_owner, pod) if effective == component else None
    keys = [_go_text(_single_value(pod, path, "group key path")) for path in member.get("groupByKeyPaths") or []]
    metadata.name = "-".join([f"pg-{meta_str(top_owner, 'uid')}", *keys])
    if keys and (len(metadata.name) > 253 or not _DNS_SUBDOMAIN.fullmatch(metadata.name)):
        raise GroupingError(f"Karta grouping keys [{' '.join(keys)}] produce invalid Kubernetes PodGroup name "
                            f"{json.dumps(metadata.name)}: {_DNS_SUBDOMAIN_RULE}")
    metadata.min_available = subtree_scale(karta, effective, top_owner, instance)
    return metadata


def karta_metadata(karta: Karta, metadata: PodGroupMetadata, top_owner: dict, pod: dict) -> PodGroupMetadata:
    """``metadata`` (the default rules) shaped by the Karta's ``podGroup`` instruction, or by its deprecated
    ``podGroups`` instruction when it has no ``podGroup``."""
    pod_group = karta.pod_group
    if pod_group is None:
        return member_metadata(karta, metadata, top_owner, pod)
    metadata.name = f"pg-{meta_str(top_owner, 'uid')}-{pod_group['name']}"
    metadata.min_subgroup = None
    metadata.subgroups = []
    topology = _topology(pod_group.get("topology"))
    if topology is not None:
        metadata.topology = topology
    for mapping in pod_group.get("subGroups") or []:
        name = (mapping or {}).get("componentName") or ""
        if not name:
            raise GroupingError("subgroup component name cannot be empty")
        if name not in karta.components:
            raise GroupingError(f"Karta {karta.name}: component {name} not found")
        minimum = subtree_scale(karta, name, top_owner)
        if minimum == 0:
            raise GroupingError(f"component {name} must expose a replica scale definition")
        subgroup = SubGroupMetadata(name, minimum, topology=_topology(mapping.get("topology")))
        if pod_in_subtree(karta, name, pod):
            subgroup.pods.append(meta_str(pod, "name"))
        metadata.subgroups.append(subgroup)
    if metadata.subgroups:
        metadata.min_subgroup, metadata.min_available = len(metadata.subgroups), 0
    else:
        metadata.min_available = subtree_scale(karta, karta.root, top_owner)
    return metadata


class KartaLookup:
    """Finds the Karta of a top owner's kind as KAI's Karta hub does: the Kartas are listed for every pod
    grouped (never cached, so a Karta created or changed counts at once); when no API serves Kartas (or the
    reader may not list them), they are listed again only ``retry`` seconds later (KAI: a minute)."""

    def __init__(self, retry: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.retry = retry
        self.clock = clock
        self.retry_at: float | None = None

    def karta_for(self, hub, top_owner: dict) -> Karta | None:
        """The Karta grouping the top owner's kind, if any."""
        if self.retry_at is not None and self.clock() < self.retry_at:
            return None
        try:
            karta = find_karta(hub, gvk(top_owner))
        except NotFoundError as err:
            log.info("Kartas cannot be listed, looking again in %.0f s: %s", self.retry, err)
            self.retry_at = self.clock() + self.retry
            return None
        self.retry_at = None
        return karta
