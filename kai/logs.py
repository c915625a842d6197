"""Structured logging: every decision names its objects (pod, node, podgroup, queue ...) as fields.

Call sites pass fields through :func:`fields`::

    log.info("bound pod", **fields(pod="team-a/train-0", node="gpu-node-3"))

:func:`configure` installs a formatter that prints them as ``key=value`` after the message
(``text``) or as keys of one JSON object per line (``json``, for log pipelines).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

FORMATS = ("text", "json")
_KEY = "kai_fields"


def fields(**values: Any) -> dict[str, Any]:
    """Keyword arguments for a ``logging`` call that attach ``values`` (None values are dropped)."""
    return {"extra": {_KEY: {k: v for k, v in values.items() if v is not None}}}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    return getattr(record, _KEY, None) or {}


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(f"{k}={_text(v)}" for k, v in record_fields(record).items())
        return f"{line} {extra}" if extra else line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(record_fields(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each record (it may be replaced)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure(fmt: str = "text", level: str | int = "INFO", stream=None) -> None:
    """Route the root logger to ``stream`` (default: the current stderr) in format ``fmt``."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)


def _text(value: Any) -> str:
    text = str(value)
    return f'"{text}"' if (" " in text or not text) else text
