"""The requests of a pod's implicit claim for a DRA-backed extended resource, as Kubernetes makes them (KEP-5004).

Each long-lived container (a regular one or a native sidecar) asking the resource gets a request of its own,
``container-<i>-request-<j>`` (``i`` counts init containers first, ``j`` is the resource's place among the
container's sorted request names). An init container runs before the containers after it start: it reuses
their requests as far as they cover it, and the init containers' remainders share one request, the largest
of them -- so a pod needs the larger of its init and its regular containers' amounts, not their sum.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai.sdk import ContainerRequest


def implicit_requests(containers: Sequence[ContainerRequest], resource: str
                      ) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
    """The ``(request name, count)`` of the claim, by name, and the ``(container name, request name)`` mappings."""
    counts = [int(c.amounts.get(resource, 0)) for c in containers]
    long_lived = [i for i, c in enumerate(containers) if not c.init or c.sidecar]
    own: dict[int, str] = {}
    mappings: list[tuple[str, str]] = []
    for i in long_lived:
        if counts[i] > 0:
            own[i] = _name(i, containers[i], resource)
            mappings.append((containers[i].name, own[i]))
    largest: tuple[str, int] | None = None
    short: list[tuple[str, str]] = []
    for i, c in enumerate(containers):
        if i in long_lived or counts[i] <= 0:
            continue
        covered = 0
        for j in (j for j in long_lived if j >= i and j in own):
            covered += counts[j]
            short.append((c.name, own[j]))
            if covered >= counts[i]:
                break
        if covered < counts[i]:
            name = _name(i, c, resource)
            short.append((c.name, name))
            if largest is None or largest[1] < counts[i] - covered:
                largest = (name, counts[i] - covered)
    requests = [(own[i], counts[i]) for i in own]
    if largest is not None:
        requests.append(largest)
        merged = {n for n, _ in short} - set(own.values())
        short = [(c, largest[0] if n in merged else n) for c, n in short]
    return sorted(requests), mappings + short


def _name(index: int, container: ContainerRequest, resource: str) -> str:
    return f"container-{index}-request-{sorted(container.amounts).index(resource)}"
