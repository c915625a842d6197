"""Resource quantities in the scheduler's units: CPU millicores, memory bytes, GPUs in devices.

Extended resources (MIG profiles such as ``nvidia.com/mig-1g.10gb``, ``pods`` and any other scalar)
live in ``scalars`` by their Kubernetes name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import attrs

from kai.api.names import GPU, GPU_FRACTION, GPU_FRACTION_NUM_DEVICES, GPU_MEMORY, MIG_PREFIX

#: Tolerance for comparing fractional quantities (GPU fractions add up in floating point).
EPSILON = 1e-9

_MIG_RE = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb$")

#: GPU memory assumed when a node does not say (KAI's default; a fraction of it is still a whole number).
DEFAULT_GPU_MEMORY_MIB = 100
_MIB_IN_TIB = 1024 * 1024


def mig_gpu_slices(profile: str) -> int:
    """Number of GPU slices of a MIG profile name (``nvidia.com/mig-3g.20gb`` -> 3); counts as GPUs in quota."""
    m = _MIG_RE.match(profile)
    if not m:
        raise ValueError(f"not a MIG profile resource name: {profile!r}")
    return int(m.group(1))


def is_mig_resource(name: str) -> bool:
    return name.startswith(MIG_PREFIX)


def gpu_memory_from_label(value: str | None) -> int:
    """Memory of each GPU device in MiB from the node label, floored to a multiple of 100; 0 when absent or bad.

    Values of a TiB or more are bytes (a known GPU-feature-discovery quirk) and are converted.
    """
    try:
        mib = int(value) if value is not None else 0
    except ValueError:
        return 0
    if mib >= _MIB_IN_TIB:
        mib //= 2**20
    return max(mib - mib % 100, 0)


class GpuRequestError(ValueError):
    """A pod's GPU request cannot be scheduled; ``field`` names the annotation or resource at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def parse_gpu_sharing(annotations: Mapping[str, str], gpu_limit: float = 0.0) -> tuple[float, int, int]:
    """``(fraction, devices, memory MiB)`` of a pod's GPU-sharing annotations; ``(0.0, 1, 0)`` without any.

    ``gpu_limit`` is the pod's ``nvidia.com/gpu`` limit (a shared request may not have one). Raises
    :class:`GpuRequestError` naming the field when the request is malformed, with KAI's rules: a fraction
    in (0, 1], a positive whole number of MiB, not both, a positive whole number of devices only together
    with a fraction or memory.
    """
    raw_fraction = annotations.get(GPU_FRACTION)
    raw_memory = annotations.get(GPU_MEMORY)
    raw_devices = annotations.get(GPU_FRACTION_NUM_DEVICES)
    fraction, memory, devices = 0.0, 0, 1
    if raw_fraction is not None:
        try:
            fraction = float(raw_fraction)
        except (TypeError, ValueError):
            raise GpuRequestError(GPU_FRACTION, f"annotation {GPU_FRACTION}={raw_fraction!r} is not a number") from None
        if not 0.0 < fraction <= 1.0:
            raise GpuRequestError(GPU_FRACTION, f"annotation {GPU_FRACTION}={raw_fraction!r} must be in (0, 1]")
    if raw_memory is not None:
        if raw_fraction is not None:
            raise GpuRequestError(GPU_MEMORY, f"annotations {GPU_FRACTION} and {GPU_MEMORY} may not be used together")
        memory = _positive_int(raw_memory, GPU_MEMORY)
    if raw_devices is not None:
        if raw_fraction is None and raw_memory is None:
            raise GpuRequestError(GPU_FRACTION_NUM_DEVICES, f"annotation {GPU_FRACTION_NUM_DEVICES} needs "
                                  f"{GPU_FRACTION} or {GPU_MEMORY}")
        devices = _positive_int(raw_devices, GPU_FRACTION_NUM_DEVICES)
    if (fraction or memory) and gpu_limit:
        shared = GPU_FRACTION if fraction else GPU_MEMORY
        raise GpuRequestError(GPU, f"annotation {shared} may not be used together with a {GPU} limit")
    return fraction, devices, memory


def _positive_int(raw: object, field: str) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise GpuRequestError(field, f"annotation {field}={raw!r} is not a whole number") from None
    if value <= 0:
        raise GpuRequestError(field, f"annotation {field}={raw!r} must be positive")
    return value


@attrs.define(slots=True)
class Resources:
    """A vector of resource amounts (allocatable, idle, used, releasing ...)."""

    cpu: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0
    scalars: dict[str, float] = attrs.field(factory=dict)

    def copy(self) -> Resources:
        return Resources(self.cpu, self.memory, self.gpu, dict(self.scalars))

    def add(self, other: Resources) -> Resources:
        self.cpu += other.cpu
        self.memory += other.memory
        self.gpu += other.gpu
        for k, v in other.scalars.items():
            self.scalars[k] = self.scalars.get(k, 0.0) + v
        return self


