"""The binder's plugins from its flags and the ``binder`` section of KAI's ``Config kai-config``.

:func:`chosen_plugins` is the translation, field by field the way KAI's operator turns the section into the
binder's flags, each field the Config sets winning over the flag:

* ``cdiEnabled`` and ``volumeBindingTimeoutSeconds`` set the default arguments of ``gpusharing`` and
  ``volumebinding`` (flag ``--cdi-enabled``; 120 s);
* ``plugins`` (``{NAME: {enabled, priority, arguments}}``) is laid over the defaults after ``--binder-plugins``;
  when it gives ``gpusharing`` arguments without ``cdiEnabled``, that comes from above, as KAI's operator does;
* ``resourceReservation.{namespace, appLabel, serviceAccountName, allocationTimeout (seconds),
  runtimeClassName, podResources, reservationPodSecurityContext, reservationContainerSecurityContext}`` become
  the reservation arguments of ``gpusharing`` (flags ``--resource-reservation-*``, ``--runtime-class-name``);
  without a container security context the reservation pods take ``global.securityContext``, as KAI's
  operator gives them; arguments the plugin configuration gives win.

:func:`plugins_builder` makes the ``build`` of :class:`kai.kube.kaiconfig.KaiObjects`: the plugins built, a
plugin whose name and arguments did not change kept as it is (with its state and watches).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import attrs

from kai.binder.pluginconfig import (
    DEFAULT_BIND_TIMEOUT_SECONDS,
    PluginConfig,
    default_config,
    enabled_plugins,
    parse_config,
    resolve,
)
from kai.binder.plugins import BindPlugin, build_plugins
from kai.common.errors import ConfigError
from kai.kube.client import Kube
from kai.kube.kaiconfig import config_field

#: ``binder.resourceReservation`` fields and the ``gpusharing`` argument each one sets.
RESERVATION_FIELDS = {"namespace": "namespace", "appLabel": "appLabel", "serviceAccountName": "serviceAccount",
                      "runtimeClassName": "runtimeClass"}
#: ``binder.resourceReservation`` objects and the ``gpusharing`` argument each one sets.
RESERVATION_OBJECTS = {"podResources": "podResources", "reservationPodSecurityContext": "podSecurityContext",
                       "reservationContainerSecurityContext": "containerSecurityContext"}


@attrs.frozen
class BinderFlags:
    """What the binder's flags say: ``--binder-plugins``, ``--cdi-enabled``, and the ``gpusharing`` arguments
    of the reservation flags."""

    plugins: Mapping[str, PluginConfig] = attrs.field(factory=dict)
    cdi_enabled: bool = False
    reservation: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(eq=False)
class BinderPlugins:
    """The plugins in force: ``chosen`` (name, arguments) in order, and the plugins built from them."""

    chosen: tuple[tuple[str, dict[str, Any]], ...]
    plugins: tuple[BindPlugin, ...]


def chosen_plugins(flags: BinderFlags, kai_config: dict | None) -> list[tuple[str, dict[str, Any]]]:
    """(name, arguments) of the plugins to run, in order; ConfigError or ValueError naming a malformed field."""
    cdi = config_field(kai_config, "binder.cdiEnabled", bool)
    cdi = flags.cdi_enabled if cdi is None else cdi
    timeout = config_field(kai_config, "binder.volumeBindingTimeoutSeconds", int)
    if timeout is not None and timeout <= 0:
        raise ValueError(f"spec.binder.volumeBindingTimeoutSeconds: must be positive, not {timeout}")
    section = config_field(kai_config, "binder.plugins", dict)
    overrides = parse_config(section, "spec.binder.plugins") if section is not None else {}
    resolved = resolve(resolve(default_config(cdi, timeout or DEFAULT_BIND_TIMEOUT_SECONDS), flags.plugins),
                       overrides)
    given = overrides.get("gpusharing")
    if given is not None and given.arguments is not None and "cdiEnabled" not in given.arguments:
        arguments = {**given.arguments, "cdiEnabled": _go_bool(cdi)}
        resolved["gpusharing"] = replace(resolved["gpusharing"], arguments=arguments)
    reservation = {**flags.reservation, **_reservation(kai_config)}
    return [(name, {**reservation, **arguments} if name == "gpusharing" else arguments)
            for name, arguments in enabled_plugins(resolved)]


def _go_bool(value: bool) -> str:
    return "true" if value else "false"


def _reservation(kai_config: dict | None) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for field, argument in RESERVATION_FIELDS.items():
        value = config_field(kai_config, f"binder.resourceReservation.{field}", str)
        if value is not None:
            arguments[argument] = value
    for field, argument in RESERVATION_OBJECTS.items():
        value = config_field(kai_config, f"binder.resourceReservation.{field}", dict)
        if value is not None:
            arguments[argument] = value
    if "containerSecurityContext" not in arguments:
        context = config_field(kai_config, "global.securityContext", dict)
        if context is not None:
            arguments["containerSecurityContext"] = context
    timeout = config_field(kai_config, "binder.resourceReservation.allocationTimeout", int)
    if timeout is not None:
        if timeout <= 0:
            raise ValueError(f"spec.binder.resourceReservation.allocationTimeout: must be a positive number of "
                             f"seconds, not {timeout}")
        arguments["allocationTimeout"] = f"{timeout}s"
    return arguments


def build_chosen(chosen: list[tuple[str, dict[str, Any]]], kube: Kube,
                 current: BinderPlugins | None = None) -> BinderPlugins:
    """The plugins of ``chosen``, reusing those of ``current`` whose name and arguments are the same."""
    kept = {name: plugin for (name, arguments), plugin in zip(current.chosen, current.plugins, strict=True)
            if (name, arguments) in chosen} if current is not None else {}
    plugins = [kept.get(name) or build_plugins([name], {name: arguments}, kube)[0] for name, arguments in chosen]
    return BinderPlugins(tuple(chosen), tuple(plugins))


def plugins_builder(flags: BinderFlags, kube: Kube,
                    current: Callable[[], BinderPlugins]) -> Callable[[dict | None, dict | None], BinderPlugins]:
    """``build(shard, kai_config)`` of the binder (the shard is not read): the current plugins when nothing
    changed, else the new list; a plugin refusing its arguments is an error naming the Config's field."""

    def build(_shard: dict | None, kai_config: dict | None) -> BinderPlugins:
        chosen = chosen_plugins(flags, kai_config)
        now = current()
        if list(now.chosen) == chosen:
            return now
        try:
            return build_chosen(chosen, kube, now)
        except Exception as exc:  # PluginError, or whatever a plugin's builder raises
            raise ConfigError(f"spec.binder: {exc}") from exc

    return build
