"""``nodeavailability``: prefer nodes where the task fits now, without waiting for releasing pods."""

from array import array

from kai.sdk import hookimpl

SCORE = 100.0


class NodeAvailability:
    name = "nodeavailability"

    @hookimpl
    def kai_nodes_alike(self):
        return True  # the resource fit alone

    @hookimpl
    def kai_node_scores(self, session, task, nodes):
        mask = session.fit_mask(task, array("i", (n.index for n in nodes)))
        return [SCORE if fit == 2 else 0.0 for fit in mask]


def build(arguments):
    return NodeAvailability()
