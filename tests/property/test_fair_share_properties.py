"""Fair shares of random queue trees through the proportion plugin, for GPU, CPU and memory.

Whatever the tree, quotas, limits, priorities, weights, historical usage and workloads:

* no queue's fair share is above its limit, at any level;
* the fair shares of siblings never add up to more than their parent's (the top level's: the
  cluster's total) -- except where the siblings' deserved quotas alone exceed it, in which case
  each keeps exactly its deserved grant and nothing more (KAI's rule);
* every queue gets at least ``min(deserved, requested, limit)`` (deserved -1 meaning everything
  its parent has).
"""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from kai import testing as kt
from kai.api import UNLIMITED, Queue, QuotaSpec
from kai.framework import PluginSpec, Session

RESOURCES = ("cpu", "memory", "gpu")  # the plugin's vector order
#: Units of each resource in base units (millicores, bytes, devices); quotas are whole multiples.
UNIT = {"cpu": 1000.0, "memory": 2.0**30, "gpu": 1.0}
TOL = 1e-6


@st.composite
def trees(draw):
    n = draw(st.integers(1, 12))
    names = [f"q{i}" for i in range(n)]
    queues = []
    for i, name in enumerate(names):
        parent = None if i == 0 or draw(st.booleans()) and i < 3 else names[draw(st.integers(0, i - 1))]
        specs = {}
        for res in RESOURCES:
            deserved = draw(st.one_of(st.just(UNLIMITED), st.integers(0, 12).map(float)))
            limit = draw(st.one_of(st.just(UNLIMITED), st.integers(0, 20).map(float)))
            if limit != UNLIMITED and deserved != UNLIMITED:
                limit = max(limit, deserved)
            elif limit != UNLIMITED:
                deserved = float(draw(st.integers(0, int(limit))))
            unit = UNIT[res]
            specs[res] = QuotaSpec(deserved if deserved == UNLIMITED else deserved * unit,
                                   limit if limit == UNLIMITED else limit * unit,
                                   float(draw(st.sampled_from([0, 1, 2, 3]))))
        queues.append(Queue(name, parent, draw(st.sampled_from([50, 100, 200])), creation=float(i), **specs))
    parents = {q.parent for q in queues}
    leaves = [q.name for q in queues if q.name not in parents]
    jobs = []
    nodes = [kt.node(f"n{i}", gpus=draw(st.integers(0, 8)), cpu=draw(st.sampled_from([8000, 32000])),
                     memory=draw(st.sampled_from([16, 64])) * 2**30) for i in range(draw(st.integers(1, 4)))]
    for k in range(draw(st.integers(0, 10))):
        node = nodes[draw(st.integers(0, len(nodes) - 1))]
        running = draw(st.booleans())
        jobs.append(kt.job(f"j{k}", draw(st.sampled_from(leaves)), tasks=draw(st.integers(1, 4)),
                           gpus=draw(st.integers(0, 2)), cpu=draw(st.sampled_from([0, 1000, 2000])),
                           memory=draw(st.sampled_from([0, 2**30])), status="Running" if running else "Pending",
                           node=node.name if running else None))
    usage = {q.name: tuple(draw(st.floats(0, 1)) for _ in RESOURCES) for q in queues if draw(st.booleans())}
    return nodes, queues, jobs, usage, draw(st.sampled_from([0.0, 1.0, 2.0]))


def shares_of(data):
    nodes, queues, jobs, usage, k_value = data
    snap = kt.cluster(nodes, queues, jobs)
    assert snap.problems == []
    snap.usage = usage
    session = Session(snap, kt.plugin_manager([PluginSpec("proportion", {"kValue": k_value})])).open()
    plugin = session.plugins.plugin("proportion")
    return session, plugin.shares, plugin.totals


def sibling_sets(session, shares, totals, r):
    """(sibling shares in creation order, what they divide) for the top level and every parent."""
    yield [shares[q.name] for q in session.children.get(None, [])], totals[r]
    for name, qs in shares.items():
        children = session.children.get(name)
        if children:
            yield [shares[q.name] for q in children], qs.fair_share[r]


def grant(qs, r, amount):
    deserved = amount if qs.deserved[r] == UNLIMITED else qs.deserved[r]
    requestable = qs.request[r] if qs.limit[r] == UNLIMITED else min(qs.limit[r], qs.request[r])
    return min(deserved, requestable)


@given(trees())
def test_no_queue_above_its_limit(data):
    _, shares, _ = shares_of(data)
    for qs in shares.values():
        for r in range(3):
            if qs.limit[r] != UNLIMITED:
                assert qs.fair_share[r] <= qs.limit[r] + TOL, (qs.name, RESOURCES[r])


@given(trees())
def test_siblings_never_share_more_than_their_parent(data):
    session, shares, totals = shares_of(data)
    for r in range(3):
        for siblings, amount in sibling_sets(session, shares, totals, r):
            grants = [grant(qs, r, amount) for qs in siblings]
            if math.fsum(grants) >= amount:
                assert [qs.fair_share[r] for qs in siblings] == grants
            else:
                assert math.fsum(qs.fair_share[r] for qs in siblings) <= amount * (1 + 1e-12) + TOL


@given(trees())
def test_deserved_quota_is_honoured_when_requested(data):
    session, shares, totals = shares_of(data)
    for r in range(3):
        for siblings, amount in sibling_sets(session, shares, totals, r):
            for qs in siblings:
                assert qs.fair_share[r] >= grant(qs, r, amount) - TOL, (qs.name, RESOURCES[r])


@given(trees())
def test_requests_add_up_the_tree(data):
    session, shares, _ = shares_of(data)
    for name, qs in shares.items():
        children = session.children.get(name)
        if children:
            for r in range(3):
                assert math.isclose(qs.request[r], math.fsum(shares[c.name].request[r] for c in children),
                                    rel_tol=1e-9, abs_tol=1e-9)
