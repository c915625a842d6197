"""No unsafe call in the shipped code (``kai``, ``plugins``, ``podgroupers``), checked on the syntax tree
so that comments, docstrings and strings do not count:

* ``yaml.load``/``load_all`` without a safe ``Loader``, ``yaml.unsafe_load``, ``yaml.full_load`` (and
  their ``_all`` forms), or importing them from ``yaml`` by name;
* a ``shell=`` argument other than ``False`` (``subprocess`` running a shell), ``os.system``, ``os.popen``;
* ``eval`` and ``exec``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ("kai", "plugins", "podgroupers")
SAFE_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}
UNSAFE_YAML = {"unsafe_load", "unsafe_load_all", "full_load", "full_load_all"}
YAML_LOADS = {"load", "load_all"}
SHELLS = {("os", "system"), ("os", "popen")}


def _name(node: ast.expr) -> str | None:
    """The last name of ``x`` or ``a.b.x``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def problems(source: str, filename: str = "<source>") -> list[str]:
    """What is unsafe in ``source``, one line each: ``file:line: what``."""
    tree = ast.parse(source, filename)
    modules: dict[str, str] = {}  # local name -> module, for `import yaml as y`
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module == "yaml":
            for alias in node.names:
                if alias.name in YAML_LOADS | UNSAFE_YAML:
                    found.append((node.lineno, f"from yaml import {alias.name}"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("eval", "exec"):
            found.append((node.lineno, f"{func.id}()"))
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            module = modules.get(func.value.id, func.value.id)
            if module == "yaml" and func.attr in UNSAFE_YAML:
                found.append((node.lineno, f"yaml.{func.attr}()"))
            elif module == "yaml" and func.attr in YAML_LOADS:
                loader = next((k.value for k in node.keywords if k.arg == "Loader"),
                              node.args[1] if len(node.args) > 1 else None)
                if loader is None or _name(loader) not in SAFE_LOADERS:
                    found.append((node.lineno, f"yaml.{func.attr}() without a safe Loader"))
            elif (module, func.attr) in SHELLS:
                found.append((node.lineno, f"{module}.{func.attr}()"))
            elif module == "builtins" and func.attr in ("eval", "exec"):
                found.append((node.lineno, f"builtins.{func.attr}()"))
        for keyword in node.keywords:
            no_shell = isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            if keyword.arg == "shell" and not no_shell:
                found.append((node.lineno, f"shell={ast.unparse(keyword.value)}"))
    return [f"{filename}:{line}: {what}" for line, what in sorted(found)]


def shipped_sources() -> list[Path]:
    return sorted(path for folder in SHIPPED for path in (ROOT / folder).rglob("*.py"))


def test_the_shipped_code_makes_no_unsafe_call():
    sources = shipped_sources()
    assert len(sources) > 50 and any(p.parts[-2:] == ("kube", "certs.py") for p in sources)
    found = [line for path in sources for line in problems(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("source, what", [
    ("import yaml\nyaml.load(text)", "yaml.load() without a safe Loader"),
    ("import yaml\nyaml.load(text, Loader=yaml.Loader)", "yaml.load() without a safe Loader"),
    ("import yaml as y\ny.load_all(text, y.FullLoader)", "yaml.load_all() without a safe Loader"),
    ("import yaml\nyaml.unsafe_load(text)", "yaml.unsafe_load()"),
    ("from yaml import load", "from yaml import load"),
    ("import subprocess\nsubprocess.run(cmd, shell=True)", "shell=True"),
    ("import subprocess as sp\nsp.Popen(cmd, shell=flag)", "shell=flag"),
    ("import os\nos.system('ls')", "os.system()"),
    ("eval(text)", "eval()"),
    ("exec(code, {})", "exec()"),
    ("import builtins\nbuiltins.exec(code)", "builtins.exec()"),
])
def test_each_unsafe_call_is_found(source, what):
    assert problems(source) == [f"<source>:{source.count(chr(10)) + 1}: {what}"]


@pytest.mark.parametrize("source", [
    "import yaml\nyaml.safe_load(text)",
    "import yaml\nyaml.load(text, Loader=yaml.SafeLoader)",
    "import yaml\nyaml.load_all(text, yaml.CSafeLoader)",
    "import subprocess\nsubprocess.run(['ls'], shell=False)",
    "'''eval(x) and shell=True in a docstring'''\n# yaml.load(x) in a comment",
    "session.eval_expression(x)\nast.literal_eval(x)\nre.compile(x)",
])
def test_safe_code_and_mere_mentions_pass(source):
    assert problems(source) == []
