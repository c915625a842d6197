"""The chart's RBAC, generated from every component's declared API access.

``python -m kai.rbac > deploy/chart/kai-scheduler/templates/rbac.yaml`` writes a ServiceAccount,
ClusterRole and ClusterRoleBinding per component, plus a Role in the release namespace for the
leader-election Lease. A unit test fails when the committed file differs from the generated one,
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
from kai.scheduler import loop


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


if __name__ == "__main__":  # pragma: no cover - regenerates the chart file
    sys.stdout.write(chart_template())
