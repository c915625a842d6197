"""The kernel's import graph: kai.framework imports only the API, the shared utilities, the native modules,
the hook specifications, the plugin loader and itself, with no cycle between its modules and no import inside
a function to get round one."""

from __future__ import annotations

import ast
from pathlib import Path

import kai.framework

KERNEL = "kai.framework"
#: What the kernel may import from the rest of the project.
ALLOWED = ("kai", "kai.api", "kai.common", "kai._native", "kai.hookspecs", "kai.plugin_loader")
ROOT = Path(kai.framework.__file__).parent


def kernel_modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([KERNEL, *parts])] = ast.parse(path.read_text(), str(path))
    return out


def is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports(body: list[ast.stmt], known: set[str]) -> list[str]:
    """Modules of the project imported by the statements of ``body`` (not those only for type checking)."""
    out = []
    for node in body:
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.append(sub if sub in known else node.module)
        elif isinstance(node, ast.If):
            out.extend(imports(node.orelse if is_type_checking(node) else node.body + node.orelse, known))
        elif isinstance(node, ast.Try):
            out.extend(imports(node.body + node.orelse + node.finalbody, known))
    return [m for m in out if m == "kai" or m.startswith("kai.")]


def graph() -> dict[str, list[str]]:
    modules = kernel_modules()
    return {name: imports(tree.body, set(modules)) for name, tree in modules.items()}


def test_kernel_imports_only_the_api_the_shared_utilities_the_native_modules_and_itself():
    for name, targets in graph().items():
        for target in targets:
            allowed = target in ALLOWED or target == KERNEL or target.startswith(("kai.common.", KERNEL + "."))
            assert allowed, (name, target)


def test_kernel_import_graph_has_no_cycle():
    edges = graph()
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path[path.index(name):], name))
        if name in done:
            return
        for target in edges.get(name, ()):
            visit(target, (*path, name))
        done.add(name)

    for name in edges:
        visit(name, ())


def test_no_project_import_inside_a_function():
    for name, tree in kernel_modules().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = [n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))]
                assert not imports(inner, set()), f"{name}.{node.name} imports inside the function"
