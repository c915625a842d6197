"""The pre-commit hooks run the static checks of ``tox -e lint``, with the same pinned ruff and mypy and libraries."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def _lint_env() -> tuple[list[str], list[str]]:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    lint = tox["testenv:lint"]
    return lint["deps"].split(), [line for line in lint["commands"].splitlines() if line]


def _hooks() -> dict[str, dict]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    return {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}


def test_ruff_and_mypy_are_pinned_to_one_release():
    deps, _ = _lint_env()
    tools = [d.partition("==") for d in deps if d.startswith(("ruff", "mypy"))]
    assert sorted(name for name, _, _ in tools) == ["mypy", "ruff"]
    assert all(re.fullmatch(r"\d+(\.\d+)+", version) for _, _, version in tools), tools


def test_the_hooks_run_the_lint_commands_with_its_dependencies():
    deps, commands = _lint_env()
    hooks = _hooks()
    assert [hooks["ruff"]["entry"], hooks["mypy"]["entry"]] == commands
    assert hooks["ruff"]["additional_dependencies"] + hooks["mypy"]["additional_dependencies"] == deps
    assert all(hook["language"] == "python" and hook["pass_filenames"] is False for hook in hooks.values())
