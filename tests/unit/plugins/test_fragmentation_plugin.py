"""The ``fragmentation`` plugin: the measure on hand-computed nodes, its scores, and placements."""

from collections import Counter
from pathlib import Path

import attrs
import pytest

from kai import testing as kt
from kai.api import TaskStatus
from kai.api.resources import ResourceRequest
from kai.framework import Plugins, load_config
from kai.framework.shapes import NodeState, Shape, parse_workload
from kai.plugin_loader import discover
from kai.plugins.fragmentation.measure import fragmentation, scarcity
from kai.plugins.fragmentation.plugin import Fragmentation, build, covering

GI = 2**30
ONE_GPU = Shape(cpu=8000, memory=32 * GI, gpus=1)
HALF_GPU = Shape(cpu=2000, memory=8 * GI, fraction=0.5)
CPU_ONLY = Shape(cpu=4000, memory=16 * GI)


def parts(node, workload):
    """(next-task part, filled-node part) of the node's fragmentation."""
    now = fragmentation(node, workload, lookahead=0.0, stranded=0.0)
    return now, fragmentation(node, workload, lookahead=1.0, stranded=0.0) - now


def test_a_node_every_shape_fits_has_no_fragmentation():
    node = NodeState(cpu=32000, memory=128 * GI, whole=2)
    assert parts(node, [(ONE_GPU, 0.5), (HALF_GPU, 0.3), (CPU_ONLY, 0.2)]) == (0.0, 0.0)


def test_slivers_too_small_for_a_shape_are_fragment():
    node = NodeState(cpu=32000, memory=128 * GI, whole=1, slivers=(0.3, 0.6))
    # A whole-GPU task can use only the free device: both slivers (0.9) are lost to it, now and when filled.
    assert parts(node, [(ONE_GPU, 1.0)]) == pytest.approx((0.9, 0.9))
    # The next half-GPU task can use the free device or the 0.6 sliver: only the 0.3 sliver is lost to it.
    # Filled with half-GPU tasks (the free device twice, the 0.6 sliver once) 0.3 + 0.1 are left over.
    assert parts(node, [(HALF_GPU, 1.0)]) == pytest.approx((0.3, 0.4))
    # Weighted by the shapes' probabilities, the filled-node part by the look-ahead.
    assert fragmentation(node, [(ONE_GPU, 0.25), (HALF_GPU, 0.75)], lookahead=0.5) == pytest.approx(
        0.25 * (0.9 + 0.45) + 0.75 * (0.3 + 0.2))


def test_a_shape_that_cannot_fit_at_all_loses_every_free_gpu():
    node = NodeState(cpu=32000, memory=128 * GI, whole=0, slivers=(0.4,))
    assert parts(node, [(HALF_GPU, 1.0)]) == pytest.approx((0.4, 0.4))  # no device has 0.5 free
    two = Shape(cpu=1000, memory=GI, gpus=2)
    assert parts(NodeState(32000, 128 * GI, whole=1), [(two, 1.0)]) == pytest.approx((1.0, 1.0))


def test_free_gpus_on_a_cpu_or_memory_starved_node_are_stranded():
    cpu_starved = NodeState(cpu=4000, memory=128 * GI, whole=2)
    mem_starved = NodeState(cpu=32000, memory=16 * GI, whole=2)
    for node in (cpu_starved, mem_starved):
        assert parts(node, [(ONE_GPU, 1.0)]) == pytest.approx((2.0, 2.0))
        # CPU-only shapes take no GPU: they add nothing themselves.
        assert parts(node, [(Shape(cpu=64000, memory=256 * GI), 1.0)]) == (0.0, 0.0)


