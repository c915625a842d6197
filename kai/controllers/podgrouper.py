"""The podgrouper control loop: every pod of the scheduler gets its PodGroup (``scheduling.run.ai/v2alpha2``).

For each pod with ``spec.schedulerName`` equal to the scheduler's name (``kai-scheduler``):

1. a bare pod that already names its PodGroup (annotation ``pod-group-name``, no owner) is left
   alone: its PodGroup is the user's;
2. the grouping hub (:mod:`kai.grouping.hub`, the same code as ``kai-scheduler podgroup``)
   walks the pod's owners through the API (:class:`kai.kube.objects.KubeObjects`) and lets the
   podgrouper of the top owner's kind compute the PodGroup;
3. the PodGroup is created, or updated when it differs, as KAI does: ``spec.queue``,
   ``spec.markUnschedulable``, ``spec.schedulingBackoff`` and the node-pool and queue labels of an
   existing PodGroup are kept; labels and annotations are merged, never removed;
4. the pod gets the annotation ``pod-group-name`` and, when it belongs to a subgroup, the label
   ``kai.scheduler/subgroup-name``.

Every step compares before it writes, so grouping a pod again changes nothing. A pod that cannot be
grouped (owner gone, kind not served, invalid workload spec) gets a Warning event
``PodGrouperWarning`` with the reason, once per distinct reason, and is retried with exponential
backoff (1 s doubling to 60 s, KAI's rate limiter); API errors are retried the same way. A pod
being deleted whose owner is gone is not reported. Pods are grouped again when their PodGroup is
deleted and every ``resync_period`` seconds (owners change without touching their pods).

With ``settings`` (a :class:`kai.kube.kaiconfig.KaiObjects` of
:class:`kai.controllers.grouping_settings.Grouping`, following ``Config kai-config``) the grouping
configuration and the podgroupers' arguments are replaced when the Config changes them, and every pod
is grouped again with them, as after a restart.

``pod_label_selector`` and ``namespace_label_selector`` (label selectors, KAI's ``global.podLabelSelector``
and ``global.namespaceLabelSelector``) limit the pods grouped to those matching the first in namespaces
matching the second; the others are never grouped, so the scheduler never schedules them. Pods of a namespace
that comes to match are grouped at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from kai.api import names
from kai.api.podgroup import GroupingError
from kai.grouping.hub import GroupingConfig, PodGrouperHub, build_hub
from kai.grouping.podgroups import GroupingSkipped, kept_topology, pod_assignment, skip_reason
from kai.kube.access import Access
from kai.kube.client import ApiError, Kube, object_path
from kai.kube.controller import Controller
from kai.kube.events import WARNING, record_event
from kai.kube.kaiconfig import CONFIG_STATUS_ACCESS, KaiObjects
from kai.kube.objects import KubeObjects
from kai.kube.watch import Informer, object_key
from kai.logs import fields

log = logging.getLogger(__name__)

#: Spec fields of an existing PodGroup that other components own (KAI's podgrouper keeps them).
KEPT_SPEC_FIELDS = ("markUnschedulable", "schedulingBackoff", "queue")

#: KAI's podgrouper defaults: ``--max-concurrent-reconciles``, rate limiter base/max delay.
DEFAULT_WORKERS = 10
DEFAULT_BASE_DELAY = 1.0
DEFAULT_MAX_DELAY = 60.0
DEFAULT_RESYNC_PERIOD = 600.0
#: Seconds a PodGroup this loop wrote is preferred to the (lagging) informer's copy.
WRITTEN_MEMORY = 10.0

#: Owner kinds the shipped podgroupers read, by API group (KAI's list). Owners of other kinds need a
#: ``get`` rule added to the podgrouper's ClusterRole; without one the walk stops below them.
OWNER_RESOURCES = {
    "": ("configmaps", "namespaces"),
    "amlarc.azureml.com": ("amljobs",),
    "apps": ("deployments", "replicasets", "statefulsets"),
    "argoproj.io": ("workflows",),
    "batch": ("cronjobs", "jobs"),
    "egx.nvidia.io": ("spotrequests",),
    "grove.io": ("podcliques", "podcliquescalinggroups", "podcliquesets", "podgangsets"),
    "jobset.x-k8s.io": ("jobsets",),
    "kubeflow.org": ("jaxjobs", "mpijobs", "notebooks", "pytorchjobs", "scheduledworkflows", "tfjobs", "xgboostjobs"),
    "kubevirt.io": ("virtualmachineinstances", "virtualmachines"),
    "leaderworkerset.x-k8s.io": ("leaderworkersets",),
    "machinelearning.seldon.io": ("seldondeployments",),
    "ray.io": ("rayclusters", "rayjobs", "rayservices"),
    "run.ai": ("distributedinferenceworkloads", "distributedworkloads", "inferenceworkloads", "interactiveworkloads",
               "runaijobs", "trainingworkloads", "workloadrunners"),
    "scheduler.grove.io": ("podgangs",),
    "scheduling.k8s.io": ("priorityclasses",),
    "serving.knative.dev": ("configurations", "revisions", "services"),
    "tekton.dev": ("pipelineruns", "taskruns"),
    "trainer.kubeflow.org": ("trainjobs",),
    "workspace.devfile.io": ("devworkspaces",),
    "nvidia.com": ("dynamographdeployments",),
}

#: Every API call of the loop (the chart's RBAC is generated from this; see kai.kube.access).
API_ACCESS = (
    Access("", "pods", ("get", "list", "watch", "patch")),
    Access("", "namespaces", ("get", "list", "watch")),  # --namespace-label-selector
    Access("", "events", ("create",)),
    Access(names.PODGROUPS[0], names.PODGROUPS[2], ("get", "list", "watch", "create", "update")),
    *(Access(group, resource, ("get",)) for group, resources in OWNER_RESOURCES.items() for resource in resources),
    Access("run.ai", "kartas", ("list",)),  # the no-code grouping rules of unknown kinds
    Access(names.CONFIGS[0], names.CONFIGS[2], ("get", "list", "watch")),  # the settings of Config kai-config
    *CONFIG_STATUS_ACCESS,  # and its status
)


def desired_update(current: dict, desired: dict, config: GroupingConfig) -> dict | None:
    """The existing PodGroup ``current`` brought to ``desired`` as KAI's podgrouper does; None when nothing changes."""
    current_spec = current.get("spec") or {}
    spec = kept_topology(current_spec, dict(desired.get("spec") or {}))
    for key in KEPT_SPEC_FIELDS:
        if key in current_spec:
            spec[key] = current_spec[key]
        else:
            spec.pop(key, None)
    meta, current_meta = desired.get("metadata") or {}, current.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    current_labels = current_meta.get("labels") or {}
    pool, queue = config.node_pool_label_key, config.queue_label_key
    if pool in current_labels:
        labels[pool] = current_labels[pool]
    else:
        labels.pop(pool, None)
    if queue in current_labels:
        labels[queue] = current_labels[queue]
    annotations = meta.get("annotations") or {}
    current_annotations = current_meta.get("annotations") or {}
    owners = meta.get("ownerReferences") or []
    if (
        spec == current_spec
        and owners == (current_meta.get("ownerReferences") or [])
        and _contains(current_labels, labels)
        and _contains(current_annotations, annotations)
    ):
        return None
    updated = dict(current)
    updated["metadata"] = {
        **current_meta,
        "labels": {**current_labels, **labels},
        "annotations": {**current_annotations, **annotations},
        "ownerReferences": owners,
    }
    updated["spec"] = spec
    return updated


