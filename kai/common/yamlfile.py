"""Every file input's YAML, read within bounds, and typed access to its fields.

:func:`read_yaml` (one document) and :func:`read_yaml_documents` (a multi-document file) are the
only YAML loaders of the commands' file inputs. They refuse, with an error naming the file: a file
larger than :data:`MAX_BYTES`; bytes that are not UTF-8 (naming the byte offset); YAML nested deeper
than :data:`MAX_DEPTH`; more than :data:`MAX_VALUES` values once aliases are expanded (an alias bomb);
an alias used inside the node it names; tags other than YAML's JSON types (strings, numbers, booleans,
null, lists, mappings); and, when asked, a top level of another type. Dates stay strings, as they do
for Kubernetes. Parsing uses libyaml when PyYAML has it.

:class:`Fields` reads the fields of one mapping of such a file with their types and ranges checked
(numbers are finite and bounded); its errors name the entry and the field. :func:`describe` names a
value in an error without printing all of it, and :func:`one_line` keeps a message on one line.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, Event, NodeEvent
from yaml.nodes import Node, ScalarNode
from yaml.reader import ReaderError
from yaml.resolver import Resolver

from kai.common.errors import ConfigError

#: Largest file read (bytes).
MAX_BYTES = 64 * 2**20
#: Deepest nesting of lists and mappings.
MAX_DEPTH = 64
#: Most values (scalars, lists and mappings) in a file, every alias counting as the values it repeats.
MAX_VALUES = 1_000_000
#: Largest magnitude of a number field unless the field says otherwise (Kubernetes' int64 quantities).
MAX_NUMBER = 2.0**63

_REQUIRED: Any = object()
_SURROGATE = re.compile("[\ud800-\udfff]")
_LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})
_JSON_TAGS = ("null", "bool", "int", "float", "str", "seq", "map")

if getattr(yaml, "__with_libyaml__", False):
    from yaml._yaml import CParser as _Parser
else:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str):
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


class _Resolver(Resolver):
    """YAML 1.1's implicit types without timestamps (Kubernetes reads ``2025-01-01`` as a string)."""


_Resolver.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in Resolver.yaml_implicit_resolvers.items()
}


class _Constructor(SafeConstructor):
    """The safe constructor limited to JSON's types; a scalar its tag cannot read is a YAML error."""

    yaml_constructors = {
        tag: construct for tag, construct in SafeConstructor.yaml_constructors.items()
        if tag is None or tag in {f"tag:yaml.org,2002:{t}" for t in _JSON_TAGS}
    }

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, KeyError, OverflowError):  # e.g. ``!!int x``, ``!!bool maybe``
            tag = node.tag.rpartition(":")[2]
            raise ConstructorError(None, None, f"{describe(node.value)} is not a valid !!{tag}",
                                   node.start_mark) from None


class _Composer(Composer):
    """PyYAML's composer counting values (aliases count what they repeat) and nesting depth."""

    if TYPE_CHECKING:  # the parser that comes with it in the loader
        def peek_event(self) -> NodeEvent: ...
        def check_event(self, *choices: type[Event]) -> bool: ...

    def __init__(self) -> None:
        Composer.__init__(self)
        self.values = 0
        self.depth = 0
        self.sizes: dict[str | None, int] = {}  # anchor -> values of its node

    def compose_document(self) -> Node | None:
        node = super().compose_document()
        self.sizes = {}
        return node

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()
        mark: Any = event.start_mark
        if self.check_event(AliasEvent):
            if event.anchor in self.anchors and event.anchor not in self.sizes:
                raise ComposerError(None, None, f"alias *{event.anchor} is used inside the node it names", mark)
            self._count(self.sizes.get(event.anchor, 0), mark)
            return super().compose_node(parent, index)
        start = self.values
        self._count(1, mark)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        node = super().compose_node(parent, index)
        self.depth -= 1
        if event.anchor is not None:
            self.sizes[event.anchor] = self.values - start
        return node

    def compose_scalar_node(self, anchor: Any) -> ScalarNode:
        node = super().compose_scalar_node(anchor)
        if _SURROGATE.search(node.value):
            raise ComposerError(None, None, "a string escapes a lone surrogate, which is not Unicode", node.start_mark)
        return node

    def _count(self, values: int, mark: Any) -> None:
        self.values += values
        if self.values > MAX_VALUES:
            raise ComposerError(None, None, f"more than {MAX_VALUES:,} values (aliases count each time they are "
                                "used)", mark)