def test_gpus_the_cpu_cannot_feed_are_fragment_before_the_cpu_runs_out():
    # 8 free GPUs but CPU for two 8-core GPU tasks: the next task fits (next-task part 0), but 6 GPUs will
    # be stranded once the node is filled.
    node = NodeState(cpu=20000, memory=512 * GI, whole=8)
    assert parts(node, [(ONE_GPU, 1.0)]) == pytest.approx((0.0, 6.0))
    assert parts(node, [(HALF_GPU, 1.0)]) == pytest.approx((0.0, 8.0 - 10 * 0.5))


def test_gpu_model_and_mig():
    t4 = NodeState(cpu=32000, memory=128 * GI, whole=2, model="T4")
    assert parts(t4, [(Shape(cpu=1000, gpus=1, models=frozenset({"A100"})), 1.0)]) == pytest.approx((2.0, 2.0))
    assert parts(t4, [(Shape(cpu=1000, gpus=1, models=frozenset({"T4"})), 1.0)]) == (0.0, 0.0)
    mig = NodeState(cpu=32000, memory=128 * GI, whole=1, mig=(("nvidia.com/mig-1g.10gb", 2.0),))
    # Whole-GPU tasks cannot use MIG slices; a 1g task can, and then only the whole device is left over.
    assert parts(mig, [(Shape(cpu=1000, gpus=1), 1.0)]) == pytest.approx((2.0, 2.0))
    assert parts(mig, [(Shape(cpu=1000, mig="nvidia.com/mig-1g.10gb"), 1.0)]) == pytest.approx((1.0, 1.0))
    assert parts(mig, [(Shape(cpu=1000, mig="nvidia.com/mig-3g.40gb"), 1.0)]) == pytest.approx((3.0, 3.0))


def test_a_gpu_memory_shape_is_a_fraction_of_the_node_s_devices():
    shape = Shape(cpu=1000, gpu_memory_mib=20000)
    # Half a device: the next task fits the free device, two fill it; the 0.3 sliver is lost either way.
    assert parts(NodeState(32000, 128 * GI, whole=1, slivers=(0.3,), device_memory=40000),
                 [(shape, 1.0)]) == pytest.approx((0.3, 0.3))
    assert parts(NodeState(32000, 128 * GI, whole=1, device_memory=16000), [(shape, 1.0)]) == (1.0, 1.0)


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
    with pytest.raises(ValueError, match="lookahead"):
        build({"lookahead": -1})
    for bad in ({"coverage": 0}, {"coverage": 1.5}, {"resolution": -0.1}, {"resolution": "fine"}):
        with pytest.raises(ValueError, match="coverage"):
            build(bad)
    for bad in ({"scarcity": 0.5}, {"scarcity": "high"}):
        with pytest.raises(ValueError, match="scarcity"):
            build(bad)
    for bad in ({"stranded": -1}, {"stranded": "much"}):
        with pytest.raises(ValueError, match="stranded"):
            build(bad)


def test_the_plugin_is_found_through_its_entry_point():
    assert discover()["fragmentation"].value == "kai.plugins.fragmentation.plugin:build"
    plugins = kt.plugin_manager(["predicates", kt.PluginSpec("fragmentation", {"window": 10})])
    plugin = plugins.plugin("fragmentation")
    assert isinstance(plugin, Fragmentation) and plugin.window == 10


def test_the_example_config_enables_it_in_place_of_kai_s_placement():
    config = load_config(Path(__file__).parents[3] / "examples" / "configs" / "fragmentation.yaml")
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
    # On "small" the CPU-only task strands its GPU for the 8-core GPU tasks, for the next one and once filled:
    # growth 1 + 0.5 x 1 GPU (look-ahead 0.5), score -15.
    assert got["small"] == pytest.approx(-15.0, abs=0.01)
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
    # Before: the 0.4 sliver is lost to half-GPU tasks, now and once filled: 0.4 + 0.5 x 0.4 = 0.6.
    # Filling the sliver leaves the free device (fragment 0, growth -0.6); opening the free device leaves
    # slivers 0.4 and 0.6: 0.4 lost to the next task, 0.4 + 0.1 once filled (0.65, growth +0.05).
    assert plugin.kai_gpu_scores(task=task, node=node, groups=["g1", None]) == pytest.approx([6.0, -0.5])


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


