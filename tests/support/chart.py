"""Render the project's Helm chart (from a source checkout) without ``helm``, for tests.

The chart's templates keep to a small subset of Helm's template language, which this module
implements with Go template semantics:

* actions ``{{ PIPELINE }}`` with ``{{-`` / ``-}}`` whitespace trimming and ``{{/* comments */}}``;
* ``if`` / ``else`` / ``end`` and ``range $v := X``, ``range $k, $v := X`` (maps in key order);
* values ``.Values.a.b``, ``.Release.Namespace``, ``.Chart.AppVersion``, ``$`` (the root), ``$var.a``,
  string, number and boolean literals; ``.Files.Get "path"`` (a file of the chart);
* functions ``quote``, ``default``, ``toYaml``, ``toJson``, ``indent``, ``nindent``, ``not``, ``eq``, ``required``,
  called directly or at the end of a pipe (``X | default "y"``).

Anything else is an error naming the template and the action, so a template that strays from
the subset fails its test instead of rendering differently from Helm. A value that is missing
where it is printed is an error too (Helm would print nothing; here it is almost always a typo).
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

_ACTION = re.compile(r"\{\{(-?)(.*?)(-?)\}\}", re.S)


class TemplateError(ValueError):
    """A template uses syntax outside the subset, or refers to a missing value."""


def render_chart(chart: Path, values: Mapping[str, Any] | None = None, namespace: str = "kai-scheduler",
                 release: str = "kai-scheduler") -> list[dict]:
    """Every manifest the chart installs: its CRDs, then its rendered templates (in file order)."""
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    merged = _merge(yaml.safe_load((chart / "values.yaml").read_text()) or {}, values or {})
    root = {
        "Values": merged,
        "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
        "Chart": {"Name": meta["name"], "Version": meta["version"], "AppVersion": str(meta.get("appVersion", ""))},
        "Files": chart,
    }
    docs: list[dict] = []
    for path in sorted((chart / "crds").glob("*.yaml")):
        docs += copy.deepcopy(_crd_docs(path, path.stat().st_mtime_ns))
    for path in sorted((chart / "templates").glob("*.yaml")):
        text = render(path.read_text(), root, path.name)
        try:
            docs += [d for d in yaml.safe_load_all(text) if d]
        except yaml.YAMLError as exc:
            raise TemplateError(f"{path.name}: rendered output is not YAML: {exc}\n{text}") from exc
    return docs


@functools.lru_cache(maxsize=16)
def _crd_docs(path: Path, mtime: int) -> list[dict]:
    """The documents of one CRD file, parsed once per version of the file (KAI's Config CRD is large)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(path.read_text(), Loader=loader) if d]


def render(template: str, root: Mapping[str, Any], name: str = "template") -> str:
    """Render one template against ``root`` (the ``.`` of the template; ``root["Files"]`` is the chart directory)."""
    nodes, rest = _parse(_tokens(template, name), name, ())
    if rest:
        raise TemplateError(f"{name}: unexpected {{{{ {rest[0][1]} }}}}")
    out: list[str] = []
    _run(nodes, root, {"$": root}, out, name)
    return "".join(out)


# -- lexing and parsing --------------------------------------------------------------------------
def _tokens(template: str, name: str) -> list[tuple[str, str]]:
    """("text", s) and ("action", body) in order, whitespace trimming applied."""
    tokens: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    for m in _ACTION.finditer(template):
        text = template[pos:m.start()]
        if trim_next:
            text = text.lstrip()
        if m.group(1):
            text = text.rstrip()
        tokens.append(("text", text))
        body = m.group(2).strip()
        if not (body.startswith("/*") and body.endswith("*/")):
            tokens.append(("action", body))
        pos, trim_next = m.end(), bool(m.group(3))
    tail = template[pos:]
    if "{{" in tail or "}}" in tail:
        raise TemplateError(f"{name}: unbalanced '{{{{' or '}}}}'")
    tokens.append(("text", tail.lstrip() if trim_next else tail))
    return tokens


def _parse(tokens: list[tuple[str, str]], name: str, until: tuple[str, ...]):
    nodes: list[tuple] = []
    while tokens:
        kind, body = tokens[0]
        if kind == "text":
            nodes.append(("text", body))
            tokens = tokens[1:]
            continue
        word = body.split(None, 1)[0] if body else ""
        if word in until:
            return nodes, tokens
        tokens = tokens[1:]
        if word == "if":
            then, tokens = _parse(tokens, name, ("else", "end"))
            otherwise: list[tuple] = []
            if tokens and tokens[0][1] == "else":
                otherwise, tokens = _parse(tokens[1:], name, ("end",))
            tokens = _expect_end(tokens, name, body)
            nodes.append(("if", body[2:].strip(), then, otherwise))
        elif word == "range":
            m = re.fullmatch(r"range\s+(?:(\$\w+)\s*,\s*)?(\$\w+)\s*:=\s*(.+)", body, re.S)
            if m is None:
                raise TemplateError(f"{name}: use 'range $v := X' or 'range $k, $v := X', not {{{{ {body} }}}}")
            inner, tokens = _parse(tokens, name, ("end",))
            tokens = _expect_end(tokens, name, body)
            nodes.append(("range", m.group(1), m.group(2), m.group(3), inner))
        elif word in ("else", "end", "with", "define", "template", "block", "include"):
            raise TemplateError(f"{name}: {{{{ {body} }}}} is not supported here")
        else:
            nodes.append(("print", body))
    if until:
        raise TemplateError(f"{name}: missing {{{{ end }}}}")
    return nodes, tokens


def _expect_end(tokens, name, opener):
    if not tokens or tokens[0][1] != "end":
        raise TemplateError(f"{name}: {{{{ {opener} }}}} has no {{{{ end }}}}")
    return tokens[1:]


# -- evaluation ----------------------------------------------------------------------------------
def _run(nodes, dot, scope, out: list[str], name: str) -> None:
    for node in nodes:
        if node[0] == "text":
            out.append(node[1])
        elif node[0] == "print":
            value = _pipeline(node[1], dot, scope, name)
            if value is None:
                raise TemplateError(f"{name}: {{{{ {node[1]} }}}} has no value")
            out.append(_string(value))
        elif node[0] == "if":
            branch = node[2] if _truthy(_pipeline(node[1], dot, scope, name)) else node[3]
            _run(branch, dot, scope, out, name)
        else:  # range
            _, key_var, value_var, source, inner = node
            items = _pipeline(source, dot, scope, name)
            pairs = sorted(items.items()) if isinstance(items, Mapping) else enumerate(items or ())
            for key, value in pairs:
                inner_scope = dict(scope, **{value_var: value})
                if key_var:
                    inner_scope[key_var] = key
                _run(inner, value, inner_scope, out, name)


def _pipeline(body: str, dot, scope, name: str):
    try:
        commands = [shlex.split(part, posix=False) for part in _split_pipes(body)]
    except ValueError as exc:
        raise TemplateError(f"{name}: cannot read {{{{ {body} }}}}: {exc}") from exc
    value, first = None, True
    for words in commands:
        if not words:
            raise TemplateError(f"{name}: empty command in {{{{ {body} }}}}")
        head, args = words[0], [_operand(w, dot, scope, name, body) for w in words[1:]]
        if head in (".Files.Get", "$.Files.Get") and first and len(args) == 1:
            value = _chart_file(scope["$"].get("Files"), args[0], name)
        elif head in _FUNCTIONS:
            if not first:
                args.append(value)
            try:
                value = _FUNCTIONS[head](*args)
            except TypeError as exc:
                raise TemplateError(f"{name}: wrong arguments to {head} in {{{{ {body} }}}}") from exc
        elif len(words) == 1 and first:
            value = _operand(head, dot, scope, name, body)
        else:
            raise TemplateError(f"{name}: unknown function {head!r} in {{{{ {body} }}}}")
        first = False
    return value


def _chart_file(chart: Path | None, relative: str, name: str) -> str:
    path = (chart / relative) if chart is not None else None
    if path is None or not path.is_file():
        raise TemplateError(f"{name}: .Files.Get: no file {relative!r} in the chart")
    return path.read_text()


def _split_pipes(body: str) -> list[str]:
    parts, current, quoted = [], "", False
    for ch in body:
        if ch == '"':
            quoted = not quoted
        if ch == "|" and not quoted:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [*parts, current]


def _operand(word: str, dot, scope, name: str, body: str):
    if word.startswith('"') and word.endswith('"') and len(word) >= 2:
        return word[1:-1]
    if word in ("true", "false"):
        return word == "true"
    if re.fullmatch(r"-?\d+", word):
        return int(word)
    if word == ".":
        return dot
    if word.startswith("."):
        return _lookup(dot, word[1:].split("."))
    if word.startswith("$"):
        var, _, path = word.partition(".")
        if var not in scope:
            raise TemplateError(f"{name}: undefined variable {var} in {{{{ {body} }}}}")
        return _lookup(scope[var], path.split(".")) if path else scope[var]
    raise TemplateError(f"{name}: cannot read {word!r} in {{{{ {body} }}}}")


def _lookup(value, path: list[str]):
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _truthy(value) -> bool:
    return not (value is None or value is False or value == 0 or (hasattr(value, "__len__") and len(value) == 0))


def _string(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        raise TemplateError(f"cannot print a {type(value).__name__} without toYaml")
    return str(value)


def _to_yaml(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=False, sort_keys=True)
    return text.removesuffix("\n...\n").rstrip("\n")


def _indent(width: int, text) -> str:
    return "\n".join((" " * width + line) if line else line for line in _string(text).split("\n"))


def _required(message: str, value):
    if not _truthy(value):
        raise TemplateError(message)
    return value


_FUNCTIONS = {
    "quote": lambda value: '"' + _string(value).replace("\\", "\\\\").replace('"', '\\"') + '"',
    "default": lambda fallback, value=None: value if _truthy(value) else fallback,
    "toYaml": _to_yaml,
    "toJson": lambda value: json.dumps(value, separators=(",", ":"), sort_keys=True),  # Go's json.Marshal
    "indent": _indent,
    "nindent": lambda width, text: "\n" + _indent(width, text),
    "not": lambda value: not _truthy(value),
    "eq": lambda a, b: a == b,
    "required": _required,
}


def _merge(base: dict, override: Mapping[str, Any]) -> dict:
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), dict):
            result[key] = _merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result
