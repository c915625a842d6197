"""A snapshot kept as built in a cycle is copied later, as built, whatever the sessions after it changed."""

from __future__ import annotations

from kai import testing as kt
from kai.api import TaskStatus
from kai.framework import Session
from kai.framework.whatif import copy_as_built, keep_as_built


def cluster():
    return kt.cluster([kt.node("n", gpus=2)], jobs=[kt.job("run", gpus=1, status="Running", node="n"),
                                                    kt.job("a", gpus=1), kt.job("b", gpus=2)])


def as_built(snap):
    return {t.uid: (t.status, t.node) for j in snap.jobs.values() for t in j.tasks.values()} | {
        j.uid: j.last_start for j in snap.jobs.values()}


def test_kept_in_a_session_and_copied_while_the_next_one_changes_the_same_objects():
    snap = cluster()
    built = as_built(snap)
    first = Session(snap, kt.plugin_manager()).open()
    first.run_actions()
    assert kt.placements(first) == {"a-0": "n"}
    kept = keep_as_built(snap)  # the session is still on it: what it changed is taken from its journal
    first.close()
    second = Session(snap, kt.plugin_manager()).open()  # rewinds the snapshot, then places "a" again
    second.run_actions()
    assert snap.jobs["default/a"].tasks["a-0"].status is TaskStatus.BINDING
    copy = copy_as_built(kept)
    assert as_built(copy) == built and copy.jobs["default/a"] is not snap.jobs["default/a"]
    assert snap.jobs["default/a"].tasks["a-0"].status is TaskStatus.BINDING  # the live objects are left alone
    second.close()
    assert kt.placements(kt.run(copy)) == {"a-0": "n"}  # the copy schedules as the snapshot did


def test_kept_with_no_session_on_it():
    snap = cluster()
    assert as_built(copy_as_built(keep_as_built(snap))) == as_built(snap)
