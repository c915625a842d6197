"""``elastic``: jobs below their gang size first, then jobs exactly at it, then jobs above it.

A job's state changes only when one of its tasks is placed or taken off a node, which the session
reports through ``kai_on_allocate`` / ``kai_on_deallocate``; between two such moves each job's state
is worked out once, however many comparisons a sort makes. A new session, or a step that failed (an
error the session recorded, which may have left those reports unfinished), starts afresh.
"""

import weakref

from kai.sdk import Session, hookimpl


class Elastic:
    name = "elastic"

    def __init__(self) -> None:
        #: id(job) -> (job, state) since the last move; the job is kept so that its id is not reused.
        self.states: dict[int, tuple[object, int]] = {}
        #: The session ``states`` belong to, and its errors when they were last known good.
        self.session: weakref.ref | None = None
        self.errors = 0

    def _state(self, job) -> int:
        known = self.states.get(id(job))
        if known is not None and known[0] is job:
            return known[1]
        state = job.elastic_state()
        self.states[id(job)] = (job, state)
        return state

    @hookimpl
    def kai_on_allocate(self, session, task, node):
        self.states.clear()

    @hookimpl
    def kai_on_deallocate(self, session, task, node):
        self.states.clear()

    @hookimpl
    def kai_job_order(self, session: Session, left, right):
        if self.session is None or self.session() is not session or len(session.errors) != self.errors:
            self.states, self.session, self.errors = {}, weakref.ref(session), len(session.errors)
        return self._state(left) - self._state(right) or None


def build(arguments):
    return Elastic()
