"""The compiled queue-order comparison against its pure-Python twin, on random queue pairs."""

from __future__ import annotations

import importlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai._native import queueorder_py

try:
    queueorder_native = importlib.import_module("kai._native.queueorder")
except ImportError:
    if os.environ.get("KAI_REQUIRE_EXTENSIONS") == "1":
        raise
    queueorder_native = None

# Small grids so that ties, exact quota boundaries, zero and unlimited shares all occur.
amount = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 8.0])
quota = st.one_of(st.just(-1.0), amount)


@st.composite
def sides(draw):
    vec = lambda s: draw(st.lists(s, min_size=3, max_size=3))  # noqa: E731
    return [vec(amount), vec(amount), vec(amount), draw(st.one_of(st.none(), st.just(vec(amount)))),
            vec(quota), vec(quota), draw(st.integers(0, 2))]


@pytest.mark.skipif(queueorder_native is None, reason="compiled kai._native.queueorder is not built")
@settings(max_examples=1500)
@given(sides(), sides(), st.lists(st.sampled_from([0.0, 4.0, 16.0]), min_size=3, max_size=3))
def test_native_equals_pure(left, right, totals):
    args = (*left, *right, totals)
    assert queueorder_native.compare(*args) == queueorder_py.compare(*args)


@settings(max_examples=500)
@given(sides(), sides(), st.lists(st.sampled_from([0.0, 4.0, 16.0]), min_size=3, max_size=3))
def test_antisymmetric(left, right, totals):
    assert queueorder_py.compare(*left, *right, totals) == -queueorder_py.compare(*right, *left, totals)


def test_rules_in_order():
    unlimited = [-1.0] * 3
    zero = [0.0] * 3

    def side(fair=(4, 4, 4), allocated=zero, request=zero, victims=None, deserved=(2, 2, 2), limit=unlimited,
             priority=0):
        return [list(fair), list(allocated), list(request), victims, list(deserved), list(limit), priority]

    totals = [16.0] * 3
    for impl in filter(None, (queueorder_py, queueorder_native)):
        def cmp(a, b):
            return impl.compare(*a, *b, totals)  # noqa: B023

        # 1. above fair share in every resource goes last, whatever the priority
        assert cmp(side(allocated=(5, 5, 5), priority=9), side()) == 1
        # 2. within deserved with the job goes first
        assert cmp(side(request=(3, 0, 0), priority=9), side(request=(1, 0, 0))) == 1
        # 3. higher priority
        assert cmp(side(priority=1), side()) == -1
        # 4. a zero allocatable share of a used resource goes last
        assert cmp(side(fair=zero, deserved=zero, request=(1, 0, 0)), side(request=(3, 0, 0))) == 1
        # 5. smaller dominant share with the job; victims count against it
        assert cmp(side(allocated=(1, 0, 0), request=(2, 0, 0)), side(request=(4, 0, 0))) == -1
        assert cmp(side(allocated=(3, 0, 0), request=(2, 0, 0), victims=[2.0, 0, 0]),
                   side(allocated=(1, 0, 0), request=(3, 0, 0))) == -1
        # 7. strictly smaller allocatable share first; 0 when every rule ties
        assert cmp(side(fair=(3, 3, 3)), side()) == -1
        assert cmp(side(), side()) == 0
