"""``fgd``'s caches and node classes change no score and no choice: its scores equal the paper's measure worked
out afresh for every node, and per-class placement lands where looking at every node does."""

import random

import pytest
from kai_fgd_baselines import Fgd, build_fgd, fragmentation, sigmoid_score

from kai import testing as kt
from kai.sdk import EPSILON as EPS
from kai.sdk import ResourceRequest, Shape, after_task, hookimpl, node_gpu_memory, node_state, task_gpu_memory

GI = 2**30
MODEL = "nvidia.com/gpu.product"
FRACTIONS = (0.1, 0.25, 0.3, 0.5, 0.6)
#: Whole-GPU, shared and CPU-only shapes; the second workload names GPU models.
WORKLOAD = [(Shape(8000.0, 0.0, 1), 0.4), (Shape(4000.0, 0.0, 0, 0.5), 0.3), (Shape(2000.0, 0.0, 0, 0.25), 0.2),
            (Shape(16000.0, 0.0, 4), 0.05), (Shape(1000.0), 0.05)]
BY_MODEL = [(Shape(8000.0, 0.0, 1, 0.0, "", frozenset({"A"})), 0.5), (Shape(4000.0, 0.0, 0, 0.3), 0.3),
            (Shape(1000.0), 0.2)]


def fresh_node_score(workload, task, node) -> float:
    """The paper's node score without caches: the best over the devices the task could take."""
    state = node_state(node, MODEL)
    before = fragmentation(state, workload)
    r = task.request
    if not r.is_shared_gpu:
        return sigmoid_score(before - fragmentation(after_task(state, r, None, None), workload))
    portion = task_gpu_memory(node, r) / node_gpu_memory(node)
    options = [k for k, s in enumerate(state.slivers) if s >= portion - EPS]
    options += [None] if state.whole >= 1 - EPS else []
    return max(sigmoid_score(before - fragmentation(after_task(state, r, portion, k), workload)) for k in options)


def fresh_gpu_scores(workload, task, node, groups) -> list[float]:
    state = node_state(node, MODEL)
    before = fragmentation(state, workload)
    mem = node_gpu_memory(node)
    portion = task_gpu_memory(node, task.request) / mem
    return [sigmoid_score(before - fragmentation(
        after_task(state, task.request, portion,
                   None if g is None else state.slivers.index(1.0 - node.gpu_groups[g].used / mem)), workload))
        for g in groups]


def random_session(rng: random.Random):
    """Nodes of a few sizes and models with shared tasks running on numbered devices and whole-GPU tasks
    running or releasing, and pending whole-GPU, shared and CPU-only tasks."""
    nodes, jobs = [], []
    for k in range(14):
        gpus, cpu = rng.choice([(8, 96000), (4, 32000), (2, 64000)])
        nodes.append(kt.node(f"n{k:02d}", gpus=gpus, cpu=cpu, labels={MODEL: rng.choice("AB")}))
        free, cores = gpus, cpu
        for d in range(rng.randrange(gpus + 1)):
            used = 0.0
            for t in range(rng.randrange(1, 4)):
                f = rng.choice(FRACTIONS)
                if used + f > 1 or cores < 2000:
                    break
                used, cores = used + f, cores - 2000
                jobs.append(kt.job(f"s{k}-{d}-{t}", status="Running", node=f"n{k:02d}", gpu_groups=(f"g{d}",),
                                   request=ResourceRequest(cpu=2000, memory=GI, gpu_fraction=f)))
            free -= 1
        for t in range(rng.randrange(free + 1)):
            if cores >= 4000:
                cores -= 4000
                jobs.append(kt.job(f"w{k}-{t}", status=rng.choice(["Running", "Releasing"]), node=f"n{k:02d}",
                                   request=ResourceRequest(cpu=4000, memory=GI, gpus=1)))
    pending = [ResourceRequest(cpu=rng.choice([1000, 4000, 8000]), memory=GI, gpus=rng.choice([0, 1, 2]))
               for _ in range(4)]
    pending += [ResourceRequest(cpu=rng.choice([1000, 2000]), memory=GI, gpu_fraction=rng.choice(FRACTIONS))
                for _ in range(4)]
    jobs += [kt.job(f"new{k}", request=r) for k, r in enumerate(pending)]
    session = kt.run(kt.cluster(nodes=nodes, jobs=jobs), plugins=["predicates"], actions=())
    tasks = [t for j in session.jobs.values() for t in j.tasks.values() if t.name.startswith("new")]
    return tasks, session.nodes


@pytest.mark.parametrize("workload", [WORKLOAD, BY_MODEL], ids=["any-model", "by-model"])
def test_cached_scores_equal_the_measure_worked_out_afresh(workload):
    rng = random.Random(7)
    plugin = Fgd(workload, MODEL)  # one plugin across sessions: its caches fill and are hit
    compared = shared_nodes = 0
    for _ in range(12):
        tasks, nodes = random_session(rng)
        shared_nodes += sum(1 for n in nodes if n.gpu_groups)
        for task in tasks:
            fitting = [n for n in nodes if fresh_fits(task, n)]
            expected = [fresh_node_score(workload, task, n) for n in fitting]
            assert plugin.kai_node_scores(task=task, nodes=fitting) == expected
            assert plugin.kai_node_scores(task=task, nodes=fitting) == expected  # from the cache
            compared += len(fitting)
            if task.request.is_shared_gpu:
                for n in fitting:
                    groups = [*n.fitting_gpu_groups(task), None]
                    assert plugin.kai_gpu_scores(task, n, groups) == fresh_gpu_scores(workload, task, n, groups)
    assert compared > 500 and shared_nodes > 50
    assert plugin.score_cache and plugin.delta_cache and plugin.frag_cache


