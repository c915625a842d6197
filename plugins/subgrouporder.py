"""``subgrouporder``: members of a subgroup tree below what they need first; then required before
optional (gang size or ``min_subgroup`` 0) ones; then the lowest ratio of satisfied to needed (among
optional ones, the fewest satisfied)."""

from kai.sdk import hookimpl


class SubGroupOrder:
    name = "subgrouporder"

    @hookimpl
    def kai_subgroup_order(self, job, left, right):
        if not left.satisfied or not right.satisfied:
            return (right.satisfied - left.satisfied) or None
        if (left.required == 0) != (right.required == 0):
            return 1 if left.required == 0 else -1
        if left.required == 0:
            return (left.active > right.active) - (left.active < right.active) or None
        lr, rr = left.active / left.required, right.active / right.required
        return (lr > rr) - (lr < rr) or None


def build(arguments):
    return SubGroupOrder()
