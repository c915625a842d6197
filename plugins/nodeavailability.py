"""``nodeavailability``: prefer nodes where the task fits now, without waiting for releasing pods."""

from kai import hookimpl
from kai.api import EPSILON

SCORE = 100.0


class NodeAvailability:
    name = "nodeavailability"

    @hookimpl
    def kai_node_scores(self, task, nodes):
        req = task.request.node_resources()
        return [SCORE if req.fits_in(n.idle) and n.idle_pods >= 1 - EPSILON else 0.0 for n in nodes]


def build(arguments):
    return NodeAvailability()
