"""Which binder plugins run, in what order and with which arguments: KAI v0.17's binder plugin configuration.

The shape is KAI's (the binder's ``--plugins`` JSON, the operator's ``binder.plugins``): a mapping
from plugin name to ``{enabled, priority, arguments}``, every field optional::

    {"gpusharing": {"priority": 100, "arguments": {"cdiEnabled": "true"}},
     "volumebinding": {"enabled": false}}

:func:`resolve` lays such a mapping over the defaults as KAI does: a field given replaces the
default's (``arguments`` as a whole), and a plugin without a default is enabled with priority 0
unless it says otherwise. :func:`enabled_plugins` orders the enabled ones by priority, highest
first, then by name. The names are entry points of ``kai.binder_plugins``; building an unknown one
is an error (:func:`kai.binder.plugins.build_plugins`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kai.common.errors import ConfigError
from kai.common.yamlfile import describe, read_yaml

FIELDS = ("enabled", "priority", "arguments")
#: KAI's priorities of its binder plugins.
HAMICORE_PRIORITY = 50
GPUSHARING_PRIORITY = 100
DYNAMICRESOURCES_PRIORITY = 200
VOLUMEBINDING_PRIORITY = 300
#: KAI's default ``bindTimeoutSeconds`` of the volume-binding plugin.
DEFAULT_BIND_TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class PluginConfig:
    """One plugin's entry; ``None`` is a field not given."""

    enabled: bool | None = None
    priority: int | None = None
    arguments: Mapping[str, str] | None = None


def default_config(cdi_enabled: bool = False,
                   bind_timeout_seconds: int = DEFAULT_BIND_TIMEOUT_SECONDS) -> dict[str, PluginConfig]:
    """The plugins run when the configuration names none, with KAI's priorities and arguments: volume binding,
    DRA claims, then GPU sharing; HAMi-core's GPU-memory limits are there but off, as in KAI."""
    return {"volumebinding": PluginConfig(True, VOLUMEBINDING_PRIORITY,
                                          {"bindTimeoutSeconds": str(bind_timeout_seconds)}),
            "dynamicresources": PluginConfig(True, DYNAMICRESOURCES_PRIORITY,
                                             {"bindTimeoutSeconds": str(bind_timeout_seconds)}),
            "gpusharing": PluginConfig(True, GPUSHARING_PRIORITY, {"cdiEnabled": _go_bool(cdi_enabled)}),
            "hamicore": PluginConfig(False, HAMICORE_PRIORITY, {})}


def parse_config(value: Any, where: str) -> dict[str, PluginConfig]:
    """The entries of a decoded configuration; ConfigError naming ``where`` and the field that is wrong."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping from plugin name to {{enabled, priority, arguments}}, "
                          f"not {describe(value)}")
    config = {}
    for name, entry in value.items():
        at = f"{where}: {name}"
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: a plugin name must be a non-empty string, not {describe(name)}")
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{at}: expected a mapping with {', '.join(FIELDS)}, not {describe(entry)}")
        unknown = sorted(str(k) for k in entry if k not in FIELDS)
        if unknown:
            raise ConfigError(f"{at}: unknown field(s) {', '.join(unknown)}; the fields are {', '.join(FIELDS)}")
        enabled, priority, arguments = (entry.get(f) for f in FIELDS)
        if enabled is not None and not isinstance(enabled, bool):
            raise ConfigError(f"{at}.enabled: expected true or false, not {describe(enabled)}")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise ConfigError(f"{at}.priority: expected an integer, not {describe(priority)}")
        if arguments is not None:
            arguments = _arguments(arguments, f"{at}.arguments")
        config[name] = PluginConfig(enabled, priority, arguments)
    return config


def _arguments(value: Any, where: str) -> dict[str, str]:
    """KAI's arguments are strings; YAML's booleans and numbers are taken as the strings they spell."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping of strings, not {describe(value)}")
    out = {}
    for key, item in value.items():
        if isinstance(item, bool):
            item = _go_bool(item)
        elif isinstance(item, int | float):
            item = str(item)
        if not isinstance(key, str) or not isinstance(item, str):
            raise ConfigError(f"{where}: {key!r}: expected a string value, not {describe(item)}")
        out[key] = item
    return out


def load_config(value: str, where: str) -> dict[str, PluginConfig]:
    """A configuration given inline as a JSON object (KAI's ``--plugins``), or as the path of a YAML file."""
    if value.lstrip().startswith("{"):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not valid JSON: {exc}") from exc
        return parse_config(decoded, where)
    try:
        decoded = read_yaml(value)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc} (expected a JSON object or the path of a YAML file)") from exc
    return parse_config(decoded, f"{where} ({value})")


def resolve(defaults: Mapping[str, PluginConfig], overrides: Mapping[str, PluginConfig]) -> dict[str, PluginConfig]:
    """KAI's ResolveConfig: each override's given fields replace the default's; a new plugin is enabled."""
    resolved = dict(defaults)
    for name, override in overrides.items():
        base = resolved.get(name, PluginConfig(True, 0, {}))
        resolved[name] = replace(
            base,
            enabled=base.enabled if override.enabled is None else override.enabled,
            priority=base.priority if override.priority is None else override.priority,
            arguments=base.arguments if override.arguments is None else override.arguments)
    return resolved


def enabled_plugins(config: Mapping[str, PluginConfig]) -> list[tuple[str, dict[str, str]]]:
    """(name, arguments) of the enabled plugins, highest priority first, then by name. ConfigError when
    ``hamicore`` is on without ``gpusharing`` running before it (KAI's check: it writes into gpusharing's
    ConfigMap)."""
    on = [(name, entry) for name, entry in config.items() if entry.enabled is not False]
    enabled = dict(on)
    if "hamicore" in enabled:
        sharing = enabled.get("gpusharing")
        if sharing is None:
            raise ConfigError("hamicore needs the gpusharing plugin enabled")
        if (sharing.priority or 0) <= (enabled["hamicore"].priority or 0):
            raise ConfigError(f"hamicore needs gpusharing to run before it (gpusharing.priority "
                              f"{sharing.priority or 0} must be above hamicore.priority "
                              f"{enabled['hamicore'].priority or 0})")
    on.sort(key=lambda item: (-(item[1].priority or 0), item[0]))
    return [(name, dict(entry.arguments or {})) for name, entry in on]


def _go_bool(value: bool) -> str:
    return "true" if value else "false"
