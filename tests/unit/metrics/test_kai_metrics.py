"""KAI v0.17's metrics are exported by the same component, with KAI's type and labels, under KAI's name or
the one the rename table of docs/metrics.md gives; and every metric exported is documented there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kai.metrics import BinderMetrics, Family, QueueMetrics, Registry, SchedulerMetrics

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "metrics.md"
#: KAI's list (component, name, type, labels); its header says how it was made.
KAI_V017 = Path(__file__).with_name("kai_v017_metrics.txt")
COMPONENTS = {"scheduler": SchedulerMetrics, "binder": BinderMetrics, "queue-controller": QueueMetrics}
#: A row of the rename table: | `KAI's name` | `ours` | value |
RENAME = re.compile(r"^\| `(kai_\w+)` \| `(kai_\w+)` \| [^|]+ \|$", re.M)


def kai_metrics() -> list[tuple[str, str, str, frozenset[str]]]:
    rows = []
    for line in KAI_V017.read_text().splitlines():
        if line and not line.startswith("#"):
            component, name, kind, labels = line.split()
            rows.append((component, name, kind, frozenset() if labels == "-" else frozenset(labels.split(","))))
    return rows


def renames() -> dict[str, str]:
    return dict(RENAME.findall(DOC.read_text()))


def usual_name(family: Family) -> str:
    """The name a query uses: a counter's ``_total`` sample, otherwise the family's name."""
    return family.samples()[0] if family.type == "counter" else family.name


def exported(component: str) -> dict[str, Family]:
    """The families of one component's registry by their usual name and by each of their sample names
    (a counter is never found by its name without ``_total``: ``/metrics`` has no such sample)."""
    registry = Registry()
    COMPONENTS[component](registry)
    return {name: f for f in registry.families for name in (usual_name(f), *f.samples())}


def test_kai_s_list_is_complete():
    assert len(kai_metrics()) == 34  # METRICS.md at d5bc503a: 7 of the queue controller, 27 of the scheduler
    assert {c for c, *_ in kai_metrics()} <= set(COMPONENTS)


@pytest.mark.parametrize(("component", "name", "kind", "labels"), kai_metrics(), ids=lambda v: str(v))
def test_kai_metric_is_exported_with_its_type_and_labels(component, name, kind, labels):
    families = exported(component)
    kai_name = f"kai_{name}"
    ours = kai_name if kai_name in families else renames().get(kai_name)
    assert ours in families, f"{kai_name}: not exported by the {component}, and docs/metrics.md renames it to {ours}"
    family = families[ours]
    assert family.type == kind
    assert set(family.labels) == labels


def test_the_rename_table_lists_only_kai_metrics_exported_under_another_name():
    table = renames()
    assert len(table) == 14
    kai = {f"kai_{name}": component for component, name, *_ in kai_metrics()}
    for kai_name, ours in table.items():
        families = exported(kai[kai_name])
        assert kai_name not in families, f"{kai_name} is exported under KAI's name: no rename"
        assert ours in families and usual_name(families[ours]) == ours


def test_every_exported_metric_is_documented():
    documented = set(re.findall(r"`(kai_\w+)`", DOC.read_text()))
    for component in COMPONENTS:
        names = {usual_name(f) for f in exported(component).values()}
        assert names - documented == set(), f"{component}: not in docs/metrics.md"
