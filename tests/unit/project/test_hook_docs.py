"""Every hook of ``kai/hookspecs.py`` is documented and has a test of its own.

* Scheduling hooks: a Markdown heading naming the hook (``### `kai_x` ``) in ``docs/plugins.md``
  whose section shows the hook's signature, and a test function named ``test_<hook>...`` in a
  module under ``tests/unit/hooks/``.
* Pod-grouping hooks (``kai_podgroup*``), owned by the podgrouper guide: the hook named in
  ``docs/podgroupers.md`` and in a test module under ``tests/unit/podgroupers/``.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from kai import hookspecs

ROOT = Path(__file__).resolve().parents[3]
HOOKS = sorted(name for name, fn in vars(hookspecs).items()
               if name.startswith("kai_") and inspect.isfunction(fn) and hasattr(fn, "kai_spec"))
GROUPING = [h for h in HOOKS if h.startswith("kai_podgroup")]
SCHEDULING = [h for h in HOOKS if h not in GROUPING]


def _sections(doc: str) -> dict[str, str]:
    """Section text by the hook named in its heading."""
    parts = re.split(r"^#{2,4} `(kai_\w+)`\s*$", doc, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _test_functions(folder: Path) -> set[str]:
    names = set()
    for path in folder.rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                names.add(node.name)
    return names


def test_hooks_are_found():
    assert {"kai_job_order", "kai_node_scores", "kai_actions", "kai_podgroup_metadata"} <= set(HOOKS)


@pytest.mark.parametrize("hook", SCHEDULING)
def test_scheduling_hook_is_documented_with_its_signature(hook):
    section = _sections((ROOT / "docs" / "plugins.md").read_text()).get(hook)
    assert section is not None, f"docs/plugins.md has no '### `{hook}`' section"
    spec_args = list(inspect.signature(getattr(hookspecs, hook)).parameters)
    shown = re.search(rf"def {hook}\(([^)]*)\)", section)
    assert shown is not None, f"the section of {hook} in docs/plugins.md does not show its signature"
    doc_args = [a.split(":")[0].strip() for a in shown.group(1).split(",") if a.strip()]
    assert doc_args == spec_args, f"docs/plugins.md shows {hook}{tuple(doc_args)}, the spec is {tuple(spec_args)}"
    assert "**When:**" in section and "**Combines:**" in section, f"{hook}: say when it is called, how results combine"


@pytest.mark.parametrize("hook", SCHEDULING)
def test_scheduling_hook_has_a_test_of_its_own(hook):
    tests = _test_functions(ROOT / "tests" / "unit" / "hooks")
    assert any(t.startswith(f"test_{hook}") for t in tests), f"no test function test_{hook}... in tests/unit/hooks/"


@pytest.mark.parametrize("hook", GROUPING)
def test_pod_grouping_hook_is_documented_and_tested(hook):
    tests_dir = ROOT / "tests" / "unit" / "podgroupers"
    if not tests_dir.is_dir():
        pytest.skip("no podgrouper tests yet")
    doc = ROOT / "docs" / "podgroupers.md"
    assert doc.is_file() and f"`{hook}(" in doc.read_text(), f"docs/podgroupers.md does not document {hook}"
    assert any(hook in p.read_text() for p in tests_dir.rglob("test_*.py")), f"no test under {tests_dir} uses {hook}"
    assert f"### `{hook}`" in (ROOT / "docs" / "plugins.md").read_text(), f"docs/plugins.md does not link {hook}"
