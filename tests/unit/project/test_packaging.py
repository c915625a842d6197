"""The wheel holds every package of the source tree, its Cython sources and license files, and no test helper.

The packages expected are found in the source tree (every folder with an ``__init__.py`` under a
folder of pyproject's ``package-dir``), so a package missing from pyproject's ``packages`` fails here.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

import kai

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: Files of a package folder that the wheel must carry.
SOURCE_SUFFIXES = (".py", ".pyx", ".pxd")
MARKERS = ("py.typed",)
#: Compiled extensions, built from the .pyx sources (absent when built without Cython).
NATIVE_SUFFIXES = (".so", ".pyd")
TEST_HELPERS = ("kai/testing_chart.py", "kai/testing_kube.py", "kai/testing_wheel.py", "kai/dev/kaie2e.py",
                "kai/dev/kaisuites.py", "kai/dev/manifests.py")
#: Generated or local state that must not reach the copied source tree.
NOT_SOURCES = shutil.ignore_patterns(".git", ".tox", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis",
                                     ".pytest_cache", "*.so", "*.pyd", "*.c")


def expected_files() -> dict[str, str]:
    """Path in the wheel -> package, for every file of every package of the source tree."""
    files = {}
    for package, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            if "__pycache__" in init.parts:
                continue
            name = ".".join([package, *init.parent.relative_to(ROOT / folder).parts])
            for f in init.parent.iterdir():
                if f.is_file() and (f.suffix in SOURCE_SUFFIXES or f.name in MARKERS):
                    files[f"{name.replace('.', '/')}/{f.name}"] = name
    dirs = PYPROJECT["tool"]["setuptools"]["package-dir"]
    for package, patterns in PYPROJECT["tool"]["setuptools"].get("package-data", {}).items():
        folder = ROOT / dirs.get(package, package.replace(".", "/"))
        for pattern in patterns:  # data files pyproject declares (the shipped trace)
            for f in folder.glob(pattern):
                files[f"{package.replace('.', '/')}/{f.relative_to(folder).as_posix()}"] = package
    return files


def _setuptools_needed() -> str:
    (spec,) = [r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    return spec.partition(">=")[2]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    """The wheel built from a clean copy of the source tree, offline, with the installed setuptools."""
    needed = _setuptools_needed()
    try:
        found = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        found = None
    if found is None or _version(found) < _version(needed):
        pytest.skip(f"building the wheel needs setuptools>={needed}, found {found or 'none'} (the test extra has it)")
    work = tmp_path_factory.mktemp("packaging")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    env = {k: v for k, v in os.environ.items() if k != "KAI_REQUIRE_EXTENSIONS"}  # contents only, not the native build
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--wheel-dir", str(work / "dist"), str(source)],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (path,) = (work / "dist").glob("kai_scheduler-*.whl")
    whl = zipfile.ZipFile(path)
    yield whl
    whl.close()


def test_the_source_tree_has_the_packages_pyproject_maps():
    packages = set(expected_files().values())
    assert {"kai", "kai._native", "kai.plugins", "kai.podgroupers", "kai.plugins.proportion"} <= packages


def test_every_package_of_the_source_tree_is_in_the_wheel(wheel):
    names = set(wheel.namelist())
    missing = {path: package for path, package in expected_files().items() if path not in names}
    assert not missing, f"not in the wheel (pyproject's packages?): {sorted(set(missing.values()))}: {sorted(missing)}"


def test_the_wheel_holds_only_sources_and_native_modules(wheel):
    expected = expected_files()
    dist_info = f"kai_scheduler-{kai.__version__}.dist-info"
    names = [n for n in wheel.namelist() if not n.endswith("/")]
    assert {n.split("/")[0] for n in names} == {"kai", dist_info}
    strays = [n for n in names if n.startswith("kai/") and n not in expected and not n.endswith(NATIVE_SUFFIXES)]
    assert strays == []


def test_no_test_helper_is_in_the_wheel(wheel):
    names = wheel.namelist()
    assert not [n for n in names if n in TEST_HELPERS or n.split("/")[0] in ("support", "tests")]


def test_the_metadata_has_the_package_version_and_the_license_files(wheel):
    dist_info = f"kai_scheduler-{kai.__version__}.dist-info"
    metadata = wheel.read(f"{dist_info}/METADATA").decode()
    assert re.search(rf"^Version: {re.escape(kai.__version__)}$", metadata, re.M)
    assert re.search(r"^License-Expression: Apache-2.0$", metadata, re.M)
    for name in ("LICENSE", "NOTICE"):
        assert wheel.read(f"{dist_info}/licenses/{name}") == (ROOT / name).read_bytes()


def test_cel_comes_with_every_install(wheel):
    """DRA works on a plain ``pip install``: CEL is a requirement of the package, not of an extra."""
    dist_info = f"kai_scheduler-{kai.__version__}.dist-info"
    requires = re.findall(r"^Requires-Dist: (.*)$", wheel.read(f"{dist_info}/METADATA").decode(), re.M)
    cel = [r for r in requires if r.startswith("cel-python")]
    assert cel and all("extra ==" not in r for r in cel), requires


def test_the_console_s_templates_and_jinja_come_with_every_install(wheel):
    """The web console renders on a plain ``pip install``: Jinja2 is a requirement, not an extra, and the
    templates are in the wheel."""
    dist_info = f"kai_scheduler-{kai.__version__}.dist-info"
    requires = re.findall(r"^Requires-Dist: (.*)$", wheel.read(f"{dist_info}/METADATA").decode(), re.M)
    jinja = [r for r in requires if r.lower().startswith("jinja2")]
    assert jinja and all("extra ==" not in r for r in jinja), requires
    assert {"kai/scheduler/console/templates/base.html", "kai/scheduler/console/templates/console.css"} <= set(
        wheel.namelist())
