"""The live BindRequests kept from update to update equal those worked out afresh, whatever changed."""

from __future__ import annotations

import random

import pytest

from kai.scheduler import views
from kai.scheduler.bindrequests import LiveBindRequests


def bind_request(name: str, pod: str, node: str, uid: str = "", failed: bool = False):
    status = {"phase": "Failed", "failedAttempts": 9} if failed else {}
    return views.bindrequest_view({
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{"kind": "Pod", "uid": uid}] if uid else []},
        "spec": {"podName": pod, "selectedNode": node, "backoffLimit": 1}, "status": status})


def pod(name: str, uid: str, node: str = ""):
    return views.pod_view({"metadata": {"name": name, "namespace": "ns", "uid": uid},
                           "spec": {"schedulerName": "kai-scheduler", "nodeName": node,
                                    "containers": [{"resources": {}}]}, "status": {"phase": "Pending"}})


@pytest.mark.parametrize("seed", range(6))
def test_live_bind_requests_kept_across_updates_equal_a_fresh_reading(seed):
    rng = random.Random(seed)
    kept = LiveBindRequests()
    binds: dict = {}
    pods: dict = {}
    nodes = {"n1": 1, "n2": 1}
    last_live: dict = {}
    serial = 0
    for step in range(80):
        touched: set[str] = set()
        pods_touched: set[str] = set()
        for _ in range(rng.randint(0, 4)):
            serial += 1
            move = rng.randrange(6)
            name = f"p{rng.randrange(6)}"
            if move == 0:  # a pod made again, or bound to a node
                pods[f"ns/{name}"] = pod(name, f"u{serial}", rng.choice(["", "n1"]))
                pods_touched.add(f"ns/{name}")
            elif move == 1 and f"ns/{name}" in pods:
                del pods[f"ns/{name}"]
                pods_touched.add(f"ns/{name}")
            elif move == 2:  # a BindRequest, a second one for the same pod at times
                key = f"ns/b{rng.randrange(8)}"
                uid = pods[f"ns/{name}"].uid if f"ns/{name}" in pods and rng.random() < 0.7 else ""
                binds[key] = bind_request(key[3:], name, rng.choice(["n1", "n2", "gone"]), uid, rng.random() < 0.1)
                touched.add(key)
            elif move == 3 and binds:
                key = rng.choice(sorted(binds))
                del binds[key]
                touched.add(key)
            elif move == 4:  # a node comes or goes
                node = rng.choice(["n2", "n3"])
                if node in nodes:
                    del nodes[node]
                else:
                    nodes[node] = 1
            else:  # a BindRequest moved to the end of the store (deleted and made again)
                if binds:
                    key = rng.choice(sorted(binds))
                    binds[key] = binds.pop(key)
                    touched.add(key)
        problems: list = []
        live, stale, changed = kept.update(dict(binds), touched, pods, pods_touched, dict(nodes), problems)
        fresh_problems: list = []
        fresh_live, fresh_stale, _ = LiveBindRequests().update(dict(binds), set(), pods, set(), dict(nodes),
                                                              fresh_problems)
        assert live == fresh_live and [b.key for b in stale] == [b.key for b in fresh_stale], step
        assert problems == fresh_problems, step
        assert changed >= {p for p in last_live.keys() | live.keys() if last_live.get(p) is not live.get(p)}, step
        last_live = dict(live)
        kept.live.turn()  # the cycle is built
