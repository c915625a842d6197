"""GPU-sharing plugins: ``gpupack`` and ``gpuspread`` choose the device of a shared-GPU task,
``gpusharingorder`` prefers nodes where the task can join a device that is already shared.

* ``gpupack`` (bin-packing, KAI's default): a shared device scores the share of its memory in use,
  a device nobody shares scores 0 -- fill the fullest shared device first, open new ones last.
* ``gpuspread``: a device nobody shares scores 1, a shared one ``1 - used share`` -- open new devices
  first, then the emptiest shared one.
* ``gpusharingorder``: +1000 node score when the node has a shared device the task fits on.
"""

from kai.sdk import hookimpl

#: KAI's score of a node with a fitting shared device: above fits-now (100) and placement (<= 10).
GPU_SHARING_SCORE = 1000.0


class GpuPack:
    name = "gpupack"

    @hookimpl
    def kai_gpu_scores(self, task, node, groups):
        return [0.0 if g is None else node.used_gpu_portion(g) for g in groups]


class GpuSpread:
    name = "gpuspread"

    @hookimpl
    def kai_gpu_scores(self, task, node, groups):
        return [1.0 if g is None else 1.0 - node.used_gpu_portion(g) for g in groups]


class GpuSharingOrder:
    name = "gpusharingorder"

    @hookimpl
    def kai_nodes_alike(self, task):
        return not task.request.is_shared_gpu

    @hookimpl
    def kai_node_scores(self, task, nodes):
        if not task.request.is_shared_gpu:
            return None
        return [GPU_SHARING_SCORE if n.gpu_groups and n.fitting_gpu_groups(task) else 0.0 for n in nodes]


def build_gpupack(arguments):
    return GpuPack()


def build_gpuspread(arguments):
    return GpuSpread()


def build_gpusharingorder(arguments):
    return GpuSharingOrder()
