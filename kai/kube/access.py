"""The Kubernetes API access of each component, and the RBAC manifests generated from it.

Each control loop declares, next to its code, the resources and verbs it uses (``API_ACCESS``);
:func:`components` collects them. The Helm chart's ``templates/rbac.yaml`` is generated from this
(``python -m kai.kube.access > deploy/chart/kai-scheduler/templates/rbac.yaml``): a
ServiceAccount, ClusterRole and ClusterRoleBinding per component, plus a Role in the release
namespace for the leader-election Lease. A unit test fails when the committed file differs from
the generated one, and the end-to-end tests run the components under these ServiceAccounts, so a
call the declaration misses is a 403 there.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import yaml

SERVICE_ACCOUNT_PREFIX = "kai-"


@dataclass(frozen=True)
class Access:
    """Verbs on one resource (``pods``, ``pods/binding``) of an API group ("" is core)."""

    group: str
    resource: str
    verbs: tuple[str, ...]


# The scheduler loop (kai.scheduler.cache, kai.scheduler.commit): watches the cluster, writes decisions.
SCHEDULER_ACCESS = (
    Access("", "pods", ("list", "watch", "delete")),
    Access("", "pods/status", ("patch",)),
    Access("", "nodes", ("list", "watch")),
    Access("", "events", ("create",)),
    Access("scheduling.k8s.io", "priorityclasses", ("list", "watch")),
    Access("scheduling.run.ai", "queues", ("list", "watch")),
    Access("scheduling.run.ai", "podgroups", ("list", "watch", "patch")),
    Access("scheduling.run.ai", "podgroups/status", ("patch",)),
    Access("scheduling.run.ai", "bindrequests", ("list", "watch", "create", "delete")),
    Access("kai.scheduler", "topologies", ("list", "watch")),
)


def components() -> dict[str, tuple[Access, ...]]:
    """Each component's declared access, by component name (every component of ``kai-scheduler run``)."""
    from kai.admission import webhook as admission
    from kai.binder import binder
    from kai.controllers import podgroupstatus as podgroupcontroller
    from kai.controllers import podgrouper
    from kai.controllers import queuestatus as queuecontroller

    return {"scheduler": SCHEDULER_ACCESS, "binder": binder.API_ACCESS, "podgrouper": podgrouper.API_ACCESS,
            "podgroup-controller": podgroupcontroller.API_ACCESS, "queue-controller": queuecontroller.API_ACCESS,
            "admission": admission.API_ACCESS}


#: What a process needs for ``--leader-elect``, in its own namespace only (see kai.kube.leader).
LEADER_ELECTION_ACCESS = (Access("coordination.k8s.io", "leases", ("get", "create", "update")),)


def service_account(component: str) -> str:
    return SERVICE_ACCOUNT_PREFIX + component


def rules(access: Iterable[Access]) -> list[dict]:
    """RBAC rules, one per (group, verbs) with its resources, in a stable order."""
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for item in access:
        grouped.setdefault((item.group, tuple(sorted(set(item.verbs)))), []).append(item.resource)
    return [{"apiGroups": [group], "resources": sorted(set(resources)), "verbs": list(verbs)}
            for (group, verbs), resources in sorted(grouped.items())]


def manifests(namespace: str, declared: Mapping[str, tuple[Access, ...]] | None = None) -> list[dict]:
    """ServiceAccount, ClusterRole(+Binding) and leader-election Role(+Binding) per component."""
    docs: list[dict] = []
    for component, access in (declared if declared is not None else components()).items():
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


HELM_NAMESPACE = "{{ .Release.Namespace }}"
HEADER = (
    "# Generated from the components' API_ACCESS declarations by `python -m kai.kube.access`.\n"
    "# Do not edit: change the declaration next to the code and regenerate.\n"
)


def chart_template() -> str:
    """The chart's ``templates/rbac.yaml``: the manifests with the release namespace templated."""
    body = yaml.safe_dump_all(manifests(HELM_NAMESPACE), sort_keys=False, default_flow_style=False, explicit_start=True)
    return HEADER + body.replace(f"'{HELM_NAMESPACE}'", HELM_NAMESPACE)


if __name__ == "__main__":  # pragma: no cover - regenerates the chart file
    sys.stdout.write(chart_template())
