"""Which BindRequests make their pod Binding, kept from one cycle to the next.

A BindRequest is live when it is not failed, its pod exists (the same pod, when it names the pod's uid)
and the node it selects exists; every other one is stale, to be deleted, and one that would bind a pod
without a node to a node that does not exist is a problem naming the pod. When a pod has several live
BindRequests, the last in the store's order counts. :class:`LiveBindRequests` works this out again only
for the BindRequests that changed, those of pods that changed and the stale ones (reported again each
cycle until they are gone), and for every one when the node names changed.
"""

from __future__ import annotations

from collections.abc import Collection

from kai.framework import Problem
from kai.framework.snapshot import NODE_NOT_FOUND
from kai.scheduler.generation import Generation
from kai.scheduler.views import BindRequestView, PodView


class LiveBindRequests:
    """The live BindRequests by pod key: those of the update being made and those of the last one (:attr:`live`)."""

    def __init__(self) -> None:
        self.live: Generation[str, BindRequestView] = Generation()
        self._pod_of: dict[str, str] = {}  # BindRequest key -> its pod's key
        self._of_pod: dict[str, set[str]] = {}  # pod key -> the keys of the BindRequests naming it
        self._stale: set[str] = set()
        self._nodes: frozenset[str] | None = None

    def update(self, binds: dict[str, BindRequestView], touched: set[str], pods: dict[str, PodView],
               pods_touched: set[str], nodes: Collection[str], problems: list[Problem]
               ) -> tuple[dict[str, BindRequestView], list[BindRequestView], set[str]]:
        """The live BindRequests by pod key, the stale ones (in the store's order) and the keys of the pods
        whose live BindRequest is not the one of the last update, from the store ``binds`` (``touched``: the
        keys changed since the last update), the pods (``pods_touched`` likewise) and the node names; the
        problems are appended to ``problems``. The live ones are the last update's for the next one once the
        cycle is built (:meth:`~kai.scheduler.generation.Generation.turn`)."""
        names = frozenset(nodes)
        live = self.live
        pods_of_todo: set[str] = set()
        every = names != self._nodes
        if every:
            self._nodes, self._pod_of, self._of_pod = names, {}, {}
            todo = set(binds)
            pods_of_todo.update(live.previous)
        else:
            todo = touched | self._stale
            for pod in pods_touched:
                todo |= self._of_pod.get(pod, set())
        for key in list(todo):  # every BindRequest of a pod one of them names, or named, is worked out again
            for named in (self._pod_of.get(key), _pod_key(binds[key]) if key in binds else None):
                if named is not None:
                    todo |= self._of_pod.get(named, set())
                    pods_of_todo.add(named)
        if not every:  # the live ones of the other pods are the last update's
            live.carry(pods_of_todo)
        for key in todo:
            was = self._pod_of.pop(key, None)
            if was is not None:
                self._of_pod[was].discard(key)
                if not self._of_pod[was]:
                    del self._of_pod[was]
                live.current.pop(was, None)
                pods_of_todo.add(was)
        self._stale = set()
        stale: list[BindRequestView] = []
        for key in filter(todo.__contains__, binds):  # the stale ones are worked out again: in the store's order
            br = binds[key]
            pod_key = _pod_key(br)
            self._pod_of[key] = pod_key
            self._of_pod.setdefault(pod_key, set()).add(key)
            pods_of_todo.add(pod_key)
            if self._is_live(br, pods.get(pod_key), names, problems):
                live.current[pod_key] = br
                continue
            self._stale.add(key)
            stale.append(br)
        changed = {pod for pod in pods_of_todo if live.previous.get(pod) is not live.current.get(pod)}
        return live.current, stale, changed

    @staticmethod
    def _is_live(br: BindRequestView, pod: PodView | None, nodes: frozenset[str], problems: list[Problem]) -> bool:
        if br.failed or pod is None or (br.pod_uid and br.pod_uid != pod.uid):
            return False
        if br.node not in nodes:
            if not pod.node_name:
                problems.append(Problem("task", pod.key, NODE_NOT_FOUND,
                                        f"BindRequest {br.key} selects node {br.node!r}, which does not exist; "
                                        "it is deleted and the pod is scheduled again"))
            return False
        return True


def _pod_key(br: BindRequestView) -> str:
    return f"{br.namespace}/{br.pod_name}"
