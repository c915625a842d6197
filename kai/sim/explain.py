"""``kai-scheduler explain NAMESPACE/NAME``: why a pod or PodGroup is pending, and what would make it run.

Live, it asks a running scheduler's visibility API (``--server URL``, the address of its metrics
listener); offline, it simulates a cluster file (``--file FILE``, as ``simulate``) and explains the
last cycle. Both answers are the same view (:mod:`kai.scheduler.visibility`) of the same kind of
cycle, so the same state gets the same answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from kai.framework import Session
from kai.framework.whatif import DEFAULT_BUDGET
from kai.scheduler.visibility import PREFIX, Visibility
from kai.sim.scenario import NOW
from kai.sim.simulate import ROUND_SECONDS, Run, load_runs, prepare, reported, run_cycles

PROG = "kai-scheduler explain"
TIMEOUT = 10.0


def explain_offline(run: Run, namespace: str, name: str, check: bool = True,
                    budget: float = DEFAULT_BUDGET) -> tuple[int, dict[str, Any]]:
    """(HTTP-like status, answer) for ``namespace/name`` after the cycles of ``run``, as the running scheduler
    answers it: each suggestion that is one change is checked by the kernel on a copy of the last cycle's
    snapshot (for at most ``budget`` seconds)."""
    plugins, actions = prepare(run.config)
    times = (NOW + k * ROUND_SECONDS for k in range(run.cycles))
    visibility = Visibility(actions=actions)
    for cycle, session in enumerate(run_cycles(run, plugins, actions, times), 1):
        if cycle == run.cycles:
            if check:
                visibility.copy_wanted.set()
            visibility(session)
            break  # the last cycle's decisions are not fed back
    return visibility.explain(namespace, name, check, budget)


def explain_live(server: str, namespace: str, name: str, check: bool = True) -> tuple[int, dict[str, Any]]:
    url = f"{server.rstrip('/')}{PREFIX}explain/{namespace}/{name}{'?check=true' if check else ''}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as reply:  # noqa: S310 - the user's scheduler address
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def format_answer(answer: dict[str, Any]) -> str:
    """The human-readable form of one answer."""
    reason = answer["reason"]
    lines = [f"{answer['namespace']}/{answer['name']} (queue {answer['queue']}, priority {answer['priority']}): "
             f"pending, #{answer['position_in_queue']} in its queue, #{answer['position_in_cluster']} in the cluster",
             f"reason: {reason['code']} ({reason['details'].get('kind', '')})"]
    lines += [f"  {line.strip()}" for line in reason["message"].splitlines() if line.strip()]
    details = {k: v for k, v in reason["details"].items() if k != "kind"}
    if details:
        lines.append("details: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in details.items()))
    if reason["would_run_if"]:
        lines.append("would run if:")
        lines += [f"  - {hint['text']}{_checked(hint['verified'])}" for hint in reason["would_run_if"]]
    return "\n".join(lines)


def _checked(verdict: bool | str | None) -> str:
    """What the kernel said of a suggestion on a copy of the cycle's snapshot."""
    if verdict is None:
        return ""
    if isinstance(verdict, str):
        return f" ({verdict})"
    return " (checked: it runs)" if verdict else " (checked: not enough on its own)"


def format_shadow(shadow: dict[str, Any]) -> str:
    """Shadow mode's word on the pods of an answer: its verdicts KAI has not acted on yet, and the divergences."""
    lines = ["shadow mode beside KAI:"]
    for v in shadow["awaiting_kai"]:
        lines.append(f"  {v['pod']}: {'would bind to ' + v['here'] if v['here'] else 'pending here'}; "
                     "KAI has not placed it yet")
    for d in shadow["divergences"]:
        lines.append(f"  {d['pod']}: {d['outcome']} (here {d['here'] or '-'}, KAI {d['kai'] or '-'})")
        said = d["why_kai"] and (d["why_kai"]["pod"] or (d["why_kai"]["podgroup"] or {}).get("message"))
        if said:
            lines.append(f"    KAI: {said}")
    if len(lines) == 1:
        lines.append("  no verdict awaiting KAI and no divergence")
    return "\n".join(lines)


def print_answer(status: int, answer: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print(json.dumps(answer, indent=1))
    elif status == 200:
        print(format_answer(answer))
    else:
        print(f"{PROG}: {answer.get('error', f'HTTP {status}')}", file=sys.stderr)
    if not as_json and "shadow" in answer:
        print(format_shadow(answer["shadow"]))
    return 0 if status == 200 else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("target", metavar="NAMESPACE/NAME", help="a pod or PodGroup")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--server", metavar="URL", help="the scheduler's metrics address, e.g. http://127.0.0.1:8080")
    where.add_argument("--file", metavar="FILE", help="a cluster file, simulated offline")
    parser.add_argument("--cycles", type=int, metavar="N", help="cycles to simulate (default: the file's, else 1)")
    parser.add_argument("--no-check", action="store_true",
                        help="do not check the suggestions with the kernel (live: no snapshot copy is asked for)")
    parser.add_argument("--json", action="store_true", help="print the machine-readable answer")
    args = parser.parse_args(argv)
    namespace, sep, name = args.target.rpartition("/")
    if not sep:
        namespace = "default"
    if args.server:
        try:
            status, answer = explain_live(args.server, namespace, name, not args.no_check)
        except (OSError, ValueError) as exc:
            print(f"{PROG}: {args.server}: {exc}", file=sys.stderr)
            return 2
        return print_answer(status, answer, args.json)
    return explain_file(args.file, namespace, name, args.cycles, args.json, not args.no_check)


def explain_kai_snapshot(path: str, namespace: str, name: str, cycles: int, as_json: bool, check: bool = True) -> int:
    """Explain ``namespace/name`` after ``cycles`` cycles of the KAI snapshot at ``path`` (``simulate --kai-snapshot
    FILE --explain NAME``), as a scheduler of the snapshot's node pool answers it; the exit status."""
    from kai.scheduler.kaisnapshot import read_snapshot
    from kai.sim.kaisnapshot import replay

    visibility = Visibility()

    def last(session: Session) -> None:
        visibility.actions = [a for a in session.plugins.config.actions if a in session.plugins.actions]
        if check:
            visibility.copy_wanted.set()
        visibility(session)

    def answer() -> tuple[int, dict[str, Any]]:
        replay(read_snapshot(path), path, cycles, last=last)
        return visibility.explain(namespace, name, check)

    result = reported(PROG, path, answer)
    if result is None:
        return 2
    return print_answer(*result, as_json)


def explain_file(path: str, namespace: str, name: str, cycles: int | None, as_json: bool, check: bool = True) -> int:
    """Explain ``namespace/name`` in the (first) run of the cluster file at ``path``; the exit status."""
    result = reported(PROG, path, lambda: explain_offline(load_runs(path, cycles)[0], namespace, name, check))
    if result is None:
        return 2
    return print_answer(*result, as_json)
