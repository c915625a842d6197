"""The shared vocabulary of the simulator's cluster file: its limits, Kubernetes quantities, typed entries.

Every error names the file, the entry and the field, and unknown fields are errors (a typo must not be
silently ignored); see ``docs/simulate.md``.
"""

from __future__ import annotations

from typing import Any

import attrs

from kai.api import MIG_PREFIX, mig_gpu_slices
from kai.common.errors import ConfigError
from kai.common.quantity import QuantityError, parse
from kai.common.yamlfile import MAX_NUMBER, Fields, check_number, describe

#: Most nodes and pods a file may describe, and the largest counts of one entry (docs/simulate.md, "Bad input").
MAX_NODES = 10_000
MAX_PODS = 100_000
MAX_GPUS = 1024
MAX_CYCLES = 1000
MAX_PODS_PER_NODE = 10_000
MAX_GPU_MEMORY_MIB = 2**31 - 1
MAX_PRIORITY = 2**31 - 1

def parse_quantity(value: Any, where: str, field: str) -> float:
    """A Kubernetes quantity (a number or a string such as ``500m`` or ``16Gi``) in base units, at most
    :data:`~kai.common.yamlfile.MAX_NUMBER` in size."""

    def fail(message: str) -> ConfigError:
        return ConfigError(f"{where}: field '{field}' {message}")

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return check_number(value, -MAX_NUMBER, MAX_NUMBER, fail)
    try:
        number = float(parse(value)) if isinstance(value, str) else None
    except QuantityError:
        number = None
    if number is None:
        raise ConfigError(f"{where}: field '{field}': {describe(value)} is not a Kubernetes quantity "
                          "(like 500m, 4, 16Gi)")
    if not abs(number) <= MAX_NUMBER:  # also catches inf and nan
        raise fail(f"must be at most {MAX_NUMBER:g} in size, not {describe(value)}")
    return number


class Entry(Fields):
    """Typed access to one entry of a cluster file; unknown fields are errors."""

    def count(self, key: str, default: int, minimum: int = 0, maximum: int = MAX_PODS) -> int:
        return self.whole(key, default, minimum, maximum)

    def quantity(self, key: str, default: Any = attrs.NOTHING) -> float:
        if not self.has(key):
            if default is attrs.NOTHING:
                raise self.fail(key, "is missing")
            return default
        value = parse_quantity(self.data[key], self.where, key)
        if value < 0:
            raise self.fail(key, f"must not be negative, not {describe(self.data[key])}")
        return value


def named(items: Any, file: str, section: str) -> list[tuple[str, Any]]:
    """(where, item) of each entry of a list section, ``where`` naming the entry by index and name."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise ConfigError(f"{file}: field '{section}' must be a list, not {describe(items)}")
    out = []
    for i, item in enumerate(items):
        where = f"{file}: {section}[{i}]"
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(item, dict) and not isinstance(name, str):
            raise ConfigError(f"{where}: field 'name' is missing or not a string")
        out.append((f"{where} {describe(name)}" if name else where, item))
    return out


def mig_counts(e: Entry, key: str) -> dict[str, int]:
    """The MIG devices of the entry's ``key``: ``{profile: count}``."""
    counts = {}
    for profile, count in e.mapping(key).items():
        try:
            mig_gpu_slices(str(profile))
        except ValueError:
            raise ConfigError(f"{e.where}: field '{key}': {describe(profile)} is not a MIG profile like "
                              f"{MIG_PREFIX}1g.10gb") from None
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_GPUS:
            raise ConfigError(f"{e.where}: field '{key}': the count of {profile} must be a whole number from 0 to "
                              f"{MAX_GPUS}, not {describe(count)}")
        counts[str(profile)] = count
    return counts
