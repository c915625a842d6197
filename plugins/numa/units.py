"""A task as the units the Topology Manager aligns: the whole pod (pod scope) or its containers.

Container scope: the app containers and native sidecars run together and are drawn from the zones one
after the other (concurrent); ordinary init containers run alone before them (serial). CPU counts only
as the kubelet's static CPU Manager pins it: whole CPUs of a Guaranteed pod's container.
"""

from __future__ import annotations

import attrs

from kai.sdk import GPU, GUARANTEED, SCOPE_POD, ContainerRequest, Task

Amounts = dict[str, float]


@attrs.define(slots=True, frozen=True)
class Units:
    pod: Amounts
    concurrent: tuple[Amounts, ...]
    serial: tuple[Amounts, ...]

    def for_scope(self, scope: str) -> tuple[tuple[Amounts, ...], tuple[Amounts, ...]]:
        """``(concurrent, serial)`` units under ``scope``."""
        return ((self.pod,), ()) if scope == SCOPE_POD else (self.concurrent, self.serial)


def request_amounts(task: Task) -> Amounts:
    """The task's request by resource name (one container asking all of it)."""
    r = task.request
    out = {"cpu": r.cpu, "memory": r.memory, GPU: float(r.gpus)}
    out.update({k: float(v) for k, v in r.mig.items()})
    out.update(r.scalars)
    return out


def _aligned(amounts: Amounts, guaranteed: bool) -> Amounts:
    cpu = amounts.get("cpu", 0.0)
    pinned = cpu if guaranteed and cpu % 1000 == 0 else 0.0
    return {**amounts, "cpu": pinned}


def units_of(task: Task) -> Units:
    guaranteed = task.qos_class == GUARANTEED
    containers = task.containers or (ContainerRequest(request_amounts(task)),)
    concurrent: list[Amounts] = []
    serial: list[Amounts] = []
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for c in containers:
        amounts = _aligned(c.amounts, guaranteed)
        if c.init and not c.sidecar:
            serial.append(amounts)
            for n in set(amounts) | set(sidecars):
                init_peak[n] = max(init_peak.get(n, 0.0), sidecars.get(n, 0.0) + amounts.get(n, 0.0))
            continue
        concurrent.append(amounts)
        if c.sidecar:
            for n, v in amounts.items():
                sidecars[n] = sidecars.get(n, 0.0) + v
    running: Amounts = {}
    for amounts in concurrent:
        for n, v in amounts.items():
            running[n] = running.get(n, 0.0) + v
    pod = {n: max(running.get(n, 0.0), init_peak.get(n, 0.0)) for n in set(running) | set(init_peak)}
    return Units(pod, tuple(concurrent), tuple(serial))
