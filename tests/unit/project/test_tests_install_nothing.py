"""No test installs a distribution into the environment running the tests: pip installs what a test builds into a
folder of its own (``support.wheel.install``), which the processes that need it get on their ``PYTHONPATH``. A
distribution installed into this environment would be seen by every later test, and left behind by an interrupted
one."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
PIP = re.compile(r"""["']pip["']""")
INSTALL = re.compile(r"""["']install["']""")
UNINSTALL = re.compile(r"""["']uninstall["']""")


def installs_into_this_environment(source: str) -> bool:
    """Whether a module runs pip's ``install`` without ``--target``, or its ``uninstall``."""
    return bool(PIP.search(source)) and (bool(UNINSTALL.search(source))
                                         or (bool(INSTALL.search(source)) and '"--target"' not in source))


def test_no_test_module_pip_installs_into_this_environment():
    modules = [p for p in sorted(TESTS.rglob("*.py")) if p != Path(__file__).resolve()]  # but this one's examples
    assert [str(p.relative_to(TESTS)) for p in modules if installs_into_this_environment(p.read_text())] == []


def test_the_check_finds_an_install_into_this_environment():
    assert installs_into_this_environment('subprocess.run([sys.executable, "-m", "pip", "install", wheel])')
    assert installs_into_this_environment('pip("uninstall", "-y", DIST)\ndef pip(*a): run(["pip", *a])')
    assert not installs_into_this_environment('run([sys.executable, "-m", "pip", "install", "--target", d, w])')
    assert not installs_into_this_environment('run([sys.executable, "-m", "pip", "wheel", "--no-deps", src])')
