"""One scheduler per SchedulingShard, as KAI's operator deploys one per shard.

:class:`ShardSchedulers` watches the SchedulingShards (those named, or matching a label selector, or all)
and runs a :class:`~kai.scheduler.loop.Scheduler` on a thread of its own for each, over the shard's
partition (``spec.partitionLabelValue`` on the node-pool label, :mod:`kai.scheduler.partition`), with the
shard's settings (:mod:`kai.kube.kaiconfig`, which also writes the shard's status conditions), its
metrics labelled ``shard=<name>`` and, with leader election, a Lease of its own: the scheduler's name
for the default shard, ``<scheduler name>-<partition value>`` (KAI's name of a shard's scheduler) for the
others. A shard created later is served within :data:`RESYNC` seconds of the watch showing it; a deleted
shard's scheduler stops (its committer finishes what it submitted); a shard whose partition changes gets
a new scheduler. When no shard is there to serve -- no SchedulingShard CRD, or none at all -- and the
default shard is wanted, one scheduler serves the default partition with the flags' configuration (and
takes up ``SchedulingShard default`` when it appears). A shard whose partition cannot be read gets a
Warning event and ``Deployed`` false, and the others go on; a scheduler that fails is started again after
a backoff. The component is ready when every shard's scheduler is (a standby for its Lease is ready).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kai.api import names
from kai.kube.client import Kube, object_path
from kai.kube.events import WARNING, record_event
from kai.kube.kaiconfig import spec_view
from kai.kube.leader import LeaderElector
from kai.kube.shardstatus import report_shard_status
from kai.kube.watch import Informer
from kai.logs import fields
from kai.scheduler.loop import MAX_BACKOFF, SETTINGS_WAIT, Scheduler
from kai.scheduler.partition import Partition

log = logging.getLogger(__name__)

#: How often the shards are compared with the schedulers running, besides after every change, seconds.
RESYNC = 1.0
#: How long a stopping shard's scheduler may take, seconds (its committer's bound and a cycle's end).
JOIN_TIMEOUT = 10.0

#: Makes the scheduler of a shard (by name) over a partition.
MakeScheduler = Callable[[str, Partition], Scheduler]


def partition_of(shard: dict[str, Any], key: str) -> Partition:
    """The partition of a SchedulingShard (as :func:`~kai.kube.kaiconfig.spec_view` keeps it); ValueError
    when ``spec.partitionLabelValue`` is not a string."""
    value = (shard.get("spec") or {}).get("partitionLabelValue")
    if value is not None and not isinstance(value, str):
        raise ValueError(f"spec.partitionLabelValue: expected a string, not {value!r}")
    return Partition(key, value or None)


def lease_of(scheduler_name: str, shard: str, partition: Partition) -> str:
    """The Lease of a shard's scheduler: the scheduler name for the default shard, else KAI's name of the
    shard's scheduler, ``<scheduler name>-<partition value>`` (the shard's name when it has none)."""
    if shard == names.DEFAULT_SHARD:
        return scheduler_name
    return f"{scheduler_name}-{partition.value or shard}"


class ShardLoop:
    """The scheduler of one shard on its thread: campaigning for its Lease first when ``campaign`` is given (it
    makes the LeaderElector of each campaign; after a lost lease the loop campaigns again)."""

    def __init__(self, shard: str, partition: Partition, make: MakeScheduler,
                 campaign: Callable[[], LeaderElector] | None) -> None:
        self.shard, self.partition, self.make, self.campaign = shard, partition, make, campaign
        self.elector = campaign() if campaign is not None else None
        self.scheduler: Scheduler | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"scheduler {shard}", daemon=True)

    def start(self) -> ShardLoop:
        log.info("serving scheduling shard", **fields(shard=self.shard, partition=self.partition.selector))
        self.thread.start()
        return self

    def ready(self) -> tuple[bool, str]:
        if self.elector is not None and not self.elector.leading:
            return True, self.elector.state
        scheduler = self.scheduler
        return scheduler.ready() if scheduler is not None else (False, "starting")

    def _run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                if self.elector is None:
                    self._schedule(self.stop)
                    return
                if self.elector.run(self.stop, self._schedule):
                    return
                log.warning("shard's leader lease lost; standing by again", **fields(shard=self.shard))
                self.elector = self.campaign() if self.campaign is not None else None
                failures = 0
            except Exception:  # noqa: BLE001 - one shard's failure must not stop the others
                failures += 1
                delay = min(2.0 ** failures, MAX_BACKOFF)
                log.exception("shard's scheduler failed; starting it again",
                              **fields(shard=self.shard, retry_in_seconds=delay))
                self.stop.wait(delay)

    def _schedule(self, over: threading.Event) -> None:
        self.scheduler = self.make(self.shard, self.partition)
        try:
            self.scheduler.run(over)
        finally:
            self.scheduler = None


class ShardSchedulers:
    """The component ``scheduler`` of ``kai-scheduler run``; see the module docstring.

    ``shards``: the names served (None: every shard ``selector`` matches); ``elector(lease)`` makes the
    LeaderElector of a Lease (None: no leader election); ``forget(shard)`` is called once a shard is no
    longer served (its metrics go)."""

    name = "scheduler"

    def __init__(self, kube: Kube, make: MakeScheduler, *, scheduler_name: str = names.SCHEDULER_NAME,
                 shards: list[str] | None = None, selector: str = "", key: str = names.NODE_POOL_LABEL,
                 elector: Callable[[str], LeaderElector] | None = None,
                 forget: Callable[[str], None] | None = None) -> None:
        self.kube, self.make, self.scheduler_name, self.forget = kube, make, scheduler_name, forget
        self.shards, self.selector, self.key, self.elector = shards, selector, key, elector
        self.loops: dict[str, ShardLoop] = {}
        self.changed = threading.Event()
        self.informer = Informer(kube, object_path(*names.SCHEDULINGSHARDS), label_selector=selector,
                                 transform=spec_view, on_event=lambda _kind, _obj: self.changed.set(),
                                 name="schedulingshards")
        self._reported: dict[str, str] = {}  # shard -> the partition error last reported

    def ready(self) -> tuple[bool, str]:
        loops = dict(self.loops)
        if not loops:
            return True, "no scheduling shard to serve"
        states = {name: loop.ready() for name, loop in loops.items()}
        return all(ok for ok, _ in states.values()), "; ".join(f"shard {name}: {state}"
                                                               for name, (_, state) in states.items())

    def snapshot_scheduler(self) -> Scheduler | None:
        """The scheduler whose snapshot ``/get-snapshot`` serves: the default shard's, else the only shard's."""
        loops = dict(self.loops)
        loop = loops.get(names.DEFAULT_SHARD) or (next(iter(loops.values())) if len(loops) == 1 else None)
        return loop.scheduler if loop is not None else None

    def run(self, stop: threading.Event) -> None:
        self.informer.start()
        try:
            if not self.informer.wait_synced(SETTINGS_WAIT):
                log.warning("SchedulingShards not listed; serving the default partition meanwhile")
            while not stop.is_set():
                self.changed.clear()
                self.reconcile()
                self.changed.wait(RESYNC)
        finally:
            self.informer.stop()
            for loop in self.loops.values():
                loop.stop.set()
            for name, loop in self.loops.items():
                loop.thread.join(JOIN_TIMEOUT)
                log.info("stopped serving scheduling shard", **fields(shard=name))

    def wanted(self) -> dict[str, Partition]:
        """The shards to serve now and their partitions (the default shard's also when it does not exist and
        nothing else is served)."""
        found = {}
        for shard in self.informer.list():
            name = shard["metadata"].get("name")
            if self.shards is not None and name not in self.shards:
                continue
            try:
                found[name] = partition_of(shard, self.key)
            except ValueError as exc:
                self._bad(shard, str(exc))
                continue
            self._reported.pop(name, None)
        if not found and not self.selector and (self.shards is None or names.DEFAULT_SHARD in self.shards):
            found[names.DEFAULT_SHARD] = Partition(self.key)
        return found

    def reconcile(self) -> None:
        """Stops the schedulers of shards gone or changed, starts those of shards new or changed."""
        wanted = self.wanted()
        for name, loop in list(self.loops.items()):
            if wanted.get(name) != loop.partition:
                loop.stop.set()
                loop.thread.join(JOIN_TIMEOUT)
                del self.loops[name]
                log.info("stopped serving scheduling shard", **fields(shard=name))
                if self.forget is not None and name not in wanted:
                    self.forget(name)
        for name, partition in wanted.items():
            if name not in self.loops:
                lease, elector = lease_of(self.scheduler_name, name, partition), self.elector
                campaign = (lambda lease=lease, elector=elector: elector(lease)) if elector is not None else None
                self.loops[name] = ShardLoop(name, partition, self.make, campaign).start()

    def _bad(self, shard: dict[str, Any], error: str) -> None:
        name = shard["metadata"].get("name")
        if self._reported.get(name) == error:
            return
        self._reported[name] = error
        log.error("scheduling shard not served", **fields(shard=name, error=error))
        record_event(self.kube, shard, WARNING, names.REASON_INVALID_CONFIGURATION,
                     f"not served by {names.SOURCE_SCHEDULER}: {error}", names.SOURCE_SCHEDULER)
        report_shard_status(self.kube, shard, f"SchedulingShard {name}: {error}")
