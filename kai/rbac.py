"""The chart's RBAC, generated from every component's declared API access.

``python -m kai.rbac > deploy/chart/kai-scheduler/templates/rbac.yaml`` writes a ServiceAccount,
ClusterRole and ClusterRoleBinding per component, plus a Role in the release namespace for the
leader-election Lease; ``python -m kai.rbac shadow > deploy/chart/kai-scheduler/templates/rbac-shadow.yaml``
the read-only ServiceAccount of shadow mode (:mod:`kai.scheduler.shadow`), installed with the value
``components.scheduler.shadow``. A unit test fails when the committed file differs from the generated one,
and the end-to-end tests run the components under these ServiceAccounts, so a call a declaration
misses is a 403 there.
"""

from __future__ import annotations

import sys

import yaml

from kai.admission import webhook
from kai.binder import binder
from kai.controllers import nodescaleadjuster, podgrouper, podgroupstatus, queuestatus
from kai.kube import operatorobjects
from kai.kube.access import Access, manifests
from kai.scheduler import loop, shadow


def components() -> dict[str, tuple[Access, ...]]:
    """Each component's declared access, by component name (every component of ``kai-scheduler run``), with
    what the process needs to create KAI's operator objects at start."""
    declared = {"scheduler": loop.API_ACCESS, "binder": binder.API_ACCESS, "podgrouper": podgrouper.API_ACCESS,
                "podgroup-controller": podgroupstatus.API_ACCESS, "queue-controller": queuestatus.API_ACCESS,
                "admission": webhook.API_ACCESS, "node-scale-adjuster": nodescaleadjuster.API_ACCESS}
    return {name: access + operatorobjects.API_ACCESS for name, access in declared.items()}


HELM_NAMESPACE = "{{ .Release.Namespace }}"
HEADER = (
    "# Generated from the components' API_ACCESS declarations by `python -m kai.rbac`.\n"
    "# Do not edit: change the declaration next to the code and regenerate.\n"
)


def chart_template() -> str:
    """The chart's ``templates/rbac.yaml``: the manifests with the release namespace templated."""
    body = yaml.safe_dump_all(manifests(HELM_NAMESPACE, components()), sort_keys=False, default_flow_style=False,
                              explicit_start=True)
    return HEADER + body.replace(f"'{HELM_NAMESPACE}'", HELM_NAMESPACE)


#: Shadow mode's ServiceAccount (``kai-scheduler-shadow``): reads only, and no Lease.
SHADOW_ACCOUNT = "scheduler-shadow"


def shadow_template() -> str:
    """The chart's ``templates/rbac-shadow.yaml``: shadow mode's ServiceAccount, read-only ClusterRole and its
    binding, when the value ``components.scheduler.shadow`` is set."""
    docs = [d for d in manifests(HELM_NAMESPACE, {SHADOW_ACCOUNT: shadow.API_ACCESS}) if d["kind"] != "Role"
            and d["kind"] != "RoleBinding"]
    body = yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, explicit_start=True)
    header = HEADER.replace("`python -m kai.rbac`", "`python -m kai.rbac shadow`")
    return (header + "{{- if .Values.components.scheduler.shadow }}\n"
            + body.replace(f"'{HELM_NAMESPACE}'", HELM_NAMESPACE) + "{{- end }}\n")


if __name__ == "__main__":  # pragma: no cover - regenerates the chart files
    sys.stdout.write(shadow_template() if sys.argv[1:] == ["shadow"] else chart_template())
