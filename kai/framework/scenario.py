"""What the eviction actions show the plugins of a scenario they solved (``kai_scenario_validator``)."""

from __future__ import annotations

import attrs

from kai.api import Job, Task


@attrs.define(eq=False)
class Scenario:
    """A solved scenario as validators see it (``kai_scenario_validator``)."""

    #: The job being placed.
    preemptor: Job
    #: Its tasks placed in this scenario (a prefix of its next allocation step).
    preemptor_tasks: list[Task]
    #: Every victim candidate task of the scenario, in the order the solver added them (recorded first).
    candidates: list[Task]
    #: Victim tasks evicted for good: still Releasing after the simulation.
    victims: list[Task] = attrs.Factory(list)
    #: Victim tasks placed again elsewhere (Pipelined on their new node).
    moved: list[Task] = attrs.Factory(list)
    #: The jobs owning the tasks of ``victims`` and ``moved``.
    victim_jobs: list[Job] = attrs.Factory(list)
