"""Fair-share division on random queue forests: native == pure, and KAI's invariants."""

from __future__ import annotations

import importlib
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai._native import division_py

U = -1

try:
    division_native = importlib.import_module("kai._native.division")
except ImportError:
    if os.environ.get("KAI_REQUIRE_EXTENSIONS") == "1":
        raise
    division_native = None

FIELDS = ("deserved", "max_allowed", "over_quota_weight", "priority", "request", "usage", "rank")


@st.composite
def forests(draw, integral=False):
    """Keyword arguments of ``divide_tree`` for a random forest with indices in random order.

    ``integral``: integer quotas and limits, requests in halves (fractional GPUs), which is where
    KAI's arithmetic keeps every queue within its limit.
    """
    n = draw(st.integers(1, 24))
    parent = [-1 if i == 0 else draw(st.integers(-1, i - 1)) for i in range(n)]
    label = draw(st.permutations(range(n)))
    parent = [-1 if p == -1 else label[p] for p in parent]
    parent = [parent[label.index(i)] for i in range(n)]
    if integral:
        amount = st.integers(0, 30)
        request = st.one_of(st.integers(0, 40), st.integers(0, 80).map(lambda x: x / 2))
    else:
        amount = st.one_of(st.integers(0, 30), st.floats(0, 30, allow_nan=False))
        request = amount
    unlimited_or = lambda s: st.one_of(st.just(U), s)  # noqa: E731
    kwargs = {
        "total": draw(st.one_of(st.integers(0, 200), st.floats(0, 200, allow_nan=False))),
        "parent": parent,
        "deserved": draw(st.lists(unlimited_or(amount), min_size=n, max_size=n)),
        "max_allowed": draw(st.lists(unlimited_or(amount), min_size=n, max_size=n)),
        "over_quota_weight": draw(st.lists(st.sampled_from([0, 1, 2, 3, 0.5, 7]), min_size=n, max_size=n)),
        "priority": draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
        "request": draw(st.lists(request, min_size=n, max_size=n)),
        "usage": draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)),
        "rank": draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)),
        "k_value": draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
    }
    return kwargs


def sibling_sets(kw):
    """(members in visiting order, amount they share) for every set of siblings, given the result."""
    fs = division_py.divide_tree(**kw)
    n = len(kw["parent"])
    order = sorted(range(n), key=lambda i: (kw["rank"][i], i))
    sets = [([i for i in order if kw["parent"][i] == -1], float(kw["total"]))]
    for p in range(n):
        children = [i for i in order if kw["parent"][i] == p]
        if children:
            sets.append((children, fs[p]))
    return fs, sets


def requestable(kw, i):
    limit, request = kw["max_allowed"][i], kw["request"][i]
    return request if limit == U else min(limit, request)


def deserved_phase(kw, members, amount):
    """What the deserved phase gives each member out of ``amount``, and what it leaves."""
    grants = [min(amount if kw["deserved"][i] == U else kw["deserved"][i], requestable(kw, i)) for i in members]
    remaining = amount
    for grant in grants:
        remaining -= grant
    return grants, remaining


@pytest.mark.skipif(division_native is None, reason="compiled kai._native.division is not built")
@settings(max_examples=400)
@given(forests())
def test_native_equals_pure(kw):
    assert division_native.divide_tree(**kw) == division_py.divide_tree(**kw)


@pytest.mark.skipif(division_native is None, reason="compiled kai._native.division is not built")
@settings(max_examples=400)
@given(forests())
def test_native_equals_pure_with_reasons(kw):
    assert division_native.divide_tree_explained(**kw) == division_py.divide_tree_explained(**kw)
    assert division_native.REASONS == division_py.REASONS


@settings(max_examples=300)
@given(forests())
def test_reasons_agree_with_the_shares(kw):
    fs, reasons = division_py.divide_tree_explained(**kw)
    assert fs == division_py.divide_tree(**kw)
    for i, (share, reason) in enumerate(zip(fs, reasons)):
        satisfied = requestable(kw, i) <= share
        assert satisfied == (reason in (division_py.REASON_REQUESTED, division_py.REASON_LIMIT))
        if reason == division_py.REASON_LIMIT:
            assert share >= kw["max_allowed"][i] != U
        if reason == division_py.REASON_NO_WEIGHT:
            assert kw["over_quota_weight"][i] == 0


@pytest.mark.skipif(division_native is None, reason="compiled kai._native.division is not built")
@settings(max_examples=200)
@given(forests())
def test_native_equals_pure_on_one_level(kw):
    args = {name: kw[name] for name in FIELDS}
    assert division_native.divide_level(kw["total"], k_value=kw["k_value"], **args) == division_py.divide_level(
        kw["total"], k_value=kw["k_value"], **args
    )


@settings(max_examples=300)
@given(forests(integral=True))
def test_no_queue_above_its_limit(kw):
    fs = division_py.divide_tree(**kw)
    for i, share in enumerate(fs):
        if kw["max_allowed"][i] != U:
            assert share <= kw["max_allowed"][i]
        if kw["request"][i] == int(kw["request"][i]):  # fractional requests can be overshot
            assert share <= kw["request"][i]


@settings(max_examples=300)
@given(forests())
def test_children_never_exceed_their_parents_share(kw):
    fs, sets = sibling_sets(kw)
    for members, amount in sets:
        grants, remaining = deserved_phase(kw, members, amount)
        if remaining <= 0:
            # Over-subscribed quotas: KAI pays every deserved grant, even beyond the amount, and
            # nothing else.
            assert [fs[i] for i in members] == grants
        else:
            assert math.fsum(fs[i] for i in members) <= amount * (1 + 1e-9) + 1e-9


@settings(max_examples=300)
@given(forests())
def test_deserved_always_honoured(kw):
    fs, sets = sibling_sets(kw)
    for members, amount in sets:
        grants, _ = deserved_phase(kw, members, amount)
        assert all(fs[i] >= grant for i, grant in zip(members, grants))


@settings(max_examples=300)
@given(forests(integral=True))
def test_nothing_left_while_a_weighted_queue_still_asks(kw):
    # Without the usage term (k_value 0); with it, a bucket whose queues all have high usage gets
    # no over-quota at all.
    kw["k_value"] = 0.0
    fs, sets = sibling_sets(kw)
    for members, amount in sets:
        _, remaining = deserved_phase(kw, members, amount)
        if remaining > 0 and math.fsum(fs[i] for i in members) < amount - 1e-9:
            for i in members:
                if kw["over_quota_weight"][i] > 0:
                    assert fs[i] >= requestable(kw, i) - 1e-9
