"""Shared fixtures: the scheduler kernel on in-memory clusters (see ``kai.testing``)."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture(scope="session")
def sweep_podgrouper_source() -> str:
    """The third-party podgrouper of the worked example in docs/podgroupers.md (a module's source)."""
    text = (DOCS / "podgroupers.md").read_text()
    (block,) = re.findall(r"```python\n# sweep_podgrouper\.py\n(.*?)```", text, flags=re.S)
    return block
