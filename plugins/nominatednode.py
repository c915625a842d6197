"""``nominatednode``: a pod's ``status.nominatedNodeName`` wins over every other node score."""

from kai.sdk import hookimpl

#: KAI's score for the nominated node: above every other plugin's, so it decides among feasible nodes.
SCORE = 1_000_000.0


class NominatedNode:
    name = "nominatednode"

    @hookimpl
    def kai_nodes_alike(self, task):
        return not task.nominated_node

    @hookimpl
    def kai_node_scores(self, session, task, nodes):
        if not task.nominated_node:
            return None
        return [SCORE if n.name == task.nominated_node else 0.0 for n in nodes]


def build(arguments):
    return NominatedNode()
