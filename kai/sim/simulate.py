"""``kai-scheduler simulate FILE``: run the scheduler on an in-memory cluster described in YAML.

FILE is a cluster file (a mapping with ``nodes``, ``queues`` and ``workloads``; see
``docs/simulate.md``) or a conformance scenario file (a list of scenarios), each scenario then
simulated on its own. Every cycle builds a snapshot, runs the configured actions through the
kernel and feeds the decisions back; the output lists per cycle what was placed or evicted and
why every pod that stays pending does.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import attrs

from kai.api import TaskStatus
from kai.common.errors import ConfigError
from kai.common.yamlfile import one_line, read_yaml
from kai.framework import PluginError, Plugins, SchedulerConfig, Session, Snapshot
from kai.sim.cluster_file import parse_cluster
from kai.sim.rounds import ROUND_SECONDS, feed_back, feed_back_jobs
from kai.sim.scenario import NOW, load_scenarios
from kai.usagedb import make_usage_source

T = TypeVar("T")

PROG = "kai-scheduler simulate"
KINDS = {"bind": "bound", "pipeline": "pipelined"}


@attrs.define
class Run:
    """One simulation: how to build each cycle's snapshot and how to feed a session back into the facts."""

    name: str
    config: SchedulerConfig
    cycles: int
    build: Callable[[float], Snapshot]
    feed: Callable[[Session], None]


def load_runs(path: str, cycles: int | None) -> list[Run]:
    """The simulations of a cluster file (one) or of a conformance scenario file (one per scenario)."""
    data = read_yaml(path, top=(dict, list), what="a cluster file (a mapping) or a list of scenarios")
    if isinstance(data, list):
        return [Run(sc.name, sc.config(), cycles or 1, sc.build, functools.partial(feed_back, sc))
                for sc in load_scenarios(path, data)]
    cluster = parse_cluster(data, path, NOW)
    return [Run(cluster.name, cluster.config, cycles or cluster.cycles, cluster.snapshot,
                lambda s: feed_back_jobs(s.jobs.values()))]


def prepare(config: SchedulerConfig, available=None) -> tuple[Plugins, list[str]]:
    """The plugins of ``config`` and the configured actions they provide, in order."""
    plugins = Plugins(attrs.evolve(config, actions=()), available)
    return plugins, [a for a in config.actions if a in plugins.actions]


def run_cycles(run: Run, plugins: Plugins, actions: list[str], times: Iterable[float]) -> Iterator[Session]:
    """One scheduling cycle at each time of ``times``: build the snapshot, give it the usage source's
    history, run ``actions`` and yield the session while it is still open (so its plugins can be asked);
    when the caller asks for the next one, close it and feed it back into the facts. ``times`` is read
    lazily, after the last session was fed back, so a driver may work out the next time from the facts."""
    usage = make_usage_source(run.config.usage_db)
    try:
        for now in times:
            snapshot = run.build(now)
            if usage is not None:
                snapshot.usage = usage.usage(now)
            session = Session(snapshot, plugins).open()
            try:
                session.run_actions(actions)
                yield session
            finally:
                session.close()
            if usage is not None:
                usage.record(session)
            run.feed(session)
    finally:
        if usage is not None:
            usage.close()


def simulate(run: Run, available=None) -> dict:
    """Run the cycles of ``run``; the result is the JSON-ready report."""
    plugins, actions = prepare(run.config, available)
    report: dict[str, Any] = {
        "name": run.name, "actions": actions,
        "unbuilt_actions": [a for a in run.config.actions if a not in plugins.actions],
        "problems": [], "cycles": [],
    }
    times = (NOW + k * ROUND_SECONDS for k in range(run.cycles))
    for cycle, session in enumerate(run_cycles(run, plugins, actions, times), 1):
        if cycle == 1:
            report["problems"] = [str(p) for p in session.snapshot.problems]
        report["cycles"].append(cycle_report(cycle, session))
    return report


def cycle_report(cycle: int, session: Session) -> dict:
    def job_name(task):
        return session.jobs[task.job].name

    placements = [{"pod": d.task.name, "job": job_name(d.task), "node": d.node, "kind": KINDS[d.kind],
                   "gpu_groups": list(d.gpu_groups)} | ({"numa_zones": [zp.zone for zp in d.numa_zones]}
                                                       if d.numa_zones else {})
                  for d in session.decisions if d.kind in KINDS]
    evictions = [{"pod": d.task.name, "job": job_name(d.task), "node": d.node, "reason": d.message}
                 for d in session.decisions if d.kind == "evict"]
    pending = []
    for job in session.jobs.values():
        waiting = [t for t in job.tasks.values() if t.status is TaskStatus.PENDING]
        if waiting:
            job_reason = session.job_fit_message(job)
            pending += [{"pod": t.name, "job": job.name, "queue": job.queue, "job_reason": job_reason,
                         "pod_reason": session.task_fit_errors.get(t.uid)} for t in waiting]
    for job in session.snapshot.rejected_jobs.values():
        why = next((p.message for p in session.snapshot.problems if p.kind == "job" and p.name == job.name), "rejected")
        pending += [{"pod": t.name, "job": job.name, "queue": job.queue, "job_reason": why, "pod_reason": None}
                    for t in job.tasks.values()]
    running = sum(1 for j in session.jobs.values() for t in j.tasks.values() if t.status is TaskStatus.RUNNING)
    return {"cycle": cycle, "placements": placements, "evictions": evictions, "pending": pending,
            "already_running": running}


