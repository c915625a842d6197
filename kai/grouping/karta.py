"""Karta: grouping a kind no podgrouper knows from a ``run.ai/v1alpha1`` Karta object ("no-code" grouping).

A Karta describes a workload kind as a tree of components (the root is the kind itself); each
component may say where its replica count is (``scaleDefinition``) and which pods belong to it
(``podSelector.componentTypeSelector``). Its ``optimizationInstructions.gangScheduling.podGroup`` says how the
workload's pods form one PodGroup: ``pg-<uid>-<name>``, with a sub-group per listed component and
optional topology constraints. KAI v0.17 consults the Kartas labelled with a kind
(``run.ai/karta-group``, ``-version``, ``-kind``) before its default rules.

Supported here: that ``podGroup`` format, with scale and selector paths that are plain JQ paths
(``.spec.worker.replicas``, ``.metadata.labels["job-name"]``, ``.spec.items[0]``). A Karta using
anything else -- the deprecated ``podGroups`` format, JQ beyond plain paths, components with
several instances (``instanceIdPath``, instance and replica selectors) -- is skipped with a warning,
as KAI skips an invalid Karta, and the kind gets the default rules.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping

import attrs

from kai.api.podgroup import GroupingError, PodGroupMetadata, SubGroupMetadata, TopologyConstraint
from kai.grouping.unstructured import gvk, meta_str

log = logging.getLogger(__name__)

KARTA_API_VERSION = "run.ai/v1alpha1"
KARTA_GROUP_LABEL = "run.ai/karta-group"
KARTA_VERSION_LABEL = "run.ai/karta-version"
KARTA_KIND_LABEL = "run.ai/karta-kind"


class UnsupportedKarta(Exception):
    """The Karta is invalid or uses a feature this implementation does not evaluate."""


# --- plain JQ paths -------------------------------------------------------------------------------

_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\.?\[\s*("(?:[^"\\]|\\.)*"|-?[0-9]+)\s*\]|\.("(?:[^"\\]|\\.)*")')


def parse_path(path: str) -> tuple[str | int, ...]:
    """The keys of a plain JQ path (``.`` is the identity); raises :class:`UnsupportedKarta` for other JQ."""
    text = (path or "").strip()
    if text == ".":
        return ()
    steps: list[str | int] = []
    position = 0
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None or match.end() == position:
            raise UnsupportedKarta(f"JQ expression {path!r} is not a plain path")
        name, index, quoted = match.groups()
        if name is not None:
            steps.append(name)
        elif quoted is not None:
            steps.append(json.loads(quoted))
        else:
            steps.append(json.loads(index))
        position = match.end()
    if not steps:
        raise UnsupportedKarta(f"JQ expression {path!r} is not a plain path")
    return tuple(steps)


def evaluate(obj, path: str):
    """The value at a plain JQ path; ``None`` (JQ's null) when a key is missing."""
    value = obj
    for step in parse_path(path):
        if value is None:
            return None
        if isinstance(step, str) and isinstance(value, Mapping):
            value = value.get(step)
        elif isinstance(step, int) and isinstance(value, list):
            value = value[step] if -len(value) <= step < len(value) else None
        else:
            raise GroupingError(f"cannot index {type(value).__name__} with {step!r} in JQ path {path}")
    return value


# --- the Karta structure -------------------------------------------------------------------------------


@attrs.define
class Component:
    """One component of a Karta's structure."""

    name: str
    parent: str | None
    has_pod_definition: bool
    scale_paths: tuple[str | None, str | None] | None  # (replicas, minReplicas); None without scaleDefinition
    selector: tuple[str, str | None] | None  # (keyPath, value); None without componentTypeSelector


@attrs.define
class Karta:
    """A validated Karta: its components (root first) and its ``podGroup`` instruction."""

    name: str
    components: dict[str, Component]
    root: str
    pod_group: dict

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
    for unsupported in ("instanceIdPath",):
        if definition.get(unsupported):
            raise UnsupportedKarta(f"component {name}: {unsupported} is not supported")
    scale = definition.get("scaleDefinition")
    scale_paths = None
    if isinstance(scale, Mapping):
        scale_paths = (scale.get("replicasPath"), scale.get("minReplicasPath"))
        for path in scale_paths:
            if path is not None:
                parse_path(path)
    selector = None
    pod_selector = definition.get("podSelector") or {}
    if pod_selector.get("componentInstanceSelector") or pod_selector.get("replicaSelector"):
        raise UnsupportedKarta(f"component {name}: instance and replica selectors are not supported")
    type_selector = pod_selector.get("componentTypeSelector")
    if type_selector:
        key = _str(type_selector.get("keyPath"), f"component {name}: keyPath")
        parse_path(key)
        value = type_selector.get("value")
        selector = (key, None if value is None else str(value))
    parent = None if root else _str(definition.get("ownerRef"), f"component {name}: ownerRef")
    return Component(name, parent, bool(definition.get("specDefinition")), scale_paths, selector)


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
    if not isinstance(pod_group, Mapping):
        raise UnsupportedKarta("only the gangScheduling.podGroup format is supported")
    _str(pod_group.get("name"), "podGroup name")
    return Karta(meta_str(obj, "name"), components, root.name, dict(pod_group))


# --- finding the Karta of a kind -------------------------------------------------------------------------


def _root_kind(obj: dict) -> tuple[str, str, str] | None:
    kind = (((obj.get("spec") or {}).get("structureDefinition") or {}).get("rootComponent") or {}).get("kind")
    if not isinstance(kind, Mapping):
        return None
    return str(kind.get("group") or ""), str(kind.get("version") or ""), str(kind.get("kind") or "")


def _has_instructions(obj: dict) -> bool:
    spec = obj.get("spec") or {}
    structure = spec.get("structureDefinition") or {}
    if not (structure.get("rootComponent") or {}).get("name") and not structure.get("childComponents"):
        return False
    gang = (spec.get("optimizationInstructions") or {}).get("gangScheduling") or {}
    return bool(gang.get("podGroup") or gang.get("podGroups"))


def find_karta(hub, kind: tuple[str, str, str]) -> Karta | None:
    """The one usable Karta for ``kind``, or ``None`` (none, several, or the reader cannot list Kartas).

    As KAI: Kartas being deleted, without gang-scheduling instructions or invalid are skipped; two
    usable ones for a kind are an error that leaves the kind to the default rules.
    """
    group, version, name = kind
    selector = {KARTA_GROUP_LABEL: group, KARTA_VERSION_LABEL: version, KARTA_KIND_LABEL: name}
    found = hub.list_objects(KARTA_API_VERSION, "Karta", "", selector)
    if not found:
        return None
    usable = []
    for obj in found:
        if _root_kind(obj) != kind or (obj.get("metadata") or {}).get("deletionTimestamp"):
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


def _scale_value(karta: Karta, component: Component, top_owner: dict, path: str | None) -> int:
    if path is None:
        return 0
    value = evaluate(top_owner, path)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise GroupingError(f"Karta {karta.name}: {path} of component {component.name} is not an integer")
    return value


def _component_scale(karta: Karta, component: Component, top_owner: dict) -> int:
    """KAI's effective minimum of a component: minReplicas when positive, else replicas when positive, else 0."""
    if component.scale_paths is None:
        return 0
    replicas_path, min_path = component.scale_paths
    minimum = _scale_value(karta, component, top_owner, min_path)
    if minimum > 0:
        return minimum
    return max(_scale_value(karta, component, top_owner, replicas_path), 0)


def subtree_scale(karta: Karta, name: str, top_owner: dict) -> int:
    """Pods a component's subtree needs at once (KAI's CalculateSubtreeScale).

    With scale definitions: a leaf's scale; a parent's scale times the sum of its children's
    (either alone when the other is 0). Without any: the number of components with a pod definition.
    """
    component = karta.components[name]
    children = karta.children(name)
    if not karta.has_scale_definition:
        if component.has_pod_definition:
            return 1
        return sum(subtree_scale(karta, child, top_owner) for child in children)
    own = _component_scale(karta, component, top_owner)
    if not children:
        return own
    below = sum(subtree_scale(karta, child, top_owner) for child in children)
    if below == 0:
        return own
    return below if own == 0 else own * below


def _pod_matches(component: Component, pod: dict) -> bool:
    if component.selector is None:
        return False
    key, expected = component.selector
    value = evaluate(pod, key)
    if expected is None:
        return value is not None
    return (value if isinstance(value, str) else json.dumps(value)) == expected


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


def karta_metadata(karta: Karta, metadata: PodGroupMetadata, top_owner: dict, pod: dict) -> PodGroupMetadata:
    """``metadata`` (the default rules) shaped by the Karta's ``podGroup`` instruction."""
    pod_group = karta.pod_group
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


def karta_for(hub, top_owner: dict) -> Karta | None:
    """The Karta grouping the top owner's kind, if any."""
    return find_karta(hub, gvk(top_owner))
