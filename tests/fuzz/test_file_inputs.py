"""Mutated copies of the shipped examples and conformance files, fed to every file input of the CLI.

Every input is run in-process through ``kai.cli.main`` (``simulate``, ``fairshare``, ``conformance``,
``bench``, ``podgroup``, ``run --config``) and must either work (exit code 0, or 1 where the command
uses it) or be refused with exit code 2 and exactly one line on stderr naming the file -- never an
exception, never longer than :data:`LIMIT` seconds. The mutations delete keys, put values of other
types, huge, negative or not-a-number values, long strings and deep structures in place of any value,
and truncate the text, insert bytes that are not UTF-8 or control characters, alias bombs and
recursive aliases.

``KAI_FUZZ_EXAMPLES`` sets the number of inputs (default 500, the same ones every run; ``tox -e fuzz``
runs thousands, new ones each time). ``KAI_FUZZ_KEEP_GOING=1`` counts bad inputs instead of stopping
at the first (up to the first hang, whose thread cannot be stopped). The test prints how many inputs
were tried, worked, were refused cleanly, raised or hung.
"""

from __future__ import annotations

import copy
import io
import logging
import os
import sys
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import kai.run
from kai.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("KAI_FUZZ_EXAMPLES", "500"))
KEEP_GOING = os.environ.get("KAI_FUZZ_KEEP_GOING", "") not in ("", "0")
#: Seconds one input may take (generous: a slow, shared machine must not fail the test).
LIMIT = 60.0
MISSING_KUBECONFIG = "/nonexistent/kubeconfig"

#: command -> (arguments before/after the file, exit codes that mean "it worked").
COMMANDS = {
    "simulate": (["simulate"], [], {0}),
    "fairshare": (["fairshare"], [], {0}),
    "conformance": (["conformance"], [], {0, 1}),
    "bench": (["bench"], ["--repeat", "1"], {0}),
    "podgroup": (["podgroup"], [], {0, 1}),
    # Without a cluster, a configuration that parses ends in the (one-line) kubeconfig error.
    "run": (["run", "--kubeconfig", MISSING_KUBECONFIG, "--config"], [], set()),
}


def _load(path: Path):
    return yaml.safe_load(path.read_text())


def _seeds() -> list[tuple[str, str, object]]:
    """(command, seed name, parsed document) of every seed; a multi-document seed is ``{"documents": [...]}``."""
    seeds: list[tuple[str, str, object]] = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for command in ("simulate", "fairshare"):
            seeds.append((command, path.name, _load(path)))
    for path in sorted((ROOT / "tests/conformance/kai").glob("*.yaml")):
        scenarios = _load(path)
        picked = [scenarios[0]] + [s for s in scenarios if s.get("mode") == "simulation"][:1]
        for scenario in picked:
            for command in ("simulate", "fairshare", "conformance", "bench"):
                seeds.append((command, f"{path.name}#{scenario['name'][:40]}", [scenario]))
    for path in sorted((ROOT / "tests/conformance/podgrouper").glob("*.yaml")):
        case = _load(path)[0]
        seeds.append(("conformance", f"{path.name}#{case['name']}", [case]))
        pod = {"apiVersion": "v1", "kind": "Pod", **case["pod"]}
        objects = [o for o in case.get("objects") or [] if isinstance(o, dict) and "kind" in o] + [pod]
        seeds.append(("podgroup", f"{path.name}#{case['name']}", {"documents": objects}))
    for doc, heading in (("plugins.md", "## The default configuration"), ("fairshare.md", "## Time-based fair share")):
        body = (ROOT / "docs" / doc).read_text().split(f"\n{heading}\n", 1)[1]
        block = body.split("```yaml\n", 1)[1].split("```", 1)[0]
        seeds.append(("run", f"{doc} configuration", yaml.safe_load(block)))
    return seeds


SEEDS = _seeds()
#: command -> its seeds; a command is drawn first, so that each gets its share of inputs.
BY_COMMAND = {command: [(name, doc) for c, name, doc in SEEDS if c == command] for command in COMMANDS}


def _nested(depth: int, leaf: object) -> object:
    value = leaf
    for k in range(depth):
        value = [value] if k % 2 else {"k": value}
    return value


