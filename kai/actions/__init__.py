"""The shipped actions (KAI's ``pkg/scheduler/actions``): allocate, consolidation, reclaim, preempt and
stale-gang eviction, with the job solver the eviction actions share.

Each action is a callable taking an open :class:`~kai.framework.Session`, registered in the entry-point
group ``kai.actions`` exactly like a third-party one; the kernel never imports this package.
"""
