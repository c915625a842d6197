"""CEL device selectors, evaluated with ``cel-python``.

A selector sees ``device`` as Kubernetes exposes it: ``device.driver``, ``device.attributes[domain].name``
and ``device.capacity[domain].name`` (a name without a domain belongs to the driver's; an unknown domain
is an empty map). Capacities are quantities: ``quantity("40Gi")``, ``q.compareTo(other)``,
``q.isGreaterThan``, ``q.isLessThan``, ``q.asInteger()``, ``q.asApproximateFloat()``.

Each expression is compiled once per session and each (expression, device) verdict is kept, so a
selector costs one evaluation per device per session. A selector that does not compile, or fails on a
device (a missing attribute), does not match; the reason is kept for the fit error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import celpy
from celpy import celtypes

from kai.sdk import Device, QuantityError, parse_quantity


class Quantity(celtypes.DoubleType):
    """A capacity value or ``quantity(...)`` result: compared only through its methods, as in Kubernetes."""


class _Domains(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: an unknown domain is an empty map."""

    def __getitem__(self, key):
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()


def _sign(a: float, b: float) -> int:
    return (a > b) - (a < b)


def _quantity(text):
    try:
        return Quantity(float(parse_quantity(str(text))))
    except QuantityError:
        return celpy.CELEvalError(f"{str(text)!r} is not a Kubernetes quantity", ValueError, None)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "compareTo": lambda a, b: celtypes.IntType(_sign(float(a), float(b))),
    "isGreaterThan": lambda a, b: celtypes.BoolType(float(a) > float(b)),
    "isLessThan": lambda a, b: celtypes.BoolType(float(a) < float(b)),
    "asInteger": lambda a: celtypes.IntType(math.trunc(float(a))),
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(a)),
}


def _value(value: Any):
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    return celtypes.StringType(str(value))


def _by_domain(driver: str, values: dict[str, Any], convert) -> _Domains:
    domains: dict[str, dict] = {}
    for name, value in values.items():
        domain, _, short = name.rpartition("/")
        domains.setdefault(domain or driver, {})[celtypes.StringType(short)] = convert(value)
    return _Domains({celtypes.StringType(d): celtypes.MapType(v) for d, v in domains.items()})


def activation(driver: str, device: Device) -> dict:
    return {"device": celtypes.MapType({
        celtypes.StringType("driver"): celtypes.StringType(driver),
        celtypes.StringType("attributes"): _by_domain(driver, device.attributes, _value),
        celtypes.StringType("capacity"): _by_domain(driver, device.capacity, Quantity),
    })}


class Selectors:
    """The selectors of one session: compiled once, verdicts kept per device."""

    def __init__(self) -> None:
        self.programs: dict[str, Any] = {}
        #: Why an expression does not compile, or why it failed on some device (the first such reason).
        self.errors: dict[str, str] = {}
        self.verdicts: dict[tuple[str, tuple[str, str, str]], bool] = {}
        self.activations: dict[tuple[str, str, str], dict] = {}
        self.environment = celpy.Environment()

    def compile(self, expression: str) -> str | None:
        """Compile ``expression`` (once); why it cannot be used, or None."""
        if expression in self.programs:
            return None
        if expression in self.errors:
            return self.errors[expression]
        try:
            ast = self.environment.compile(expression)
            self.programs[expression] = self.environment.program(ast, functions=FUNCTIONS)
        except Exception as exc:  # noqa: BLE001 -- celpy raises its own parse and type errors
            self.errors[expression] = f"CEL expression {expression!r} does not compile: {_first_line(exc)}"
            return self.errors[expression]
        return None

    def matches(self, expression: str, device_id: tuple[str, str, str], device: Device) -> bool:
        key = (expression, device_id)
        verdict = self.verdicts.get(key)
        if verdict is None:
            verdict = self.verdicts[key] = self._evaluate(expression, device_id, device)
        return verdict

    def _evaluate(self, expression: str, device_id: tuple[str, str, str], device: Device) -> bool:
        if self.compile(expression) is not None:
            return False
        act = self.activations.get(device_id)
        if act is None:
            act = self.activations[device_id] = activation(device_id[0], device)
        try:
            result = self.programs[expression].evaluate(act)
        except Exception as exc:  # noqa: BLE001 -- a runtime error (a missing attribute) is no match
            result = exc
        if isinstance(result, Exception):
            self.errors.setdefault(expression, f"CEL expression {expression!r} failed on device "
                                               f"{device_id[2]}: {_first_line(result)}")
            return False
        if not isinstance(result, (bool, celtypes.BoolType)):
            self.errors.setdefault(expression, f"CEL expression {expression!r} is not a boolean")
            return False
        return bool(result)


def _first_line(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    return " ".join(text.split())[:200]
