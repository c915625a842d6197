"""``kai-scheduler run``: the scheduler's control loops against a Kubernetes API server.

Components are objects with a ``name`` and ``run(stop)``, which blocks until the
:class:`threading.Event` ``stop`` is set. :data:`COMPONENTS` maps each name to a factory taking the
:class:`Context`; ``--components`` picks some of them (default: every one available but those of
:data:`OPT_IN`). A name that is part of KAI but not available in this build is an error naming what
is. Each component runs on its own thread; SIGTERM or SIGINT sets ``stop``, and the process exits once
every component has returned, or :data:`STOP_TIMEOUT` seconds after ``stop`` with exit code 1, naming
the components still running. A component that fails stops the others and the process exits 1.

At start the process creates KAI's ``Config kai-config`` and ``SchedulingShard default`` where they are
missing (:mod:`kai.kube.operatorobjects`; ``--create-default-objects=false``: not), and one of its
components reports the Config's status conditions (:func:`report_config_status`).

The process serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``--metrics-address`` (every
interface by default), the probes on ``--health-probe-address`` instead when that is given. With
``--console`` the metrics listener also serves the scheduler's read-only web console at ``/console/``
(:mod:`kai.scheduler.console`). With ``--leader-elect`` it first campaigns for a Lease in ``--namespace``
and runs the components only while it holds it (the scheduler of each SchedulingShard campaigns for a Lease of its own,
:mod:`kai.scheduler.shards`); losing the lease ends the process with exit code 1 (KAI's behaviour), so that
Kubernetes restarts it as a standby. On SIGTERM the leader releases the lease as soon as its
components have returned, and a standby watching the lease takes over at once.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from kai.api import names
from kai.binder import reservation
from kai.binder.binder import DEFAULT_WORKERS
from kai.common.durations import duration_flag
from kai.common.errors import ConfigError
from kai.common.yamlfile import one_line
from kai.controllers import nodescaleadjuster
from kai.framework import DEFAULT_CONFIG, PluginError, SchedulerConfig, load_config
from kai.framework.shard import BIND_MODES
from kai.kube.controller import Controller
from kai.kube.leader import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD, LeaderElector
from kai.kube.server import DEFAULT_ADDRESS, METRICS, PROBES, ObservabilityServer
from kai.logs import FORMATS, configure, fields
from kai.metrics import DEFAULT_NAMESPACE, ControllerMetrics, Registry, count_api_requests

log = logging.getLogger(__name__)

#: KAI's components, in start order. Those missing from :data:`COMPONENTS` are not available yet.
KAI_COMPONENTS = ("scheduler", "binder", "podgrouper", "podgroup-controller", "queue-controller", "admission",
                  "node-scale-adjuster")
#: Components run only when ``--components`` names them (KAI's node scale adjuster is off by default too).
OPT_IN = ("node-scale-adjuster",)
#: How long the components may take to return once stopped (each bounds its own wait to a few seconds).
STOP_TIMEOUT = 10.0


@attrs.define
class Context:
    """What component factories get: the parsed options and a client factory."""

    args: argparse.Namespace
    config: SchedulerConfig
    kube: Any  # the unthrottled client; components rate-limit through client()
    registry: Any  # kai.metrics.Registry: the process's metrics

    def client(self):
        """A client for one component, limited to ``--qps``/``--burst``."""
        from kai.kube.ratelimit import ThrottledKube, TokenBucket

        return ThrottledKube(self.kube, TokenBucket(self.args.qps, self.args.burst))


def _scheduler(ctx: Context):
    from kai.kube.leader import LeaderElector
    from kai.metrics import SchedulerMetrics
    from kai.scheduler.loop import Scheduler
    from kai.scheduler.partition import Partition
    from kai.scheduler.shards import ShardSchedulers

    a = ctx.args

    def scheduler(shard: str | None, partition: Partition, metrics: SchedulerMetrics) -> Scheduler:
        return Scheduler(ctx.client(), ctx.config, period=a.schedule_period, scheduler_name=a.scheduler_name,
                         metrics=metrics, shard=shard, partition=partition,
                         stuck_in_releasing_threshold=a.stuck_in_releasing_threshold,
                         reservation_app=a.resource_reservation_app_label, bind_mode=a.bind_mode)

    shards = scheduling_shards(a.scheduling_shard)
    if a.shadow or shards == []:  # the flags' configuration only, over the default partition
        loop = scheduler(None, Partition(a.nodepool_label_key), SchedulerMetrics(ctx.registry))
        if a.shadow:  # writes nothing: not even a SchedulingShard's status, so no shard is watched
            from kai.scheduler.shadow import ShadowCommitter

            loop.committer = ShadowCommitter(loop.cache, ctx.registry, a.shadow_report)
        return loop
    metrics: dict[str, tuple[Any, SchedulerMetrics]] = {}  # per shard: its labelled registry, kept across restarts
    listed = Registry(ctx.registry.namespace)  # the families every shard's loop exports, with the label shard
    SchedulerMetrics(listed)
    ctx.registry.families.extend(f._replace(labels=(*f.labels, "shard")) for f in listed.families)

    def shard_metrics(shard: str) -> SchedulerMetrics:
        if shard not in metrics:
            registry = ctx.registry.labelled("shard", shard)
            metrics[shard] = (registry, SchedulerMetrics(registry))
        return metrics[shard][1]

    def forget(shard: str) -> None:
        if shard in metrics:
            ctx.registry.drop(metrics.pop(shard)[0])

    def elector(lease: str) -> LeaderElector:
        return LeaderElector(ctx.kube, lease, a.namespace, lease_duration=a.leader_elect_lease_duration,
                             renew_deadline=a.leader_elect_renew_deadline, retry_period=a.leader_elect_retry_period)

    return ShardSchedulers(ctx.client(), lambda shard, partition: scheduler(shard, partition, shard_metrics(shard)),
                           scheduler_name=a.scheduler_name, shards=shards, selector=a.scheduling_shard_selector,
                           key=a.nodepool_label_key, elector=elector if a.leader_elect else None, forget=forget)


def scheduling_shards(values: list[str] | None) -> list[str] | None:
    """The shards named by ``--scheduling-shard`` (repeated or comma-separated): None when not given (every
    shard), [] for ``''`` (none: the flags' configuration)."""
    if values is None:
        return None
    return list(dict.fromkeys(name.strip() for value in values for name in value.split(",") if name.strip()))


def _binder(ctx: Context):
    from kai.binder.binder import Binder
    from kai.binder.pluginconfig import load_config
    from kai.binder.settings import BinderFlags, build_chosen, chosen_plugins, plugins_builder
    from kai.kube.kaiconfig import KaiObjects
    from kai.metrics import BinderMetrics

    a, kube = ctx.args, ctx.client()
    try:
        overrides = load_config(a.binder_plugins, "--binder-plugins") if a.binder_plugins.strip() else {}
    except ConfigError as exc:
        raise ValueError(str(exc)) from exc
    # the reservation flags are the binder's settings (KAI's binder flags); the configuration's arguments win
    reservation = {"namespace": a.resource_reservation_namespace, "appLabel": a.resource_reservation_app_label,
                   "image": a.resource_reservation_pod_image, "serviceAccount": a.resource_reservation_service_account,
                   "runtimeClass": a.runtime_class_name, "allocationTimeout": a.resource_reservation_allocation_timeout,
                   "fakeGpuNodes": a.fake_gpu_nodes, "podResources": a.resource_reservation_pod_resources,
                   "podSecurityContext": a.resource_reservation_pod_security_context,
                   "containerSecurityContext": a.resource_reservation_container_security_context}
    flags = BinderFlags(overrides, a.cdi_enabled, reservation)
    try:
        initial = build_chosen(chosen_plugins(flags, None), kube)
    except PluginError as exc:
        raise PluginError(f"--binder-plugins: {exc}") from exc
    binder = Binder(kube, plugins=initial.plugins, workers=a.bind_workers, metrics=BinderMetrics(ctx.registry))
    if a.kai_config:
        binder.settings = KaiObjects(kube, plugins_builder(flags, kube, lambda: binder.settings.value),  # type: ignore[union-attr]
                                     initial,
                                     component=names.SOURCE_BINDER, shard=None, config=a.kai_config)
    return binder


def _podgroup_controller(ctx: Context):
    from kai.controllers.podgroupstatus import PodGroupController

    return PodGroupController(ctx.client())


def _queue_controller(ctx: Context):
    from kai.controllers.queuestatus import QueueController
    from kai.metrics import QueueMetrics

    metrics = QueueMetrics(ctx.registry, ctx.args.queue_label_to_metric_label,
                           ctx.args.queue_label_to_default_metric_value)
    return QueueController(ctx.client(), metrics)


def _podgrouper(ctx: Context):
    from kai.api.podgroup import GroupingError
    from kai.controllers.grouping_settings import Grouping, GroupingFlags, grouping_builder
    from kai.controllers.podgrouper import PodGrouper
    from kai.grouping.hub import GroupingConfig
    from kai.kube.kaiconfig import KaiObjects

    a, kube = ctx.args, ctx.client()
    if bool(a.default_priorities_configmap_name) != bool(a.default_priorities_configmap_namespace):
        raise ValueError("--default-priorities-configmap-name and -namespace go together")
    defaults = (a.default_priorities_configmap_namespace, a.default_priorities_configmap_name)
    config = GroupingConfig(queue_label_key=a.queue_label_key, node_pool_label_key=a.nodepool_label_key,
                            defaults_configmap=defaults if all(defaults) else None)
    flags = GroupingFlags(config, a.search_legacy_pg == "true", a.knative_gang_schedule == "true",
                          a.generic_karta_fallback == "true")
    try:
        grouper = PodGrouper(kube, config=config, scheduler_name=a.scheduler_name, arguments=flags.arguments(),
                             pod_label_selector=",".join(a.pod_label_selector),
                             namespace_label_selector=",".join(a.namespace_label_selector),
                             workers=a.podgrouper_workers)
    except (GroupingError, PluginError) as exc:  # two podgroupers claiming one kind, a podgrouper that cannot load
        raise ValueError(f"podgrouper: {exc}") from exc
    if a.kai_config:
        grouper.settings = KaiObjects(
            kube, grouping_builder(flags, grouper.reader, lambda: grouper.settings.value),  # type: ignore[union-attr]
            Grouping(flags, grouper.hub), component=names.SOURCE_PODGROUPER, shard=None, config=a.kai_config)
    return grouper


def _admission(ctx: Context):
    from kai.admission.certificates import ManagedCertificate
    from kai.admission.pods import DEFAULT_RUNTIME_CLASS
    from kai.admission.settings import policy_builder
    from kai.admission.webhook import AdmissionServer, queue_reader
    from kai.kube.kaiconfig import KaiObjects

    a = ctx.args
    # fake GPU nodes (kwok) have no container runtime to name: no runtime class unless one is given
    runtime_class = next((name for name in (a.gpu_fraction_runtime_class_name, a.gpu_pod_runtime_class_name)
                          if name is not None), "" if a.fake_gpu_nodes else DEFAULT_RUNTIME_CLASS)
    hosts = a.webhook_host or ["localhost", "127.0.0.1"]
    if a.webhook_configuration and not a.webhook_cert_secret:
        raise ValueError("--webhook-configuration needs --webhook-cert-secret, the certificate whose CA it sets")
    managed = ManagedCertificate(ctx.client(), a.namespace, a.webhook_cert_secret, hosts,
                                 a.webhook_configuration) if a.webhook_cert_secret else None
    server = AdmissionServer(a.webhook_addr, scheduler_name=a.scheduler_name, cert_file=a.webhook_cert_file,
                             key_file=a.webhook_key_file, hosts=hosts, cert_dir=a.webhook_cert_dir or None,
                             managed=managed,
                             gpu_sharing=a.gpu_sharing_enabled, block_visible_devices=a.block_nvidia_visible_devices,
                             runtime_class=runtime_class, hami_core=a.hami_core_enabled,
                             read_queue=queue_reader(ctx.client()) if a.enable_quota_validation else None)
    if a.kai_config:
        server.settings = KaiObjects(ctx.client(), policy_builder(server.base_policy), server.base_policy,
                                     component="admission", shard=None, config=a.kai_config)
    return server


def _node_scale_adjuster(ctx: Context):
    a = ctx.args
    return nodescaleadjuster.NodeScaleAdjuster(
        ctx.client(), scheduler_name=a.scheduler_name, namespace=a.scale_adjust_namespace, image=a.scaling_pod_image,
        app=a.scaling_pod_app_label, service_account=a.scaling_pod_service_account,
        memory_ratio=a.gpu_memory_to_fraction_ratio)


COMPONENTS: dict[str, Callable[[Context], Any]] = {
    "scheduler": _scheduler,
    "binder": _binder,
    "podgrouper": _podgrouper,
    "podgroup-controller": _podgroup_controller,
    "queue-controller": _queue_controller,
    "admission": _admission,
    "node-scale-adjuster": _node_scale_adjuster,
}


def metrics_registry(args: argparse.Namespace, kube) -> Registry:
    """The process's registry: the process metrics and the API requests of ``kube``; the components add theirs."""
    registry = Registry(args.metrics_namespace)
    registry.add_process_metrics()
    count_api_requests(registry, kube)
    return registry


def build_components(ctx: Context, names: list[str]) -> list:
    """The components ``names``; the work queue and reconciles of each controller among them are measured."""
    components = [COMPONENTS[name](ctx) for name in names]
    controllers = ControllerMetrics(ctx.registry)
    for component in components:
        if isinstance(component, Controller):
            component.instrument(controllers)
    return components


def parse_components(value: str) -> list[str]:
    """The component names of ``--components``; ValueError naming the unknown or unavailable ones."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise ValueError("--components names no component")
    unknown = [n for n in names if n not in KAI_COMPONENTS]
    if unknown:
        raise ValueError(f"unknown component(s) {', '.join(unknown)}; KAI's components are {', '.join(KAI_COMPONENTS)}")
    missing = [n for n in names if n not in COMPONENTS]
    if missing:
        raise ValueError(f"component(s) {', '.join(missing)} not available in this version; "
                         f"available: {', '.join(COMPONENTS)}")
    return list(dict.fromkeys(names))


def shadow_components(args: argparse.Namespace, names: list[str]) -> list[str]:
    """Shadow mode runs the scheduler alone (KAI runs the rest) and without a Lease, which is a write."""
    if args.components != _parser().get_default("components") and names != ["scheduler"]:
        raise ValueError("--shadow runs the scheduler alone; --components must be 'scheduler'")
    if args.leader_elect:
        raise ValueError("--shadow writes nothing, not even a Lease: run one replica without --leader-elect")
    return ["scheduler"]


def scheduler_config(args: argparse.Namespace) -> SchedulerConfig:
    """The configuration of ``--config`` (else the default) with the scheduler flags that set it."""
    config = load_config(args.config) if args.config else DEFAULT_CONFIG
    if args.restrict_node_scheduling:
        config = attrs.evolve(config, restrict_node_scheduling=True)
    return config


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kai-scheduler run", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="DURATION: a Go duration (1s, 1m30s, 500ms, 1h) or a bare number of seconds.")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    p.add_argument("--config", help="scheduler configuration YAML (actions and plugin tiers; default: built-in)")
    p.add_argument("--components", default=",".join(c for c in COMPONENTS if c not in OPT_IN),
                   help=f"comma-separated components to run (default: %(default)s; KAI's: {', '.join(KAI_COMPONENTS)})")
    p.add_argument("--scheduler-name", default=names.SCHEDULER_NAME,
                   help="pods with this spec.schedulerName are scheduled (default: %(default)s)")
    p.add_argument("--namespace", default="kai-scheduler",
                   help="namespace of the scheduler's own objects (leases) (default: %(default)s)")
    p.add_argument("--schedule-period", type=duration_flag, default=1.0, metavar="DURATION",
                   help="time between scheduling cycles (default: 1s)")
    p.add_argument("--stuck-in-releasing-threshold", type=duration_flag, default=120.0, metavar="DURATION",
                   help="how long a running pod may be deleting before its resources are no longer counted as "
                        "being released (nothing is pipelined onto them, it is never a victim) (default: 2m)")
    p.add_argument("--bind-mode", choices=BIND_MODES, default=BIND_MODES[0],
                   help="direct: the scheduler binds a pod that needs no bind-time work (shared GPUs, "
                        "ResourceClaims, volumes) itself, the others through BindRequests and the binder; "
                        "bindRequest: every pod through a BindRequest, as KAI (a SchedulingShard's args.bind-mode "
                        "wins) (default: %(default)s)")
    p.add_argument("--restrict-node-scheduling", action="store_true",
                   help="schedule only on nodes labelled as GPU workers (node-role.kubernetes.io/gpu-worker, for pods "
                        "asking for GPUs) or CPU workers (node-role.kubernetes.io/cpu-worker, for the others); the "
                        "configuration's restrictSchedulingNodes does the same")
    p.add_argument("--scheduling-shard", action="append", metavar="NAME[,NAME...]",
                   help="serve these SchedulingShards (repeatable): one scheduling loop per shard over its partition "
                        "(spec.partitionLabelValue on --nodepool-label-key), taking up the shard's settings (with "
                        "Config kai-config's) live over --config and --schedule-period; '' for one loop with the "
                        "flags' configuration only (default: every SchedulingShard, see docs/shards.md)")
    p.add_argument("--scheduling-shard-selector", default="", metavar="SELECTOR",
                   help="serve the SchedulingShards matching this label selector (default: all)")
    p.add_argument("--kai-config", default=names.KAI_CONFIG_NAME, metavar="NAME",
                   help="the Config whose binder, podGrouper, admission and global sections the binder, podgrouper and "
                        "admission take up live, over their flags; '' for none (default: %(default)s)")
    p.add_argument("--create-default-objects", type=_bool, nargs="?", const=True, default=True, metavar="BOOL",
                   help="create Config kai-config and SchedulingShard default with KAI's default values at start where "
                        "they are missing (their CRDs installed); false for installs that create them otherwise or "
                        "may not (default: true)")
    p.add_argument("--qps", type=float, default=500.0, help="API requests per second per component, 0: no limit "
                   "(default: %(default)s)")
    p.add_argument("--burst", type=int, default=1000, help="API request burst per component (default: %(default)s)")
    p.add_argument("--log-format", choices=FORMATS, default="text", help="log line format (default: %(default)s)")
    p.add_argument("--log-level", default="INFO", help="log level (default: %(default)s)")
    p.add_argument("--metrics-address", default=DEFAULT_ADDRESS, metavar="HOST:PORT",
                   help="serve /metrics, /healthz and /readyz here; ':PORT' is every interface, 127.0.0.1:PORT "
                        "this host only; port 0 picks a free one (default: %(default)s)")
    p.add_argument("--health-probe-address", default="", metavar="HOST:PORT",
                   help="serve /healthz and /readyz here instead, e.g. for the kubelet while /metrics listens "
                        "on 127.0.0.1 only (default: with the metrics)")
    p.add_argument("--console", action="store_true",
                   help="scheduler: serve the read-only web console at /console/ on the metrics address (bind that "
                        "to 127.0.0.1 to keep it to this host)")
    p.add_argument("--metrics-namespace", default=DEFAULT_NAMESPACE,
                   help="prefix of every metric name (default: %(default)s)")
    p.add_argument("--bind-workers", type=int, default=DEFAULT_WORKERS,
                   help="binder: BindRequests handled concurrently (default: %(default)s)")
    p.add_argument("--binder-plugins", default="", metavar="JSON|FILE",
                   help="binder: which binder plugins (entry points of kai.binder_plugins) run around each Binding, "
                        "in what order and with which arguments, in KAI's shape: "
                        "'{\"NAME\": {\"enabled\": BOOL, \"priority\": INT, \"arguments\": {...}}}', inline or as "
                        "a YAML file, laid over the default (gpusharing, priority 100)")
    gs = p.add_argument_group("binder: GPU sharing (reservation pods; the arguments of binder plugin gpusharing)")
    gs.add_argument("--resource-reservation-namespace", default=reservation.NAMESPACE, metavar="NAMESPACE",
                    help="namespace of the GPU reservation pods (default: %(default)s)")
    gs.add_argument("--resource-reservation-service-account", default=reservation.APP, metavar="NAME",
                    help="their ServiceAccount, '' for none (default: %(default)s)")
    gs.add_argument("--resource-reservation-pod-image", default=reservation.IMAGE, metavar="IMAGE",
                    help="their image, which reports the pod's GPU (default: %(default)s)")
    gs.add_argument("--resource-reservation-app-label", default=reservation.APP, metavar="VALUE",
                    help="their 'app' label (default: %(default)s)")
    gs.add_argument("--resource-reservation-allocation-timeout", type=duration_flag, metavar="DURATION",
                    default=reservation.DEFAULT_TIMEOUT,
                    help="wait this long for a reservation pod's GPU (default: 40s)")
    gs.add_argument("--runtime-class-name", default="", metavar="NAME", help="their runtime class (default: none)")
    gs.add_argument("--resource-reservation-pod-resources", default="", metavar="JSON",
                    help="their container's requests and limits besides the GPU, a ResourceRequirements in JSON "
                         "(default: none)")
    gs.add_argument("--resource-reservation-pod-security-context", default="", metavar="JSON",
                    help="their pod's securityContext in JSON (default: none)")
    gs.add_argument("--resource-reservation-container-security-context", default="", metavar="JSON",
                    help="their container's securityContext in JSON (default: none)")
    gs.add_argument("--cdi-enabled", action="store_true",
                    help="the device plugin uses CDI: devices are given as k8s.device-plugin.nvidia.com/gpu=<id>")
    gs.add_argument("--fake-gpu-nodes", action="store_true",
                    help="nodes without real GPUs (kwok): reservation pods sleep and the binder picks their device")
    p.add_argument("--queue-label-to-metric-label", type=_key_values, default={}, metavar="KEY=LABEL,...",
                   help="queue-controller: add queue label KEY to the queue metrics as label LABEL")
    p.add_argument("--queue-label-to-default-metric-value", type=_key_values, default={}, metavar="KEY=VALUE,...",
                   help="queue-controller: the metric label's value for queues without label KEY")
    le = p.add_argument_group("leader election")
    le.add_argument("--leader-elect", action="store_true",
                    help="run the components only while holding the Lease (for several replicas)")
    le.add_argument("--leader-elect-lease-name", default="", metavar="NAME",
                    help="the Lease in --namespace (default: the scheduler name, then the components other than "
                         "the scheduler, joined by '-')")
    le.add_argument("--leader-elect-lease-duration", type=duration_flag, default=LEASE_DURATION, metavar="DURATION",
                    help="a lease not renewed for this long may be taken over (default: 15s)")
    le.add_argument("--leader-elect-renew-deadline", type=duration_flag, default=RENEW_DEADLINE, metavar="DURATION",
                    help="the leader gives up if it cannot renew for this long (default: 10s)")
    le.add_argument("--leader-elect-retry-period", type=duration_flag, default=RETRY_PERIOD, metavar="DURATION",
                    help="how often to renew, and how often a standby checks the lease (default: 5s)")
    g = p.add_argument_group("podgrouper")
    g.add_argument("--queue-label-key", default="kai.scheduler/queue",
                   help="label naming a workload's queue (default: %(default)s)")
    g.add_argument("--nodepool-label-key", default="kai.scheduler/node-pool",
                   help="label naming a pod's node pool, copied to its PodGroup; the scheduling shards' partitions "
                        "are its values (default: %(default)s)")
    g.add_argument("--default-priorities-configmap-name", default="", metavar="NAME",
                   help="ConfigMap with default priority classes per workload kind (key 'types')")
    g.add_argument("--default-priorities-configmap-namespace", default="", metavar="NAMESPACE")
    g.add_argument("--search-legacy-pg", choices=("true", "false"), default="true",
                   help="reuse PodGroups named by older releases for Jobs (default: %(default)s)")
    g.add_argument("--knative-gang-schedule", choices=("true", "false"), default="true",
                   help="one PodGroup per Knative revision (default: %(default)s)")
    g.add_argument("--generic-karta-fallback", choices=("true", "false"), default="true",
                   help="group kinds no podgrouper knows by their Karta, if one exists (default: %(default)s)")
    g.add_argument("--pod-label-selector", action="append", default=[], metavar="SELECTOR",
                   help="group only pods matching this label selector, e.g. team=a (repeatable: all must match; "
                        "default: all pods)")
    g.add_argument("--namespace-label-selector", action="append", default=[], metavar="SELECTOR",
                   help="group only pods of namespaces matching this label selector (repeatable: all must match; "
                        "default: every namespace)")
    g.add_argument("--podgrouper-workers", type=int, default=10, metavar="N",
                   help="pods grouped concurrently (KAI's --max-concurrent-reconciles) (default: %(default)s)")
    g = p.add_argument_group("admission")
    g.add_argument("--webhook-addr", default=":9443", metavar="HOST:PORT",
                   help="HTTPS address of the admission webhooks (default: %(default)s)")
    g.add_argument("--webhook-cert-file", metavar="PATH", help="PEM serving certificate of the webhook")
    g.add_argument("--webhook-key-file", metavar="PATH", help="PEM private key of --webhook-cert-file")
    g.add_argument("--webhook-host", action="append", default=[], metavar="NAME",
                   help="without certificate files: a DNS name or IP address for the certificate made at start "
                        "(repeatable; default: localhost and 127.0.0.1)")
    g.add_argument("--webhook-cert-secret", default="", metavar="NAME",
                   help="without certificate files: keep the certificate in this Secret of --namespace (keys tls.crt, "
                        "tls.key, ca.crt), made for the --webhook-host names where it is missing, so that every "
                        "replica serves the same one")
    g.add_argument("--webhook-configuration", default="", metavar="NAME",
                   help="with --webhook-cert-secret: set its CA as the caBundle of the Validating- and "
                        "MutatingWebhookConfiguration of this name, at start and every minute")
    g.add_argument("--webhook-cert-dir", default="", metavar="PATH",
                   help="folder for the certificate files made or read at start (default: a temporary folder)")
    g.add_argument("--gpu-sharing-enabled", type=_bool, nargs="?", const=True, default=True, metavar="BOOL",
                   help="admit pods asking for a fraction of a GPU; false refuses them, as KAI does by default "
                        "(default: true)")
    g.add_argument("--block-nvidia-visible-devices", type=_bool, nargs="?", const=True, default=False,
                   metavar="BOOL", help="refuse pods that set NVIDIA_VISIBLE_DEVICES (but to void or none) and set it "
                                        "to void in containers without a GPU (default: false)")
    g.add_argument("--hami-core-enabled", type=_bool, nargs="?", const=True, default=False, metavar="BOOL",
                   help="make shared-GPU containers read HAMi-core's GPU-memory limit, which the binder plugin "
                        "hamicore sets (default: false)")
    g.add_argument("--gpu-fraction-runtime-class-name", metavar="NAME",
                   help="runtime class set on GPU-fraction pods that name none, '' for none (default: nvidia; "
                        "none with --fake-gpu-nodes)")
    g.add_argument("--gpu-pod-runtime-class-name", metavar="NAME",
                   help="deprecated spelling of --gpu-fraction-runtime-class-name, which wins when both are given")
    g.add_argument("--enable-quota-validation", type=_bool, nargs="?", const=True, default=False, metavar="BOOL",
                   help="warn when a queue's quotas exceed its parent's (reads queues; default: false)")
    g = p.add_argument_group("shadow mode (beside a running KAI; docs/snapshots.md)")
    g.add_argument("--shadow", action="store_true",
                   help="run the scheduler alone, writing nothing, and compare its decisions with KAI's")
    g.add_argument("--shadow-report", metavar="FILE", help="with --shadow: also write the rolling report to FILE")
    g = p.add_argument_group("node-scale-adjuster (scaling pods for cluster autoscalers; docs/gpu-sharing.md)")
    g.add_argument("--scale-adjust-namespace", default=nodescaleadjuster.NAMESPACE, metavar="NAMESPACE",
                   help="namespace of the scaling pods (default: %(default)s)")
    g.add_argument("--scaling-pod-image", default=nodescaleadjuster.IMAGE, metavar="IMAGE",
                   help="their image, which runs kai-scaling-pod (default: %(default)s)")
    g.add_argument("--scaling-pod-app-label", default=nodescaleadjuster.APP, metavar="VALUE",
                   help="their 'app' label (default: %(default)s)")
    g.add_argument("--scaling-pod-service-account", default=nodescaleadjuster.SERVICE_ACCOUNT, metavar="NAME",
                   help="their ServiceAccount, '' for none (default: %(default)s)")
    g.add_argument("--gpu-memory-to-fraction-ratio", type=float, metavar="RATIO",
                   default=nodescaleadjuster.GPU_MEMORY_TO_FRACTION_RATIO,
                   help="the share of a GPU counted for a pod asking for gpu-memory (default: %(default)s)")
    return p


def _bool(value: str) -> bool:
    """A Go-style boolean flag value."""
    lowered = value.strip().lower()
    if lowered in ("true", "t", "1"):
        return True
    if lowered in ("false", "f", "0"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r}: expected true or false")


def _names(value: str) -> list[str]:
    return [name.strip() for name in value.split(",") if name.strip()]


def _key_values(value: str) -> dict[str, str]:
    pairs = [item.partition("=") for item in value.split(",") if item.strip()]
    if any(not key.strip() or not sep for key, sep, _ in pairs):
        raise argparse.ArgumentTypeError(f"{value!r}: expected KEY=VALUE pairs separated by commas")
    return {key.strip(): val.strip() for key, _, val in pairs}


def lease_name(scheduler_name: str, components: list[str]) -> str:
    """The default Lease of a component set: one lease per set, so separate Deployments do not compete."""
    return "-".join([scheduler_name, *(c for c in components if c != "scheduler")])


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    stop = threading.Event()
    _stop_on_signals(stop)  # from the start: a SIGTERM while connecting still exits cleanly
    try:
        configure(args.log_format, args.log_level)
    except ValueError as exc:
        print(f"kai-scheduler run: {exc}", file=sys.stderr)
        return 2
    try:
        names = parse_components(args.components)
        if args.shadow:
            names = shadow_components(args, names)
        if args.console and "scheduler" not in names:
            raise ValueError("--console serves the scheduler's console: it needs the scheduler component")
        if args.schedule_period <= 0:
            raise ValueError(f"--schedule-period must be positive, not {args.schedule_period:g}")
        config = scheduler_config(args)
    except (ValueError, ConfigError) as exc:
        print(f"kai-scheduler run: {one_line(str(exc))}", file=sys.stderr)
        return 2
    from kai.kube.client import Kube

    try:
        kube = Kube.connect(args.kubeconfig)
    except Exception as exc:  # noqa: BLE001 - kubeconfig and in-cluster loading raise many types
        print(f"kai-scheduler run: cannot load a Kubernetes configuration: {exc}", file=sys.stderr)
        return 2
    ctx = Context(args, config, kube, metrics_registry(args, kube))
    try:
        components = build_components(ctx, names)
        # the schedulers of the shards hold a Lease each; the process's Lease is for the other components
        own = [c for c in components if getattr(c, "elector", None) is not None]
        leased = [c for c in components if c not in own]
        elector = None
        if args.leader_elect and leased:
            elector = LeaderElector(
                kube, args.leader_elect_lease_name or lease_name(args.scheduler_name, names), args.namespace,
                lease_duration=args.leader_elect_lease_duration, renew_deadline=args.leader_elect_renew_deadline,
                retry_period=args.leader_elect_retry_period)
        servers = observability_servers(args, ctx.registry)
    except (PluginError, ValueError, OSError) as exc:
        print(f"kai-scheduler run: {exc}", file=sys.stderr)
        return 2
    if args.create_default_objects and not args.shadow:  # shadow mode writes nothing
        from kai.kube.operatorobjects import create_missing

        create_missing(kube, args.namespace)
    report_config_status(components)
    probes = next(s for s in servers if PROBES in s.routes)
    _serve_snapshots(next(s for s in servers if METRICS in s.routes), components)
    serve_visibility(components, next(s for s in servers if METRICS in s.routes))
    if args.console:
        serve_console(components, next(s for s in servers if METRICS in s.routes))
    for component in components:
        probes.add_ready_check(component.name, _readiness(component, elector if component in leased else None))
    if elector is not None:
        probes.add_ready_check("leader-election", lambda: (not elector.lost, elector.state))
    for server in servers:
        server.start()
        log.info(f"serving {' and '.join(server.routes)}", **fields(address=f"{server.address[0]}:{server.port}"))
    try:
        if elector is None:
            return run_components(components, stop)
        if not own:
            return run_as_leader(elector, components, stop)
        return run_components([*own, Leading(elector, leased)], stop)
    finally:
        for server in servers:
            server.stop()


def report_config_status(components: list) -> None:
    """The Config's status is written once per process: by the first component taking the Config up (the
    binder, else the podgrouper, else the admission webhook; the scheduler reports on its SchedulingShard)."""
    from kai.kube.kaiconfig import KaiObjects

    watching = (c.settings for c in components if isinstance(getattr(c, "settings", None), KaiObjects))
    first = next(watching, None)
    if first is not None:
        first.report_config = True


def _serve_snapshots(server: ObservabilityServer, components: list) -> None:
    """KAI's ``/get-snapshot`` of the scheduler, served while its configuration has the ``snapshot`` plugin (of
    the default shard's loop, or the only shard's, in a process serving shards), and in shadow mode the report at
    ``/shadow-report``."""
    from kai.scheduler.kaisnapshot import ROUTE, snapshot_route
    from kai.scheduler.shadow import ShadowCommitter
    from kai.scheduler.shards import ShardSchedulers

    scheduler = next((c for c in components if c.name == "scheduler"), None)
    if isinstance(scheduler, ShardSchedulers):
        server.add_route(ROUTE, snapshot_route(scheduler.snapshot_scheduler))
    elif scheduler is not None:
        server.add_route(ROUTE, snapshot_route(lambda: scheduler))
        if isinstance(scheduler.committer, ShadowCommitter):
            server.add_route("/shadow-report", scheduler.committer.route)
def serve_visibility(components: list, server: ObservabilityServer) -> None:
    """The scheduler's visibility API on the metrics server: each scheduler hands its cycles to a
    :class:`~kai.scheduler.visibility.Visibility`; in a process serving shards, one per shard, and the API
    answers from the default shard's (else the only shard's), as ``/get-snapshot`` does. In shadow mode it also
    lists the divergences from KAI and adds shadow mode's word to ``explain``."""
    from kai.scheduler.loop import Scheduler
    from kai.scheduler.shadow import ShadowCommitter
    from kai.scheduler.shards import ShardSchedulers
    from kai.scheduler.visibility import Visibility

    for component in components:
        if isinstance(component, Scheduler):
            visibility = Visibility(component.committer.node_pool)
            if isinstance(component.committer, ShadowCommitter):
                visibility.shadow = component.committer
            component.observer = visibility
            server.visibility = visibility.answer
        elif isinstance(component, ShardSchedulers):
            shards: dict[str, Visibility] = {}
            make = component.make

            def observed(shard: str, partition, make=make, shards=shards) -> Scheduler:
                scheduler = make(shard, partition)
                scheduler.observer = shards.setdefault(shard, Visibility(partition.value or "default"))
                return scheduler

            def answer(path: str, component=component) -> tuple[int, dict]:
                loop = component.snapshot_scheduler()
                visibility = loop.observer if loop is not None else None
                if not isinstance(visibility, Visibility):
                    return 503, {"error": "no scheduling shard to explain"}
                return visibility.answer(path)

            component.make = observed
            server.visibility = answer


