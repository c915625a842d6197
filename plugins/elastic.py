"""``elastic``: jobs below their gang size first, then jobs exactly at it, then jobs above it.

A job's state changes only when one of its tasks is placed or taken off a node, which the session
reports through ``kai_on_allocate`` / ``kai_on_deallocate``; between two such moves each job's state
is worked out once, however many comparisons a sort makes. A step that failed (an error the session
recorded) may have left those reports unfinished: the states are then worked out afresh.
"""

from kai import hookimpl


class Elastic:
    name = "elastic"

    def __init__(self) -> None:
        #: id(job) -> (job, state) since the last move; the job is kept so that its id is not reused.
        self.states: dict[int, tuple[object, int]] = {}
        #: The session's errors when ``states`` was last known good.
        self.errors = 0

    def _state(self, job) -> int:
        known = self.states.get(id(job))
        if known is not None and known[0] is job:
            return known[1]
        state = job.elastic_state()
        self.states[id(job)] = (job, state)
        return state

    @hookimpl
    def kai_session_open(self, session):
        self.states, self.errors = {}, len(session.errors)

    @hookimpl
    def kai_session_close(self, session):
        self.states = {}

    @hookimpl
    def kai_on_allocate(self, session, task, node):
        self.states.clear()

    @hookimpl
    def kai_on_deallocate(self, session, task, node):
        self.states.clear()

    @hookimpl
    def kai_job_order(self, session, left, right):
        if len(session.errors) != self.errors:
            self.states, self.errors = {}, len(session.errors)
        return self._state(left) - self._state(right) or None


def build(arguments):
    return Elastic()
