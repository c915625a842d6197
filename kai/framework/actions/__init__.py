"""The actions shipped with the kernel, offered through the ``kai_actions`` hook like any plugin's."""

from kai import hookimpl
from kai.framework.actions.allocate import allocate
from kai.framework.actions.stalegangeviction import stalegangeviction


@hookimpl
def kai_actions():
    return {"allocate": allocate, "stalegangeviction": stalegangeviction}
