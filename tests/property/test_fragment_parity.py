"""The fragmentation measure: compiled against its pure-Python twin, and both against the plugin's definition."""

from __future__ import annotations

import importlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai._native import fragment_py
from kai.framework.shapes import NodeState, Shape
from kai.plugins.fragmentation.kernel import Measure, measure_rows
from kai.plugins.fragmentation.measure import fragmentation

try:
    fragment_native = importlib.import_module("kai._native.fragment")
except ImportError:
    if os.environ.get("KAI_REQUIRE_EXTENSIONS") == "1":
        raise
    fragment_native = None

GI = 2**30
MIG_1G, MIG_3G = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"
models = st.sampled_from([frozenset(), frozenset({"A100"}), frozenset({"A100", "V100"})])


@st.composite
def shapes(draw):
    head = {"cpu": draw(st.sampled_from([0.0, 1000.0, 2000.0, 8000.0, 32000.0, 96000.0])),
            "memory": float(draw(st.sampled_from([0, 1, 8, 32, 256])) * GI), "models": draw(models)}
    kind = draw(st.sampled_from(["gpus", "fraction", "gpu_memory_mib", "mig", "cpu only"]))
    if kind == "gpus":
        head[kind] = draw(st.sampled_from([1, 2, 4, 8]))
    elif kind == "fraction":
        head[kind] = draw(st.sampled_from([0.05, 0.1, 0.25, 0.3, 0.5, 0.6, 0.75, 0.99]))
    elif kind == "gpu_memory_mib":
        head[kind] = draw(st.sampled_from([1000, 16000, 20000, 50000, 90000]))
    elif kind == "mig":
        head[kind] = draw(st.sampled_from([MIG_1G, MIG_3G]))
    return Shape(**head)


@st.composite
def states(draw):
    slivers = tuple(sorted(draw(st.lists(st.sampled_from([0.05, 0.1, 0.3, 0.45, 0.5, 0.7, 0.95]), max_size=4))))
    mig = draw(st.sampled_from([(), ((MIG_1G, 2.0),), ((MIG_1G, 1.0), (MIG_3G, 1.0))]))
    return NodeState(draw(st.floats(0, 128000)), draw(st.floats(0, 1024 * GI)), float(draw(st.integers(0, 8))),
                     slivers, mig, draw(st.sampled_from(["", "A100", "T4"])),
                     draw(st.sampled_from([0.0, 16000.0, 40000.0, 81920.0])))


workloads = st.lists(st.tuples(shapes(), st.floats(0.01, 1.0)), min_size=1, max_size=12)
lookaheads = st.sampled_from([0.0, 0.5, 1.0, 0.37])
strandeds = st.sampled_from([0.0, 1.0, 4.0, 0.3])


@settings(max_examples=400, deadline=None)
@given(workloads, lookaheads, strandeds, st.lists(states(), min_size=1, max_size=5))
def test_the_fast_measure_is_the_definition(workload, lookahead, stranded, nodes):
    measure = Measure(workload, lookahead, stranded)
    for state in nodes:
        assert measure(state) == pytest.approx(fragmentation(state, workload, lookahead, stranded), rel=1e-12,
                                               abs=1e-12)


@pytest.mark.skipif(fragment_native is None, reason="compiled kai._native.fragment is not built")
@settings(max_examples=400, deadline=None)
@given(workloads, lookaheads, strandeds, st.lists(states(), min_size=1, max_size=5))
def test_native_equals_pure(workload, lookahead, stranded, nodes):
    needs, shape_rows = measure_rows(workload)
    pure = fragment_py.Measure(needs, shape_rows, lookahead, stranded)
    native = fragment_native.Measure(needs, shape_rows, lookahead, stranded)
    for s in nodes:
        args = (s.whole, s.slivers, s.mig, s.mig_gpus, s.model, s.cpu, s.memory, s.device_memory)
        assert native(*args) == pure(*args)


def test_a_shape_must_name_a_given_need():
    for impl in filter(None, (fragment_py, fragment_native)):
        with pytest.raises(ValueError, match="need 1"):
            impl.Measure([(fragment_py.WHOLE, 1, 0)], [(1, 1.0, 0.0, 0.0, frozenset())], 0.5)
