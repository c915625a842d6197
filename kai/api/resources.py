"""Resource quantities in the scheduler's units: CPU millicores, memory bytes, GPUs in devices.

Extended resources (MIG profiles such as ``nvidia.com/mig-1g.10gb``, ``pods`` and any other scalar)
live in ``scalars`` by their Kubernetes name.
"""

from __future__ import annotations

import re

import attrs

#: Tolerance for comparing fractional quantities (GPU fractions add up in floating point).
EPSILON = 1e-9

GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
_MIG_RE = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb$")


def mig_gpu_slices(profile: str) -> int:
    """Number of GPU slices of a MIG profile name (``nvidia.com/mig-3g.20gb`` -> 3); counts as GPUs in quota."""
    m = _MIG_RE.match(profile)
    if not m:
        raise ValueError(f"not a MIG profile resource name: {profile!r}")
    return int(m.group(1))


@attrs.define(slots=True)
class Resources:
    """A vector of resource amounts (allocatable, idle, used, releasing ...)."""

    cpu: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0
    scalars: dict[str, float] = attrs.field(factory=dict)

    def copy(self) -> "Resources":
        return Resources(self.cpu, self.memory, self.gpu, dict(self.scalars))

    def add(self, other: "Resources") -> "Resources":
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
    """

    cpu: float = 0.0
    memory: float = 0.0
    gpus: int = 0
    gpu_fraction: float = 0.0
    gpu_devices: int = 1
    gpu_memory_mib: int = 0
    mig: dict[str, int] = attrs.field(factory=dict)
    scalars: dict[str, float] = attrs.field(factory=dict)

    @property
    def is_shared_gpu(self) -> bool:
        return self.gpu_fraction > 0 or self.gpu_memory_mib > 0

    @property
    def is_best_effort(self) -> bool:
        return (
            self.cpu == 0 and self.memory == 0 and self.gpus == 0 and not self.is_shared_gpu
            and not self.mig and not any(self.scalars.values())
        )

    @property
    def gpus_required(self) -> float:
        """KAI's reported GPU request: whole devices, or the fraction times its devices; 0 for memory and MIG."""
        if self.gpu_fraction > 0:
            return round(self.gpu_fraction * self.gpu_devices, 2)
        return float(self.gpus)

    def node_resources(self) -> Resources:
        """The amounts this request takes from a node's vector (shared GPUs are accounted by device groups)."""
        scalars = dict(self.scalars)
        for profile, count in self.mig.items():
            scalars[profile] = scalars.get(profile, 0.0) + count
        return Resources(self.cpu, self.memory, float(self.gpus), scalars)

    def quota_gpus(self, gpu_memory_mib: float = 0.0) -> float:
        """GPUs charged to the queue: whole, fraction, MIG slices, or memory over the device's memory."""
        gpus = float(self.gpus) + self.gpu_fraction * self.gpu_devices
        gpus += sum(mig_gpu_slices(p) * c for p, c in self.mig.items())
        if self.gpu_memory_mib and gpu_memory_mib:
            gpus += self.gpu_devices * self.gpu_memory_mib / gpu_memory_mib
        return gpus