def serve_console(components: list, server: ObservabilityServer) -> None:
    """The web console on the metrics server, from the visibility API and the recent cycles of the scheduler it
    answers from (in a process serving shards, the default shard's, else the only shard's)."""
    from kai.scheduler.console import PREFIX, Console
    from kai.scheduler.shards import ShardSchedulers

    scheduler = next(c for c in components if c.name == "scheduler")
    if isinstance(scheduler, ShardSchedulers):
        def recent() -> tuple:
            loop = scheduler.snapshot_scheduler()
            return loop.recent if loop is not None else ()
    else:
        def recent() -> tuple:
            return scheduler.recent
    assert server.visibility is not None  # serve_visibility set it for the scheduler
    server.add_pages(PREFIX, Console(server.visibility, recent))


def observability_servers(args: argparse.Namespace, registry) -> list[ObservabilityServer]:
    """The servers of ``--metrics-address`` and ``--health-probe-address`` (bound, not started)."""
    if not args.health_probe_address:
        return [ObservabilityServer(args.metrics_address, registry)]
    metrics = ObservabilityServer(args.metrics_address, registry, routes=(METRICS,))
    try:
        return [metrics, ObservabilityServer(args.health_probe_address, registry, routes=(PROBES,))]
    except OSError:
        metrics.stop()
        raise


