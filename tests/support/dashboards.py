"""Grafana dashboards against the metrics a ``kai-scheduler run`` process exports, for tests.

:func:`run_metrics` builds the registry of every component ``kai-scheduler run`` can run (but the
admission webhook, which exports nothing of its own) without a cluster; :func:`problems` parses one
PromQL expression and says what it selects that the components do not export.
"""

from __future__ import annotations

import re

import promql_parser

from kai.framework import DEFAULT_CONFIG
from kai.run import Context, _parser, build_components, metrics_registry

#: Labels Prometheus adds to every sample it scrapes from a Service (the Prometheus operator's).
SCRAPE_LABELS = frozenset({"namespace", "pod", "job", "instance", "service", "endpoint", "container"})
#: Grafana's interval variables, which are no PromQL: a duration stands in for them when parsing.
INTERVAL = re.compile(r"\$__(rate_interval|interval|range)")
LABEL_VALUES = re.compile(r"^label_values\((.+),\s*(\w+)\)$")
#: The components of one ``kai-scheduler run`` process that export metrics of their own.
COMPONENTS = ["scheduler", "binder", "podgrouper", "podgroup-controller", "queue-controller"]


class NoKube:
    """Enough of a client to build components (none of them calls the API before ``run``)."""

    api_client = None
    timeout = 30.0


def run_metrics() -> dict[str, frozenset[str]]:
    """Every sample name a process running :data:`COMPONENTS` exports, with its label names."""
    args = _parser().parse_args([])
    registry = metrics_registry(args, NoKube())
    build_components(Context(args, DEFAULT_CONFIG, NoKube(), registry), COMPONENTS)
    found = {sample: frozenset(f.labels) | ({"le"} if sample.endswith("_bucket") else set())
             for f in registry.families for sample in f.samples()}
    for family in registry.collectors.collect():  # the process collector's, which are no registered family
        for sample in family.samples:
            found.setdefault(sample.name, frozenset(sample.labels))
    return found


def problems(expr: str, metrics: dict[str, frozenset[str]], elsewhere: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with one query: a syntax error, an unknown metric, a label the metric does not have.
    Metrics whose names start with one of ``elsewhere`` come from other exporters and are not checked."""
    try:
        ast = promql_parser.parse(INTERVAL.sub("5m", expr))
    except ValueError as exc:
        return [f"not PromQL: {exc}"]
    found: list[str] = []

    def labels_under(node) -> frozenset[str] | None:
        """The labels the series under ``node`` may have; None when some come from another exporter."""
        names: set[str] = set(SCRAPE_LABELS)
        foreign = False

        def add(n) -> None:  # walk() stops at a callback returning False
            nonlocal foreign
            if isinstance(n, promql_parser.VectorSelector):
                foreign |= n.name.startswith(elsewhere) if elsewhere else False
                names.update(metrics.get(n.name, ()))

        promql_parser.walk(node, add)
        return None if foreign else frozenset(names)

    def visit(node) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if elsewhere and node.name.startswith(elsewhere):
                return
            if node.name not in metrics:
                found.append(f"{node.name} is not exported")
            else:
                found.extend(f"{node.name} has no label {m.name}" for m in node.matchers.matchers
                             if m.name not in metrics[node.name] | SCRAPE_LABELS)
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            if node.modifier.type == promql_parser.AggModifierType.By:
                labels = labels_under(node.expr)
                found.extend(f"{node.op} by {label}: no such label" for label in node.modifier.labels
                             if labels is not None and label not in labels)

    promql_parser.walk(ast, visit)
    return found


def panels(items):
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", ()))


def queries(dashboard: dict):
    """(where, PromQL) of every panel target and of every variable's ``label_values`` query."""
    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", ()):
            yield f"{panel['title']} {target['refId']}", target["expr"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            selector = LABEL_VALUES.match(var["query"]["query"])
            assert selector, f"variable {var['name']}: not label_values(metric, label)"
            yield f"variable {var['name']}", selector.group(1)
