"""Reading fields of Kubernetes objects held as plain maps, with the outcomes of KAI's Go accessors.

``nested_*`` walk a path of keys: a missing key or an intermediate ``null`` is *not found*; an
intermediate value that is not a map, or a leaf of the wrong type (``null`` included), raises
:class:`FieldError`. Each returns ``(value, found)``.
"""

# Without ``from __future__ import annotations``: its name would be taken by :func:`annotations` below.
import re

from kai.api.podgroup import GroupingError

_MISSING = object()


class FieldError(GroupingError):
    """A field exists but has the wrong type."""


def _go_type(value) -> str:
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    if isinstance(value, dict):
        return "map[string]interface {}"
    return type(value).__name__


def _go_value(value) -> str:
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + " ".join(_go_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_value(v)}" for k, v in sorted(value.items())) + "]"
    return str(value)


def _path(fields) -> str:
    return "." + ".".join(fields)


def _type_error(fields, value, expected: str) -> FieldError:
    return FieldError(
        f"{_path(fields)} accessor error: {_go_value(value)} is of the type {_go_type(value)}, expected {expected}"
    )


def nested(obj, *fields):
    """The raw value at ``fields`` and whether it was found (any type)."""
    value = obj
    for i, field in enumerate(fields):
        if value is None:
            return None, False
        if not isinstance(value, dict):
            raise _type_error(fields[: i + 1], value, "map[string]interface{}")
        value = value.get(field, _MISSING)
        if value is _MISSING:
            return None, False
    return value, True


def _typed(obj, fields, check, expected):
    value, found = nested(obj, *fields)
    if not found:
        return None, False
    if not check(value):
        raise _type_error(fields, value, expected)
    return value, True


def nested_int(obj, *fields):
    """An integer leaf (``bool`` and ``float`` are type errors)."""
    return _typed(obj, fields, lambda v: isinstance(v, int) and not isinstance(v, bool), "int64")


def nested_str(obj, *fields):
    """A string leaf."""
    return _typed(obj, fields, lambda v: isinstance(v, str), "string")


def nested_bool(obj, *fields):
    """A boolean leaf."""
    return _typed(obj, fields, lambda v: isinstance(v, bool), "bool")


def nested_map(obj, *fields):
    """A map leaf."""
    return _typed(obj, fields, lambda v: isinstance(v, dict), "map[string]interface{}")


def nested_list(obj, *fields):
    """A list leaf."""
    return _typed(obj, fields, lambda v: isinstance(v, list), "[]interface{}")


def nested_str_list(obj, *fields):
    """A list of strings."""
    value, found = nested_list(obj, *fields)
    if not found:
        return None, False
    for item in value:
        if not isinstance(item, str):
            raise FieldError(
                f"{_path(fields)} accessor error: contains non-string value in the slice: "
                f"{_go_value(item)} is of the type {_go_type(item)}, expected string"
            )
    return value, True


_ATOI = re.compile(r"[+-]?[0-9]+")


def atoi(text: str) -> int:
    """Parse a decimal integer strictly (optional sign, digits only), as Go's ``strconv.Atoi``."""
    if not isinstance(text, str) or not _ATOI.fullmatch(text):
        raise ValueError(f'strconv.Atoi: parsing "{text}": invalid syntax')
    return int(text)


def parse_int32(text: str) -> int:
    """Parse a decimal 32-bit integer as Go's ``strconv.ParseInt(text, 10, 32)``; ``ValueError`` with Go's text."""
    if not isinstance(text, str) or not _ATOI.fullmatch(text):
        raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise ValueError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return value


def _string_map(obj, key: str) -> dict[str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    values = meta.get(key) if isinstance(meta, dict) else None
    if not isinstance(values, dict):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in values.items()}


def labels(obj) -> dict[str, str]:
    """A copy of the object's labels (missing or ``null`` = empty)."""
    return _string_map(obj, "labels")


def annotations(obj) -> dict[str, str]:
    """A copy of the object's annotations (missing or ``null`` = empty)."""
    return _string_map(obj, "annotations")


def meta_str(obj, key: str) -> str:
    """A string field of ``metadata`` (``name``, ``namespace``, ``uid``), ``""`` when absent."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    value = meta.get(key) if isinstance(meta, dict) else None
    return "" if value is None else str(value)


def split_api_version(api_version: str) -> tuple[str, str]:
    """``"apps/v1"`` -> ``("apps", "v1")``; ``"v1"`` -> ``("", "v1")``; malformed -> ``("", "")``."""
    parts = (api_version or "").split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    return "", ""


def gvk(obj) -> tuple[str, str, str]:
    """The (group, version, kind) of an object map."""
    group, version = split_api_version(str(obj.get("apiVersion") or ""))
    return group, version, str(obj.get("kind") or "")
