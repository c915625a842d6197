"""The ``fragmentation`` plugin: the measure on hand-computed nodes, its scores, and placements."""

from pathlib import Path

import pytest

from kai import testing as kt
from kai.api.resources import ResourceRequest
from kai.framework import Plugins, load_config
from kai.framework.plugins import discover
from kai.plugins.fragmentation import Fragmentation, NodeState, Shape, build, fragmentation, parse_workload

GI = 2**30
ONE_GPU = Shape(cpu=8000, memory=32 * GI, gpus=1)
HALF_GPU = Shape(cpu=2000, memory=8 * GI, fraction=0.5)
CPU_ONLY = Shape(cpu=4000, memory=16 * GI)


def test_a_node_every_shape_fits_has_no_fragmentation():
    node = NodeState(cpu=32000, memory=128 * GI, whole=2)
    assert fragmentation(node, [(ONE_GPU, 0.5), (HALF_GPU, 0.3), (CPU_ONLY, 0.2)]) == 0.0


def test_slivers_too_small_for_a_shape_are_fragment():
    node = NodeState(cpu=32000, memory=128 * GI, whole=1, slivers=(0.3, 0.6))
    # A whole-GPU task can use only the free device: both slivers (0.9) are lost to it.
    assert fragmentation(node, [(ONE_GPU, 1.0)]) == pytest.approx(0.9)
    # Half-GPU tasks fill the free device twice and the 0.6 sliver once: 0.3 + 0.1 are left over.
    assert fragmentation(node, [(HALF_GPU, 1.0)]) == pytest.approx(0.4)
    # Weighted by the shapes' probabilities.
    assert fragmentation(node, [(ONE_GPU, 0.25), (HALF_GPU, 0.75)]) == pytest.approx(0.25 * 0.9 + 0.75 * 0.4)


def test_a_shape_that_cannot_fit_at_all_loses_every_free_gpu():
    node = NodeState(cpu=32000, memory=128 * GI, whole=0, slivers=(0.4,))
    assert fragmentation(node, [(HALF_GPU, 1.0)]) == pytest.approx(0.4)  # no device has 0.5 free
    two = Shape(cpu=1000, memory=GI, gpus=2)
    assert fragmentation(NodeState(32000, 128 * GI, whole=1), [(two, 1.0)]) == pytest.approx(1.0)


def test_free_gpus_on_a_cpu_or_memory_starved_node_are_stranded():
    cpu_starved = NodeState(cpu=4000, memory=128 * GI, whole=2)
    mem_starved = NodeState(cpu=32000, memory=16 * GI, whole=2)
    for node in (cpu_starved, mem_starved):
        assert fragmentation(node, [(ONE_GPU, 1.0)]) == pytest.approx(2.0)
        # CPU-only shapes take no GPU: they add nothing themselves.
        assert fragmentation(node, [(Shape(cpu=64000, memory=256 * GI), 1.0)]) == 0.0


def test_gpus_the_cpu_cannot_feed_are_fragment_before_the_cpu_runs_out():
    # 8 free GPUs but CPU for two 8-core GPU tasks: 6 GPUs will be stranded (the paper's measure says 0).
    node = NodeState(cpu=20000, memory=512 * GI, whole=8)
    assert fragmentation(node, [(ONE_GPU, 1.0)]) == pytest.approx(6.0)
    assert fragmentation(node, [(HALF_GPU, 1.0)]) == pytest.approx(8.0 - 10 * 0.5)


def test_gpu_model_and_mig():
    t4 = NodeState(cpu=32000, memory=128 * GI, whole=2, model="T4")
    assert fragmentation(t4, [(Shape(cpu=1000, gpus=1, models=frozenset({"A100"})), 1.0)]) == pytest.approx(2.0)
    assert fragmentation(t4, [(Shape(cpu=1000, gpus=1, models=frozenset({"T4"})), 1.0)]) == 0.0
    mig = NodeState(cpu=32000, memory=128 * GI, whole=1, mig=(("nvidia.com/mig-1g.10gb", 2.0),))
    # Whole-GPU tasks cannot use MIG slices; a 1g task can, and then only the whole device is left over.
    assert fragmentation(mig, [(Shape(cpu=1000, gpus=1), 1.0)]) == pytest.approx(2.0)
    assert fragmentation(mig, [(Shape(cpu=1000, mig="nvidia.com/mig-1g.10gb"), 1.0)]) == pytest.approx(1.0)
    assert fragmentation(mig, [(Shape(cpu=1000, mig="nvidia.com/mig-3g.40gb"), 1.0)]) == pytest.approx(3.0)


def test_a_gpu_memory_shape_is_a_fraction_of_the_node_s_devices():
    shape = Shape(cpu=1000, gpu_memory_mib=20000)
    assert fragmentation(NodeState(32000, 128 * GI, whole=1, slivers=(0.3,), device_memory=40000),
                         [(shape, 1.0)]) == pytest.approx(0.3)  # half a device: two fit the free one
    assert fragmentation(NodeState(32000, 128 * GI, whole=1, device_memory=16000), [(shape, 1.0)]) == 1.0


