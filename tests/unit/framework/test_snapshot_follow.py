"""A snapshot built to follow another, told which jobs may have changed, finds what a full build finds."""

from kai import testing as kt
from kai.framework import build_snapshot


def _facts(snapshot):
    return (list(snapshot.jobs), [(p.kind, p.name, p.reason) for p in snapshot.problems],
            list(snapshot.rejected_jobs), set(snapshot.whole), snapshot.flawed)


def test_only_the_touched_jobs_and_those_not_found_whole_are_checked_in_the_order_of_the_jobs():
    nodes, queues = [kt.node("n1", gpus=4)], [kt.queue("q")]
    jobs = {j.uid: j for j in [
        kt.job("a", queue="q", status="Running", node="n1"),
        kt.job("lost", queue="q", status="Running", node="gone"),  # a task on a missing node: not whole
        kt.job("b", queue="q"),
        kt.job("stray", queue="missing"),  # left out
        kt.job("c", queue="q")]}
    first = build_snapshot(nodes, queues, jobs, now=1.0)
    first.follow(None)
    for job in (kt.job("b", queue="q", gpus=1), kt.job("late", queue="nowhere"), kt.job("new", queue="q")):
        jobs[job.uid] = job  # b built again, late left out
    del jobs["default/c"]
    touched = {"default/b", "default/c", "default/late", "default/new"}
    second = build_snapshot(nodes, queues, jobs, now=2.0, previous=first, touched=touched)
    assert _facts(second) == _facts(build_snapshot(nodes, queues, list(jobs.values()), now=2.0))
    assert [p.name for p in second.problems] == ["default/lost-0", "stray", "late"]
    assert second.changed == {"default/b", "default/new"} and second.gone == {"default/c"}
    assert second.jobs["default/a"] is first.jobs["default/a"]
    assert set(second.replaced) == {"default/b", "default/c"}
