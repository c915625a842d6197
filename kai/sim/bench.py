"""``kai-scheduler bench FILE...``: time scheduling actions on scenario files.

What is timed is what KAI's Go benchmarks time: building the session from the scenario's facts
(snapshot, Session, plugins' session open) and running its actions once. Reading the YAML and
loading the plugins are done before the clock starts; one untimed run warms the caches first.
Scenarios that need an action or feature not built yet are reported as skipped, naming it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kai import _native
from kai.common.errors import ConfigError
from kai.common.yamlfile import one_line
from kai.framework import PluginError, Session
from kai.sim.conformance import Runner, _files
from kai.sim.scenario import NOW, Scenario, load_scenarios

PROG = "kai-scheduler bench"


def time_once(scenario: Scenario, plugins) -> tuple[float, float]:
    """Seconds (wall clock, and CPU time of this process) to build the session of ``scenario`` and run its
    actions once. CPU time is what a busy machine does not distort."""
    start, cpu = time.perf_counter(), time.process_time()
    session = Session(scenario.build(NOW), plugins).open()
    session.run_actions(scenario.actions)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    session.close()
    return elapsed, cpu


def bench_scenario(runner: Runner, scenario: Scenario, repeats: int) -> dict:
    """The timing entry of one scenario (or its skip, with what it needs)."""
    entry: dict[str, Any] = {"file": scenario.file, "name": scenario.name, "median_s": None, "min_s": None,
                             "cpu_median_s": None, "repeats": 0,
                             "skipped": runner.missing(scenario)}
    if entry["skipped"] is None:
        plugins = runner.plugins(scenario)
        time_once(scenario, plugins)
        runs = [time_once(scenario, plugins) for _ in range(repeats)]
        times = [wall for wall, _ in runs]
        entry.update(median_s=statistics.median(times), min_s=min(times),
                     cpu_median_s=statistics.median(cpu for _, cpu in runs), repeats=repeats)
    return entry


def native_modules() -> str:
    """The compiled modules in use, or a note that the run is pure Python."""
    return ", ".join(sorted(_native.NATIVE_LOADED)) or "none (pure Python)"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", metavar="FILE", help="scenario files or folders of them")
    parser.add_argument("--repeat", type=int, default=5, metavar="N", help="timed runs per scenario (default 5)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of timings instead")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    for p in args.paths:
        if not Path(p).exists():
            print(f"{PROG}: {p}: no such file or folder", file=sys.stderr)
            return 2
    runner = Runner()
    results = []
    try:
        for path in _files(args.paths):
            for sc in load_scenarios(str(path)):
                try:
                    results.append(bench_scenario(runner, sc, args.repeat))
                except PluginError as exc:  # the scenario's plugins: an error of the file
                    raise ConfigError(f"{sc.where}: {exc}") from None
                if not args.json:
                    print(_line(results[-1]), flush=True)
    except ConfigError as exc:
        print(f"{PROG}: {one_line(str(exc))}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=1))
        print(f"native modules: {native_modules()}", file=sys.stderr)
    else:
        print(f"native modules: {native_modules()}")
    return 0


def _line(r: dict) -> str:
    name = Path(r["file"]).name
    if r["skipped"]:
        return f"SKIPPED {name} {r['name']}: {r['skipped']}"
    return (f"{name} {r['name']}: median {r['median_s'] * 1000:.1f} ms, min {r['min_s'] * 1000:.1f} ms, "
            f"CPU median {r['cpu_median_s'] * 1000:.1f} ms "
            f"over {r['repeats']} runs")
