"""``subgrouporder``: pod sets below their gang size first; among satisfied ones, the least filled first."""

from kai import hookimpl
from kai.api import ACTIVE_ALLOCATED


class SubGroupOrder:
    name = "subgrouporder"

    @hookimpl
    def kai_podset_order(self, job, left, right):
        la, ra = job.count(left.name, ACTIVE_ALLOCATED), job.count(right.name, ACTIVE_ALLOCATED)
        lbelow, rbelow = la < left.min_available, ra < right.min_available
        if lbelow != rbelow:
            return -1 if lbelow else 1
        if lbelow:
            return None
        lr = la / left.min_available if left.min_available else float("inf")
        rr = ra / right.min_available if right.min_available else float("inf")
        return (lr > rr) - (lr < rr) or None


def build(arguments):
    return SubGroupOrder()
