"""The pluggy manager of the scheduling plugins, the actions a configuration may run, and per-session
call lists.

Every scheduling plugin -- shipped or third-party -- is an entry point in the group
``kai.plugins`` naming a builder ``build(arguments: dict) -> object``, found and built by
:mod:`kai.plugin_loader`; the object carries ``@kai.hookimpl`` methods, each named after a hook of
:mod:`kai.hookspecs` and declaring only arguments of that hook (a plugin doing otherwise fails to load).
The configuration says which plugins run, with which arguments, in which order. Every action -- the
shipped ones too -- is an entry point in the group ``kai.actions`` naming a callable that takes a
session, or is offered by a plugin through ``kai_actions``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, cast

import pluggy
from pluggy import HookImpl

from kai import PROJECT, _native, hookspecs
from kai.framework.config import SchedulerConfig
from kai.plugin_loader import (
    ACTION_GROUP,
    BINDER_PLUGIN_GROUP,
    PLUGIN_GROUP,
    PODGROUPER_GROUP,
    Installed,
    PluginError,
    build_plugin,
    discover,
    distribution,
    load,
    register,
)

if TYPE_CHECKING:
    from kai.api import Job, Member, PodSet, Queue, Reject, SubGroup, Task
    from kai.framework.nodes import NodeInfo
    from kai.framework.session import Session

    #: An action: runs on a session (``kai_actions`` offers them by name).
    Action = Callable[[Session], None]

#: Hooks called in the scheduling loops; resolved once per session into plain lists.
HOT_HOOKS = (
    "kai_job_order", "kai_task_order", "kai_subgroup_order", "kai_queue_order", "kai_pre_predicate",
    "kai_predicate", "kai_nodes_alike", "kai_job_over_capacity", "kai_task_over_capacity", "kai_node_scores",
    "kai_gpu_scores", "kai_on_allocate", "kai_on_deallocate", "kai_pre_job_allocation", "kai_subset_nodes",
)


def _adapt(impl: HookImpl, spec_args: tuple[str, ...]) -> Callable[..., object]:
    """A callable taking the spec's positional arguments, for an impl that may accept only some."""
    names = tuple(impl.argnames)
    fn = impl.function
    if names == spec_args:
        return fn
    picks = tuple(spec_args.index(n) for n in names)
    if not picks:
        return lambda *args: fn()
    if len(picks) == 1:
        (a,) = picks
        return lambda *args: fn(args[a])
    if len(picks) == 2:
        a, b = picks
        return lambda *args: fn(args[a], args[b])
    return lambda *args: fn(*[args[i] for i in picks])


class CallLists:
    """The implementations of each hot hook, in configuration order, as plain callables."""

    kai_job_order: list[Callable[[Session, Job, Job], int | None]]
    kai_task_order: list[Callable[[Session, Task, Task], int | None]]
    kai_subgroup_order: list[Callable[[Session, Job, Member, Member], int | None]]
    kai_queue_order: list[Callable[[Session, Queue, Queue, Job | None, Job | None, Sequence[Job], Sequence[Job]],
                                   int | None]]
    kai_pre_predicate: list[Callable[[Session, Task, Job], Reject | None]]
    kai_predicate: list[Callable[[Session, Task, Job, NodeInfo], Reject | None]]
    kai_nodes_alike: list[Callable[[Session, Task, Job], bool | None]]
    kai_job_over_capacity: list[Callable[[Session, Job, list[Task]], Reject | None]]
    kai_task_over_capacity: list[Callable[[Session, Task, Job, NodeInfo | None], Reject | None]]
    kai_node_scores: list[Callable[[Session, Task, list[NodeInfo]], Sequence[float] | None]]
    kai_gpu_scores: list[Callable[[Session, Task, NodeInfo, list[str | None]], Sequence[float] | None]]
    kai_on_allocate: list[Callable[[Session, Task, NodeInfo | None], None]]
    kai_on_deallocate: list[Callable[[Session, Task, NodeInfo | None], None]]
    kai_pre_job_allocation: list[Callable[[Session, Job], None]]
    kai_subset_nodes: list[Callable[[Session, Job, SubGroup | PodSet, list[str], list[Task], list[NodeInfo]],
                                    list[list[NodeInfo]] | None]]

    def __init__(self, pm: pluggy.PluginManager):
        #: The plugin object behind each entry of each list.
        self._owners: dict[str, list[object]] = {}
        for name in HOT_HOOKS:
            caller = getattr(pm.hook, name)
            spec_args = tuple(caller.spec.argnames)
            # pluggy calls the last registered first; plugins are registered in reverse
            # configuration order, so pluggy's call order is configuration order.
            impls = list(reversed(caller.get_hookimpls()))
            setattr(self, name, [_adapt(i, spec_args) for i in impls])
            self._owners[name] = [i.plugin for i in impls]

    def owners(self, name: str) -> list[object]:
        """The plugin object behind each entry of the call list of hook ``name``."""
        return self._owners[name]

    def withdraw(self, plugin: object, hooks: Iterable[str] | None = None) -> None:
        """Leave ``plugin`` out of every hot hook (or of ``hooks``) for the rest of the session (it has
        nothing to do there)."""
        names = self._owners.keys() if hooks is None else set(hooks)
        for name, owners in self._owners.items():
            if name not in names:
                continue
            calls = getattr(self, name)
            setattr(self, name, [fn for fn, owner in zip(calls, owners, strict=True) if owner is not plugin])
            self._owners[name] = [owner for owner in owners if owner is not plugin]


