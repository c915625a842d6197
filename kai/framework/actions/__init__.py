"""The actions shipped with the kernel, offered through the ``kai_actions`` hook like any plugin's."""

from kai import hookimpl
from kai.framework.actions import allocate, consolidation, preempt, reclaim, stalegangeviction


@hookimpl
def kai_actions():
    return {"allocate": allocate.allocate, "consolidation": consolidation.consolidation, "reclaim": reclaim.reclaim,
            "preempt": preempt.preempt, "stalegangeviction": stalegangeviction.stalegangeviction}