def _contains(target: Mapping[str, str], source: Mapping[str, str]) -> bool:
    return all(key in target and target[key] == value for key, value in source.items())


def pod_patch(pod: dict, podgroup: dict, subgroup: str | None) -> dict | None:
    """The merge patch assigning ``pod`` to its PodGroup and subgroup; None when it already is. It carries the
    pod's uid: the API server refuses it for a new pod of the same name (the store may still hold the old one)."""
    wanted = pod_assignment(podgroup, subgroup)
    meta = pod.get("metadata") or {}
    patch: dict[str, Any] = {}
    for part in ("annotations", "labels"):
        have = meta.get(part) or {}
        missing = {k: v for k, v in wanted[part].items() if have.get(k) != v}
        if missing:
            patch[part] = missing
    if patch and meta.get("uid"):
        patch["uid"] = meta["uid"]
    return {"metadata": patch} if patch else None


def _slim_pod(pod: dict) -> dict:
    """The pod without its managed fields, and with its kind: the items of a list carry none, and a
    PodGroup owned by the pod (a Deployment's pods) needs them in its owner reference."""
    meta = pod.get("metadata") or {}
    return {**pod, "apiVersion": pod.get("apiVersion") or "v1", "kind": pod.get("kind") or "Pod",
            "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _metadata_only(namespace: dict) -> dict:
    return {"metadata": {k: v for k, v in (namespace.get("metadata") or {}).items() if k in ("name", "labels")}}


class PodGrouper(Controller):
    """The podgrouper control loop; ``run(stop)`` blocks until ``stop`` is set. See the module docstring."""

    name = "podgrouper"
    key_field = "pod"

    def __init__(
        self,
        kube: Kube,
        *,
        config: GroupingConfig | None = None,
        arguments: Mapping[str, Mapping] | None = None,
        hub: PodGrouperHub | None = None,
        scheduler_name: str = names.SCHEDULER_NAME,
        pod_label_selector: str = "",
        namespace_label_selector: str = "",
        workers: int = DEFAULT_WORKERS,
        base_delay: float = DEFAULT_BASE_DELAY,
        max_delay: float = DEFAULT_MAX_DELAY,
        resync_period: float = DEFAULT_RESYNC_PERIOD,
        owner_cache_ttl: float = 5.0,
        settings: KaiObjects | None = None,
        clock=time.monotonic,
    ) -> None:
        super().__init__(kube, workers=workers, error_delay=max_delay, clock=clock)
        self.config = config or GroupingConfig()
        self.reader = KubeObjects(kube, ttl=owner_cache_ttl)
        self.hub = hub or build_hub(self.reader, self.config, arguments)
        self.settings = settings
        self.scheduler_name = scheduler_name
        self.pod_label_selector = pod_label_selector
        self.namespace_label_selector = namespace_label_selector
        self.base_delay, self.max_delay = base_delay, max_delay
        self.resync_period = resync_period
        self._next_resync = clock() + resync_period
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}
        self._reported: dict[str, str] = {}  # pod key -> last warning recorded
        # The pods of one workload share a PodGroup: its writes are serialized, and the PodGroup as this loop
        # last wrote it is used until the store, which lags, has caught up.
        self._podgroup_locks = [threading.Lock() for _ in range(64)]
        self._written: dict[str, tuple[float, dict]] = {}

    # -- informer side -------------------------------------------------------------------------
    def on_pod(self, kind: str, pod: dict) -> None:
        key = object_key(pod)
        if kind == "DELETED":
            with self._lock:
                self._failures.pop(key, None)
                self._reported.pop(key, None)
        else:
            self.queue.add(key)

    def on_podgroup(self, kind: str, podgroup: dict) -> None:
        """A deleted PodGroup is made again for the pods still naming it."""
        meta = podgroup.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        with self._lock:
            self._written.pop(f"{namespace}/{name}", None)  # the store has caught up with our write, or it is gone
        if kind != "DELETED" or "pods" not in self.stores:
            return
        for pod in self.stores["pods"].list():
            meta = pod.get("metadata") or {}
            if (meta.get("namespace") == namespace
                    and (meta.get("annotations") or {}).get(names.POD_GROUP_ANNOTATION) == name):
                self.queue.add(object_key(pod))

    def on_namespace(self, kind: str, namespace: dict) -> None:
        """The pods of a namespace that comes to match the namespace selector are grouped."""
        name = (namespace.get("metadata") or {}).get("name")
        if kind == "DELETED" or "pods" not in self.stores:
            return
        for pod in self.stores["pods"].list():
            if (pod.get("metadata") or {}).get("namespace") == name:
                self.queue.add(object_key(pod))

    def selected(self, pod: dict) -> bool:
        """Whether the pod's namespace matches the namespace selector (the pod informer applies the pod one)."""
        if not self.namespace_label_selector:
            return True
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        return "namespaces" in self.stores and self.stores["namespaces"].get(namespace) is not None

    def informers(self) -> dict[str, Informer]:
        """The scheduler's pods and the PodGroups (and the namespaces matching the namespace selector)."""
        informers = {
            "podgroups": Informer(self.kube, object_path(*names.PODGROUPS), on_event=self.on_podgroup,
                                  name="podgroups"),
            "pods": Informer(self.kube, object_path(*names.PODS), on_event=self.on_pod, transform=_slim_pod,
                             field_selector=f"spec.schedulerName={self.scheduler_name}",
                             label_selector=self.pod_label_selector, name="podgrouper pods"),
        }
        if self.namespace_label_selector:
            informers["namespaces"] = Informer(self.kube, object_path("", "v1", "namespaces"),
                                               on_event=self.on_namespace, transform=_metadata_only,
                                               label_selector=self.namespace_label_selector, name="namespaces")
        return informers

    def reconfigure(self) -> bool:
        """Take up the settings of ``settings`` if they changed, and group every pod again; whether they did."""
        grouping = self.changed_settings()
        if grouping is None:
            return False
        with self._lock:
            if grouping.hub is self.hub:
                return False
            self.hub, self.config = grouping.hub, grouping.flags.config
        flags = grouping.flags
        log.info("podgrouper configuration applied", **fields(
            queue_label_key=flags.config.queue_label_key, node_pool_label_key=flags.config.node_pool_label_key,
            defaults_configmap="/".join(flags.config.defaults_configmap or ()),
            knative_gang_schedule=flags.knative_gang_schedule, generic_karta_fallback=flags.generic_karta_fallback,
            objects=self.settings.describe() if self.settings else ""))
        if "pods" in self.stores:
            for pod in self.stores["pods"].list():
                self.queue.add(object_key(pod))
        return True

    def tick(self) -> None:
        """Every ``resync_period``: group every pod again (owners change without touching their pods)."""
        self.reconfigure()
        if self._clock() < self._next_resync:
            return
        for pod in self.stores["pods"].list():
            self.queue.add(object_key(pod))
        self._next_resync = self._clock() + self.resync_period

    # -- one pod -------------------------------------------------------------------------------
    def handle(self, key: str) -> float | None:
        """Group the pod ``key`` (``namespace/name``); returns the delay before a retry, if one is due."""
        self.reconfigure()
        pod = self.stores["pods"].get(key) if "pods" in self.stores else None
        if pod is None or not self.selected(pod):
            return None
        try:
            outcome = self.group(pod)
        except GroupingSkipped as exc:  # an owner asks to be left alone: not an error
            log.debug("pod not grouped", **fields(pod=key, reason=str(exc)))
            return None
        except GroupingError as exc:
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                log.debug("pod being deleted cannot be grouped", **fields(pod=key, error=str(exc)))
                return None
            self._warn(pod, key, str(exc))
            return self._retry(key)
        except ApiError as exc:
            log.warning("podgrouper API request failed; will retry", **fields(pod=key, error=str(exc)))
            return self._retry(key)
        with self._lock:
            self._failures.pop(key, None)
            self._reported.pop(key, None)
        if outcome:
            log.info("grouped pod", **fields(pod=key, **outcome))
        return None

    def group(self, pod: dict) -> dict[str, str]:
        """Group one pod now: write its PodGroup and its assignment where they differ.

        Returns what was written (empty when nothing); raises GroupingError or ApiError.
        """
        if (pod.get("spec") or {}).get("schedulerName") != self.scheduler_name or skip_reason(pod):
            return {}
        podgroup, subgroup = self.hub.podgroup(pod)
        done: dict[str, str] = {}
        action = self.apply(podgroup)
        if action:
            done["podgroup"] = f"{podgroup['metadata']['name']} ({action})"
        patch = pod_patch(pod, podgroup, subgroup)
        if patch is not None:
            meta = pod["metadata"]
            self.kube.patch(object_path("", "v1", "pods", meta["namespace"], meta["name"]), patch)
            done["assigned"] = podgroup["metadata"]["name"] + (f"/{subgroup}" if subgroup else "")
        return done

    def apply(self, podgroup: dict) -> str:
        """Create or update the PodGroup; returns ``"created"``, ``"updated"`` or ``""`` (unchanged)."""
        meta = podgroup["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        path = object_path(*names.PODGROUPS, meta["namespace"], meta["name"])
        with self._podgroup_locks[hash(key) % len(self._podgroup_locks)]:
            store = self.stores.get("podgroups")
            current = self._recently_written(key) or (store.get(key) if store is not None else None)
            try:
                return self._write(key, podgroup, current, path)
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise
            try:  # what we knew was stale: decide again on the PodGroup as it is now
                current = self.kube.get(path)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                current = None
            return self._write(key, podgroup, current, path)

    def _recently_written(self, key: str) -> dict | None:
        now = self._clock()
        with self._lock:
            for old in [k for k, (until, _) in self._written.items() if until <= now]:
                del self._written[old]
            entry = self._written.get(key)
        return entry[1] if entry else None

    def _write(self, key: str, podgroup: dict, current: dict | None, path: str) -> str:
        if current is None:
            written = self.kube.post(object_path(*names.PODGROUPS, podgroup["metadata"]["namespace"]), podgroup)
            action = "created"
        else:
            updated = desired_update(current, podgroup, self.config)
            if updated is None:
                return ""
            written = self.kube.request("PUT", path, body=updated)
            action = "updated"
        with self._lock:
            self._written[key] = (self._clock() + WRITTEN_MEMORY, written)
        return action

    def _retry(self, key: str) -> float:
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        return min(self.max_delay, self.base_delay * 2.0**failures)

    def _warn(self, pod: dict, key: str, message: str) -> None:
        with self._lock:
            if self._reported.get(key) == message:
                return
            self._reported[key] = message
        log.warning("cannot group pod", **fields(pod=key, reason=message))
        record_event(self.kube, pod, WARNING, names.REASON_PODGROUPER_WARNING, message, names.SOURCE_PODGROUPER)