HOSTILE = st.one_of(
    st.sampled_from([
        None, True, False, 0, -1, -(2**63) - 1, 2**63, 10**30, 10**400, 1e308, float("inf"), float("-inf"),
        float("nan"), -0.5, 0.5, "", " ", "nan", "inf", "-1", "1e400", "1e-400", "9" * 50, "99999999Ei", "1.5.6",
        "a\nb", "\u2028", "x" * 5000, "Gi", "~", "{}", "[]", "2025-13-45", "yes", "-5Gi", "\x7f", "\udcff",
    ]),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.integers(2, 100).map(lambda n: _nested(n, 1)),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
OPERATIONS = ("delete", "replace", "replace", "retype", "duplicate", "rename", "copy", "alias")
#: Mutations of the text after the structure's ("none" three times in four).
TEXT_OPERATIONS = ("none",) * 27 + (
    "truncate", "bytes", "control", "bomb", "recursive", "nesting", "crlf", "bom", "nul")
ALIAS_BOMB = "&a0 [x, x, x, x, x, x, x, x, x]"
for _k in range(1, 9):
    ALIAS_BOMB = f"[{ALIAS_BOMB}, &a{_k} [{', '.join([f'*a{_k - 1}'] * 9)}]]"
SMALL_ALIASES = "[&s0 [x, x, x], &s1 [*s0, *s0, *s0], &s2 [*s1, *s1, *s1]]"
MARKER = "__FUZZ_MARKER__"


def _paths(node, path=()) -> list[tuple]:
    """Every position in a document: a tuple of keys and indexes."""
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, path + (i,))
    return found


def _get(node, path):
    for step in path:
        node = node[step]
    return node


def _mutate(data, doc):
    """Apply one drawn mutation to ``doc`` in place (its top level is a list or mapping); returns ``doc``."""
    paths = _paths(doc)
    path = data.draw(st.sampled_from(paths), label="path")
    op = data.draw(st.sampled_from(OPERATIONS), label="operation")
    if not path:  # the document itself
        return data.draw(HOSTILE, label="document") if op == "replace" else doc
    parent, key = _get(doc, path[:-1]), path[-1]
    value = parent[key]
    if op == "delete":
        del parent[key]
    elif op == "replace":
        parent[key] = data.draw(HOSTILE, label="value")
    elif op == "retype":
        if isinstance(value, dict):
            parent[key] = list(value.values())
        elif isinstance(value, list):
            parent[key] = {str(i): v for i, v in enumerate(value)}
        else:
            parent[key] = data.draw(st.sampled_from([[value], {"x": value}]), label="wrapped")
    elif op == "duplicate":
        if isinstance(parent, list):
            parent.insert(key, copy.deepcopy(value))
        else:
            parent[f"{key}-copy"] = copy.deepcopy(value)
    elif op == "rename" and isinstance(parent, dict):
        parent[f"{key}x" if isinstance(key, str) else f"{key}"] = parent.pop(key)
    elif op == "copy":
        other = data.draw(st.sampled_from(paths), label="copied from")
        if other[: len(path)] != path:
            parent[key] = copy.deepcopy(_get(doc, other))
    elif op == "alias":
        parent[key] = MARKER
    return doc


def _text(data, doc) -> bytes:
    if isinstance(doc, dict) and set(doc) == {"documents"} and isinstance(doc["documents"], list):
        text = yaml.safe_dump_all(doc["documents"], sort_keys=False, allow_unicode=True)
    else:
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    text = text.replace(f"'{MARKER}'", MARKER).replace(MARKER, data.draw(
        st.sampled_from([ALIAS_BOMB, SMALL_ALIASES, "&r [*r]", "*nowhere"]), label="alias"))
    op = data.draw(st.sampled_from(TEXT_OPERATIONS), label="text operation")
    raw = text.encode("utf-8", "surrogatepass")
    at = data.draw(st.integers(0, len(raw)), label="position")
    if op == "truncate":
        return raw[:at]
    if op == "bytes":
        junk = data.draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xef\xbb"]))
        return raw[:at] + junk + raw[at:]
    if op == "control":
        return raw[:at] + data.draw(st.sampled_from([b"\x00", b"\x1b", b"\t", b"\x85", b"\r"])) + raw[at:]
    if op == "bomb":
        return (("bomb: " if isinstance(doc, dict) else "- ") + ALIAS_BOMB + "\n").encode() + raw
    if op == "recursive":
        return b"- &r [x, *r]\n" + raw
    if op == "nesting":
        depth = data.draw(st.integers(60, 3000), label="depth")
        return raw[:at] + b"[" * depth + b"]" * depth + raw[at:]
    if op == "crlf":
        return raw.replace(b"\n", b"\r\n")
    if op == "bom":
        return b"\xef\xbb\xbf" + raw
    if op == "nul":
        return raw + b"\x00" * at
    return raw