def _devices(groups: list[str]) -> str:
    """The shared GPU devices of a placement, by the start of their group ids."""
    return f" (shared GPU {', '.join(g[:8] for g in groups)})" if groups else ""


def _zones(placement: dict) -> str:
    zones = placement.get("numa_zones")
    return f" (NUMA zones {', '.join(zones)})" if zones else ""


def format_report(report: dict) -> str:
    """The human-readable form of one run's report."""
    lines = [f"== {report['name']} (actions: {', '.join(report['actions']) or 'none'})"]
    if report["unbuilt_actions"]:
        lines.append(f"   not built yet, skipped: {', '.join(report['unbuilt_actions'])}")
    lines += [f"   problem: {p}" for p in report["problems"]]
    for c in report["cycles"]:
        lines.append(f"cycle {c['cycle']}: {len(c['placements'])} placed, {len(c['evictions'])} evicted, "
                     f"{len(c['pending'])} pending, {c['already_running']} already running")
        lines += [f"  {p['kind']:9} {p['pod']} -> {p['node']}{_devices(p['gpu_groups'])}{_zones(p)}"
                  for p in c["placements"]]
        lines += [f"  evicted   {e['pod']} from {e['node']}: {e['reason']}" for e in c["evictions"]]
        shown: set[str] = set()
        for p in c["pending"]:
            if p["job"] not in shown:
                shown.add(p["job"])
                pods = [q["pod"] for q in c["pending"] if q["job"] == p["job"]]
                lines.append(f"  pending   {', '.join(pods)} (job {p['job']}, queue {p['queue']}):")
                lines += [f"              {line.strip()}" for line in p["job_reason"].splitlines()]
            if p["pod_reason"] and p["pod_reason"] not in p["job_reason"]:
                lines.append(f"              {p['pod']}: {' '.join(p['pod_reason'].split())}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("file", metavar="FILE", nargs="?", help="a cluster file or a conformance scenario file")
    parser.add_argument("--kai-snapshot", metavar="FILE",
                        help="replay a snapshot of KAI's snapshot plugin (the zip, or its snapshot.json) instead")
    parser.add_argument("--compare", action="store_true",
                        help="with --kai-snapshot: set the first cycle beside the decisions KAI had just made")
    parser.add_argument("--cycles", type=int, metavar="N",
                        help="scheduling cycles to run (default: the file's, else 1)")
    parser.add_argument("--json", action="store_true", help="print a machine-readable report instead")
    parser.add_argument("--explain", metavar="[NAMESPACE/]NAME",
                        help="explain why this pod or PodGroup is pending after the last cycle instead")
    args = parser.parse_args(argv)
    if args.cycles is not None and args.cycles < 1:
        parser.error("--cycles must be at least 1")
    if (args.file is None) == (args.kai_snapshot is None):
        parser.error("give either FILE or --kai-snapshot FILE")
    if args.compare and args.kai_snapshot is None:
        parser.error("--compare needs --kai-snapshot")
    if args.compare and args.explain:
        parser.error("--compare and --explain go separately")
    if args.explain:
        from kai.sim.explain import explain_file, explain_kai_snapshot

        namespace, sep, name = args.explain.rpartition("/")
        namespace = namespace if sep else "default"
        if args.kai_snapshot is not None:
            return explain_kai_snapshot(args.kai_snapshot, namespace, name, args.cycles or 1, args.json)
        return explain_file(args.file, namespace, name, args.cycles, args.json)
    if args.kai_snapshot is not None:
        return replay_snapshot(args.kai_snapshot, args.cycles or 1, args.compare, args.json)
    return print_reports(PROG, args.file, args.cycles, simulate, format_report, args.json)


def replay_snapshot(path: str, cycles: int, compare: bool, as_json: bool) -> int:
    """Print the replay of the KAI snapshot at ``path`` (:mod:`kai.sim.kaisnapshot`); the exit status."""
    from kai.scheduler.kaisnapshot import read_snapshot
    from kai.sim.kaisnapshot import format_replay, replay

    try:
        report = replay(read_snapshot(path), path, cycles, compare)
    except (ConfigError, PluginError) as exc:
        print(f"{PROG}: {path}: {one_line(str(exc))}", file=sys.stderr)
        return 2
    print(json.dumps({"file": path, "runs": [report]}, indent=1) if as_json else format_replay(report))
    return 0


def reported(prog: str, path: str, work: Callable[[], T]) -> T | None:
    """``work()`` on the cluster file at ``path``; None, with the bad field or plugin on standard error, when the
    file cannot be used."""
    try:
        return work()
    except ConfigError as exc:
        print(f"{prog}: {one_line(str(exc))}", file=sys.stderr)
    except PluginError as exc:
        print(f"{prog}: {path}: {one_line(str(exc))}", file=sys.stderr)
    return None


def print_reports(prog: str, path: str, cycles: int | None, report: Callable[[Run], dict],
                  text: Callable[[dict], str], as_json: bool) -> int:
    """Print ``report`` of every run of the file at ``path`` (as text or JSON); the exit status."""
    reports = reported(prog, path, lambda: [report(run) for run in load_runs(path, cycles)])
    if reports is None:
        return 2
    if as_json:
        print(json.dumps({"file": path, "runs": reports}, indent=1))
    else:
        print("\n\n".join(text(r) for r in reports))
    return 0
