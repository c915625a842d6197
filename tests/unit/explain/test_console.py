"""The web console: its pages rendered from the visibility API and the loop's recent cycles, escaped, bounded on
large clusters, and served GET only from the metrics server."""

from __future__ import annotations

import copy
import re
import urllib.error
import urllib.request
from urllib.parse import parse_qs

import pytest

from kai.kube.server import ObservabilityServer
from kai.metrics import Registry
from kai.scheduler.console import NODES_PER_PAGE, PENDING_PER_PAGE, PREFIX, QUEUES_PER_PAGE, Console
from kai.scheduler.console.views import node_map, pools
from kai.scheduler.loop import CycleSummary
from kai.scheduler.visibility import PREFIX as API
from kai.scheduler.visibility import Visibility

from .test_visibility import scheduler

PAGES = ["", "pending", "nodes", "cycles"]
EVIL = '<script>alert("x")</script>"\'&'


def run_cycle():
    s, visibility = scheduler(), Visibility("pool-a")
    s.observer = visibility
    s.run_once()
    return s, visibility


def body(console, path):
    status, raw, content_type, headers = console(PREFIX + path)
    assert content_type.startswith("text/html") and "default-src 'none'" in headers["Content-Security-Policy"]
    return status, raw.decode()


def test_every_page_shows_the_last_cycle():
    s, visibility = run_cycle()
    console = Console(visibility.answer, lambda: s.recent)
    status, queues = body(console, "")
    assert status == 200 and "cycle 1" in queues and "node pool pool-a" in queues
    assert re.search(r'data-queue="a".*?href="/console/pending\?queue=a">9<', queues, re.S)
    status, pending = body(console, "pending")
    assert status == 200 and pending.count('<tr class="job"') == 18
    assert "default/a-1" in pending and "PodSchedulingErrors" in pending and "Would run if:" in pending
    assert "job default/a-0 ends" in pending
    status, only_b = body(console, "pending?queue=b&offset=5")
    assert only_b.count('<tr class="job"') == 4 and "6–9 of 9" in only_b and "default/a-1" not in only_b
    status, nodes = body(console, "nodes")
    (n1,) = re.findall(r'<figure class="node" data-node="n1">.*?</figure>', nodes, re.S)
    assert status == 200 and n1.count('class="gpu-used"') == 2
    status, cycles = body(console, "cycles")
    assert status == 200 and "<td>1</td>" in cycles and "ms" in cycles


def test_before_the_first_cycle_the_pages_say_so():
    console = Console(Visibility().answer, lambda: ())
    for page in ["", "pending", "nodes"]:
        status, text = body(console, page)
        assert status == 503 and "no scheduling cycle has run yet" in text
    status, text = body(console, "cycles")
    assert status == 200 and "No scheduling cycle has run yet." in text


def test_an_empty_cluster():
    empty = {"cycle": 3, "time": 1.7e9, "node_pool": "default"}

    def answer(path):
        return 200, empty | {"items": [], "total": 0, "offset": 0}

    console = Console(answer, lambda: ())
    assert "No queues." in body(console, "")[1]
    assert "No pending jobs." in body(console, "pending")[1]
    assert "No nodes." in body(console, "nodes")[1]


def test_every_value_is_escaped():
    s, visibility = run_cycle()
    _, queues = visibility.answer(API + "queues")
    _, pending = visibility.answer(API + "pending")
    _, nodes = visibility.answer(API + "nodes")
    queues["items"][0]["name"] = EVIL
    job = pending["items"][0]
    job.update(namespace=EVIL, name=EVIL, queue=EVIL)
    job["reason"]["message"] = EVIL
    job["reason"]["details"]["kind"] = EVIL
    job["reason"]["would_run_if"][0]["text"] = EVIL
    nodes["items"][0].update(name=EVIL, node_pool=EVIL)
    answers = {"queues": queues, "pending": pending, "nodes": nodes}
    bad = CycleSummary(None, 1.7e9, 0.5, error=EVIL)

    def answer(path):
        return 200, copy.deepcopy(answers[path[len(API):].partition("?")[0]]) | {"cycle": EVIL, "node_pool": EVIL}

    console = Console(answer, lambda: (bad,))
    for page in PAGES:
        _, text = body(console, page)
        assert "<script" not in text and 'alert("x")' not in text, page
        assert "&lt;script&gt;" in text, page
    assert body(console, "pending?queue=" + EVIL)[1].count("&lt;script&gt;") >= 1


def large_answer(visibility, nodes=2500, jobs=3000, queues=600):
    """The visibility API of a large cluster: the small cycle's items copied many times, paginated as the API is."""
    _, q = visibility.answer(API + "queues")
    _, p = visibility.answer(API + "pending?limit=1")
    _, n = visibility.answer(API + "nodes")
    head = {"cycle": 7, "time": 1.7e9, "node_pool": "default"}
    all_queues = [q["items"][0] | {"name": f"q{i}"} for i in range(queues)]
    all_jobs = [p["items"][0] | {"name": f"j{i}", "queue": f"q{i % queues}"} for i in range(jobs)]
    all_nodes = [n["items"][0] | {"name": f"n{i}", "node_pool": f"pool-{i % 3}"} for i in range(nodes)]
    asked = []

    def answer(path):
        asked.append(path)
        route, _, query = path[len(API):].partition("?")
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        offset, limit = int(params.get("offset", 0)), min(int(params.get("limit", 100)), 1000)
        if route == "queues":
            return 200, head | {"items": all_queues}
        rows = all_nodes if route == "nodes" else [j for j in all_jobs if params.get("queue") in (None, j["queue"])]
        return 200, head | {"total": len(rows), "offset": offset, "items": rows[offset:offset + limit]}

    return answer, asked