class ThreadStreams(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` for the fuzz test: what a registered thread writes goes to its own
    buffer (at most :data:`CAPTURE` characters kept), so that a thread still running after its time limit,
    or a log handler it installed, writes nowhere else. Other threads write to ``fallback``."""

    def __init__(self, fallback, errors: str):
        self.fallback, self.encoding_errors = fallback, errors
        self.buffers: dict[int, list] = {}

    def capture(self) -> list:
        """Capture the calling thread's text from now on; returns its buffer ([text, length])."""
        self.buffers[threading.get_ident()] = buffer = ["", 0]
        return buffer

    def write(self, text: str) -> int:
        buffer = self.buffers.get(threading.get_ident())
        if buffer is None:
            return self.fallback.write(text)
        text.encode("utf-8", self.encoding_errors)  # a real UTF-8 stream refuses what this refuses
        if buffer[1] < CAPTURE:
            buffer[0] += text[: CAPTURE - buffer[1]]
        buffer[1] += len(text)
        return len(text)

    def flush(self) -> None:
        pass


#: Characters of a command's output kept per stream.
CAPTURE = 100_000


def run_cli(argv: list[str], out: ThreadStreams, err: ThreadStreams) -> dict:
    """Run the CLI in a thread, its output captured; ``hung`` when it takes longer than LIMIT."""
    result: dict = {}

    def target():
        result["stdout"], result["stderr"] = out.capture(), err.capture()
        try:
            result["code"] = main(argv)
        except BaseException:  # noqa: BLE001 - anything escaping is what the test looks for
            result["exception"] = traceback.format_exc()

    start = time.monotonic()
    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(LIMIT)
    result["seconds"] = time.monotonic() - start
    result["hung"] = worker.is_alive()
    if not result["hung"]:
        out.buffers.pop(worker.ident, None)
        err.buffers.pop(worker.ident, None)
    for name in ("stdout", "stderr"):
        result[name] = result[name][0]
    return result


def verdict(command: str, path: str, result: dict) -> str:
    """``worked``, ``refused`` (exit 2, one line naming the file), ``hang`` or ``traceback`` (anything else)."""
    if result["hung"]:
        return "hang"
    if "exception" in result or "Traceback" in result["stderr"]:
        return "traceback"
    if result["code"] in COMMANDS[command][2]:
        return "worked"
    lines = result["stderr"].splitlines()
    if result["code"] == 2 and len(lines) == 1 and result["stderr"].endswith("\n"):
        line = lines[0]
        prefix = f"kai-scheduler {command}: "
        kubeconfig = command == "run" and "cannot load a Kubernetes configuration" in line
        if line.startswith(prefix) and (path in line or kubeconfig):
            return "refused"
    return "traceback"


@pytest.fixture
def quiet_run(monkeypatch):
    """The root logger as it was (``run`` configures logging) and no signal handlers (``run`` installs
    them, which only the main thread may do, and the inputs run in a thread)."""
    monkeypatch.setattr(kai.run, "_stop_on_signals", lambda stop: None)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:], root.level = handlers, level


def test_every_file_input_works_or_refuses_cleanly(tmp_path, quiet_run, monkeypatch, capsys):
    # Installed here, not in a fixture: capsys takes sys.stdout and sys.stderr when the test starts.
    streams = ThreadStreams(sys.stdout, "strict"), ThreadStreams(sys.stderr, "backslashreplace")
    monkeypatch.setattr(sys, "stdout", streams[0])
    monkeypatch.setattr(sys, "stderr", streams[1])
    counts: Counter = Counter()
    bad: list[str] = []
    started = time.monotonic()

    # No shrinking: the report shows the whole input, and a hanging input must not be run again.
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=not KEEP_GOING, database=None,
              phases=(Phase.generate,), suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one_input(data):
        if counts["hang"]:  # its thread still runs: stop rather than pile up more
            return
        command = data.draw(st.sampled_from(sorted(COMMANDS)), label="command")
        name, seed = data.draw(st.sampled_from(BY_COMMAND[command]), label="seed")
        doc = copy.deepcopy(seed)
        for _ in range(data.draw(st.integers(1, 3), label="mutations")):
            doc = _mutate(data, doc)
        path = tmp_path / "input.yaml"
        path.write_bytes(_text(data, doc))
        before, after, _ = COMMANDS[command]
        result = run_cli([*before, str(path), *after], *streams)
        kind = verdict(command, str(path), result)
        counts["tried"] += 1
        counts[kind] += 1
        counts["slowest"] = max(counts["slowest"], round(result["seconds"], 1))
        if kind in ("hang", "traceback"):
            report = (f"{kind}: kai-scheduler {command} on a mutation of {name} (exit {result.get('code')}, "
                      f"{result['seconds']:.1f} s)\n{result.get('exception') or result['stderr'][-3000:]}\n"
                      f"input:\n{path.read_bytes()[:2000]!r}")
            if not KEEP_GOING:
                raise AssertionError(report)
            bad.append(report)

    try:
        one_input()
    finally:
        with capsys.disabled():
            print(f"\nfile-input fuzz: {counts['tried']} inputs tried, {counts['worked']} worked, "
                  f"{counts['refused']} refused cleanly (exit 2, one line), {counts['traceback']} tracebacks, "
                  f"{counts['hang']} hangs; slowest input {counts['slowest']} s, "
                  f"{time.monotonic() - started:.0f} s in all")
            for report in bad[:10]:
                print(report, "\n")
    assert not bad, f"{len(bad)} inputs raised or hung"
