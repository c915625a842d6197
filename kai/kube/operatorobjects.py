"""KAI's operator objects as KAI's chart creates them: ``Config kai-config`` and ``SchedulingShard default``.

KAI's docs, tools and e2e suites reconfigure the scheduler by patching these two objects, so every install
has them: the chart creates them (``templates/operator-objects.yaml``, with the values here unless the chart's
values change them; a test checks that they agree), and ``kai-scheduler run`` started otherwise creates those
that are missing at start (:func:`create_missing`). An object that exists is never changed; a missing CRD or
a create the API refuses is logged and the components start as they would without the object.

The shard has KAI's default spec. KAI's Config describes the Deployments its operator makes (images,
resources, ports), which here are the chart's values, and carries a few settings of the components (GPU
sharing, the queue label key, ...) that here are their flags. Since a field the Config sets replaces the
flag, the Config made here has KAI's defaults without those settings: its ``namespace``, ``global`` and
each component's ``service.enabled`` (true), which KAI's suites patch in place and nothing here acts on.
"""

from __future__ import annotations

import copy
import logging

from kai.api import names
from kai.kube.access import Access
from kai.kube.client import ApiError, Kube, object_path
from kai.logs import fields

log = logging.getLogger(__name__)

API_VERSION = "/".join(names.CONFIGS[:2])
#: Kept when the chart is uninstalled or an Argo CD application pruned (KAI's annotations on its shard).
KEEP = {"helm.sh/resource-policy": "keep", "argocd.argoproj.io/sync-options": "Prune=false"}
#: The sections of KAI's Config for its components, each with ``service.enabled`` true in KAI chart's defaults.
CONFIG_COMPONENTS = ("binder", "podGrouper", "podGroupController", "queueController", "admission", "scheduler")
#: The spec of KAI chart's ``SchedulingShard default`` with its default values.
DEFAULT_SHARD_SPEC = {"partitionLabelValue": "", "goMemLimitRatio": 0.9,
                      "placementStrategy": {"gpu": "binpack", "cpu": "binpack"}}
#: Creating the objects where they are missing (every component of ``kai-scheduler run`` may).
API_ACCESS = (Access(names.CONFIGS[0], names.CONFIGS[2], ("create",)),
              Access(names.SCHEDULINGSHARDS[0], names.SCHEDULINGSHARDS[2], ("create",)))


def default_objects(namespace: str) -> list[dict]:
    """``Config kai-config`` (``namespace``: where the components run) and ``SchedulingShard default``."""
    def made(kind: str, name: str, spec: dict) -> dict:
        return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name, "annotations": dict(KEEP)},
                "spec": spec}

    config = {"namespace": namespace, "global": {},
              **{component: {"service": {"enabled": True}} for component in CONFIG_COMPONENTS}}
    return [made("Config", names.KAI_CONFIG_NAME, config),
            made("SchedulingShard", names.DEFAULT_SHARD, copy.deepcopy(DEFAULT_SHARD_SPEC))]


def create_missing(kube: Kube, namespace: str) -> list[str]:
    """Creates the objects of :func:`default_objects` that do not exist; the ``Kind/name`` of those created.
    One that exists (or that another replica creates first) is left as it is."""
    created = []
    for obj, resource in zip(default_objects(namespace), (names.CONFIGS, names.SCHEDULINGSHARDS)):
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kube.post(object_path(*resource), obj)
        except ApiError as exc:
            if exc.status == 409:
                continue
            if exc.status == 404:
                log.info("not created: its CRD is not installed", **fields(object=what))
            else:
                log.warning("not created", **fields(object=what, error=str(exc)))
            continue
        log.info("created with KAI's default values", **fields(object=what))
        created.append(what)
    return created
