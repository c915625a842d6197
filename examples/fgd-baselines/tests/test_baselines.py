"""The baselines score hand-computed nodes as the paper's simulator does, and load through entry points."""

import pytest
from kai_fgd_baselines import BestFit, DotProd, Fgd, GpuClustering, GpuPacking, RandomFit, trace_workload

from kai import testing as kt
from kai.api.resources import ResourceRequest

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


def test_random_picks_one_node():
    task, nodes = nodes_and_task(ResourceRequest(cpu=1000, memory=GI, gpus=1))
    assert sorted(RandomFit(42).kai_node_scores(task=task, nodes=nodes)) == [0.0, 100.0]


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