def test_a_large_cluster_is_drawn_a_page_at_a_time_and_summed_whole():
    _, visibility = run_cycle()
    answer, asked = large_answer(visibility)
    console = Console(answer, lambda: ())
    _, nodes = body(console, "nodes")
    assert nodes.count('<figure class="node"') == NODES_PER_PAGE
    assert f"1–{NODES_PER_PAGE} of 2500" in nodes and f"offset={NODES_PER_PAGE}" in nodes
    assert [int(m) for m in re.findall(r'<tr class="pool">\s*<td class="name">pool-\d</td><td>(\d+)</td>', nodes)] == [
        834, 833, 833]
    assert all("limit=1000" in a for a in asked if "nodes?" in a)  # read in pages of the API's largest
    _, last = body(console, "nodes?offset=2450")
    assert last.count('<figure class="node"') == 50 and "next</a>" not in last
    _, pending = body(console, "pending")
    assert pending.count('<tr class="job"') == PENDING_PER_PAGE and "of 3000" in pending
    _, queues = body(console, "")
    assert queues.count('<tr class="queue"') == QUEUES_PER_PAGE and "of 600" in queues
    assert max(len(page) for page in (nodes, pending, queues)) < 600_000


def test_the_gpu_map_tells_whole_shared_free_and_fragmented_gpus():
    def node(name, pool, gpus, free, shared_groups=0, shared_free=0.0):
        return {"name": name, "node_pool": pool, "allocatable": {"gpu": gpus}, "free_whole_gpus": free,
                "shared_gpu_groups": shared_groups, "free_shared_gpus": shared_free}

    busy = node_map(node("a", "p", 8, 2, 1, 0.5))
    assert (busy.used, busy.shared, busy.shared_used, busy.free, busy.fragmented) == (5, 1, 0.5, 0, 2)
    idle = node_map(node("b", "p", 8, 8))
    assert (idle.used, idle.free, idle.fragmented) == (0, 8, 0)
    assert [k for k, _, _ in busy.cells()] == ["used"] * 5 + ["shared"] + ["fragmented"] * 2
    assert busy.cells()[-1][1:] == (7, 0)
    (pool,) = pools([node("a", "p", 8, 2, 1, 0.5), node("b", "p", 8, 8), node("c", "p", 0, 0)])
    assert (pool.nodes, pool.gpus, pool.used, pool.shared, pool.shared_free, pool.free, pool.fragmented) == (
        3, 16, 5, 1, 0.5, 8, 2)
    assert sum(width for _, _, width, _ in pool.segments()) == pytest.approx(240)


def test_a_gpu_shared_by_fractions_is_drawn_as_shared_beside_whole_ones():
    from kai import testing as kt
    from kai.api.resources import ResourceRequest
    from kai.scheduler.build import Cycle

    half = kt.task("half-0", request=ResourceRequest(cpu=100.0, memory=1e8, gpu_fraction=0.5))
    cluster = kt.cluster(nodes=[kt.node("n1", gpus=4)], queues=[kt.queue("a", deserved_gpus=4)],
                         jobs=[kt.job("half", queue="a", tasks=[half]), kt.job("two", queue="a", gpus=2)])
    s, visibility = scheduler(), Visibility()
    s.cache.snapshot = lambda: Cycle(cluster, {}, {}, [])
    s.observer = visibility
    assert len(s.run_once().decisions) == 2
    (node,) = visibility.answer(API + "nodes")[1]["items"]
    m = node_map(node)
    assert (m.used, m.shared, m.shared_used, m.free, m.fragmented) == (2, 1, 0.5, 0, 1)


def test_the_console_is_served_get_only_from_the_metrics_server():
    s, visibility = run_cycle()
    server = ObservabilityServer("127.0.0.1:0", Registry())
    server.visibility = visibility.answer
    server.add_pages(PREFIX, Console(visibility.answer, lambda: s.recent))
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        with urllib.request.urlopen(base + "/console") as response:  # redirected to /console/
            assert response.url == base + PREFIX and "Queues" in response.read().decode()
        with urllib.request.urlopen(base + PREFIX + "console.css") as response:
            assert response.headers["Content-Type"].startswith("text/css")
        with pytest.raises(urllib.error.HTTPError) as posted:
            urllib.request.urlopen(urllib.request.Request(base + PREFIX, data=b"x", method="POST"))
        assert posted.value.code == 501
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + PREFIX + "nope")
        assert missing.value.code == 404
    finally:
        server.stop()

