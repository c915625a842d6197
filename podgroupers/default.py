"""KAI's default grouping: one PodGroup per top owner with a minimum of one pod.

``default`` is the fallback for every kind no other podgrouper claims: a kind described by a Karta
(:mod:`kai.grouping.karta`) is grouped as its Karta says, any other by the default rules. The other
entry points of this module claim the kinds KAI's table maps to the default rules explicitly.
"""

from __future__ import annotations

from kai.sdk import FALLBACK_KIND, KartaLookup, hookimpl, karta_metadata


class DefaultGrouper:
    """The default rules for the given kinds; the owners decide priority class and preemptibility."""

    def __init__(self, kinds):
        self.kinds = list(kinds)

    @hookimpl
    def kai_podgrouper_kinds(self):
        return self.kinds

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        return hub.default_metadata(top_owner, pod, owners)


class FallbackGrouper(DefaultGrouper):
    """The fallback: the kind's Karta when ``karta`` is on and one exists, else the default rules."""

    def __init__(self, karta: bool):
        super().__init__([FALLBACK_KIND])
        self.kartas = KartaLookup() if karta else None

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        metadata = hub.default_metadata(top_owner, pod, owners)
        karta = self.kartas.karta_for(hub, top_owner) if self.kartas else None
        return karta_metadata(karta, metadata, top_owner, pod) if karta is not None else metadata


def build(arguments):
    """The fallback podgrouper for every kind without a podgrouper of its own; ``arguments["kartaFallback"]``
    (default true) turns the Karta fallback on (KAI's ``--generic-karta-fallback``)."""
    return FallbackGrouper(bool(arguments.get("kartaFallback", True)))


def build_seldondeployment(arguments):
    return DefaultGrouper(
        [
            ("machinelearning.seldon.io", "v1alpha2", "SeldonDeployment"),
            ("machinelearning.seldon.io", "v1", "SeldonDeployment"),
        ]
    )


def build_virtualmachineinstance(arguments):
    return DefaultGrouper([("kubevirt.io", "v1", "VirtualMachineInstance")])


def build_devworkspace(arguments):
    return DefaultGrouper([("workspace.devfile.io", "v1alpha2", "DevWorkspace")])


def build_pipelinerun(arguments):
    return DefaultGrouper([("tekton.dev", "v1", "PipelineRun")])


def build_taskrun(arguments):
    return DefaultGrouper([("tekton.dev", "v1", "TaskRun")])
