"""Kubernetes selectors: label requirements (match expressions), label selectors and node selector terms.

Pods, claims, volumes, storage classes and DRA objects select nodes or pods with them; this module
imports nothing else of ``kai.api``.
"""

from __future__ import annotations

import attrs


@attrs.define(slots=True, frozen=True)
class LabelRequirement:
    """One requirement of a node selector term or label selector (Kubernetes operators)."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        op, present = self.operator, self.key in labels
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt") and present:
            try:
                value, bound = int(labels[self.key]), int(self.values[0])
            except (ValueError, IndexError):
                return False
            return value > bound if op == "Gt" else value < bound
        return False


@attrs.define(slots=True, frozen=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


@attrs.define(slots=True, frozen=True)
class NodeSelectorTerm:
    """A node selector term: label requirements and ``metadata.name`` field requirements, all must hold."""

    expressions: tuple[LabelRequirement, ...] = ()
    fields: tuple[LabelRequirement, ...] = ()

    def matches(self, node_name: str, labels: dict[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False  # an empty term matches nothing
        name = {"metadata.name": node_name}
        return all(r.matches(labels) for r in self.expressions) and all(r.matches(name) for r in self.fields)


def terms_match(terms: tuple[NodeSelectorTerm, ...] | None, node_name: str, labels: dict[str, str]) -> bool:
    """Whether a node selector (its terms are ORed) admits the node; None admits every node."""
    return terms is None or any(t.matches(node_name, labels) for t in terms)
