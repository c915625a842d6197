"""Shared test setup: Hypothesis profiles, the e2e time limit, and the docs' worked podgrouper.

Hypothesis runs the ``dev`` profile (few examples, quick) unless ``HYPOTHESIS_PROFILE`` names
another, or ``CI`` is set, which selects ``ci`` (more examples, failure blobs printed). A test's own
``@settings(max_examples=...)`` overrides the profile.
"""

import os
import re
from pathlib import Path

import pytest
from hypothesis import settings

DOCS = Path(__file__).resolve().parents[1] / "docs"
#: Seconds an e2e test may take (waits on a real control plane); the default ``timeout`` is for the rest.
E2E_TIMEOUT = 600

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("ci", max_examples=200, deadline=None, print_blob=True)


def _profile() -> str:
    if os.environ.get("HYPOTHESIS_PROFILE"):
        return os.environ["HYPOTHESIS_PROFILE"]
    return "ci" if os.environ.get("CI", "").lower() not in ("", "0", "false") else "dev"


settings.load_profile(_profile())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT))


@pytest.fixture(scope="session")
def sweep_podgrouper_source() -> str:
    """The third-party podgrouper of the worked example in docs/podgroupers.md (a module's source)."""
    text = (DOCS / "podgroupers.md").read_text()
    (block,) = re.findall(r"```python\n# sweep_podgrouper\.py\n(.*?)```", text, flags=re.S)
    return block
