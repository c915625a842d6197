"""The bounded YAML loader of every file input, and the typed field accessors (kai.common.yamlfile)."""

from __future__ import annotations

import math

import pytest

from kai.common.errors import ConfigError
from kai.common.yamlfile import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_VALUES,
    Fields,
    describe,
    one_line,
    read_yaml,
    read_yaml_documents,
)


def write(tmp_path, content, name="in.yaml"):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def refused(tmp_path, content, documents=False) -> str:
    path = write(tmp_path, content)
    with pytest.raises(ConfigError) as info:
        read_yaml_documents(path) if documents else read_yaml(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_plain_yaml_reads_as_json_types(tmp_path):
    text = "a: [1, 2.5, true, null, text]\nb: {c: -1}\nwhen: 2025-01-06T00:00:00Z\nday: 2025-13-45\n"
    assert read_yaml(write(tmp_path, text)) == {
        "a": [1, 2.5, True, None, "text"], "b": {"c": -1},
        "when": "2025-01-06T00:00:00Z", "day": "2025-13-45"}  # dates stay strings, as for Kubernetes


def test_anchors_aliases_and_merge_keys_within_the_budget_work(tmp_path):
    text = "base: &b {gpus: 1, cpu: 2}\nx: *b\ny: {<<: *b, cpu: 4}\n" + alias_bomb(3)
    data = read_yaml(write(tmp_path, text))
    assert data["x"] == {"gpus": 1, "cpu": 2} and data["y"] == {"gpus": 1, "cpu": 4}
    assert len(data["a2"]) == 9 and data["a2"][0] == data["a1"]


def test_alias_bomb_is_refused_while_it_is_read(tmp_path):
    message = refused(tmp_path, alias_bomb(9))  # 9**9 values once expanded
    assert f"more than {MAX_VALUES:,} values" in message and "line 7" in message


def test_recursive_alias_is_refused(tmp_path):
    assert "alias *r is used inside the node it names" in refused(tmp_path, "a: &r [x, *r]\n")


@pytest.mark.parametrize("text", ["[" * 200 + "]" * 200, "".join("  " * i + "- \n" for i in range(MAX_DEPTH + 5))])
def test_deep_nesting_is_refused(tmp_path, text):
    assert f"nested deeper than {MAX_DEPTH} levels" in refused(tmp_path, text)


def test_nesting_up_to_the_limit_is_read(tmp_path):
    depth = MAX_DEPTH - 1
    data = read_yaml(write(tmp_path, "[" * depth + "1" + "]" * depth))
    for _ in range(depth):
        data = data[0]
    assert data == 1


def test_oversized_file_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as f:
        f.truncate(MAX_BYTES + 1)
    with pytest.raises(ConfigError, match=f"larger than {MAX_BYTES // 2**20} MiB"):
        read_yaml(path)


def test_invalid_utf8_names_the_byte_offset(tmp_path):
    assert refused(tmp_path, b"a: 1\nb: \xff\xfe\n").endswith("not valid UTF-8 at byte 8")


@pytest.mark.parametrize("text, problem", [
    ("a: \x00", "unacceptable character #x0000"),
    ('a: "\\ud800"', "Unicode"),
    ("a: !!int x", "'x' is not a valid !!int"),
    ("a: !!bool maybe", "'maybe' is not a valid !!bool"),
    ("a: !!set {x}", "tag:yaml.org,2002:set"),
    ("a: !!binary aGk=", "tag:yaml.org,2002:binary"),
    ("a: !!python/object:os.system x", "python/object"),
    ("a: " + "9" * 5000, "is not a valid !!int"),
    ("a: [1, 2", "while parsing a flow sequence"),
    ("a: *nowhere", "found undefined alias"),
])
def test_malformed_yaml_is_one_line_naming_the_problem(tmp_path, text, problem):
    message = refused(tmp_path, text)
    assert "not valid YAML: " in message and problem in message


def test_top_level_type(tmp_path):
    path = write(tmp_path, "- a\n")
    assert read_yaml(path, top=list) == ["a"]
    with pytest.raises(ConfigError, match="in.yaml: must be a cluster file, not a list$"):
        read_yaml(path, top=dict, what="a cluster file")
    with pytest.raises(ConfigError, match="must be a cluster file, not null"):
        read_yaml(write(tmp_path, ""), top=dict, what="a cluster file")


def test_documents_share_the_budget_and_errors_name_the_document(tmp_path):
    assert read_yaml_documents(write(tmp_path, "a: 1\n---\nb: 2\n")) == [{"a": 1}, {"b": 2}]
    assert "document 2: not valid YAML" in refused(tmp_path, "a: 1\n---\nb: [\n", documents=True)
    with pytest.raises(ConfigError, match="expected a single document"):
        read_yaml(write(tmp_path, "a: 1\n---\nb: 2\n"))


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: cannot read"):
        read_yaml(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="cannot read"):
        read_yaml(tmp_path)


def test_custom_error_type(tmp_path):
    class FileError(ConfigError):
        pass

    with pytest.raises(FileError):
        read_yaml(write(tmp_path, "a: ["), FileError)


def test_describe_names_values_shortly():
    assert describe([1]) == "a list" and describe({"a": 1}) == "a mapping" and describe(None) == "null"
    assert describe(True) == "true" and describe("x") == "'x'" and describe(float("nan")) == "nan"
    assert describe(10**400) == "a number of about 400 digits"
    assert len(describe("y" * 10_000)) < 110


def test_one_line_escapes_every_line_break():
    assert one_line("a\nb\rc\u2028d\x85e") == "a\\nb\\rc\\u2028d\\x85e"
    assert len(one_line("a\nb\u2029c").splitlines()) == 1


def test_fields_check_types_and_ranges():
    f = Fields({"n": 3, "x": 1.5, "s": "a", "b": True, "l": [1], "m": {"k": 1}, "none": None}, "f.yaml: e")
    assert (f.whole("n"), f.number("x"), f.text("s"), f.flag("b")) == (3, 1.5, "a", True)
    assert f.whole("none", 7) == 7 and f.number("absent", None) is None and f.mapping("absent") == {}
    cases = [
        (lambda: f.whole("x"), "field 'x' must be a whole number, not 1.5"),
        (lambda: f.whole("b"), "field 'b' must be a whole number, not true"),
        (lambda: f.number("l"), "field 'l' must be a number, not a list"),
        (lambda: f.text("m"), "field 'm' must be a string, not a mapping"),
        (lambda: f.flag("s"), "field 's' must be true or false, not 'a'"),
        (lambda: f.whole("n", maximum=2), "field 'n' must be at most 2, not 3"),
        (lambda: f.number("x", minimum=2), "field 'x' must be at least 2, not 1.5"),
        (lambda: f.text("s", choices=("b", "c")), "field 's' must be one of b, c, not 'a'"),
        (lambda: f.whole("absent"), "field 'absent' is missing"),
    ]
    for call, message in cases:
        with pytest.raises(ConfigError) as info:
            call()
        assert str(info.value) == f"f.yaml: e: {message}"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e300, 10**30])
def test_fields_refuse_numbers_that_are_not_finite_or_too_large(value):
    with pytest.raises(ConfigError, match="field 'v' must be (a finite number|at most)"):
        Fields({"v": value}, "e").number("v")


def test_fields_labels_names_and_unknown_fields():
    f = Fields({"labels": {"a": 1, "b": "x"}, "names": ["p", "q"], "bad": {"a": [1]}, "odd": ["a", 1]}, "e")
    assert f.labels("labels") == {"a": "1", "b": "x"} and f.names("names") == ["p", "q"]
    with pytest.raises(ConfigError, match="field 'bad' must map names to strings; 'a' maps to a list"):
        f.labels("bad")
    with pytest.raises(ConfigError, match="field 'odd' must list strings; item 1 is 1"):
        f.names("odd")
    with pytest.raises(ConfigError, match="e: field 'gpu' is not known; did you mean 'gpus'"):
        Fields({"gpu": 1}, "e", known=("gpus", "cpu"))
    with pytest.raises(ConfigError, match="e: must be a mapping, not a list"):
        Fields([1], "e")
