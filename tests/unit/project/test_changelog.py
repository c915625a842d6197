"""CHANGELOG.md keeps the Keep a Changelog structure, and its newest release is the package's version."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

import kai

CHANGELOG = Path(__file__).resolve().parents[3] / "CHANGELOG.md"
SUBSECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
RELEASE = re.compile(r"^## \[((\d+)\.(\d+)\.(\d+))\] - (\d{4}-\d{2}-\d{2})$", re.M)


def problems(text: str) -> list[str]:
    """What breaks the structure: title, Unreleased first, release headings in descending order,
    only the standard subsections, once each, and no empty section."""
    lines = text.splitlines()
    found = []
    if not lines or lines[0] != "# Changelog":
        found.append("the first line must be '# Changelog'")
    sections = [(i, line) for i, line in enumerate(lines) if line.startswith("## ")]
    if not sections or sections[0][1] != "## [Unreleased]":
        found.append("the first section must be '## [Unreleased]'")
    previous = None
    for n, (i, heading) in enumerate(sections):
        if n > 0:
            m = RELEASE.fullmatch(heading)
            if m is None:
                found.append(f"line {i + 1}: {heading!r} is not '## [x.y.z] - YYYY-MM-DD'")
                continue
            version = (int(m[2]), int(m[3]), int(m[4]))
            try:
                date = datetime.date.fromisoformat(m[5])
            except ValueError:
                found.append(f"line {i + 1}: {m[5]} is not a date")
                continue
            if previous is not None and (version >= previous[0] or date > previous[1]):
                found.append(f"line {i + 1}: {heading!r} is not older than the release above it")
            previous = (version, date)
        end = sections[n + 1][0] if n + 1 < len(sections) else len(lines)
        body = lines[i + 1:end]
        subsections = [line[4:] for line in body if line.startswith("### ")]
        for name in subsections:
            if name not in SUBSECTIONS:
                found.append(f"{heading}: '### {name}' is not one of {', '.join(SUBSECTIONS)}")
        if len(set(subsections)) != len(subsections):
            found.append(f"{heading}: a subsection appears twice")
        if n > 0 and not any(line.startswith("- ") for line in body):
            found.append(f"{heading}: no entries")
    return found


def test_changelog_follows_keep_a_changelog():
    assert problems(CHANGELOG.read_text()) == []


def test_newest_release_is_the_package_version():
    newest = RELEASE.search(CHANGELOG.read_text())
    assert newest is not None, "CHANGELOG.md names no release"
    assert newest[1] == kai.__version__


GOOD = "# Changelog\n\n## [Unreleased]\n\n## [1.1.0] - 2026-02-01\n\n### Fixed\n\n- b\n\n" \
       "## [1.0.0] - 2026-01-01\n\n### Added\n\n- a\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (GOOD.replace("# Changelog", "# Changes"), "first line"),
        (GOOD.replace("## [Unreleased]\n", ""), "'## [Unreleased]'"),
        (GOOD.replace("[1.1.0]", "[0.9.0]"), "not older"),
        (GOOD.replace("2026-02-01", "2025-12-01"), "not older"),
        (GOOD.replace("[1.1.0] - 2026-02-01", "[1.1.0]"), "is not '## [x.y.z] - YYYY-MM-DD'"),
        (GOOD.replace("2026-02-01", "2026-02-31"), "not a date"),
        (GOOD.replace("### Fixed", "### Improved"), "'### Improved' is not one of"),
        (GOOD.replace("### Fixed\n\n- b", "### Fixed\n\n- b\n\n### Fixed\n\n- c"), "appears twice"),
        (GOOD.replace("- b\n", ""), "no entries"),
    ],
)
def test_each_structural_mistake_is_reported(text, problem):
    assert problems(GOOD) == []
    assert any(problem in p for p in problems(text)), problems(text)
