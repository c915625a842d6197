"""Faults contained inside a session: an exception while handling one job is rolled back and recorded,
and the rest of the cycle goes on.

Actions run the work of one job inside :meth:`Session.contained <kai.framework.session.Session.contained>`:
an exception there discards every statement the step opened, is logged with the job, its queue and the
traceback, and is recorded as a :class:`SchedulingError` on the session and as the job's fit error
(reason :data:`INTERNAL_ERROR_REASON`). An exception outside any job's step ends that action only.
Two faults are not contained: a plugin failing to open the session (:class:`SessionOpenError`: a plugin
without its per-session state would make wrong decisions, so the cycle is skipped) and a rollback that
cannot restore the node state (:class:`SessionCorrupted`).
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING

import attrs

from kai.api import names

if TYPE_CHECKING:
    from types import TracebackType

    from kai.api import Job
    from kai.framework.session import Session

#: The fit-error reason (and event reason) of a job whose scheduling step raised.
INTERNAL_ERROR_REASON = names.REASON_INTERNAL_ERROR


class SessionOpenError(Exception):
    """A plugin raised in ``kai_session_open``; the cycle cannot be scheduled safely."""


class SessionCorrupted(Exception):
    """Undoing a failed step left the node state unknown; the rest of the cycle must not run on it."""


@attrs.define(frozen=True)
class SchedulingError:
    """An exception contained in a session: in ``action`` (or ``session close``), for ``job`` (its uid) when it
    happened in a job's step, else for the whole action; ``plugin`` names the plugin when it is known."""

    action: str
    job: str | None
    queue: str | None
    message: str
    traceback: str
    plugin: str | None = None

    @classmethod
    def of(cls, exc: BaseException, action: str, job: Job | None = None, plugin: str | None = None) -> SchedulingError:
        return cls(action, job.uid if job is not None else None, job.queue if job is not None else None,
                   describe(exc), "".join(traceback.format_exception(exc)), plugin)

    def fit_error(self) -> str:
        """The job's fit error: what happened, without the traceback (that is in the scheduler's log)."""
        return f"Internal error while scheduling the podgroup in action {self.action}: {self.message}"


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, short enough for an event."""
    text = str(exc)
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


class Contained:
    """The context of one job's step in an action (see the module docstring); reusable, cheap to enter."""

    __slots__ = ("session", "action", "job", "mark")

    def __init__(self, session: Session, action: str, job: Job | None) -> None:
        self.session, self.action, self.job = session, action, job
        self.mark = 0

    def __enter__(self) -> Contained:
        self.mark = len(self.session.open_statements)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, SessionCorrupted):
            return False
        self.session.contain(exc, self.action, self.job, self.mark)
        return True
