"""What the scheduler measures inside a session that the kernel does not report itself.

KAI's scheduler times every plugin's session open and close (``plugin_scheduling_latency``) and
counts the PodGroups each eviction action tries (``podgroups_acted_on_by_action``). The kernel
calls the plugins' ``kai_session_open`` / ``kai_session_close`` implementations one at a time and
``kai_job_solution_start`` for every job consolidation, reclaim and preempt try, so the scheduler
wraps the former once and listens to the latter, without a change to the kernel.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from kai import hookimpl
from kai.metrics import ON_SESSION_CLOSE, ON_SESSION_OPEN

if TYPE_CHECKING:
    from kai.api import Job
    from kai.framework import Plugins
    from kai.metrics import SchedulerMetrics

#: The name the probe is registered under in the plugin manager.
NAME = "kai.scheduler.probe"


def _timed(function, metrics: SchedulerMetrics, plugin: str, on_session: str):
    @functools.wraps(function)
    def timed(*args, **kwargs):
        with metrics.plugin(plugin, on_session):
            return function(*args, **kwargs)

    return timed


class SessionProbe:
    """Times the session hooks of ``plugins`` into ``metrics`` and collects the jobs the eviction actions try.

    ``tried`` holds the uids of the jobs passed to ``kai_job_solution_start`` since the caller last
    cleared it (the scheduler clears it before each action).
    """

    def __init__(self, plugins: Plugins, metrics: SchedulerMetrics) -> None:
        self.tried: list[str] = []
        for hook, on_session in (("kai_session_open", ON_SESSION_OPEN), ("kai_session_close", ON_SESSION_CLOSE)):
            for impl in getattr(plugins.pm.hook, hook).get_hookimpls():
                impl.function = _timed(impl.function, metrics, impl.plugin_name, on_session)
        plugins.pm.register(self, name=NAME)

    @hookimpl
    def kai_job_solution_start(self, job: Job) -> None:
        self.tried.append(job.uid)
