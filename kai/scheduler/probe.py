"""The PodGroups each eviction action tries, for KAI's ``podgroups_acted_on_by_action``.

The kernel calls ``kai_job_solution_start`` for every job consolidation, reclaim and preempt try;
the scheduler registers this probe to listen to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai import hookimpl

if TYPE_CHECKING:
    from kai.api import Job
    from kai.framework import Plugins

#: The name the probe is registered under in the plugin manager.
NAME = "kai.scheduler.probe"


class SessionProbe:
    """Collects the jobs the eviction actions try: ``tried`` holds the uids passed to
    ``kai_job_solution_start`` since the caller last cleared it (the scheduler clears it before each action).
    """

    def __init__(self, plugins: Plugins) -> None:
        self.tried: list[str] = []
        plugins.pm.register(self, name=NAME)

    @hookimpl
    def kai_job_solution_start(self, job: Job) -> None:
        self.tried.append(job.uid)
