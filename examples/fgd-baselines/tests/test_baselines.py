"""The baselines score hand-computed nodes as the paper's simulator does, and load through entry points."""

from collections import Counter
from types import SimpleNamespace

import pytest
from kai_fgd_baselines import BestFit, DotProd, Fgd, GpuClustering, GpuPacking, RandomFit, trace_workload, uniform

from kai import testing as kt
from kai.sdk import ResourceRequest, hookimpl

GI = 2**30


def nodes_and_task(request, jobs=()):
    snap = kt.cluster(
        nodes=[kt.node("empty", gpus=8, cpu=96000, gpu_memory_mib=1000),
               kt.node("used", gpus=8, cpu=96000, gpu_memory_mib=1000)],
        jobs=[*jobs, kt.job("new", request=request)],
    )
    session = kt.run(snap, plugins=["predicates"], actions=())
    task = next(t for j in session.jobs.values() for t in j.tasks.values() if t.name == "new-0")
    return task, [session.node_by_name["empty"], session.node_by_name["used"]]


RUNNING = [kt.job("run", status="Running", node="used", gpu_groups=("g1",),
                  request=ResourceRequest(cpu=32000, memory=GI, gpu_fraction=0.5))]


def test_bestfit_dotprod_packing_clustering_scores():
    task, nodes = nodes_and_task(ResourceRequest(cpu=8000, memory=GI, gpu_fraction=0.5), RUNNING)
    # BestFit: empty leaves 0.5*(88/128) + 0.5*(7.5/8) = 0.8125 -> 18; used 0.5*(56/128) + 0.5*(7/8) -> 34.
    assert BestFit().kai_node_scores(task=task, nodes=nodes) == [0.0, 100.0]
    # DotProd: dot = 96/128*8/128 + 8/8*0.5/8 = 0.109375 -> 94; used: 64/128*8/128 + 7.5/8*0.5/8 -> 95.
    assert DotProd().kai_node_scores(task=task, nodes=nodes) == [94.0, 95.0]
    # GpuPacking: an empty node 33 - 8 = 25; joining the used device 100 - 50/10 = 95.
    assert GpuPacking().kai_node_scores(task=task, nodes=nodes) == [25.0, 95.0]
    # GpuClustering: empty 25/4*0... = 0 + 25; used (only share-gpu tasks) 25*500//8000 = 1, + 75.
    assert GpuClustering().kai_node_scores(task=task, nodes=nodes) == [25.0, 76.0]


def test_exact_integer_scores():
    # A device 90 % used leaves 100 milli: GpuPacking sums 100 * 100 // 1000 = 10, 10 // 10 = 1 -> 99 (the
    # free share as a float, 0.0999..., would truncate to 9 and score 100).
    busy = [kt.job("run", status="Running", node="used", gpu_groups=("g1",),
                   request=ResourceRequest(cpu=1000, memory=GI, gpu_fraction=0.9))]
    task, nodes = nodes_and_task(ResourceRequest(cpu=1000, memory=GI, gpu_fraction=0.1), busy)
    assert GpuPacking().kai_node_scores(task=task, nodes=nodes) == [25.0, 99.0]
    # BestFit before normalising, in milli as Go computes it: a device 6 % used (940 milli free) and 32 cores
    # left after a 0.5-GPU task on "used": s = 32000/128000*0.5 + (7940 - 500)/8000*0.5 = 0.59, -> 40
    # (41 from the float free share 7.94).
    busy = [kt.job("run", status="Running", node="used", gpu_groups=("g1",),
                   request=ResourceRequest(cpu=56000, memory=GI, gpu_fraction=0.06))]
    task, nodes = nodes_and_task(ResourceRequest(cpu=8000, memory=GI, gpu_fraction=0.5), busy)
    assert BestFit.raw_score(task, nodes[1]) == 40


def test_random_scores_are_uniform_draws_fixed_by_the_names():
    task, nodes = nodes_and_task(ResourceRequest(cpu=1000, memory=GI, gpus=1))
    scores = RandomFit().kai_node_scores(task=task, nodes=nodes)
    assert all(0.0 <= x < 1.0 for x in scores) and scores[0] != scores[1]
    assert RandomFit().kai_node_scores(task=task, nodes=nodes) == scores
    assert RandomFit(seed=7).kai_node_scores(task=task, nodes=nodes) != scores
    # The argmax over four nodes is uniform: 4000 task names, each node wins about 1000 times.
    wins = Counter(max(range(4), key=lambda k: uniform(0, f"task-{t}", f"node-{k}")) for t in range(4000))
    assert all(850 < wins[k] < 1150 for k in range(4)), wins


