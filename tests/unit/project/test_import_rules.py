"""Who may import whom between packages (docs/architecture.md), checked on the source of every module.

Imports inside functions count too: a lazy import is still a dependency. The kernel's own, stricter
rules (only the API, the native modules and itself; no cycle) are in test_kernel_imports.py; the
packages without a cycle between their modules, counting every import, are checked here.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: Source folders and the package each is installed as.
SOURCES = {"kai": "kai", "plugins": "kai.plugins", "podgroupers": "kai.podgroupers"}
#: The example distributions: third-party code, held to what a plugin author may import.
EXAMPLES = ROOT / "examples"

SDK = "kai.sdk"
TESTING = ("kai.testing", "kai.testing_podgroupers")
COMPONENTS = ("kai.scheduler", "kai.binder", "kai.controllers", "kai.admission")
DRIVERS = (*COMPONENTS, "kai.kube", "kai.dev", "kai.sim", "kai.usagedb", "kai.run", "kai.rbac", "kai.cli")
EXTENSIONS = ("kai.plugins", "kai.podgroupers")
KERNEL = ("kai.framework", "kai.hookspecs", "kai._native")


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in SOURCES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


MODULES = _modules()


def _examples() -> dict[str, Path]:
    return {".".join(("examples", *path.relative_to(EXAMPLES).with_suffix("").parts)): path
            for path in EXAMPLES.rglob("*.py")}


EXAMPLE_MODULES = _examples()


def _imports(name: str, path: Path) -> set[str]:
    """The ``kai`` modules (or names of a package) a module imports, resolved to dotted names: ``from kai
    import testing`` imports ``kai.testing``, ``from kai import hookimpl`` the package ``kai``."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            modules = {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES}
            out.update(modules)
            if len(modules) < len(node.names):
                out.add(base)
    return {m for m in out if m == "kai" or m.startswith("kai.")}


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _top(module: str) -> str:
    """The unit a module belongs to: ``kai.plugins.proportion`` for ``kai.plugins.proportion.shares``."""
    parts = module.split(".")
    return ".".join(parts[:3]) if _within(module, EXTENSIONS) else ".".join(parts[:2])


def _violations(allowed, modules: dict[str, Path] = MODULES) -> list[str]:
    return sorted(f"{name} imports {dep}" for name, path in modules.items()
                  for dep in _imports(name, path) if not allowed(name, dep))


def _graph(package: str) -> dict[str, list[str]]:
    """The imports between the modules of ``package``."""
    inside = {name: path for name, path in MODULES.items() if _within(name, (package,))}
    return {name: sorted(d for d in _imports(name, path) if d in inside and d != name) for name, path in inside.items()}


def _cycle(edges: dict[str, list[str]]) -> list[str]:
    """One cycle of ``edges`` as ``[a, b, a]``, or ``[]`` when there is none."""
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> list[str]:
        if name in path:
            return [*path[path.index(name):], name]
        if name in done:
            return []
        for target in edges.get(name, ()):
            if found := visit(target, (*path, name)):
                return found
        done.add(name)
        return []

    for name in sorted(edges):
        if found := visit(name, ()):
            return found
    return []


def test_the_source_tree_is_found():
    assert {"kai.api.model", "kai.framework.session", "kai.plugins.priority", "kai.podgroupers.batch",
            "kai.kube.client", "kai.scheduler.loop"} <= set(MODULES)


def test_api_imports_nothing_else_of_kai():
    assert _violations(lambda name, dep: not _within(name, ("kai.api",)) or _within(dep, ("kai.api",))) == []


def test_common_imports_nothing_else_of_kai():
    assert _violations(lambda name, dep: not _within(name, ("kai.common",)) or _within(dep, ("kai.common",))) == []


