"""Filtering hooks (firstresult vetoes): pre-predicate, predicate, job and task over capacity."""

from kai import hookimpl
from kai import testing as kt
from kai.api import Reject, ResourceRequest


def _snap(gpus=(1, 1), tasks=1, min_available=None):
    return kt.cluster(nodes=[kt.node(f"n{i + 1}", gpus=g) for i, g in enumerate(gpus)],
                      jobs=[kt.job("j", queue="q", tasks=tasks, gpus=1, min_available=min_available)])


class CloseNode:
    """Vetoes every node in ``closed`` through ``kai_predicate``."""

    def __init__(self, closed):
        self.closed = closed

    @hookimpl
    def kai_predicate(self, task, node):
        return Reject("closer", "node is closed for maintenance") if node.name in self.closed else None


def test_kai_predicate_veto_keeps_the_task_off_the_node():
    assert kt.placements(kt.run(_snap(), plugins=[])) == {"j-0": "n1"}
    session = kt.run(_snap(), plugins=["closer"], extra_plugins={"closer": lambda a: CloseNode({"n1"})})
    assert kt.placements(session) == {"j-0": "n2"}


def test_kai_predicate_veto_reason_is_in_the_task_fit_error():
    session = kt.run(_snap(gpus=(1, 1, 0)), plugins=["closer"],
                     extra_plugins={"closer": lambda a: CloseNode({"n1", "n2"})})
    assert session.decisions == []
    assert kt.fit_error(session, "j-0") == (
        "no nodes with enough resources were found: 1 node(s) didn't have enough resources: GPUs. \n"
        "2 node is closed for maintenance.")


def test_kai_predicate_first_veto_wins_and_later_plugins_are_not_asked():
    asked = []

    class Spy:
        @hookimpl
        def kai_predicate(self, node):
            asked.append(node.name)

    kt.run(_snap(), plugins=["closer", "spy"],
           extra_plugins={"closer": lambda a: CloseNode({"n1"}), "spy": lambda a: Spy()})
    assert asked == ["n2"]


def test_kai_pre_predicate_veto_stops_the_task_before_any_node():
    asked = []

    class Gate:
        @hookimpl
        def kai_pre_predicate(self, task, job):
            return Reject("gate", f"{job.name} waits for its data set")

        @hookimpl
        def kai_predicate(self, node):
            asked.append(node.name)

    session = kt.run(_snap(), plugins=["gate"], extra_plugins={"gate": lambda a: Gate()})
    assert session.decisions == [] and asked == []
    assert kt.fit_error(session, "j-0") == "j waits for its data set"
    assert "j waits for its data set" in session.job_fit_message(session.jobs["default/j"])


def test_kai_job_over_capacity_vetoes_the_whole_gang_step():
    steps = []

    class Cap:
        @hookimpl
        def kai_job_over_capacity(self, job, tasks):
            steps.append(sorted(t.name for t in tasks))
            return Reject("cap", "queue q is full")

    session = kt.run(_snap(gpus=(4,), tasks=3), plugins=["cap"], extra_plugins={"cap": lambda a: Cap()})
    assert session.decisions == []
    assert steps == [["j-0", "j-1", "j-2"]]
    assert session.job_fit_message(session.jobs["default/j"]) == "PodSchedulingErrors: queue q is full."


class NodeQuota:
    """Vetoes n1 through ``kai_task_over_capacity``, and everything when asked without a node."""

    def __init__(self):
        self.asked = []

    @hookimpl
    def kai_task_over_capacity(self, task, job, node):
        self.asked.append(None if node is None else node.name)
        if node is None:
            return Reject("nq", "queue q has no room for this task")
        return Reject("nq", "quota of n1 is used up") if node.name == "n1" else None


def test_kai_task_over_capacity_without_node_vetoes_the_task_everywhere():
    quota = NodeQuota()
    session = kt.run(_snap(), plugins=["predicates", "nq"], extra_plugins={"nq": lambda a: quota})
    assert session.decisions == [] and quota.asked == [None]
    assert "2 queue q has no room for this task" in kt.fit_error(session, "j-0")


def test_kai_task_over_capacity_is_asked_per_node_for_gpu_memory_requests():
    def snap():
        shared = kt.task("j-0", request=ResourceRequest(cpu=1000, memory=2**30, gpu_memory_mib=1000))
        nodes = [kt.node("n1", gpus=2, gpu_memory_mib=4000), kt.node("n2", gpus=1, gpu_memory_mib=4000)]
        return kt.cluster(nodes=nodes,
                          jobs=[kt.job("j", queue="q", tasks=[shared])])

    assert kt.placements(kt.run(snap(), plugins=["predicates"])) == {"j-0": "n1"}
    quota = NodeQuota()
    session = kt.run(snap(), plugins=["predicates", "nq"], extra_plugins={"nq": lambda a: quota})
    assert kt.placements(session) == {"j-0": "n2"}
    assert quota.asked == ["n1", "n2"]
    # Without the predicates plugin nobody asks the hook.
    quota.asked.clear()
    kt.run(snap(), plugins=["nq"], extra_plugins={"nq": lambda a: quota})
    assert quota.asked == []


class Counting:
    """A predicate that vetoes nothing and counts the nodes it is asked about; ``alike`` is its
    ``kai_nodes_alike`` answer (None: it does not implement the hook)."""

    def __init__(self, alike, asked):
        self.asked = asked
        if alike is not None:
            self.kai_nodes_alike = hookimpl(lambda: alike)

    @hookimpl
    def kai_predicate(self, node):
        self.asked.append(node.name)


def _alike_run(answers, gpus=(2, 2, 2, 1)):
    asked = {name: [] for name in answers}
    extra = {name: (lambda a, n=name, v=v: Counting(v, asked[n])) for name, v in answers.items()}
    session = kt.run(_snap(gpus=gpus), plugins=["nodeplacement", *answers], extra_plugins=extra)
    return session, asked


def test_kai_nodes_alike_lets_the_kernel_ask_about_one_node_per_class():
    session, asked = _alike_run({"a": True})
    assert asked["a"] == ["n1", "n4"]  # the first node of the 2-GPU class, and n4
    assert kt.placements(session) == {"j-0": "n4"}  # binpack: the fullest node, as when every node is asked
    session, asked = _alike_run({"a": None})
    assert asked["a"] == ["n1", "n2", "n3", "n4"]
    assert kt.placements(session) == {"j-0": "n4"}


def test_kai_nodes_alike_needs_every_plugin_with_a_predicate_to_agree():
    _, asked = _alike_run({"a": True, "b": False})
    assert asked["a"] == ["n1", "n2", "n3", "n4"]
    _, asked = _alike_run({"a": True, "b": None})
    assert asked["a"] == ["n1", "n2", "n3", "n4"]
    _, asked = _alike_run({"a": True, "b": True})
    assert asked["b"] == ["n1", "n4"]


def test_kai_nodes_alike_counts_the_fit_error_of_a_class_for_each_of_its_nodes():
    for answer in (True, None):
        snap = kt.cluster(nodes=[kt.node(f"n{i}", gpus=1) for i in range(3)] + [kt.node("big", gpus=2)],
                          jobs=[kt.job("j", queue="q", gpus=2, tasks=2)])
        session = kt.run(snap, plugins=["a"], extra_plugins={"a": lambda a, v=answer: Counting(v, [])})
        assert kt.fit_error(session, "j-1") == (
            "no nodes with enough resources were found: 4 node(s) didn't have enough resources: GPUs.")
