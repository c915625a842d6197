"""Nodes whose GPUs come from DRA: KAI v0.17's DRA-backed extended resources (KEP-5004, :mod:`kai.api.dra`)."""

from __future__ import annotations

import attrs

from kai.api.dra import GPU_RESOURCE, DynamicResources
from kai.api.model import Node


def back_extended_gpus(dra: DynamicResources, nodes: list[Node]) -> None:
    """KAI's DRA GPUs for extended resources: when a device class backs ``nvidia.com/gpu``, each node without
    ``nvidia.com/gpu`` of its own but with GPUs in its node-local slices is replaced in ``nodes`` by a copy with
    those GPUs as its ``nvidia.com/gpu`` and is recorded in ``dra.extended_gpu_nodes``."""
    backing = dra.extended_class(GPU_RESOURCE)
    if backing is None:
        return
    for i, node in enumerate(nodes):
        own = node.capacity.gpu if node.capacity is not None else node.allocatable.gpu
        devices = dra.node_gpu_devices(node.name)
        if own or not devices:
            continue
        allocatable, capacity = node.allocatable.copy(), node.capacity.copy() if node.capacity is not None else None
        allocatable.gpu += devices
        if capacity is not None:
            capacity.gpu += devices
        nodes[i] = attrs.evolve(node, allocatable=allocatable, capacity=capacity)
        dra.extended_gpu_nodes[node.name] = backing.name
