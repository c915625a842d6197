"""``nodeplacement``: bin-pack or spread, per task type (GPU tasks by GPUs, CPU-only tasks by CPU).

Arguments ``gpu`` and ``cpu``, each ``binpack`` (default) or ``spread``. Binpack prefers the node
with the least non-allocated (idle + releasing) amount of the resource, scaled 0..9 between the
least and the most free candidate; spread prefers the largest free fraction (0..1).
"""

from array import array

from kai.sdk import GPU_COUNT_LABEL, hookimpl, placement_scores

MAX_HIGH_DENSITY = 9.0
STRATEGIES = ("binpack", "spread")


def is_cpu_only(task) -> bool:
    r = task.request
    return not (r.gpus or r.is_shared_gpu or r.mig)


def gpu_count(node) -> float:
    label = node.labels.get(GPU_COUNT_LABEL)
    try:
        return float(label) if label is not None else node.allocatable.gpu
    except ValueError:
        return node.allocatable.gpu


class NodePlacement:
    name = "nodeplacement"

    def __init__(self, gpu: str, cpu: str):
        self.spread = {"gpu": gpu == "spread", "cpu": cpu == "spread"}

    @hookimpl
    def kai_nodes_alike(self):
        return True  # amounts, totals and the GPU-count label, scaled by the least and most free node

    @hookimpl
    def kai_node_scores(self, task, nodes):
        kind = "cpu" if is_cpu_only(task) else "gpu"
        spread = self.spread[kind]
        a = nodes[0].arrays
        if kind == "gpu":
            free = array("d", (a.idle_gpu[n.index] + a.rel_gpu[n.index] for n in nodes))
            totals = array("d", (gpu_count(n) if spread else n.allocatable.gpu for n in nodes))
        else:
            free = array("d", (a.idle_cpu[n.index] + a.rel_cpu[n.index] for n in nodes))
            totals = array("d", (n.allocatable.cpu for n in nodes))
        out = array("d", bytes(8 * len(nodes)))
        placement_scores(free, totals, spread, 1.0 if spread else MAX_HIGH_DENSITY, out)
        return out


def build(arguments):
    gpu, cpu = arguments.get("gpu", "binpack"), arguments.get("cpu", "binpack")
    for key, value in (("gpu", gpu), ("cpu", cpu)):
        if value not in STRATEGIES:
            raise ValueError(f"argument {key!r} must be one of {', '.join(STRATEGIES)}, not {value!r}")
    return NodePlacement(gpu, cpu)
