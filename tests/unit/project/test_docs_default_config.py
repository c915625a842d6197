"""The default configuration printed in docs/plugins.md is the one the scheduler runs."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from kai.framework.config import DEFAULT_CONFIG, parse_config

DOC = Path(__file__).resolve().parents[3] / "docs" / "plugins.md"


def _default_config_block() -> str:
    """The first YAML block of the doc's "The default configuration" section."""
    section = DOC.read_text().split("\n## The default configuration\n", 1)
    assert len(section) == 2, "docs/plugins.md has no '## The default configuration' section"
    body = re.split(r"^## ", section[1], maxsplit=1, flags=re.M)[0]
    block = re.search(r"^```yaml\n(.*?)^```$", body, flags=re.M | re.S)
    assert block, "the default configuration section shows no YAML block"
    return block.group(1)


def test_doc_shows_the_default_configuration_in_kais_shape():
    data = yaml.safe_load(_default_config_block())
    # Both keys spelled out: a missing one would silently take the default and pass.
    assert set(data) == {"actions", "tiers"}
    assert isinstance(data["actions"], str)
    assert parse_config(data, "docs/plugins.md") == DEFAULT_CONFIG