def test_importing_common_loads_no_other_module_of_kai():
    code = ("import importlib, pkgutil, sys, kai.common\n"
            "for m in pkgutil.iter_modules(kai.common.__path__, 'kai.common.'):\n"
            "    importlib.import_module(m.name)\n"
            "print(sorted(m for m in sys.modules if m.startswith('kai.') and not m.startswith('kai.common')))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_kernel_imports_no_action():
    assert _violations(lambda name, dep: not _within(name, KERNEL) or not _within(dep, ("kai.actions",))) == []


def test_actions_import_the_kernel_the_api_and_common_only():
    allowed = ("kai", "kai.actions", "kai.api", "kai.common", *KERNEL)
    assert _violations(lambda name, dep: not _within(name, ("kai.actions",)) or _within(dep, allowed)) == []


def test_importing_the_kernel_loads_no_action():
    # -I: the installed package, not the source tree of the working directory (whose native modules are not built).
    code = "import sys, kai.framework; print(sorted(m for m in sys.modules if m.startswith('kai.actions')))"
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_grouping_imports_no_driver_plugin_or_podgrouper():
    layer = ("kai.grouping",)
    assert _violations(lambda name, dep: not _within(name, layer) or not _within(dep, DRIVERS + EXTENSIONS)) == []


def _sdk_only(name: str, dep: str) -> bool:
    """A shipped plugin or podgrouper imports the SDK and modules of its own package, nothing else of kai."""
    return not _within(name, EXTENSIONS) or dep == SDK or _top(dep) == _top(name)


def test_plugins_and_podgroupers_import_only_the_sdk_and_their_own_package():
    assert _violations(_sdk_only) == []


def test_the_examples_import_only_the_sdk_and_the_testing_modules():
    assert {"examples.plugin.kai_prefer_label", "examples.fgd-baselines.kai_fgd_baselines"} <= set(EXAMPLE_MODULES)
    assert _violations(lambda name, dep: dep in (SDK, *TESTING), EXAMPLE_MODULES) == []


def test_the_checker_sees_a_plugin_reaching_past_the_sdk(tmp_path):
    plugin = tmp_path / "reach.py"
    plugin.write_text("from kai import hookimpl, testing\nfrom kai.sdk import Reject\n"
                      "from kai.framework.nodes import NodeArrays\nfrom kai.plugins.proportion import shares\n"
                      "from .tree import Domain\n\n\ndef lazy():\n    from kai.grouping import hub\n")
    assert _violations(_sdk_only, {"kai.plugins.topology.reach": plugin}) == [
        "kai.plugins.topology.reach imports kai", "kai.plugins.topology.reach imports kai.framework.nodes",
        "kai.plugins.topology.reach imports kai.grouping.hub",
        "kai.plugins.topology.reach imports kai.plugins.proportion.shares",
        "kai.plugins.topology.reach imports kai.testing"]


def test_components_import_the_plumbing_never_each_other():
    def allowed(name, dep):
        if _within(name, ("kai.kube",)):
            return not _within(dep, COMPONENTS + ("kai.dev", "kai.run", "kai.rbac", "kai.sim", "kai.cli"))
        if not _within(name, COMPONENTS):
            return True
        return not _within(dep, COMPONENTS + ("kai.dev", "kai.run", "kai.rbac", "kai.sim")) or _top(dep) == _top(name)

    assert _violations(allowed) == []


def test_the_checker_sees_a_violation():
    assert "kai.rbac imports kai.scheduler.loop" in _violations(lambda name, dep: not _within(dep, COMPONENTS))


@pytest.mark.parametrize("package", ["kai.api", "kai.sim.replay"])
def test_no_import_cycle_within(package):
    assert _graph(package), f"{package} has no modules"
    assert _cycle(_graph(package)) == []


def test_the_cycle_check_sees_a_cycle():
    assert _cycle({"a": ["b"], "b": ["c"], "c": ["b"]}) == ["b", "c", "b"]
    assert _cycle({"a": ["b", "c"], "b": ["c"], "c": []}) == []


def test_tests_import_plugins_and_podgroupers_by_their_installed_names():
    """``plugins`` and ``podgroupers`` are folders of the source tree only; installed they are ``kai.plugins`` and
    ``kai.podgroupers``, which is where the tests run from an installed wheel find them."""
    wrong = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "tests").rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.match(r"\s*(from|import) (plugins|podgroupers)\b", line)]
    assert not wrong, wrong
