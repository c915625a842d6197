"""``resourcetype``: prefer CPU-only nodes for tasks that ask for no GPU."""

from kai.sdk import hookimpl

SCORE = 10.0


def wants_gpu(task) -> bool:
    r = task.request
    return bool(r.gpus or r.is_shared_gpu or r.mig)


class ResourceType:
    name = "resourcetype"

    @hookimpl
    def kai_nodes_alike(self):
        return True  # a node's score follows its allocatable GPUs

    @hookimpl
    def kai_node_scores(self, task, nodes):
        if wants_gpu(task):
            return None
        return [0.0 if n.has_gpus else SCORE for n in nodes]


def build(arguments):
    return ResourceType()