def test_the_workload_is_learned_from_jobs_joining_an_open_session():
    snap = kt.cluster(nodes=[kt.node("a", gpus=1, cpu=8000)], queues=[kt.queue("default")])
    session = kt.run(snap, plugins=["predicates", kt.PluginSpec("fragmentation")], actions=())
    plugin = session.plugins.plugin("fragmentation")
    assert plugin.workload == []
    session.add_job(kt.job("train", gpus=1, cpu=8000, memory=32 * GI))
    assert plugin.workload == [(ONE_GPU, 1.0)]
    for k in range(3):
        session.add_job(kt.job(f"prep{k}", cpu=4000, memory=16 * GI))
    assert plugin.workload == [(CPU_ONLY, 0.75), (ONE_GPU, 0.25)]


@pytest.mark.parametrize("window, memory", [(2000, 32 * GI), (2, 40 * GI)])
def test_tasks_differing_only_in_memory_are_one_shape_with_their_mean_memory(window, memory):
    snap = kt.cluster(nodes=[kt.node("a", gpus=1, cpu=8000)], queues=[kt.queue("default")])
    session = kt.run(snap, plugins=["predicates", kt.PluginSpec("fragmentation", {"window": window})], actions=())
    plugin = session.plugins.plugin("fragmentation")
    for k, m in enumerate((16, 32, 48)):
        session.add_job(kt.job(f"train{k}", gpus=1, cpu=8000, memory=m * GI))
    # One shape, its memory the mean over the window (a window of 2 forgot the first task).
    assert plugin.workload == [(attrs.evolve(ONE_GPU, memory=memory), 1.0)]


def test_the_most_frequent_shapes_are_kept_until_they_cover_the_share_asked():
    counts = Counter({ONE_GPU: 6, HALF_GPU: 3, CPU_ONLY: 1})
    assert covering(counts, 0.9, 48) == [(ONE_GPU, 6 / 9), (HALF_GPU, 3 / 9)]
    assert covering(counts, 0.95, 48) == [(ONE_GPU, 0.6), (HALF_GPU, 0.3), (CPU_ONLY, 0.1)]
    assert covering(counts, 0.95, 1) == [(ONE_GPU, 1.0)]  # at most max_shapes
    assert covering(Counter(), 0.95, 48) == []
    # Learned from arrivals: the rare shape is left out.
    snap = kt.cluster(nodes=[kt.node("a", gpus=1, cpu=8000)], queues=[kt.queue("default")])
    session = kt.run(snap, plugins=["predicates", kt.PluginSpec("fragmentation", {"coverage": 0.9})], actions=())
    for k in range(6):
        session.add_job(kt.job(f"train{k}", gpus=1, cpu=8000, memory=32 * GI))
    for k in range(3):
        session.add_job(kt.job(f"infer{k}", request=ResourceRequest(cpu=2000, memory=8 * GI, gpu_fraction=0.5)))
    session.add_job(kt.job("prep", cpu=4000, memory=16 * GI))
    assert session.plugins.plugin("fragmentation").workload == [(ONE_GPU, 6 / 9), (HALF_GPU, 3 / 9)]


def test_nodes_whose_growth_differs_by_less_than_the_resolution_tie():
    # Mostly 1-GPU tasks, a few 2-GPU ones: a 1-GPU task on the 3-GPU node leaves a pair free (growth -0.005 GPU),
    # on the 2-GPU node it breaks the pair (+0.015). Within the default resolution (0.1 GPU) both score the same;
    # the kernel's order among equal scores decides.
    workload = [{"cpu": 1, "gpus": 1, "weight": 99}, {"cpu": 1, "gpus": 2, "weight": 1}]
    snap = kt.cluster(nodes=[kt.node("a", gpus=3, cpu=32000), kt.node("b", gpus=2, cpu=32000)],
                      jobs=[kt.job("train", gpus=1, cpu=1000)])
    for arguments, expected in (({}, {"a": 0.0, "b": 0.0}), ({"resolution": 0}, {"a": 0.05, "b": -0.15})):
        session = kt.run(snap, plugins=["predicates", kt.PluginSpec(
            "fragmentation", {"workload": workload, **arguments})], actions=())
        plugin = session.plugins.plugin("fragmentation")
        task = session.jobs[next(iter(session.jobs))].tasks["train-0"]
        assert scores(plugin, task, session, ["a", "b"]) == pytest.approx(expected, abs=1e-9)


