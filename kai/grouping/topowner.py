"""The ``kai.scheduler/top-owner-metadata`` annotation: the top owner's identity as a small YAML text.

The text is byte-identical to KAI's (Go ``gopkg.in/yaml.v3``): one ``key: value`` line for name,
uid, group, version and kind; a value YAML would read as something other than a string is
double-quoted, a value that cannot be written plain is single-quoted.
"""

from __future__ import annotations

import re

from kai.grouping.unstructured import gvk, meta_str

_NULLS = {"", "~", "null", "Null", "NULL"}
_BOOLS = {"true", "True", "TRUE", "false", "False", "FALSE"}
_OLD_BOOLS = {"y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "n", "N", "no", "No", "NO", "off", "Off", "OFF"}
_SPECIAL_FLOATS = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN"}
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_INT = re.compile(r"[-+]?(0b[01]+|0o?[0-7]+|0x[0-9a-fA-F]+|[0-9]+)")
_BASE60 = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
    r"([Tt ][0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(\.[0-9]*)?(Z|[+-][0-9]{1,2}(:[0-9]{2})?)?)?"
)
_INDICATORS_FIRST = set("#,[]{}&*!|>'\"%@`")


def _reads_as_non_string(value: str) -> bool:
    plain = value.replace("_", "")
    return (
        value in _NULLS
        or value in _BOOLS
        or value in _OLD_BOOLS
        or value in _SPECIAL_FLOATS
        or bool(_INT.fullmatch(plain))
        or bool(_FLOAT.fullmatch(plain))
        or bool(_BASE60.fullmatch(value))
        or bool(_TIMESTAMP.fullmatch(value))
    )


def _plain_allowed(value: str) -> bool:
    if value[0] in " \t" or value[-1] in " \t" or value.startswith(("---", "...")):
        return False
    if value[0] in _INDICATORS_FIRST or (value[0] in "-?:" and (len(value) == 1 or value[1] == " ")):
        return False
    if ": " in value or value.endswith(":") or " #" in value:
        return False
    return all(ch.isprintable() for ch in value)


def _scalar(value: str) -> str:
    if _reads_as_non_string(value):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if not _plain_allowed(value):
        return "'" + value.replace("'", "''") + "'"
    return value


def top_owner_metadata(top_owner: dict) -> str:
    """The annotation value describing ``top_owner``."""
    group, version, kind = gvk(top_owner)
    fields = [
        ("name", meta_str(top_owner, "name")),
        ("uid", meta_str(top_owner, "uid")),
        ("group", group),
        ("version", version),
        ("kind", kind),
    ]
    return "".join(f"{key}: {_scalar(value)}\n" for key, value in fields)
