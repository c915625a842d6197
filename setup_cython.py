"""Build logic for the Cython extensions in ``kai/_native``.

``pyproject.toml`` declares the extensions and points ``build_ext`` here. The ``.pyx`` sources are
cythonized at build time (language level 3, bounds checks and wraparound off). Without a working
compiler or Cython the build falls back to the pure-Python twins with a warning, unless
``KAI_REQUIRE_EXTENSIONS=1`` is set, in which case it fails.
"""

from __future__ import annotations

import os
import warnings

from setuptools.command.build_ext import build_ext as _build_ext

DIRECTIVES = {"language_level": "3", "boundscheck": False, "wraparound": False, "cdivision": True}


def _required() -> bool:
    return os.environ.get("KAI_REQUIRE_EXTENSIONS") == "1"


class build_ext(_build_ext):
    """``build_ext`` that cythonizes ``.pyx`` sources and tolerates a missing toolchain."""

    def finalize_options(self):
        super().finalize_options()
        try:
            from Cython.Build import cythonize
        except ImportError as exc:
            self._fallback(f"Cython is not installed ({exc})")
            return
        for ext in self.extensions:  # keep setuptools' Extension objects, swap .pyx for generated .c
            ext.sources = cythonize([ext], compiler_directives=DIRECTIVES, quiet=True)[0].sources

    def _fallback(self, why: str):
        if _required():
            raise RuntimeError(f"KAI_REQUIRE_EXTENSIONS=1 but the native extensions cannot be built: {why}")
        warnings.warn(f"kai-scheduler: building without native extensions, using pure Python ({why})", stacklevel=2)
        self.extensions = []

    def run(self):
        if not self.extensions:
            return
        try:
            super().run()
        except Exception as exc:  # compiler missing or failing
            self._fallback(str(exc))

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            if _required():
                raise
            warnings.warn(f"kai-scheduler: extension {ext.name} not built, using its pure-Python twin ({exc})",
                          stacklevel=2)