def test_nodes_are_alike_unless_a_shape_names_gpu_models():
    assert build({"workload": [{"cpu": 8, "gpus": 1}]}).kai_nodes_alike() is True
    assert build({"workload": [{"cpu": 8, "gpus": 1, "models": ["T4"]}]}).kai_nodes_alike() is False
    assert build({"workload": [{"cpu": 1, "gpu_memory": "20Gi"}]}).kai_nodes_alike() is False


def test_scores_follow_a_node_whose_amounts_changed():
    fixed = {"workload": [{"cpu": 8, "memory": "32Gi", "gpus": 1}]}
    snap = kt.cluster(nodes=[kt.node("a", gpus=2, cpu=16000), kt.node("b", gpus=2, cpu=16000)],
                      jobs=[kt.job("prep", cpu=8000, memory=GI), kt.job("train", gpus=1, cpu=8000)])
    session = kt.run(snap, plugins=["predicates", kt.PluginSpec("fragmentation", fixed)], actions=())
    plugin = session.plugins.plugin("fragmentation")
    tasks = {t.name: t for j in session.jobs.values() for t in j.tasks.values()}
    before = scores(plugin, tasks["prep-0"], session, ["a", "b"])
    assert before["a"] == before["b"]
    version = session.node_by_name["a"].arrays.version[session.node_by_name["a"].index]
    session.node_by_name["a"].add_task(attrs.evolve(tasks["train-0"], status=TaskStatus.ALLOCATED, node="a"))
    assert session.node_by_name["a"].arrays.version[session.node_by_name["a"].index] > version
    # With a GPU task on it, "a" has CPU for its last GPU only: the CPU-only task would strand it there.
    after = scores(plugin, tasks["prep-0"], session, ["a", "b"])
    assert after["b"] == before["b"] and after["a"] == pytest.approx(-15.0, abs=0.01)


def test_a_shape_only_scarce_nodes_can_take_weighs_more():
    kinds = Counter({("G2", 96000.0, 384 * GI, 8.0): 3, ("G3", 128000.0, 768 * GI, 8.0): 1,
                     ("T4", 64000.0, 256 * GI, 2.0): 4})
    # 40 GPUs in all: 8 on nodes with 120 cores, 32 with 88, 8 of model T4, 40 with one GPU and 8 cores.
    assert scarcity(Shape(cpu=120000, gpus=8), kinds, 50) == 5.0
    assert scarcity(Shape(cpu=88000, gpus=8), kinds, 50) == 1.25
    assert scarcity(Shape(cpu=8000, gpus=1, models=frozenset({"T4"})), kinds, 50) == 5.0
    assert scarcity(Shape(cpu=8000, fraction=0.5), kinds, 50) == 1.0
    assert scarcity(Shape(cpu=120000, gpus=8), kinds, 2) == 2.0  # at most the cap
    assert scarcity(CPU_ONLY, kinds, 50) == scarcity(Shape(cpu=999000, gpus=8), kinds, 50) == 1.0


