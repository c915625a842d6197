"""Allocation events kai_on_allocate / kai_on_deallocate, seen through statements."""

from kai import hookimpl
from kai import testing as kt
from kai.api import TaskStatus
from kai.framework import Session


class Events:
    def __init__(self):
        self.log = []

    @hookimpl
    def kai_on_allocate(self, task, node):
        self.log.append(("allocate", task.name, node.name, str(task.status)))

    @hookimpl
    def kai_on_deallocate(self, task, node):
        self.log.append(("deallocate", task.name, node.name, str(task.status)))


def _session(events):
    snap = kt.cluster(nodes=[kt.node("n1", gpus=2)], jobs=[
        kt.job("run", queue="q", gpus=1, status="Running", node="n1"), kt.job("new", queue="q", gpus=1)])
    return Session(snap, kt.plugin_manager(["events"], extra_plugins={"events": lambda a: events})).open()


def test_kai_on_allocate_sees_statement_allocate_and_pipeline():
    events = Events()
    s = _session(events)
    new = s.jobs["default/new"].tasks["new-0"]
    stmt = s.statement()
    stmt.allocate(new, "n1")
    assert events.log == [("allocate", "new-0", "n1", "Allocated")]
    stmt.discard()
    stmt.pipeline(new, "n1")
    assert events.log[-1] == ("allocate", "new-0", "n1", "Pipelined")


def test_kai_on_deallocate_sees_rollback_and_eviction():
    events = Events()
    s = _session(events)
    new = s.jobs["default/new"].tasks["new-0"]
    running = s.jobs["default/run"].tasks["run-0"]
    stmt = s.statement()
    stmt.allocate(new, "n1")
    stmt.rollback(0)
    assert events.log == [("allocate", "new-0", "n1", "Allocated"), ("deallocate", "new-0", "n1", "Pending")]
    events.log.clear()
    stmt.evict(running, "make room")
    assert events.log == [("deallocate", "run-0", "n1", "Releasing")]
    stmt.discard()
    assert events.log[-1] == ("allocate", "run-0", "n1", "Running")
    assert running.status is TaskStatus.RUNNING


def test_kai_on_allocate_and_deallocate_frame_a_gang_that_does_not_fit():
    events = Events()
    snap = kt.cluster(nodes=[kt.node("n1", gpus=2)], jobs=[kt.job("g", queue="q", tasks=3, gpus=1)])
    session = kt.run(snap, ["events"], extra_plugins={"events": lambda a: events})
    assert session.decisions == []
    assert [e[0] for e in events.log] == ["allocate", "allocate", "deallocate", "deallocate"]
    assert [e[1] for e in events.log] == ["g-0", "g-1", "g-1", "g-0"]
