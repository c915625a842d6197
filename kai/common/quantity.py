"""Kubernetes resource quantities ("500m", "16Gi", "1e3") as exact decimals, and ResourceList sums.

The project's one quantity parser: whoever needs a number in base units as a float takes
``float(parse(value))``, correctly rounded from the exact value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, DecimalException

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_FACTORS = {
    None: Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal("1e3"),
    "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def parse(value: str | int | float | Decimal) -> Decimal:
    """The quantity in base units (cores, bytes, devices)."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity (like 500m, 4, 16Gi)")
    number, suffix = Decimal(match.group(1)), match.group(2)
    try:
        if suffix and suffix[0] in "eE" and suffix not in _FACTORS:
            return number.scaleb(int(suffix[1:]))
        return number * _FACTORS[suffix]
    except (DecimalException, ValueError) as exc:  # an exponent beyond what Decimal (or int) reads
        raise QuantityError(f"{value!r} is out of range") from exc


def format_quantity(value: Decimal) -> str:
    """A canonical quantity string: whole numbers plain, fractions in m/u/n when exact."""
    if value == value.to_integral_value():
        return str(int(value))
    for suffix, scale in (("m", 3), ("u", 6), ("n", 9)):
        scaled = value.scaleb(scale)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return format(value.normalize(), "f")


def sum_resources(lists: Iterable[Mapping[str, str | int | float | Decimal] | None]) -> dict[str, Decimal]:
    """Per resource name, the sum of the ResourceLists (``{"cpu": "500m", ...}``) or amounts; None lists are skipped."""
    total: dict[str, Decimal] = {}
    for resources in lists:
        for name, quantity in (resources or {}).items():
            total[name] = total.get(name, Decimal(0)) + parse(quantity)
    return total


def format_resources(amounts: Mapping[str, Decimal]) -> dict[str, str]:
    """A ResourceList of canonical quantity strings, in name order."""
    return {name: format_quantity(value) for name, value in sorted(amounts.items())}


def resource_list_patch(have: Mapping[str, str] | None, want: Mapping[str, str]) -> dict[str, str | None] | None:
    """The JSON merge patch turning ResourceList ``have`` into ``want`` (vanished names become null);
    None when they are equal as quantities ("1000m" equals "1")."""
    have = have or {}
    try:
        if have.keys() == want.keys() and all(parse(have[k]) == parse(want[k]) for k in want):
            return None
    except QuantityError:
        pass  # an unreadable stored value is overwritten
    return {**{k: None for k in have if k not in want}, **want}