def test_workload_argument_is_checked():
    workload = parse_workload([{"cpu": 8, "memory": "32Gi", "gpus": 1, "weight": 3},
                               {"cpu": "2000m", "memory": "8Gi", "gpu_fraction": 0.5}])
    assert workload == [(ONE_GPU, 0.75), (HALF_GPU, 0.25)]
    assert parse_workload([{"gpu_memory": "20Gi"}]) == [(Shape(gpu_memory_mib=20480), 1.0)]
    for bad in ([], [{"cpu": "lots"}], [{"gpus": 1, "gpu_fraction": 0.5}], [{"weight": 0}], [{"gpu": 1}],
                [{"gpu_fraction": 0.5, "gpu_memory": "1Gi"}],
                [{"mig": "1g"}]):
        with pytest.raises(ValueError):
            parse_workload(bad)
    with pytest.raises(ValueError, match="window"):
        build({"window": 0})


def test_the_plugin_is_found_through_its_entry_point():
    assert discover()["fragmentation"].value == "kai.plugins.fragmentation:build"
    plugins = kt.plugin_manager(["predicates", kt.PluginSpec("fragmentation", {"window": 10})])
    plugin = plugins.plugin("fragmentation")
    assert isinstance(plugin, Fragmentation) and plugin.window == 10


def test_the_example_config_enables_it_in_place_of_kai_s_placement():
    config = load_config(Path(__file__).parents[2] / "examples" / "configs" / "fragmentation.yaml")
    names = [s.name for s in config.plugins]
    assert "fragmentation" in names and not {"nodeplacement", "gpupack", "gpusharingorder"} & set(names)
    assert isinstance(Plugins(config).plugin("fragmentation"), Fragmentation)


def scores(plugin, task, session, names):
    nodes = [session.node_by_name[n] for n in names]
    return dict(zip(names, plugin.kai_node_scores(task=task, nodes=nodes)))


def test_node_score_prefers_the_node_whose_fragmentation_grows_least():
    fixed = {"workload": [{"cpu": 8, "memory": "32Gi", "gpus": 1}]}
    snap = kt.cluster(nodes=[kt.node("small", gpus=1, cpu=8000), kt.node("big", gpus=1, cpu=32000)],
                      jobs=[kt.job("prep", cpu=4000, memory=GI)])
    session = kt.run(snap, plugins=["predicates", kt.PluginSpec("fragmentation", fixed)], actions=())
    plugin = session.plugins.plugin("fragmentation")
    task = session.jobs[next(iter(session.jobs))].tasks["prep-0"]
    got = scores(plugin, task, session, ["small", "big"])
    # On "small" the CPU-only task strands its GPU for the 8-core GPU tasks: growth 1 GPU, score -10.
    assert got["small"] == pytest.approx(-10.0, abs=0.01)
    assert got["big"] == pytest.approx(0.0, abs=0.01)


def test_shared_task_joins_the_device_it_fills():
    snap = kt.cluster(
        nodes=[kt.node("n", gpus=2, gpu_memory_mib=1000)],
        jobs=[kt.job("run", status="Running", node="n", gpu_groups=("g1",),
                     request=ResourceRequest(cpu=1000, memory=GI, gpu_fraction=0.6)),
              kt.job("new", request=ResourceRequest(cpu=1000, memory=GI, gpu_fraction=0.4))],
    )
    fixed = {"workload": [{"cpu": 1, "memory": "1Gi", "gpu_fraction": 0.5}]}
    session = kt.run(snap, plugins=["predicates", kt.PluginSpec("fragmentation", fixed)], actions=())
    plugin = session.plugins.plugin("fragmentation")
    task = next(t for j in session.jobs.values() for t in j.tasks.values() if t.name == "new-0")
    node = session.node_by_name["n"]
    # Before: half-GPU tasks fit twice on the free device, not on the 0.4 sliver: 0.4 is fragment.
    # Filling the sliver leaves the free device (fragment 0, growth -0.4); opening the free device leaves
    # slivers 0.4 and 0.6, one half-GPU task (fragment 0.5, growth +0.1).
    assert plugin.kai_gpu_scores(task=task, node=node, groups=["g1", None]) == pytest.approx([4.0, -1.0])


def snapshot():
    return kt.cluster(
        nodes=[kt.node("a", gpus=1, cpu=8000), kt.node("b", gpus=1, cpu=32000)],
        jobs=[kt.job("prep", cpu=4000, priority=50), kt.job("train1", gpus=1, cpu=8000, priority=40),
              kt.job("train2", gpus=1, cpu=8000, priority=30)],
    )


@pytest.mark.parametrize("arguments", [{}, {"workload": [{"cpu": 8, "memory": "1Gi", "gpus": 1}]}])
def test_fragmentation_keeps_a_gpu_placeable_that_binpack_strands(arguments):
    binpack = kt.placements(kt.run(snapshot(), plugins=["predicates", "priority", "nodeplacement"]))
    assert binpack == {"prep-0": "a", "train1-0": "b"}  # a's GPU is left without the CPU to use it

    frag = kt.placements(kt.run(snapshot(), plugins=["predicates", "priority",
                                                     kt.PluginSpec("fragmentation", arguments)]))
    assert frag["prep-0"] == "b" and {frag["train1-0"], frag["train2-0"]} == {"a", "b"}


@pytest.mark.parametrize("replicas, placed", [(2, 2), (3, 0)])
def test_gangs_stay_all_or_nothing(replicas, placed):
    snap = kt.cluster(nodes=[kt.node("a", gpus=1, cpu=8000), kt.node("b", gpus=1, cpu=32000)],
                      jobs=[kt.job("gang", tasks=replicas, gpus=1, cpu=4000)])
    session = kt.run(snap, plugins=["predicates", "proportion", kt.PluginSpec("fragmentation")])
    assert len(kt.placements(session)) == placed