def test_random_device_choice_is_uniform_over_devices():
    # "used" has one shared device and 7 free ones: the shared device should win 1 time in 8.
    task, nodes = nodes_and_task(ResourceRequest(cpu=1000, memory=GI, gpu_fraction=0.25), RUNNING)
    used = nodes[1]
    plugin = RandomFit()
    wins = sum(1 for t in range(4000)
               if (lambda s: s[0] > s[1])(plugin.kai_gpu_scores(SimpleNamespace(name=f"t{t}"), used, ["g1", None])))
    assert 400 < wins < 600, wins


def placed_nodes(seed: int) -> dict[str, str]:
    """Where eight one-GPU tasks land among 30 alike nodes named as the replay names them for ``seed``."""
    nodes = kt.seeded_names([kt.node(f"n{k:02d}", gpus=8, cpu=96000) for k in range(30)], seed)
    session = kt.run(kt.cluster(nodes=nodes, jobs=[kt.job(f"j{k}", gpus=1) for k in range(8)]),
                     plugins=["predicates", "proportion", "randomfit"])
    return {t: n.split("-", 1)[1] for t, n in kt.placements(session).items()}


def test_random_fit_is_seeded_by_the_replay_node_names():
    first = placed_nodes(42)
    assert len(first) == 8 and placed_nodes(42) == first
    assert placed_nodes(43) != first
    # Node classes would hand each task the first node of a class; the pick is among nodes.
    assert len(set(first.values())) >= 5


def test_fgd_prefers_the_node_its_measure_grows_least_on(tmp_path):
    trace = tmp_path / "pods.csv"
    trace.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                     "a,8000,1024,1,1000,\nb,8000,1024,1,1000,\nc,1000,1024,0,0,\n")
    workload = trace_workload(str(trace))
    assert [round(p, 3) for _, p in workload] == [0.667, 0.333]
    task, nodes = nodes_and_task(ResourceRequest(cpu=8000, memory=GI, gpu_fraction=0.5), RUNNING)
    # The CPU-only shape counts all idle GPU: taking 0.5 GPU lowers it by 0.5/3 on both nodes. On the empty
    # node the whole-GPU shape loses the new 0.5 sliver (delta 0.5/3 - 2/3*0.5 = -1/6 -> int(100*sigmoid)
    # = 45); on the used node filling the sliver gives it back (delta 0.5/3 + 2/3*0.5 = 0.5 -> 62).
    assert Fgd(workload, "").kai_node_scores(task=task, nodes=nodes) == [45.0, 62.0]


@pytest.mark.parametrize("name", ["bestfit", "dotprod", "gpupacking", "gpuclustering", "randomfit"])
def test_entry_points(name):
    assert kt.plugin_manager(["predicates", name]).plugin(name).name == name


class EveryNode:
    """A policy's node scores without ``kai_nodes_alike``: the kernel looks at every node."""

    def __init__(self, policy):
        self.policy, self.name = policy, f"{policy.name}-every-node"

    @hookimpl
    def kai_node_scores(self, task, nodes):
        return self.policy.kai_node_scores(task=task, nodes=nodes)


@pytest.mark.parametrize("policy", [BestFit, DotProd, GpuPacking])
def test_node_classes_leave_the_choice_unchanged(policy):
    shapes = [(8, 96000), (2, 104000), (4, 64000), (8, 96000), (2, 104000)] * 6
    nodes = kt.seeded_names([kt.node(f"n{k:02d}", gpus=g, cpu=c) for k, (g, c) in enumerate(shapes)], 42)

    def placed(plugins, **extra):
        jobs = [kt.job(f"j{k}", gpus=k % 3, cpu=1000 + 7000 * (k % 5)) for k in range(60)]
        return kt.placements(kt.run(kt.cluster(nodes=nodes, jobs=jobs), plugins=plugins, **extra))

    by_class = placed(["predicates", policy.name])
    every = placed(["predicates", "every"], extra_plugins={"every": lambda arguments: EveryNode(policy())})
    assert len(by_class) == 60 and by_class == every
