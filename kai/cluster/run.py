"""``kai-scheduler run``: the scheduler's control loops against a Kubernetes API server.

Components are objects with a ``name`` and ``run(stop)``, which blocks until the
:class:`threading.Event` ``stop`` is set. :data:`COMPONENTS` maps each name to a factory taking the
:class:`Context`; ``--components`` picks some of them (default: every one available). A name that
is part of KAI but not available in this build is an error naming what is. Each component runs
on its own thread; SIGTERM or SIGINT sets ``stop``, and the process exits once every component has
returned. A component that fails stops the others and the process exits 1.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import attrs

from kai.framework import DEFAULT_CONFIG, ConfigError, PluginError, SchedulerConfig, load_config
from kai.logs import FORMATS, configure, fields

log = logging.getLogger(__name__)

#: KAI's components, in start order. Those missing from :data:`COMPONENTS` are not available yet.
KAI_COMPONENTS = ("scheduler", "binder", "podgrouper", "queue-controller", "admission")


@attrs.define
class Context:
    """What component factories get: the parsed options and a client factory."""

    args: argparse.Namespace
    config: SchedulerConfig
    kube: Any  # the unthrottled client; components rate-limit through client()

    def client(self):
        """A client for one component, limited to ``--qps``/``--burst``."""
        from kai.cluster.ratelimit import ThrottledKube, TokenBucket

        return ThrottledKube(self.kube, TokenBucket(self.args.qps, self.args.burst))


def _scheduler(ctx: Context):
    from kai.cluster.scheduler import Scheduler

    return Scheduler(ctx.client(), ctx.config, period=ctx.args.schedule_period, scheduler_name=ctx.args.scheduler_name)


def _binder(ctx: Context):
    from kai.cluster.binder import Binder

    return Binder(ctx.client())


def _queue_controller(ctx: Context):
    from kai.cluster.queuecontroller import QueueController

    return QueueController(ctx.client())


def _podgrouper(ctx: Context):
    from kai.cluster.podgrouper import PodGrouper

    return PodGrouper(ctx.client(), scheduler_name=ctx.args.scheduler_name)


COMPONENTS: dict[str, Callable[[Context], Any]] = {
    "scheduler": _scheduler,
    "binder": _binder,
    "podgrouper": _podgrouper,
    "queue-controller": _queue_controller,
}


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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kai-scheduler run", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    p.add_argument("--config", help="scheduler configuration YAML (actions and plugin tiers; default: built-in)")
    p.add_argument("--components", default=",".join(COMPONENTS),
                   help=f"comma-separated components to run (default: %(default)s; KAI's: {', '.join(KAI_COMPONENTS)})")
    p.add_argument("--scheduler-name", default="kai-scheduler",
                   help="pods with this spec.schedulerName are scheduled (default: %(default)s)")
    p.add_argument("--namespace", default="kai-scheduler",
                   help="namespace of the scheduler's own objects (leases) (default: %(default)s)")
    p.add_argument("--schedule-period", type=float, default=1.0, metavar="SECONDS",
                   help="time between scheduling cycles (default: %(default)s)")
    p.add_argument("--qps", type=float, default=500.0, help="API requests per second per component, 0: no limit "
                   "(default: %(default)s)")
    p.add_argument("--burst", type=int, default=1000, help="API request burst per component (default: %(default)s)")
    p.add_argument("--log-format", choices=FORMATS, default="text", help="log line format (default: %(default)s)")
    p.add_argument("--log-level", default="INFO", help="log level (default: %(default)s)")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        configure(args.log_format, args.log_level)
    except ValueError as exc:
        print(f"kai-scheduler run: {exc}", file=sys.stderr)
        return 2
    try:
        names = parse_components(args.components)
        if args.schedule_period <= 0:
            raise ValueError(f"--schedule-period must be positive, not {args.schedule_period:g}")
        config = load_config(args.config) if args.config else DEFAULT_CONFIG
    except (ValueError, ConfigError) as exc:
        print(f"kai-scheduler run: {exc}", file=sys.stderr)
        return 2
    from kai.cluster.client import Kube

    try:
        kube = Kube.connect(args.kubeconfig)
    except Exception as exc:  # noqa: BLE001 - kubeconfig and in-cluster loading raise many types
        print(f"kai-scheduler run: cannot load a Kubernetes configuration: {exc}", file=sys.stderr)
        return 2
    ctx = Context(args, config, kube)
    try:
        components = [COMPONENTS[name](ctx) for name in names]
    except (PluginError, ValueError) as exc:
        print(f"kai-scheduler run: {exc}", file=sys.stderr)
        return 2
    return run_components(components)


def run_components(components: list, stop: threading.Event | None = None) -> int:
    """Runs each component on a thread until ``stop`` (or SIGTERM/SIGINT); 1 if one of them failed."""
    stop = stop or threading.Event()
    failed: list[str] = []

    def handle(signum, _frame) -> None:
        log.info("stopping", **fields(signal=signal.Signals(signum).name))
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def run(component) -> None:
        try:
            component.run(stop)
        except Exception:  # noqa: BLE001 - reported, and the others are stopped
            log.exception("component failed", **fields(component=component.name))
            failed.append(component.name)
        finally:
            stop.set()  # a component returning on its own ends the process too

    threads = [threading.Thread(target=run, args=(c,), name=c.name) for c in components]
    log.info("starting", **fields(components=",".join(c.name for c in components)))
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.2)
    return 1 if failed else 0
