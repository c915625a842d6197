"""``kai.sdk``: its hook protocols agree with kai/hookspecs.py section by section, its names are all there and
public, and a plugin subclassing a protocol registers only the hooks it marks."""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import pytest

import kai.hookspecs
from kai import sdk
from kai import testing as kt
from kai import testing_podgroupers as ktp
from kai.sdk import NodeInfo, Session, Task

#: The protocol of each section of kai/hookspecs.py, by the section title's first words.
PROTOCOLS = {
    "session life cycle": sdk.SessionHooks,
    "ordering": sdk.OrderHooks,
    "filtering": sdk.FilterHooks,
    "capacity": sdk.CapacityHooks,
    "eviction actions": sdk.EvictionHooks,
    "node subsets": sdk.SubsetHooks,
    "scoring": sdk.ScoreHooks,
    "allocation events": sdk.AllocationHooks,
    "pod grouping": sdk.PodgrouperHooks,
}


def sections() -> dict[str, list[str]]:
    """The hooks of each ``# --- title`` section of kai/hookspecs.py, in order."""
    found: dict[str, list[str]] = {}
    current = None
    for line in Path(kai.hookspecs.__file__).read_text().splitlines():
        if line.startswith("# --- "):
            current = next(t for t in PROTOCOLS if line[6:].startswith(t))
            found[current] = []
        elif line.startswith("def kai_") and current is not None:
            found[current].append(line[4:line.index("(")])
    return found


def hooks_of(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if name.startswith("kai_")]


def test_every_section_has_its_protocol_with_the_same_hooks():
    found = sections()
    assert list(found) == list(PROTOCOLS)
    assert {title: hooks_of(protocol) for title, protocol in PROTOCOLS.items()} == found


def drift(protocol: type) -> list[str]:
    """The hook methods of ``protocol`` whose arguments (names, order, types) or return type are not their
    specification's."""
    out = []
    for name in hooks_of(protocol):
        spec = inspect.signature(getattr(kai.hookspecs, name))
        method = list(inspect.signature(getattr(protocol, name)).parameters.values())
        if ([(p.name, p.annotation) for p in method] != [("self", inspect.Parameter.empty)] + [
                (p.name, p.annotation) for p in spec.parameters.values()]
                or inspect.signature(getattr(protocol, name)).return_annotation != spec.return_annotation):
            out.append(name)
    return out


@pytest.mark.parametrize("title", PROTOCOLS)
def test_each_protocol_method_has_its_hooks_arguments_and_types(title):
    assert drift(PROTOCOLS[title]) == []


def test_the_checker_sees_a_protocol_drifting_from_its_hook():
    class Drifted(sdk.ScoreHooks, Protocol):
        def kai_node_scores(self, session: Session, tsk: Task, nodes: list[NodeInfo]) -> Sequence[float] | None:
            return None

        def kai_gpu_scores(self, session: Session, task: Task, node: NodeInfo, groups: list[str]) -> list[float]:
            return []

    assert drift(Drifted) == ["kai_node_scores", "kai_gpu_scores"]


def test_every_name_is_there_public_and_listed_once():
    assert len(sdk.__all__) == len(set(sdk.__all__))
    assert [n for n in sdk.__all__ if n.startswith("_") or not hasattr(sdk, n)] == []


def test_the_module_docstring_says_what_is_stable():
    assert re.search(r"What is stable: the names in ``__all__``", sdk.__doc__ or "")


class PreferGpuNodes(sdk.ScoreHooks, sdk.FilterHooks):
    name = "prefergpu"

    @sdk.hookimpl
    def kai_node_scores(self, session, task, nodes):
        return [float(n.node.allocatable.gpu) for n in nodes]


def test_a_plugin_subclassing_protocols_registers_only_its_marked_hooks():
    plugins = kt.plugin_manager(["predicates", "prefergpu"], extra_plugins={"prefergpu": lambda a: PreferGpuNodes()})
    plugin = plugins.plugin("prefergpu")
    assert [caller.name for caller in plugins.pm.get_hookcallers(plugin)] == ["kai_node_scores"]
    snap = kt.cluster(nodes=[kt.node("small", gpus=2), kt.node("big", gpus=8)], jobs=[kt.job("train", gpus=1)])
    assert kt.placements(kt.run(snap, plugins=["predicates", "prefergpu"],
                                extra_plugins={"prefergpu": lambda a: PreferGpuNodes()})) == {"train-0": "big"}


class Sweeps(sdk.PodgrouperHooks):
    @sdk.hookimpl
    def kai_podgrouper_kinds(self):
        return [("tuning.example.com", "v1", "Sweep")]

    @sdk.hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod, owners)
        metadata.min_available = sdk.nested_int(top_owner, "spec", "parallelTrials")[0]
        return metadata


def test_a_podgrouper_subclassing_its_protocol_groups_pods():
    sweep = ktp.obj("tuning.example.com/v1", "Sweep", "lr", uid="s1", spec={"parallelTrials": 4})
    metadata = ktp.group(ktp.pod("lr-7", owner=sweep), sweep, plugins={"sweep": Sweeps()})
    assert (metadata.name, metadata.min_available) == ("pg-lr-s1", 4)