def fresh_fits(task, node) -> bool:
    """Whether the paper's node score is defined: the task fits the node's CPU and, for a shared task, a
    device (a sliver or a free one)."""
    state = node_state(node, MODEL)
    r = task.request
    if r.cpu > state.cpu or r.gpus > state.whole + EPS:
        return False
    if not r.is_shared_gpu:
        return True
    portion = task_gpu_memory(node, r) / node_gpu_memory(node)
    return state.whole >= 1 - EPS or any(s >= portion - EPS for s in state.slivers)


def test_nodes_alike_unless_a_shape_names_gpu_models():
    assert Fgd(WORKLOAD, MODEL).kai_nodes_alike() is True
    assert Fgd(BY_MODEL, MODEL).kai_nodes_alike() is False
    assert build_fgd({"workload": [{"cpu": 8, "gpus": 1, "models": ["A"]}]}).kai_nodes_alike() is False


class EveryNode:
    """``fgd``'s node and device scores without ``kai_nodes_alike``: the kernel looks at every node."""

    def __init__(self, policy, alike: bool | None = None):
        self.policy, self.name, self.alike = policy, "fgd-every-node", alike

    @hookimpl
    def kai_node_scores(self, task, nodes):
        return self.policy.kai_node_scores(task=task, nodes=nodes)

    @hookimpl
    def kai_gpu_scores(self, task, node, groups):
        return self.policy.kai_gpu_scores(task, node, groups)


class ForcedAlike(EveryNode):
    """The same scores, claiming (wrongly when the workload names models) that node classes are safe."""

    @hookimpl
    def kai_nodes_alike(self):
        return True


def placed(nodes, jobs, workload, wrapper=None):
    """Where ``jobs()`` (fresh jobs: a session changes its jobs) land on ``nodes`` with ``fgd`` (wrapped)."""
    plugin = Fgd(workload, MODEL)
    extra = {"policy": lambda arguments: plugin if wrapper is None else wrapper(plugin)}
    return kt.placements(kt.run(kt.cluster(nodes=nodes, jobs=jobs()), plugins=["predicates", "proportion", "policy"],
                                extra_plugins=extra))


@pytest.mark.parametrize("workload", [WORKLOAD, BY_MODEL], ids=["any-model", "by-model"])
def test_node_classes_leave_the_choice_unchanged(workload):
    sizes = [(8, 96000), (2, 104000), (4, 32000)] * 8
    nodes = [kt.node(f"n{k:02d}", gpus=g, cpu=c, labels={MODEL: "AB"[k % 2]}) for k, (g, c) in enumerate(sizes)]

    def jobs():
        return [kt.job(f"j{k}", request=ResourceRequest(cpu=1000 + 3000 * (k % 4), memory=GI, gpus=k % 3)) if k % 4
                else kt.job(f"j{k}", request=ResourceRequest(cpu=2000, memory=GI, gpu_fraction=FRACTIONS[k % 5]))
                for k in range(70)]

    by_class = placed(nodes, jobs, workload)
    assert len(by_class) == 70
    assert by_class == placed(nodes, jobs, workload, EveryNode)


def test_a_model_workload_would_make_node_classes_choose_differently():
    # Two nodes alike but for their model; the only shape needs model A. A task on the B node turns GPUs
    # no shape can use into used ones (delta +1 -> 73), on the A node it changes nothing (-> 50): fgd picks
    # the B node, which a per-class choice (the first node by name) would miss.
    nodes = [kt.node(f"n{k}", gpus=8, cpu=96000, labels={MODEL: model}) for k, model in enumerate("AB")]

    def jobs():
        return [kt.job("j", request=ResourceRequest(cpu=1000, memory=GI, gpus=1))]

    workload = [(Shape(8000.0, 0.0, 1, 0.0, "", frozenset({"A"})), 1.0)]
    assert placed(nodes, jobs, workload) == {"j-0": "n1"}
    assert placed(nodes, jobs, workload, ForcedAlike) == {"j-0": "n0"}


def test_a_shared_device_whose_tasks_are_all_leaving_gets_a_score():
    jobs = [kt.job(f"old{k}", status="Releasing", node="n0", gpu_groups=("g0",),
                   request=ResourceRequest(cpu=1000, memory=GI, gpu_fraction=0.5)) for k in range(2)]
    jobs.append(kt.job("new", request=ResourceRequest(cpu=1000, memory=GI, gpu_fraction=0.5)))
    session = kt.run(kt.cluster(nodes=[kt.node("n0", gpus=1, cpu=8000)], jobs=jobs), plugins=["predicates"],
                     actions=())
    task = session.jobs["new"].tasks["new-0"] if "new" in session.jobs else next(
        t for j in session.jobs.values() for t in j.tasks.values() if t.name.startswith("new"))
    plugin = Fgd(WORKLOAD, MODEL)
    node = session.nodes[0]
    assert plugin.kai_gpu_scores(task=task, node=node, groups=["g0"]) == plugin.kai_gpu_scores(task=task, node=node,
                                                                                        groups=[None])