class Actions(Mapping[str, "Action"]):
    """The actions a configuration may run, by name: those plugins offer through ``kai_actions`` and the
    entry points of group ``kai.actions``, each loaded when first asked for."""

    def __init__(self, offered: Mapping[str, Action], available: Mapping[str, EntryPoint]):
        self._loaded = dict(offered)
        self._available = available

    def __getitem__(self, name: str) -> Action:
        action = self._loaded.get(name)
        if action is None:
            action = self._loaded[name] = cast("Action", load(name, self._available[name], "action"))
        return action

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._available

    def __iter__(self) -> Iterator[str]:
        return iter({**self._available, **self._loaded})

    def __len__(self) -> int:
        return len(self._available.keys() | self._loaded.keys())


class Plugins:
    """The plugins of one scheduler configuration, with the actions it may run."""

    def __init__(self, config: SchedulerConfig, available: dict[str, EntryPoint] | None = None,
                 available_actions: Mapping[str, EntryPoint] | None = None):
        self.config = config
        installed: Installed | None = entry_points() if available is None or available_actions is None else None
        available = discover(PLUGIN_GROUP, installed) if available is None else available
        available_actions = discover(ACTION_GROUP, installed) if available_actions is None else available_actions
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(hookspecs)
        built = [(spec.name, build_plugin(spec.name, spec.arguments, available)) for spec in config.plugins]
        self.names: list[str] = []
        for name, _ in reversed(built):
            if name in self.names:
                raise PluginError(f"plugin {name!r} is configured twice")
            self.names.append(name)
        self.names.reverse()
        register(self.pm, reversed(built), available)
        self.actions = Actions(self._offered_actions(available_actions), available_actions)
        missing = [a for a in config.actions if a not in self.actions]
        if missing:
            raise PluginError(
                f"unknown action(s) {', '.join(missing)}; available actions: {', '.join(sorted(self.actions))}"
            )
        for name in config.actions:
            self.actions[name]  # load the configured ones now: a broken one is a configuration error

    def _offered_actions(self, available: Mapping[str, EntryPoint]) -> dict[str, Action]:
        """The actions the plugins offer (``kai_actions``); one name offered twice is an error naming both."""
        actions: dict[str, Action] = {}
        by = {name: f"entry point {ep.value} ({distribution(ep)})" for name, ep in available.items()}
        for impl in self.pm.hook.kai_actions.get_hookimpls():
            offered = cast("dict[str, Action]", impl.function() or {})
            for name, fn in offered.items():
                if name in by:
                    raise PluginError(f"action {name!r} is offered twice: by {by[name]} and by plugin "
                                      f"{impl.plugin_name!r}")
                actions[name] = fn
                by[name] = f"plugin {impl.plugin_name!r}"
        return actions

    def plugin(self, name: str) -> Any:
        """The plugin object configured as ``name`` (None when it is not configured)."""
        return self.pm.get_plugin(name)

    def call_lists(self) -> CallLists:
        return CallLists(self.pm)

    def implementations(self, hook: str) -> list[tuple[str, Callable[..., object]]]:
        """``(plugin name, callable taking the spec's arguments)`` of every implementation of ``hook``, in
        configuration order: for calling the plugins one at a time (session open and close)."""
        caller = getattr(self.pm.hook, hook)
        spec_args = tuple(caller.spec.argnames)
        return [(i.plugin_name, _adapt(i, spec_args)) for i in reversed(caller.get_hookimpls())]


def list_main(argv: list[str]) -> int:
    """``kai-scheduler plugins``: installed plugins, podgroupers and binder plugins with their distributions."""
    if argv and argv[0] in ("-h", "--help"):
        print("usage: kai-scheduler plugins\n\nList installed scheduling plugins, podgroupers and binder plugins.")
        return 0
    try:
        groups = {"scheduling plugins": discover(PLUGIN_GROUP), "podgroupers": discover(PODGROUPER_GROUP),
                  "binder plugins": discover(BINDER_PLUGIN_GROUP)}
    except PluginError as exc:
        print(f"kai-scheduler plugins: {exc}", file=sys.stderr)
        return 2
    for title, eps in groups.items():
        print(f"{title} ({len(eps)}):")
        for name, ep in sorted(eps.items()):
            print(f"  {name:28} {distribution(ep):28} {ep.value}")
    for mod in ("nodefit", "division", "queueorder"):
        _native.load(mod)
    print(f"native extensions loaded: {', '.join(sorted(_native.NATIVE_LOADED)) or 'none (pure Python)'}")
    return 0
