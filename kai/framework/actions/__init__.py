"""The actions shipped with the kernel, offered through the ``kai_actions`` hook like any plugin's."""

from kai import hookimpl


@hookimpl
def kai_actions():
    # Imported here: the eviction actions use the job solver, which builds on the allocate action.
    from kai.framework.actions.allocate import allocate
    from kai.framework.actions.consolidation import consolidation
    from kai.framework.actions.preempt import preempt
    from kai.framework.actions.reclaim import reclaim
    from kai.framework.actions.stalegangeviction import stalegangeviction

    return {"allocate": allocate, "consolidation": consolidation, "reclaim": reclaim, "preempt": preempt,
            "stalegangeviction": stalegangeviction}
