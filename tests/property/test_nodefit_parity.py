"""The compiled node-fit kernels against their pure-Python twin, on random arrays."""

from __future__ import annotations

import importlib
import os
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai import _native
from kai._native import nodefit_py

REQUIRE = os.environ.get("KAI_REQUIRE_EXTENSIONS") == "1"

try:
    nodefit_native = importlib.import_module("kai._native.nodefit")
except ImportError:
    if REQUIRE:
        raise
    nodefit_native = None

needs_native = pytest.mark.skipif(nodefit_native is None, reason="compiled nodefit not built")

# Amounts on a coarse grid plus exact boundaries, so "fits exactly" and "just misses" both occur.
amount = st.one_of(st.integers(0, 8).map(float), st.sampled_from([0.5, 1e-10, 2.0 - 1e-10, 3.0 + 1e-8]))


@st.composite
def fit_inputs(draw):
    n = draw(st.integers(0, 12))
    arrays = [array("d", draw(st.lists(amount, min_size=n, max_size=n))) for _ in range(8)]
    candidates = array("i", draw(st.lists(st.integers(0, n - 1), max_size=2 * n)) if n else [])
    request = [draw(amount) for _ in range(4)]
    return arrays, candidates, request


@needs_native
@settings(max_examples=300)
@given(fit_inputs())
def test_fit_nodes_native_equals_pure(inputs):
    arrays, candidates, request = inputs
    out_native = array("b", bytes(len(candidates)))
    out_pure = array("b", bytes(len(candidates)))
    n_native = nodefit_native.fit_nodes(*arrays, candidates, *request, out_native)
    n_pure = nodefit_py.fit_nodes(*arrays, candidates, *request, out_pure)
    assert (n_native, list(out_native)) == (n_pure, list(out_pure))
    assert n_pure == sum(1 for v in out_pure if v)


@needs_native
def test_fit_nodes_native_refuses_what_it_cannot_read():
    arrays = [array("d", [1.0, 1.0]) for _ in range(8)]
    out = array("b", bytes(1))
    with pytest.raises(IndexError):
        nodefit_native.fit_nodes(*arrays, array("i", [2]), 0.0, 0.0, 0.0, 1.0, out)
    with pytest.raises(ValueError):
        nodefit_native.fit_nodes(*arrays[:7], array("f", [1.0, 1.0]), array("i", [0]), 0.0, 0.0, 0.0, 1.0, out)
    with pytest.raises(ValueError):
        nodefit_native.fit_nodes(*arrays, array("i", [0, 1]), 0.0, 0.0, 0.0, 1.0, out)  # out too short


@st.composite
def score_inputs(draw):
    n = draw(st.integers(0, 12))
    free = array("d", draw(st.lists(amount, min_size=n, max_size=n)))
    totals = array("d", draw(st.lists(st.one_of(st.just(0.0), amount), min_size=n, max_size=n)))
    return free, totals, draw(st.booleans()), draw(st.sampled_from([1.0, 9.0, 100.0]))


@needs_native
@settings(max_examples=300)
@given(score_inputs())
def test_placement_scores_native_equals_pure(inputs):
    free, totals, spread, max_score = inputs
    out_native = array("d", bytes(8 * len(free)))
    out_pure = array("d", bytes(8 * len(free)))
    nodefit_native.placement_scores(free, totals, spread, max_score, out_native)
    nodefit_py.placement_scores(free, totals, spread, max_score, out_pure)
    assert list(out_native) == pytest.approx(list(out_pure), rel=1e-12, abs=1e-12)


@pytest.mark.skipif(not REQUIRE, reason="only when KAI_REQUIRE_EXTENSIONS=1")
@pytest.mark.parametrize("name", ["nodefit", "division", "queueorder"])
def test_compiled_module_is_loaded_when_required(name, monkeypatch):
    monkeypatch.delenv("KAI_NO_EXTENSIONS", raising=False)
    module = _native.load(name)
    assert module.__name__ == f"kai._native.{name}"
    assert name in _native.NATIVE_LOADED
    assert module.__file__.endswith((".so", ".pyd")), f"{name} is not the compiled module: {module.__file__}"


@pytest.mark.skipif(not REQUIRE, reason="only when KAI_REQUIRE_EXTENSIONS=1")
def test_kernel_runs_on_the_compiled_modules_when_required():
    import kai.framework as framework

    assert framework.nodefit.__name__ == "kai._native.nodefit"
    assert framework.divide_tree.__module__ == "kai._native.division"
    assert framework.queue_order_compare.__module__ == "kai._native.queueorder"
