"""Durations written the way KAI's configuration writes them (Go's ``time.Duration``): ``90s``, ``1h30m``, ``10m``.

:func:`parse_duration` reads such a string (or a plain number of seconds) into seconds -- every
configuration field and, through :func:`duration_flag`, every command-line flag that is a duration;
:func:`format_duration` writes seconds back in Go's canonical form (``168h0m0s``, ``1m0s``, ``500ms``),
which is also the form KAI puts into its Prometheus queries.
"""

from __future__ import annotations

import argparse
import math
import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_SECONDS = re.compile(r"\d+(\.\d+)?")


def parse_duration(value: object, what: str = "duration") -> float:
    """Seconds in ``value``: a Go duration string (``"10m"``, ``"1h30m"``, ``"0"``) or a number of seconds.

    Raises ``ValueError`` naming ``what`` for anything else.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{what}: {value!r} is not a finite number of seconds")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"{what}: {value!r} is not a duration (like 30s, 10m, 1h30m)")
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    pos, seconds = 0, 0.0
    while pos < len(body):
        m = _PART.match(body, pos)
        if m is None:
            break
        seconds += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not body or pos != len(body):
        raise ValueError(f"{what}: {value!r} is not a duration (like 30s, 10m, 1h30m)")
    return sign * seconds


def duration_flag(text: str) -> float:
    """Seconds of a duration flag (argparse ``type=``): a Go duration (``1s``, ``1m30s``) or a bare number of seconds.

    A negative or unreadable value is an ``argparse.ArgumentTypeError``, which argparse reports naming the flag.
    """
    error = argparse.ArgumentTypeError(f"{text!r} is not a duration (like 1s, 1m30s, 500ms) or a number of seconds")
    try:
        seconds = float(text) if _SECONDS.fullmatch(text.strip()) else parse_duration(text)
    except ValueError:
        raise error from None
    if seconds < 0:
        raise error
    return seconds


def format_duration(seconds: float) -> str:
    """Go's ``time.Duration.String()`` of ``seconds`` (whole nanoseconds)."""
    ns = round(seconds * 1e9)
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("\u00b5s", 1_000), ("ns", 1)):
            if ns >= size or unit == "ns":
                return sign + _decimal(ns, size) + unit
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _decimal(rest, 1_000_000_000) + "s"
    if hours or minutes:
        text = f"{minutes}m" + text
    if hours:
        text = f"{hours}h" + text
    return sign + text


def _decimal(value: int, size: int) -> str:
    whole, frac = divmod(value, size)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(size)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"