@attrs.define(slots=True, frozen=True)
class ResourceRequest:
    """What one task asks for.

    ``gpus`` is a number of whole devices. A shared-GPU request sets ``gpu_fraction`` (a portion of
    each of ``gpu_devices`` devices) or ``gpu_memory_mib`` (that much memory of one device).
    ``mig`` maps MIG profile resource names to counts. ``scalars`` holds other extended resources.
    ``dra_gpus`` counts the GPUs the pod's ResourceClaims ask for (devices of GPU device classes): they
    count for the queue like whole GPUs, while the devices themselves are found by the
    ``dynamicresources`` plugin, not taken from the node's GPU amount.
    """

    cpu: float = 0.0
    memory: float = 0.0
    gpus: int = 0
    gpu_fraction: float = 0.0
    gpu_devices: int = 1
    gpu_memory_mib: int = 0
    mig: dict[str, int] = attrs.field(factory=dict)
    scalars: dict[str, float] = attrs.field(factory=dict)
    dra_gpus: int = 0

    @property
    def is_shared_gpu(self) -> bool:
        return self.gpu_fraction > 0 or self.gpu_memory_mib > 0

    @property
    def is_whole_gpu(self) -> bool:
        """Whole devices only (KAI's regular GPU request)."""
        return self.gpus > 0 and not self.is_shared_gpu and not self.mig

    @property
    def wants_gpu(self) -> bool:
        return self.gpus > 0 or self.is_shared_gpu or bool(self.mig) or self.dra_gpus > 0

    def problem(self) -> tuple[str, str] | None:
        """``(field, message)`` when the request can never be scheduled, else None (see :func:`parse_gpu_sharing`)."""
        if self.gpu_fraction and self.gpu_memory_mib:
            return GPU_MEMORY, f"{GPU_FRACTION} and {GPU_MEMORY} may not be used together"
        if self.gpu_fraction and not 0.0 < self.gpu_fraction <= 1.0:
            return GPU_FRACTION, f"{GPU_FRACTION} {self.gpu_fraction:g} must be in (0, 1]"
        if self.gpu_memory_mib < 0:
            return GPU_MEMORY, f"{GPU_MEMORY} {self.gpu_memory_mib} must be positive"
        if self.gpu_devices < 1:
            return GPU_FRACTION_NUM_DEVICES, f"{GPU_FRACTION_NUM_DEVICES} {self.gpu_devices} must be positive"
        if self.gpu_devices > 1 and not self.is_shared_gpu:
            return GPU_FRACTION_NUM_DEVICES, f"{GPU_FRACTION_NUM_DEVICES} needs {GPU_FRACTION} or {GPU_MEMORY}"
        if self.is_shared_gpu and (self.gpus or self.mig):
            return GPU, f"a shared-GPU request may not also ask for {GPU} or MIG devices"
        for profile, count in self.mig.items():
            if not _MIG_RE.match(profile):
                return profile, f"{profile!r} is not a MIG profile resource name"
            if count < 0:
                return profile, f"{profile} count {count} must not be negative"
        return None

    @property
    def is_best_effort(self) -> bool:
        return (
            self.cpu == 0 and self.memory == 0 and self.gpus == 0 and not self.is_shared_gpu
            and not self.mig and not any(self.scalars.values()) and not self.dra_gpus
        )

    @property
    def gpus_required(self) -> float:
        """KAI's reported GPU request: whole devices, or the fraction times its devices; 0 for memory and MIG."""
        if self.gpu_fraction > 0:
            return round(self.gpu_fraction * self.gpu_devices, 2) + self.dra_gpus
        return float(self.gpus + self.dra_gpus)

    def node_resources(self) -> Resources:
        """The amounts this request takes from a node's vector (shared GPUs are accounted by device groups)."""
        scalars = dict(self.scalars)
        for profile, count in self.mig.items():
            scalars[profile] = scalars.get(profile, 0.0) + count
        return Resources(self.cpu, self.memory, float(self.gpus), scalars)

    def accepted_gpus(self, node_gpu_memory_mib: float) -> float:
        """GPUs granted on a node: a memory request is rounded up to 0.01 of the node's device memory."""
        if self.gpu_memory_mib and node_gpu_memory_mib:
            return self.gpu_devices * math.ceil(self.gpu_memory_mib / node_gpu_memory_mib * 100 - 1e-9) / 100
        return self.quota_gpus()

    def quota_gpus(self, gpu_memory_mib: float = 0.0, dra: bool = True) -> float:
        """GPUs charged to the queue: whole, fraction, MIG slices, or memory over the device's memory, and the
        DRA GPUs (``dra=False``: only the GPUs taken from the nodes' GPU amounts)."""
        gpus = float(self.gpus + (self.dra_gpus if dra else 0)) + self.gpu_fraction * self.gpu_devices
        # A malformed profile name counts nothing (the snapshot reports the task as a problem).
        if self.mig:
            gpus += sum(int(m.group(1)) * c for p, c in self.mig.items() if (m := _MIG_RE.match(p)))
        if self.gpu_memory_mib and gpu_memory_mib:
            gpus += self.gpu_devices * self.gpu_memory_mib / gpu_memory_mib
        return gpus
