"""Cython kernels for the hot loops, each beside a pure-Python twin with the same functions.

``kai._native.load(name)`` returns the compiled module ``NAME`` unless ``KAI_NO_EXTENSIONS=1`` is
set or it was not built, and the twin ``NAME_py`` otherwise. ``KAI_REQUIRE_EXTENSIONS=1`` turns a
missing compiled module into an ImportError.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: Names of the modules that were loaded as compiled extensions (for ``kai-scheduler plugins`` and tests).
NATIVE_LOADED: set[str] = set()


def load(name: str) -> ModuleType:
    """Import ``kai._native.NAME`` (compiled) or its twin ``kai._native.NAME_py``."""
    if os.environ.get("KAI_NO_EXTENSIONS") != "1":
        try:
            module = importlib.import_module(f"kai._native.{name}")
        except ImportError:
            if os.environ.get("KAI_REQUIRE_EXTENSIONS") == "1":
                raise
        else:
            NATIVE_LOADED.add(name)
            return module
    return importlib.import_module(f"kai._native.{name}_py")
