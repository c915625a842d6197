"""The binder plugin configuration in KAI v0.17's shape: parsing, laying it over the defaults, the order."""

from __future__ import annotations

import pytest

from kai.binder.pluginconfig import (
    PluginConfig,
    default_config,
    enabled_plugins,
    load_config,
    parse_config,
    resolve,
)
from kai.common.errors import ConfigError


def test_the_default_is_volumebinding_dynamicresources_then_gpusharing_with_kais_priorities_and_arguments():
    volumes = ("volumebinding", {"bindTimeoutSeconds": "120"})
    claims = ("dynamicresources", {"bindTimeoutSeconds": "120"})
    assert enabled_plugins(default_config()) == [volumes, claims, ("gpusharing", {"cdiEnabled": "false"})]
    assert enabled_plugins(default_config(cdi_enabled=True)) == [volumes, claims,
                                                                 ("gpusharing", {"cdiEnabled": "true"})]
    assert default_config()["gpusharing"].priority == 100
    assert default_config()["dynamicresources"].priority == 200
    assert default_config()["volumebinding"].priority == 300


def test_overrides_replace_the_fields_they_give_and_new_plugins_are_enabled_at_priority_0():
    overrides = parse_config({"gpusharing": {"priority": 10}, "extra": None, "late": {"priority": -5},
                              "first": {"priority": 500, "arguments": {"a": "1"}}, "off": {"enabled": False}}, "x")
    resolved = resolve(default_config(cdi_enabled=True), overrides)
    assert resolved["gpusharing"] == PluginConfig(True, 10, {"cdiEnabled": "true"})  # arguments kept
    assert resolved["extra"] == PluginConfig(True, 0, {})
    assert [name for name, _ in enabled_plugins(resolved)] == ["first", "volumebinding", "dynamicresources",
                                                            "gpusharing", "extra", "late"]
    replaced = resolve(default_config(cdi_enabled=True), parse_config({"gpusharing": {"arguments": {"x": "y"}}}, "x"))
    assert replaced["gpusharing"].arguments == {"x": "y"}  # KAI: given arguments replace the default ones


def test_equal_priorities_run_by_name():
    config = parse_config({"b": {}, "a": {}, "c": {"priority": 1}}, "x")
    assert [name for name, _ in enabled_plugins(config)] == ["c", "a", "b"]


def test_yaml_scalars_become_the_strings_kai_reads():
    config = parse_config({"p": {"arguments": {"on": True, "off": False, "n": 60, "f": 0.5}}}, "x")
    assert config["p"].arguments == {"on": "true", "off": "false", "n": "60", "f": "0.5"}


@pytest.mark.parametrize(("value", "message"), [
    (["gpusharing"], "where: expected a mapping from plugin name to {enabled, priority, arguments}"),
    ({"p": "on"}, "where: p: expected a mapping with enabled, priority, arguments"),
    ({"p": {"priority": True}}, "where: p.priority: expected an integer, not true"),
    ({"p": {"arguments": {"k": None}}}, "where: p.arguments: 'k': expected a string value"),
    ({"p": {"arguments": {"k": {"nested": "x"}}}}, "where: p.arguments: 'k': expected a string value"),
    ({"": {}}, "where: a plugin name must be a non-empty string"),
])
def test_a_malformed_entry_names_where_it_is(value, message):
    with pytest.raises(ConfigError) as err:
        parse_config(value, "where")
    assert message in str(err.value)


def test_load_takes_inline_json_or_a_yaml_file(tmp_path):
    assert load_config(' {"p": {"enabled": false}}', "f") == {"p": PluginConfig(False, None, None)}
    path = tmp_path / "plugins.yaml"
    path.write_text("p:\n  priority: 7\n")
    assert load_config(str(path), "f") == {"p": PluginConfig(None, 7, None)}
    path.write_text("p: {enabled: maybe}\n")
    with pytest.raises(ConfigError, match=rf"f \({path}\): p.enabled: expected true or false"):
        load_config(str(path), "f")
    with pytest.raises(ConfigError, match="f: .*missing.yaml: cannot read"):
        load_config(str(tmp_path / "missing.yaml"), "f")
