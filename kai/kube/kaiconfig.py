"""KAI's operator objects, ``Config kai-config`` and one ``SchedulingShard``, watched live.

    objects = KaiObjects(kube, build, initial, component="kai-scheduler", shard="default")
    objects.start()
    objects.wait_applied(5)   # True once both were listed and build ran
    objects.value             # build's last good result (``initial`` until then)
    objects.version           # bumped each time ``value`` changes
    objects.stop()

``build(shard, config)`` gets each object (apiVersion, kind, metadata and spec; status is left out, so
a status-only update is no change) or None when it does not exist, once both informers have listed and
then after every change, on an informer's thread. When it raises, the error is logged and recorded as
a Warning Event (reason ``InvalidConfiguration``) on the object whose change could not be applied, and
the last good value stays in force. After each attempt the SchedulingShard's status conditions say whether
its current generation is in force (:mod:`kai.kube.shardstatus`), and with ``report_config`` the Config's
too (KAI's operator's conditions, :mod:`kai.kube.operatorstatus`; one component per process reports them).
With ``shard=None`` only the Config is watched. When a CRD is not installed nothing is listed and
``initial`` stays in force.

:func:`config_field` reads one field of the Config's spec for a ``build``, checking its type.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from kai.api import names
from kai.common.yamlfile import describe
from kai.kube.access import Access
from kai.kube.client import Kube, object_path
from kai.kube.events import WARNING, record_event
from kai.kube.operatorstatus import report_status
from kai.kube.shardstatus import report_shard_status
from kai.kube.watch import Informer
from kai.logs import fields

log = logging.getLogger(__name__)
T = TypeVar("T")
#: What ``report_config`` needs besides reading the Config.
CONFIG_STATUS_ACCESS = (Access(names.CONFIGS[0], f"{names.CONFIGS[2]}/status", ("patch",)),)


def spec_view(raw: dict) -> dict:
    """What a component reads of an operator object: identity, generation and spec."""
    meta = raw.get("metadata") or {}
    return {"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"),
            "metadata": {k: meta[k] for k in ("name", "uid", "generation") if k in meta},
            "spec": raw.get("spec") or {}}


#: What :func:`config_field` accepts for each type, for its error message.
_KINDS = {bool: "true or false", int: "a whole number", str: "a string", dict: "a mapping"}


def config_field(config: dict | None, path: str, kind: type) -> Any:
    """The value of ``spec.<path>`` (dotted) of the Config ``config``, None when it or a section on the way is
    unset; ValueError naming the field when it is not of ``kind`` (bool, int, str or dict)."""
    value: Any = (config or {}).get("spec") or {}
    where = "spec"
    for key in path.split("."):
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping, not {describe(value)}")
        value, where = value.get(key), f"{where}.{key}"
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}: expected {_KINDS[kind]}, not {describe(value)}")
    return value


class KaiObjects(Generic[T]):
    """Keeps ``build``'s result for the current Config and SchedulingShard; see the module docstring."""

    def __init__(self, kube: Kube, build: Callable[[dict | None, dict | None], T], initial: T, *, component: str,
                 shard: str | None = names.DEFAULT_SHARD, config: str = names.KAI_CONFIG_NAME,
                 report_config: bool = False) -> None:
        self.kube, self.build, self.component = kube, build, component
        self.report_config = report_config
        self.value = initial
        self.version = 0
        self.applied = threading.Event()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._names = {"config": config, "shard": shard}
        self.informers = {
            kind: Informer(kube, object_path(*coordinates), field_selector=f"metadata.name={self._names[kind]}",
                           transform=spec_view, on_event=lambda _type, obj: self._update(obj),
                           name=f"{coordinates[2]} {self._names[kind]}")
            for kind, coordinates in (("config", names.CONFIGS), ("shard", names.SCHEDULINGSHARDS))
            if self._names[kind] is not None
        }

    def start(self) -> KaiObjects[T]:
        for informer in self.informers.values():
            informer.start()
        threading.Thread(target=self._first_apply, name="kai objects", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for informer in self.informers.values():
            informer.stop()

    def wait_applied(self, timeout: float | None = None) -> bool:
        return self.applied.wait(timeout)

    def objects(self) -> tuple[dict | None, dict | None]:
        """The SchedulingShard and the Config as last seen (None: absent or not watched)."""
        return tuple(self.informers[kind].get(self._names[kind] or "") if kind in self.informers else None
                     for kind in ("shard", "config"))  # type: ignore[return-value]

    def _first_apply(self) -> None:
        while not self._stop.is_set():
            if all(inf.wait_synced(0.1) for inf in self.informers.values()):
                with self._lock:
                    self._apply(None)
                    self.applied.set()
                return

    def _update(self, changed: dict) -> None:
        with self._lock:
            if self.applied.is_set():
                self._apply(changed)

    def _apply(self, changed: dict | None) -> None:
        shard, config = self.objects()
        try:
            value = self.build(shard, config)
        except Exception as exc:  # noqa: BLE001 - a bad object must not stop the component
            culprit = changed or shard or config
            what = f"{culprit['kind']} {culprit['metadata'].get('name')}" if culprit else "configuration"
            log.error("configuration not applied; the previous one stays in force",
                      **fields(object=what, component=self.component, error=str(exc)))
            if culprit is not None:
                record_event(self.kube, culprit, WARNING, names.REASON_INVALID_CONFIGURATION,
                             f"not applied by {self.component}, the previous configuration stays in force: {exc}",
                             self.component)
            self._report(shard, config, f"{what}: {exc}")
            return
        if value != self.value:
            self.value = value
            self.version += 1
        self._report(shard, config, None)

    def _report(self, shard: dict | None, config: dict | None, error: str | None) -> None:
        if shard is not None:
            report_shard_status(self.kube, shard, error)
        if config is not None and self.report_config:
            report_status(self.kube, names.CONFIGS, config, error)

    def describe(self) -> str:
        """The objects in force and their generations, for log lines ("" when there are none)."""
        return ",".join(f"{obj['kind']}/{obj['metadata'].get('name')}@{obj['metadata'].get('generation')}"
                        for obj in self.objects() if obj is not None)