def _readiness(component, elector):
    """A component is ready when its caches are; a replica standing by is ready as it is."""

    def check() -> tuple[bool, str]:
        if elector is not None and not elector.leading:
            return True, elector.state
        ready = getattr(component, "ready", None)
        return ready() if ready is not None else (True, "running")

    return check


def run_as_leader(elector, components: list, stop: threading.Event | None = None) -> int:
    """Stand by until ``elector`` holds the lease, then run the components until stopped or the lease is lost."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        _stop_on_signals(stop)
    codes: list[int] = []
    kept = elector.run(stop, lambda over: codes.append(run_components(components, over)))
    if not kept:
        return 1
    return codes[0] if codes else 0


@attrs.define
class Leading:
    """Components run while the process holds its Lease, beside components holding Leases of their own."""

    elector: LeaderElector
    components: list
    name: str = "leader-election"

    def run(self, stop: threading.Event) -> None:
        if run_as_leader(self.elector, self.components, stop) != 0:
            raise RuntimeError("the leader lease was lost or a component failed")


def _stop_on_signals(stop: threading.Event) -> None:
    def handle(signum, _frame) -> None:
        log.info("stopping", **fields(signal=signal.Signals(signum).name))
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def run_components(components: list, stop: threading.Event | None = None, stop_timeout: float = STOP_TIMEOUT) -> int:
    """Runs each component on a thread until ``stop`` (or SIGTERM/SIGINT); 1 if one of them failed or
    did not return within ``stop_timeout`` seconds of the stop (its daemon thread is left to the exit)."""
    stop = stop or threading.Event()
    failed: list[str] = []
    if threading.current_thread() is threading.main_thread():
        _stop_on_signals(stop)

    def run(component) -> None:
        try:
            component.run(stop)
        except Exception:  # noqa: BLE001 - reported, and the others are stopped
            log.exception("component failed", **fields(component=component.name))
            failed.append(component.name)
        finally:
            stop.set()  # a component returning on its own ends the process too

    threads = [threading.Thread(target=run, args=(c,), name=c.name, daemon=True) for c in components]
    log.info("starting", **fields(components=",".join(c.name for c in components)))
    for t in threads:
        t.start()
    stopped_at = None
    while running := [t for t in threads if t.is_alive()]:
        running[0].join(0.1)
        if stop.is_set():
            stopped_at = stopped_at or time.monotonic()
            if time.monotonic() - stopped_at > stop_timeout:
                log.error("components did not stop in time; exiting without them",
                          **fields(components=",".join(t.name for t in running), timeout_seconds=stop_timeout))
                return 1
    return 1 if failed else 0