def test_a_task_keeps_off_the_scarce_nodes_only_some_shapes_can_use():
    # Half the GPU tasks need 88 cores, half 120: a 12-core task breaks either kind of node for one of them. Only
    # one node in four has the cores for a 120-core task, so it goes to a 96-core node.
    workload = [{"cpu": 88, "gpus": 8}, {"cpu": 120, "gpus": 8}]
    nodes = [kt.node(f"small{k}", gpus=8, cpu=96000) for k in range(3)] + [kt.node("large", gpus=8, cpu=128000)]
    snap = kt.cluster(nodes=nodes, jobs=[kt.job("prep", cpu=12000, memory=GI)])
    for arguments, expected in (({}, {"small0": -60.0, "large": -240.0}),
                                ({"scarcity": 1}, {"small0": -60.0, "large": -60.0})):
        session = kt.run(snap, plugins=["predicates", kt.PluginSpec(
            "fragmentation", {"workload": workload, **arguments})], actions=())
        plugin = session.plugins.plugin("fragmentation")
        task = session.jobs[next(iter(session.jobs))].tasks["prep-0"]
        assert scores(plugin, task, session, ["small0", "large"]) == pytest.approx(expected, abs=1e-6)


def test_a_shared_device_part_the_node_s_cpu_cannot_feed_counts_more():
    # The next 0.4-GPU task fits the 0.5 sliver by GPU, but 2 cores are too few for it: the sliver counts once
    # more per unit of `stranded` (here 2 x 0.5) beside its next-task and filled-node parts (0.5 + 0.25).
    shape = Shape(cpu=4000, fraction=0.4)
    starved = NodeState(cpu=2000, memory=128 * GI, whole=0, slivers=(0.5,))
    assert fragmentation(starved, [(shape, 1.0)], lookahead=0.5, stranded=0.0) == pytest.approx(0.75)
    assert fragmentation(starved, [(shape, 1.0)], lookahead=0.5, stranded=2.0) == pytest.approx(1.75)
    # Not when the CPU is there, and not for parts too small for the shape or for whole-GPU shapes.
    fed = attrs.evolve(starved, cpu=8000)
    assert fragmentation(fed, [(shape, 1.0)], lookahead=0.5, stranded=2.0) == pytest.approx(0.05)
    small = attrs.evolve(starved, slivers=(0.3,))
    assert fragmentation(small, [(shape, 1.0)], lookahead=0.5, stranded=2.0) == pytest.approx(0.45)
    assert fragmentation(starved, [(ONE_GPU, 1.0)], lookahead=0.5, stranded=2.0) == pytest.approx(0.75)


def test_a_shared_task_keeps_off_a_node_whose_cpu_would_strand_its_device():
    # Mostly 1-GPU tasks, a few 0.4-GPU 4-core ones. A half-GPU 4-core task on "tight" leaves its 0.5 sliver with
    # 2 cores, too few for a 0.4-GPU task; on "roomy" the sliver stays usable. The growths (0.72 and 0.67 GPU
    # without the stranded weight) round to the same 0.7: the nodes tie. The default stranded weight (8) adds
    # 8 x 0.1 x 0.5 = 0.4 GPU to "tight" (1.12, rounded 1.1) and the task goes to "roomy".
    workload = [{"cpu": 1, "gpus": 1, "weight": 9}, {"cpu": 4, "gpu_fraction": 0.4, "weight": 1}]
    snap = kt.cluster(nodes=[kt.node("tight", gpus=1, cpu=6000), kt.node("roomy", gpus=1, cpu=32000)],
                      jobs=[kt.job("infer", request=ResourceRequest(cpu=4000, memory=GI, gpu_fraction=0.5))])
    for arguments, expected in (({"stranded": 0}, {"tight": -7.0, "roomy": -7.0}),
                                ({}, {"tight": -11.0, "roomy": -7.0})):
        session = kt.run(snap, plugins=["predicates", kt.PluginSpec(
            "fragmentation", {"workload": workload, **arguments})], actions=())
        plugin = session.plugins.plugin("fragmentation")
        task = session.jobs[next(iter(session.jobs))].tasks["infer-0"]
        assert scores(plugin, task, session, ["tight", "roomy"]) == pytest.approx(expected, abs=1e-6)
