"""Plugins of every family found through their entry-point groups, built and registered the same way.

A scheduling plugin (group ``kai.plugins``), a podgrouper (``kai.podgroupers``) or a binder plugin
(``kai.binder_plugins``) is an entry point naming a builder ``build(arguments: dict) -> object``; an
action (``kai.actions``) one naming a callable that takes a session.
:func:`discover` finds a group's entry points, :func:`load` imports one, :func:`build_plugin` loads and
builds one, and :func:`register` puts hook-carrying plugins into a pluggy manager, refusing a hook or a hook
argument :mod:`kai.hookspecs` does not declare. Every failure is a :class:`PluginError` naming the plugin and its
distribution. Importing this module loads neither the scheduling kernel nor the grouping hub.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol

import pluggy

from kai import hookspecs

PLUGIN_GROUP = "kai.plugins"
ACTION_GROUP = "kai.actions"
PODGROUPER_GROUP = "kai.podgroupers"
BINDER_PLUGIN_GROUP = "kai.binder_plugins"


class Installed(Protocol):
    """One reading of every installed entry point (``importlib.metadata.entry_points()``)."""

    def select(self, *, group: str) -> Iterable[EntryPoint]: ...


class PluginError(Exception):
    """A plugin cannot be found, loaded, built or registered, or two distributions claim one name."""


def distribution(ep: EntryPoint | None) -> str:
    """``name version`` of the distribution an entry point comes from, ``?`` when unknown."""
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "?"


def discover(group: str = PLUGIN_GROUP, installed: Installed | None = None) -> dict[str, EntryPoint]:
    """Entry points of ``group`` (among ``installed``, one reading of every group, or those installed now)
    by name; two distributions claiming one name is an error naming both."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group) if installed is None else installed.select(group=group):
        other = found.get(ep.name)
        if other is not None and other.value != ep.value and distribution(other) != distribution(ep):
            raise PluginError(
                f"plugin name {ep.name!r} in group {group} is claimed by two distributions: "
                f"{distribution(other)} ({other.value}) and {distribution(ep)} ({ep.value})"
            )
        found[ep.name] = ep
    return found


def load(name: str, ep: EntryPoint, kind: str = "plugin") -> Any:
    """What the entry point ``ep`` of the ``kind`` named ``name`` names, imported."""
    try:
        return ep.load()
    except Exception as exc:  # a broken third-party distribution must not look like our bug
        raise PluginError(f"{kind} {name!r} ({distribution(ep)}): cannot load {ep.value}: {exc}") from exc


def build_plugin(name: str, arguments: Mapping[str, Any], available: Mapping[str, EntryPoint],
                 kind: str = "plugin") -> object:
    """Load and build one ``kind`` of plugin; an unknown name is an error that lists the installed ones."""
    ep = available.get(name)
    if ep is None:
        raise PluginError(f"unknown {kind} {name!r}; installed {kind}s: {', '.join(sorted(available)) or 'none'}")
    builder = load(name, ep, kind)
    try:
        return builder(dict(arguments))
    except Exception as exc:
        raise PluginError(f"{kind} {name!r}: invalid arguments {arguments!r}: {exc}") from exc


def register(pm: pluggy.PluginManager, plugins: Iterable[tuple[str, object]], available: Mapping[str, EntryPoint],
             kind: str = "plugin") -> None:
    """Register ``(name, plugin)`` pairs in ``pm`` (whose specifications are added) in that order.

    A hook implementation declaring an argument its specification does not have, or implementing a hook no
    specification declares (``optionalhook=True`` excepted), is a :class:`PluginError` naming the plugin and
    the distribution ``available`` gives it.
    """
    for name, plugin in plugins:
        try:
            pm.register(plugin, name=name)
        except pluggy.PluginValidationError:
            what = hookspecs.unknown_argument(pm, plugin)
            if what is None:
                raise
            raise PluginError(f"{kind} {name!r} ({distribution(available.get(name))}): {what}") from None
    unknown = hookspecs.unknown_hook(pm)
    if unknown is not None:
        name, what = unknown
        raise PluginError(f"{kind} {name!r} ({distribution(available.get(name))}) implements {what}")