class _Loader(_Composer, _Parser, _Constructor, _Resolver):
    def __init__(self, stream: str):
        _Parser.__init__(self, stream)
        _Composer.__init__(self)
        _Constructor.__init__(self)
        _Resolver.__init__(self)


def _text(path: str | Path, error: type[ConfigError]) -> str:
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_BYTES + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise error(f"{path}: larger than {MAX_BYTES // 2**20} MiB; input files are limited to that size")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid UTF-8 at byte {exc.start}") from None


def _parse(path: str | Path, error: type[ConfigError], documents: bool) -> list[Any]:
    text = _text(path, error)
    found: list[Any] = []
    try:
        loader = _Loader(text)  # the pure-Python reader checks the characters here
        try:
            if not documents:
                return [loader.get_single_data()]
            while loader.check_node():
                found.append(loader.construct_document(loader.get_node()))
            return found
        finally:
            loader.dispose()
    except (yaml.YAMLError, RecursionError) as exc:  # RecursionError: merge keys (``<<: *a``) chained too deep
        problem = _yaml_problem(exc) if isinstance(exc, yaml.YAMLError) else "merge keys nested too deeply"
        document = f"document {len(found) + 1}: " if documents else ""
        raise error(f"{path}: {document}not valid YAML: {problem}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, ReaderError):
        return one_line(f"{str(exc).splitlines()[0]} (character {exc.position + 1})")
    if not isinstance(exc, yaml.MarkedYAMLError):
        return one_line(str(exc))
    text = "; ".join(p for p in (exc.context, exc.problem) if p) or "malformed"
    mark = exc.problem_mark or exc.context_mark
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return one_line(text + where)


def read_yaml(path: str | Path, error: type[ConfigError] = ConfigError, top: type | tuple[type, ...] | None = None,
              what: str = "") -> Any:
    """The one document of a YAML file, within the limits above; ``top`` (described by ``what``) is the type
    the document must have. Any problem raises ``error`` naming the file."""
    (data,) = _parse(path, error, documents=False)
    if top is not None and not isinstance(data, top):
        raise error(f"{path}: must be {what}, not {describe(data)}")
    return data


def read_yaml_documents(path: str | Path, error: type[ConfigError] = ConfigError) -> list[Any]:
    """Every document of a multi-document YAML file, within the limits above (shared by all documents)."""
    return _parse(path, error, documents=True)


def one_line(message: str) -> str:
    """``message`` with its line breaks escaped, so that an error stays on one line."""
    return message.translate(_LINE_BREAKS)


def describe(value: Any) -> str:
    """A short name of a value for an error message: its type for lists and mappings, else its text, cut."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a number of about {round(value.bit_length() * math.log10(2))} digits"
    text = repr(value)
    return text if len(text) <= 100 else f"{text[:96]}...{text[-1]}"


def _type_name(types: tuple[type, ...]) -> str:
    names = {int: "a number", float: "a number", str: "a string", bool: "true or false", list: "a list",
             dict: "a mapping"}
    return " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))


class Fields:
    """Typed access to the fields of one mapping of an input file.

    ``where`` names the entry in errors (``file: nodes[3] 'a'``). With ``known``, a field not in it is
    an error (with the closest known name). A field set to null counts as not set. Errors are ``error``.
    """

    def __init__(self, data: Any, where: str, known: Iterable[str] | None = None,
                 error: type[ConfigError] = ConfigError):
        if not isinstance(data, dict):
            raise error(f"{where}: must be a mapping, not {describe(data)}")
        self.data, self.where, self.error = data, where, error
        if known is not None:
            known = tuple(known)
            for key in data:
                if key not in known:
                    close = difflib.get_close_matches(str(key), known, n=1)
                    hint = f"; did you mean '{close[0]}'?" if close else f"; known fields: {', '.join(known)}"
                    raise error(f"{where}: field {describe(key)} is not known{hint}")

    def fail(self, key: str, message: str) -> ConfigError:
        """The error ``field 'key' <message>`` of this entry."""
        return self.error(f"{self.where}: field '{key}' {message}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, types: type | tuple[type, ...], default: Any = _REQUIRED, what: str = "") -> Any:
        """The field, which must be of ``types`` (``what`` describes them); ``default`` when not set."""
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                raise self.fail(key, "is missing")
            return default
        types = types if isinstance(types, tuple) else (types,)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise self.fail(key, f"must be {what or _type_name(types)}, not {describe(value)}")
        return value

    def text(self, key: str, default: Any = _REQUIRED, choices: Iterable[str] | None = None) -> Any:
        value = self.get(key, str, default)
        if choices is not None and self.has(key):
            choices = tuple(choices)
            if value not in choices:
                raise self.fail(key, f"must be one of {', '.join(choices)}, not {describe(value)}")
        return value

    def flag(self, key: str, default: Any = _REQUIRED) -> Any:
        return self.get(key, bool, default)

    def number(self, key: str, default: Any = _REQUIRED, minimum: float = -MAX_NUMBER,
               maximum: float = MAX_NUMBER) -> Any:
        """A finite number in [minimum, maximum], as a float."""
        if not self.has(key):
            return self.get(key, (int, float), default)
        return check_number(self.data[key], minimum, maximum, lambda m: self.fail(key, m))

    def whole(self, key: str, default: Any = _REQUIRED, minimum: int = -(2**63), maximum: int = 2**63 - 1) -> Any:
        """A whole number in [minimum, maximum]."""
        value = self.get(key, int, default, "a whole number")
        if self.has(key):
            _check_range(value, minimum, maximum, lambda m: self.fail(key, m))
        return value

    def mapping(self, key: str) -> dict[Any, Any]:
        """The field's mapping, empty when not set."""
        value: dict[Any, Any] = self.get(key, dict, {})
        return value

    def sequence(self, key: str, default: Any = _REQUIRED) -> Any:
        return self.get(key, list, default)

    def entry(self, key: str, known: Iterable[str] | None = None) -> Fields:
        """The field's mapping as :class:`Fields` (named ``where: key``; empty when not set)."""
        return Fields(self.mapping(key), f"{self.where}: {key}", known, self.error)

    def labels(self, key: str) -> dict[str, str]:
        """A mapping of names to scalar values, as strings (empty when not set)."""
        out = {}
        for name, value in self.mapping(key).items():
            if isinstance(value, (dict, list)) or value is None or isinstance(name, (dict, list)):
                raise self.fail(key, f"must map names to strings; {describe(name)} maps to {describe(value)}")
            out[str(name)] = str(value)
        return out

    def names(self, key: str) -> list[str]:
        """A list of strings (empty when not set)."""
        values: list[str] = self.sequence(key, [])
        for i, value in enumerate(values):
            if not isinstance(value, str):
                raise self.fail(key, f"must list strings; item {i} is {describe(value)}")
        return values


def check_number(value: Any, minimum: float, maximum: float, fail: Callable[[str], ConfigError]) -> float:
    """``value`` as a float when it is a finite number in [minimum, maximum]; else raises ``fail(message)``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"must be a number, not {describe(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise fail(f"must be a finite number, not {describe(value)}")
    _check_range(value, minimum, maximum, fail)
    return float(value)


def _check_range(value: float, minimum: float, maximum: float, fail: Callable[[str], ConfigError]) -> None:
    if value < minimum:
        raise fail(f"must be at least {_bound(minimum)}, not {describe(value)}")
    if value > maximum:
        raise fail(f"must be at most {_bound(maximum)}, not {describe(value)}")


def _bound(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"
