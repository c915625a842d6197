"""``kai-scheduler fairshare FILE``: each queue's fair share of GPU, CPU and memory, and what bounded it.

FILE is a cluster file or a conformance scenario file, as for ``simulate``. The scheduler opens one
session on the file's cluster with the file's configuration (which must run the ``proportion``
plugin) and reports, per queue and resource, the deserved quota, the fair share the division gave
it, what it holds and asks for, its limit, and the rule that bounded the fair share; then the same
for each GPU type the queues give a quota for, among the queues taking part in it.
"""

from __future__ import annotations

import argparse

import attrs

from kai.common.errors import ConfigError
from kai.framework import FAIR_SHARE_REASONS, Plugins, Session
from kai.sim.scenario import NOW
from kai.sim.simulate import Run, print_reports
from kai.usagedb import make_usage_source

PROG = "kai-scheduler fairshare"
#: (name, index in the division's (CPU, memory, GPU) vectors, unit label, divisor from the base unit).
RESOURCES = (("gpu", 2, "GPUs", 1.0), ("cpu", 0, "cores", 1000.0), ("memory", 1, "GB", 1e9))
COLUMNS = ("deserved", "fair_share", "allocated", "requested", "limit")


def fair_shares(run: Run, available=None) -> dict:
    """The JSON-ready report of one run: totals, problems, and per queue and resource the division's result."""
    plugins = Plugins(attrs.evolve(run.config, actions=()), available)
    proportion = plugins.plugin("proportion")
    if proportion is None:
        raise ConfigError(f"{run.name}: the configuration does not run the proportion plugin, which divides "
                          "the fair share")
    snapshot = run.build(NOW)
    usage = make_usage_source(run.config.usage_db)
    if usage is not None:
        snapshot.usage = usage.usage(NOW)
        usage.close()
    session = Session(snapshot, plugins).open()
    try:
        shares, totals = proportion.shares, proportion.totals
        queues = []
        for name in _tree_order(session):
            qs = shares[name]
            resources = {}
            for label, r, _, _ in RESOURCES:
                resources[label] = {
                    "deserved": qs.deserved[r], "fair_share": qs.fair_share[r], "allocated": qs.allocated[r],
                    "requested": qs.request[r], "limit": qs.limit[r], "usage": qs.usage[r],
                    "bounded_by": FAIR_SHARE_REASONS[qs.reason[r]],
                }
            queues.append({"name": name, "parent": qs.parent, "priority": qs.priority,
                           "depth": len(session.ancestors(name)) - 1, "resources": resources})
        types = _types(session, proportion.types)
    finally:
        session.close()
    return {"name": run.name, "totals": {label: totals[r] for label, r, _, _ in RESOURCES},
            "problems": [str(p) for p in snapshot.problems], "queues": queues, "resource_types": types}


def _types(session, types) -> list[dict]:
    """Per resource type: its node selector, its GPUs, and the division of them among the queues taking part."""
    if types is None:
        return []
    out = []
    for t in sorted(types.types.values(), key=lambda t: t.name):
        queues = []
        for name in _tree_order(session):
            ts = t.shares.get(name)
            if ts is not None:
                queues.append({"name": name, "depth": len(session.ancestors(name)) - 1, "deserved": ts.deserved,
                               "fair_share": ts.fair_share, "allocated": ts.allocated, "requested": ts.request,
                               "limit": ts.limit, "bounded_by": FAIR_SHARE_REASONS[ts.reason]})
        out.append({"name": t.name, "node_selector": dict(t.selector), "gpus": t.capacity, "queues": queues})
    return out


def _tree_order(session) -> list[str]:
    """Queue names depth first, siblings by creation time then name."""
    out: list[str] = []

    def visit(parent):
        for q in sorted(session.children.get(parent, []), key=lambda q: (q.creation, q.name.encode())):
            out.append(q.name)
            visit(q.name)

    visit(None)
    return out


def _amount(value: float, divisor: float) -> str:
    if value == -1:
        return "-"
    return f"{round(value / divisor, 2):g}"


def format_report(report: dict) -> str:
    """The human-readable form of one run's report: one table per resource."""
    lines = [f"== {report['name']}"]
    lines += [f"   problem: {p}" for p in report["problems"]]
    width = max([len("queue")] + [2 * q["depth"] + len(q["name"]) for q in report["queues"]])
    with_usage = any(row["usage"] for q in report["queues"] for row in q["resources"].values())
    for label, _, unit, divisor in RESOURCES:
        lines.append("")
        lines.append(f"{label.upper() if label != 'memory' else 'Memory'} ({unit}; cluster total "
                     f"{_amount(report['totals'][label], divisor)}; - = unlimited)")
        usage_title = f" {'usage':>6}" if with_usage else ""
        lines.append(f"  {'queue'.ljust(width)}  {'deserved':>9} {'fair share':>10} {'allocated':>9} "
                     f"{'requested':>9} {'limit':>7}{usage_title}  bounded by")
        for q in report["queues"]:
            row = q["resources"][label]
            values = [_amount(row[c], divisor) for c in COLUMNS]
            name = ("  " * q["depth"] + q["name"]).ljust(width)
            usage = f" {row['usage']:>6.1%}" if with_usage else ""
            lines.append(f"  {name}  {values[0]:>9} {values[1]:>10} {values[2]:>9} {values[3]:>9} {values[4]:>7}"
                         f"{usage}  {row['bounded_by']}")
    for t in report["resource_types"]:
        width = max([len("queue")] + [2 * q["depth"] + len(q["name"]) for q in t["queues"]])
        selector = ", ".join(f"{k}={v}" for k, v in t["node_selector"].items())
        lines.append("")
        lines.append(f"GPU type {t['name']} (nodes {selector}; {_amount(t['gpus'], 1.0)} GPUs; - = unlimited)")
        lines.append(f"  {'queue'.ljust(width)}  {'deserved':>9} {'fair share':>10} {'allocated':>9} "
                     f"{'requested':>9} {'limit':>7}  bounded by")
        for q in t["queues"]:
            values = [_amount(q[c], 1.0) for c in COLUMNS]
            name = ("  " * q["depth"] + q["name"]).ljust(width)
            lines.append(f"  {name}  {values[0]:>9} {values[1]:>10} {values[2]:>9} {values[3]:>9} {values[4]:>7}"
                         f"  {q['bounded_by']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("file", metavar="FILE", help="a cluster file or a conformance scenario file")
    parser.add_argument("--json", action="store_true",
                        help="print a machine-readable report instead (GPUs, millicores, bytes; -1 unlimited)")
    args = parser.parse_args(argv)
    return print_reports(PROG, args.file, 1, fair_shares, format_report, args.json)
