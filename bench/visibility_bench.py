"""The visibility API on a large backlog: 10,000 pending pods in 200 queues.

Run: ``python bench/visibility_bench.py [--pods 10000] [--queues 200] [--nodes 100]``.
One scheduling cycle (allocate) runs on a full cluster of 8-GPU nodes with the backlog pending (2,500
gangs of 4 one-GPU pods); the scheduler's observer takes the cycle's view, then each kind of request
is answered as the server answers it (the JSON body included). Prints the cycle's CPU, the view's
(inside the cycle) and the scheduler process's CPU per request -- the first request works out
every position, each page the reasons of its jobs, kept for later requests -- and what a check of the
suggestions costs: keeping the snapshot as built in the cycle, then on the request's thread its copy
and the kernel run. Not a test: no pass/fail.
"""

from __future__ import annotations

import argparse
import gc
import json
import time

from kai import testing as kt
from kai.framework import Plugins, Session, parse_config
from kai.framework.whatif import keep_as_built
from kai.scheduler.visibility import MAX_LIMIT, PREFIX, Visibility

PLUGINS = ["predicates", "proportion", "priority", "elastic", "taskorder", "nodeplacement"]
GANG = 4  # pods per PodGroup (--gang)


def backlog(pods: int, queues: int, nodes: int, gang: int = GANG):
    names = [f"q{i:03}" for i in range(queues)]
    running = [kt.job(f"run-{n}", queue=names[n % queues], tasks=8, gpus=1, status="Running", node=f"n{n:03}")
               for n in range(nodes)]
    pending = [kt.job(f"job-{k:05}", queue=names[k % queues], tasks=gang, gpus=1, priority=50 + k % 3,
                      creation=kt.NOW - pods + k) for k in range(pods // gang)]
    return kt.cluster(nodes=[kt.node(f"n{n:03}", gpus=8) for n in range(nodes)],
                      queues=[kt.queue(q, deserved_gpus=nodes * 8 / queues) for q in names], jobs=running + pending)


def cpu_ms(fn) -> float:
    started = time.process_time()
    fn()
    return (time.process_time() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gang", type=int, default=GANG, help="pods per PodGroup")
    args = parser.parse_args()
    config = parse_config({"actions": "allocate", "tiers": [{"plugins": [{"name": p} for p in PLUGINS]}]})
    session = Session(backlog(args.pods, args.queues, args.nodes, args.gang), Plugins(config))
    visibility = Visibility()
    cycle = cpu_ms(lambda: session.open().run_actions())
    view = cpu_ms(lambda: visibility(session))
    kept = cpu_ms(lambda: keep_as_built(session.snapshot))
    checked = Visibility(actions=["allocate"])
    checked.copy_wanted.set()
    checked(session)
    session.close()
    print(f"{args.pods} pending pods in {args.pods // args.gang} PodGroups, {args.queues} queues: "
          f"cycle {cycle:.0f} ms CPU, view taken in the cycle {view:.1f} ms CPU; "
          f"keeping the snapshot a check asks for adds {kept:.1f} ms CPU to the cycle")

    gc.collect()  # what the set-up left for the collector is not counted on the first request

    def request(path: str) -> None:
        status, body = visibility.answer(PREFIX + path)
        assert status == 200, (path, body)
        json.dumps(body)

    middle = f"default/job-{args.pods // args.gang // 2:05}"
    for label, path in (
            (f"pending, first request (positions, and the reasons of its page, worked out), limit {MAX_LIMIT}",
             f"pending?limit={MAX_LIMIT}"),
            (f"pending, a later page, limit {MAX_LIMIT}", f"pending?offset=2000&limit={MAX_LIMIT}"),
            ("pending of one queue, whole", f"pending?queue=q007&limit={MAX_LIMIT}"),
            ("queues, all", "queues"),
            (f"nodes, limit {MAX_LIMIT}", f"nodes?limit={MAX_LIMIT}"),
            ("explain one PodGroup", f"explain/{middle}")):
        print(f"  {label}: {cpu_ms(lambda p=path: request(p)):.1f} ms CPU")
    assert checked.base is not None
    base = checked.base
    print(f"  a check's copy of the snapshot kept, on the request's thread: {cpu_ms(base.snapshot):.0f} ms CPU")
    status = {}
    seconds = cpu_ms(lambda: status.update(a=checked.explain(*middle.split("/"), check=True)))
    hints = status["a"][1]["reason"]["would_run_if"]
    print(f"  explain one PodGroup with its {sum(1 for h in hints if h['change'])} suggestion(s) checked by the "
          f"kernel (the copy made): {seconds:.0f} ms CPU")


if __name__ == "__main__":
    main()
