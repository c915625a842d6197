"""The actions shipped with the kernel, offered through the ``kai_actions`` hook like any plugin's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai import hookimpl
from kai.framework.actions import allocate, consolidation, preempt, reclaim, stalegangeviction

if TYPE_CHECKING:
    from kai.framework.plugins import Action


@hookimpl
def kai_actions() -> dict[str, Action]:
    return {"allocate": allocate.allocate, "consolidation": consolidation.consolidation, "reclaim": reclaim.reclaim,
            "preempt": preempt.preempt, "stalegangeviction": stalegangeviction.stalegangeviction}
