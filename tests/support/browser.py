"""A real headless Chromium for tests of HTML pages: Debian's ``chromium`` package.

:func:`chromium` finds ``/usr/bin/chromium``; when it is missing and the tests run as root with ``apt-get``,
it installs Debian's package once (``apt-get update`` first when the package is not in the lists); otherwise
the test is skipped, saying why. :func:`dump_dom` answers the DOM of a page once loaded (scripts run, though
the console has none), :func:`screenshot` saves a PNG of the page's window.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: Flags of every run: headless, as root (no sandbox), and nothing fetched but the page.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars")
INSTALL_TIMEOUT = 900.0
RUN_TIMEOUT = 90.0

_lock = threading.Lock()
_missing: list[str] = []  # why Chromium cannot be had, once found out


def chromium() -> str:
    """The path of Debian's Chromium, installed once if need be; skips the test when it cannot be had."""
    with _lock:
        if not CHROMIUM.exists() and not _missing:
            _missing.extend(_install())
        if not CHROMIUM.exists():
            pytest.skip(f"headless Chromium: {_missing[0] if _missing else 'not installed'}")
    return str(CHROMIUM)


def _install() -> list[str]:
    """Install Debian's chromium with apt-get; the reason it could not be, or nothing."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return [f"{CHROMIUM} is missing, and installing Debian's chromium needs root and apt-get "
                "(apt-get install chromium)"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
    for step in ([install], [["apt-get", "update"], install]):
        result = None
        for command in step:
            result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT)
            if result.returncode != 0:
                break
        if CHROMIUM.exists():
            return []
    tail = (result.stdout + result.stderr).strip().splitlines()[-1:] if result is not None else []
    return [f"apt-get could not install chromium: {' '.join(tail) or 'no output'}"]


def _run(*args: str) -> str:
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        result = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                                text=True, timeout=RUN_TIMEOUT, env={**os.environ, "HOME": profile})
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def dump_dom(url: str) -> str:
    """The serialized DOM of ``url`` once loaded."""
    return _run("--dump-dom", url)


def screenshot(url: str, path: Path, width: int = 1280, height: int = 900) -> Path:
    """A PNG of ``url`` in a ``width`` x ``height`` window, saved at ``path``."""
    _run(f"--screenshot={path}", f"--window-size={width},{height}", url)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no PNG at {path}"
    return path
