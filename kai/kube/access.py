"""Kubernetes API access a component declares, and the RBAC manifests made from declarations.

Each control loop declares, next to its code, the resources and verbs it uses (``API_ACCESS``);
:mod:`kai.rbac` collects them into the chart's RBAC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SERVICE_ACCOUNT_PREFIX = "kai-"


@dataclass(frozen=True)
class Access:
    """Verbs on one resource (``pods``, ``pods/binding``) of an API group ("" is core)."""

    group: str
    resource: str
    verbs: tuple[str, ...]


#: What a process needs for ``--leader-elect``, in its own namespace only (see kai.kube.leader): a standby
#: lists and watches its Lease (field selector ``metadata.name``) to take over as soon as it is released.
LEADER_ELECTION_ACCESS = (Access("coordination.k8s.io", "leases", ("get", "list", "watch", "create", "update")),)


def service_account(component: str) -> str:
    return SERVICE_ACCOUNT_PREFIX + component


def rules(access: Iterable[Access]) -> list[dict]:
    """RBAC rules, one per (group, verbs) with its resources, in a stable order."""
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for item in access:
        grouped.setdefault((item.group, tuple(sorted(set(item.verbs)))), []).append(item.resource)
    return [{"apiGroups": [group], "resources": sorted(set(resources)), "verbs": list(verbs)}
            for (group, verbs), resources in sorted(grouped.items())]


def manifests(namespace: str, declared: Mapping[str, tuple[Access, ...]]) -> list[dict]:
    """ServiceAccount, ClusterRole(+Binding) and leader-election Role(+Binding) per component."""
    docs: list[dict] = []
    for component, access in declared.items():
        name = service_account(component)
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
        docs.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}})
        if access:  # a component calling no API (the admission webhook) gets no ClusterRole
            docs += [
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
                 "rules": rules(access)},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": name},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                 "subjects": subject},
            ]
        docs += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": f"{name}-leader-election", "namespace": namespace},
             "rules": rules(LEADER_ELECTION_ACCESS)},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": f"{name}-leader-election", "namespace": namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{name}-leader-election"},
             "subjects": subject},
        ]
    return docs
