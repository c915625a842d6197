"""``kai-scheduler conformance PATH...``: replay KAI conformance scenarios through the kernel.

Every scenario runs through the same Plugins, Session and actions as a live cycle. A scenario that
needs something not built yet is skipped with the missing piece named. PodGrouper case files (their
entries have a ``grouper`` field) are run by the podgrouper case runner and reported alike.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import attrs

from kai.common.errors import ConfigError
from kai.common.yamlfile import Fields, one_line, read_yaml
from kai.framework import PluginError, Plugins, Session
from kai.plugin_loader import discover
from kai.sim.expect import check_expected
from kai.sim.rounds import ROUND_SECONDS, feed_back, run_round
from kai.sim.scenario import NOW, Scenario, ScenarioError, load_scenarios
from kai.sim.scenario_format import needs as scenario_needs


class Runner:
    """Runs scenarios, building each distinct plugin configuration once."""

    def __init__(self):
        self.available = discover()
        self._plugins: dict = {}

    def plugins(self, scenario: Scenario) -> Plugins:
        """The scenario's plugins (its actions are checked by :meth:`missing`, not here)."""
        config = attrs.evolve(scenario.config(), actions=())
        key = repr(config)
        if key not in self._plugins:
            self._plugins[key] = Plugins(config, self.available)
        return self._plugins[key]

    def missing(self, scenario: Scenario) -> str | None:
        """What the scenario needs that is not built, or None."""
        needs = [f"plugin {p}" for p in scenario.unbuilt_plugins(self.available)]
        if not needs:
            offered = self.plugins(scenario).actions
            needs += [a for a in scenario.actions if a not in offered]
        needs += scenario_needs(scenario.data)
        return f"needs: {', '.join(dict.fromkeys(needs))}" if needs else None

    def run(self, scenario: Scenario) -> tuple[str, str]:
        """(status, reason) of one scenario."""
        missing = self.missing(scenario)
        if missing:
            return "skipped", missing
        scenario = Scenario(scenario.name, scenario.file, copy.deepcopy(scenario.data))
        plugins = self.plugins(scenario)
        expected = scenario.data.get("expected") or {}
        if scenario.mode == "single_session":
            why = check_expected(expected, run_round(scenario, plugins, scenario.actions))
            return ("failed", why) if why else ("passed", "")
        sim = Fields(scenario.data.get("simulation") or {}, f"{scenario.where}: simulation")
        until, after = sim.whole("rounds_until_match", 2), sim.whole("rounds_after_match", 5)
        now = NOW
        session: Session | None = None
        for r in range(until):
            session = run_round(scenario, plugins, scenario.actions, now=now)
            why = check_expected({k: v for k, v in expected.items() if k.startswith("max_")}, session)
            if why:
                return "failed", f"round {r + 1}: {why}"
            feed_back(scenario, session)
            now += ROUND_SECONDS
        facts = run_round(scenario, plugins, actions=(), now=now)
        why = check_expected(expected, facts, fit_session=session)
        if why:
            return "failed", f"after {until} rounds: {why}"
        for r in range(after):
            session = run_round(scenario, plugins, scenario.actions, now=now)
            why = check_expected(_without_fit_messages(expected), session)
            if why:
                return "failed", f"round {until + r + 1} (after the match): {why}"
            feed_back(scenario, session)
            now += ROUND_SECONDS
        return "passed", ""

    def result(self, scenario: Scenario) -> dict:
        """``{"name", "file", "status", "reason"}`` of one scenario; a plugin or config error fails it."""
        try:
            status, reason = self.run(scenario)
        except (PluginError, ConfigError) as exc:
            status, reason = "failed", str(exc)
        return {"name": scenario.name, "file": scenario.file, "status": status, "reason": reason}


def _without_fit_messages(expected: dict) -> dict:
    out = dict(expected)
    jobs = expected.get("jobs") or {}
    out["jobs"] = {k: {f: v for f, v in w.items() if f != "fit_error_message"} for k, w in jobs.items()}
    return out


def _files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(x for x in p.rglob("*.yaml") if x.is_file()))
        else:
            files.append(p)
    return files


def run_paths(paths: list[str]) -> list[dict]:
    """Results of every scenario and podgrouper case under ``paths``; a malformed file raises ConfigError."""
    runner = Runner()
    results: list[dict] = []
    for path in _files(paths):
        data = read_yaml(path, ScenarioError, list, "a YAML list of scenarios or of podgrouper cases")
        if data and isinstance(data[0], dict) and "grouper" in data[0]:
            from kai.sim.podgroup_cases import load_cases, run_case

            results.extend(run_case(case, str(path)) for case in load_cases(str(path), data))
            continue
        results.extend(runner.result(sc) for sc in load_scenarios(str(path), data))
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kai-scheduler conformance", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", metavar="PATH", help="scenario files or folders of them")
    parser.add_argument("--json", action="store_true", help="print a JSON list of results instead")
    parser.add_argument("--verbose", "-v", action="store_true", help="also list passed and skipped scenarios")
    args = parser.parse_args(argv)
    for p in args.paths:
        if not Path(p).exists():
            print(f"kai-scheduler conformance: {p}: no such file or folder", file=sys.stderr)
            return 2
    try:
        results = run_paths(args.paths)
    except ConfigError as exc:
        print(f"kai-scheduler conformance: {one_line(str(exc))}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for r in results:
            if r["status"] == "failed" or args.verbose:
                print(f"{r['status'].upper()} {r['name']} ({Path(r['file']).name}): {r['reason']}")
    counts = {s: sum(1 for r in results if r["status"] == s) for s in ("passed", "failed", "skipped")}
    if not args.json:
        print(f"conformance: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0
