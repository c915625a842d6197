"""Ordering hooks (firstresult comparators): job, task, pod set and queue order."""

from kai import hookimpl
from kai import testing as kt
from kai.api import Job, PodSet


def prefer(attr_name, favourite):
    """A plugin object whose comparator hook ``attr_name`` puts the object named ``favourite`` first."""

    def compare(self, left, right):
        if left.name == right.name or favourite not in (left.name, right.name):
            return None
        return -1 if left.name == favourite else 1

    return type("Prefer", (), {attr_name: hookimpl(compare, specname=attr_name)})()


def test_kai_job_order_decides_which_job_gets_the_last_free_gpu():
    def snap():
        return kt.cluster(nodes=[kt.node("n1", gpus=1)], jobs=[
            kt.job("early", queue="q", gpus=1, creation=1.0), kt.job("late", queue="q", gpus=1, creation=2.0)])

    assert kt.placements(kt.run(snap(), plugins=["predicates"])) == {"early-0": "n1"}
    session = kt.run(snap(), plugins=["predicates", "mine"],
                     extra_plugins={"mine": lambda a: prefer("kai_job_order", "late")})
    assert kt.placements(session) == {"late-0": "n1"}


def test_kai_job_order_first_non_zero_answer_wins_in_config_order():
    def snap():
        return kt.cluster(nodes=[kt.node("n1", gpus=1)], jobs=[
            kt.job("a", queue="q", gpus=1), kt.job("b", queue="q", gpus=1)])

    extra = {"wants_a": lambda x: prefer("kai_job_order", "a"), "wants_b": lambda x: prefer("kai_job_order", "b")}
    assert kt.placements(kt.run(snap(), ["wants_b", "wants_a"], extra_plugins=extra)) == {"b-0": "n1"}
    assert kt.placements(kt.run(snap(), ["wants_a", "wants_b"], extra_plugins=extra)) == {"a-0": "n1"}


def test_kai_task_order_decides_which_task_of_an_elastic_job_runs():
    def snap():
        return kt.cluster(nodes=[kt.node("n1", gpus=1)],
                          jobs=[kt.job("j", queue="q", tasks=3, gpus=1, min_available=1)])

    assert kt.placements(kt.run(snap(), plugins=["predicates"])) == {"j-0": "n1"}
    session = kt.run(snap(), plugins=["predicates", "mine"],
                     extra_plugins={"mine": lambda a: prefer("kai_task_order", "j-2")})
    assert kt.placements(session) == {"j-2": "n1"}


def test_kai_subgroup_order_decides_which_pod_set_grows_first():
    def snap():
        j = kt.job("j", queue="q", tasks=[kt.task("w-0", gpus=1, pod_set="workers"),
                                          kt.task("l-0", gpus=1, pod_set="leader")])
        j.pod_sets = {"leader": PodSet("leader", 0), "workers": PodSet("workers", 0)}
        return kt.cluster(nodes=[kt.node("n1", gpus=1)], jobs=[j])

    assert kt.placements(kt.run(snap(), plugins=["predicates"])) == {"l-0": "n1"}
    session = kt.run(snap(), plugins=["predicates", "mine"],
                     extra_plugins={"mine": lambda a: prefer_podset("workers")})
    assert kt.placements(session) == {"w-0": "n1"}


def prefer_podset(favourite):
    class PreferPodSet:
        @hookimpl
        def kai_subgroup_order(self, job: Job, left, right):
            assert job.name == "j" and left.is_pod_set and left.required == 0
            if left.name == right.name:
                return None
            return -1 if left.name == favourite else 1

    return PreferPodSet()


def test_kai_queue_order_decides_which_queue_gets_the_last_free_gpu():
    def snap():
        return kt.cluster(nodes=[kt.node("n1", gpus=1)],
                          queues=[kt.queue("qa", creation=1.0), kt.queue("qb", creation=2.0)],
                          jobs=[kt.job("a", queue="qa", gpus=1), kt.job("b", queue="qb", gpus=1)])

    assert kt.placements(kt.run(snap(), plugins=["predicates"])) == {"a-0": "n1"}
    seen = []

    class PreferQb:
        @hookimpl
        def kai_queue_order(self, left, right, left_job, right_job, left_victims, right_victims):
            seen.append((left.name, right.name, left_job.name, right_job.name, tuple(left_victims)))
            return -1 if left.name == "qb" else 1

    session = kt.run(snap(), plugins=["predicates", "mine"], extra_plugins={"mine": lambda a: PreferQb()})
    assert kt.placements(session) == {"b-0": "n1"}
    assert ("qb", "qa", "b", "a", ()) in seen
