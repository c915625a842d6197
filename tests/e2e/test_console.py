"""The web console of ``kai-scheduler run --console`` in a real headless Chromium: every page loads from the running
scheduler, and the pending jobs show with their reasons and what would make them run.

``KAI_CONSOLE_SCREENSHOTS=FOLDER`` saves a screenshot of each page there (the ones of docs/images/ were taken so).
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

from support import manifests as m
from support.browser import chromium, dump_dom, screenshot
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"
PAGES = {"queues": "", "pending": "pending", "nodes": "nodes", "cycles": "cycles"}


@pytest.fixture(scope="session")
def browser():
    """Chromium, or a skip before a control plane is started for nothing."""
    return chromium()


@pytest.fixture(scope="module")
def scheduler(kai_scheduler):
    return kai_scheduler(ACTIONS, name="console", args=("--console",))


def queue(kube, ns, name, **spec):
    body = m.queue(f"{ns}-{name}", **spec)
    body["metadata"]["labels"] = {"e2e": ns}
    m.apply(kube, body)
    return body["metadata"]["name"]


def job(kube, ns, name, queue, pods=1, gpus=1, priority_class="train"):
    m.apply(kube, m.podgroup(ns, name, queue=queue, min_member=pods, priority_class=priority_class))
    names = [f"{name}-{i}" for i in range(pods)]
    for pod in names:
        m.apply(kube, m.pod(ns, pod, name, gpus=gpus, node_selector={"e2e": ns}))
    return names


def running(kube, ns, names):
    found = {p["metadata"]["name"]: p for p in kube.get(m.collection("Pod", ns)).get("items", [])}
    return all(found.get(n, {}).get("status", {}).get("phase") == "Running" for n in names)


def pending_reasons(scheduler, ns):
    """``name -> reason`` of the namespace's pending jobs in the visibility API's last cycle."""
    status, body = scheduler.get("/apis/visibility/v1/pending?limit=1000")
    items = json.loads(body).get("items", []) if status == 200 else []
    return {i["name"]: i["reason"] for i in items if i["namespace"] == ns}


def test_every_page_loads_and_shows_the_pending_jobs_with_their_reasons(browser, kube, scheduler, ns, tmp_path):
    for name, gpus in (("n0", 8), ("n1", 8), ("n2", 4)):
        m.apply(kube, m.gpu_node(f"{ns}-{name}", gpus=gpus, labels={"e2e": ns}))
    org = queue(kube, ns, "org", gpu_quota=16)
    team_a = queue(kube, ns, "team-a", parent=org, gpu_quota=8, gpu_limit=8)
    team_b = queue(kube, ns, "team-b", parent=org, gpu_quota=8)
    placed = job(kube, ns, "train", team_a, gpus=6) + job(kube, ns, "serve", team_b, gpus=2,
                                                          priority_class="inference")
    placed += job(kube, ns, "notebook", team_b, gpus=1)
    wait_until(lambda: running(kube, ns, placed), 60, "the placed pods Running")
    job(kube, ns, "giant", team_b, gpus=16)  # more GPUs than any node has
    job(kube, ns, "gang", team_a, pods=2, gpus=2)  # over its queue's limit
    found = {}

    def reasons_known():
        found.update(pending_reasons(scheduler, ns))
        return (found.get("giant", {}).get("details", {}).get("kind") == "no-node-large-enough"
                and found.get("gang", {}).get("details", {}).get("kind") == "queue-limit")

    wait_until(reasons_known, 60, "giant and gang pending with their reasons", interval=1.0,
               detail=lambda: str(found))

    base = f"http://127.0.0.1:{scheduler.port}/console/"
    dom = {page: dump_dom(base + path) for page, path in PAGES.items()}

    queues = dom["queues"]
    assert re.search(rf'data-queue="{org}">\s*<td class="name depth-0">{org}<', queues)
    assert re.search(rf'data-queue="{team_a}">\s*<td class="name depth-1">{team_a}<', queues)

    pending = dom["pending"]
    for name, kind, code in (("giant", "no-node-large-enough", "PodSchedulingErrors"), ("gang", "queue-limit",
                                                                                          "OverLimit")):
        row = re.search(rf'<tr class="job" id="job-{ns}-{name}">(.*?)</tr>', pending, re.S)
        assert row is not None, f"{ns}/{name} is not on the pending page"
        assert f"{ns}/{name}" in row[1] and kind in row[1] and code in row[1]
        for hint in found[name]["would_run_if"]:
            assert html.escape(hint["text"], quote=False) in row[1]
    assert f'id="job-{ns}-train"' not in pending  # placed

    nodes = dom["nodes"]
    cells = {n: re.search(rf'data-node="{ns}-{n}">(.*?)</figure>', nodes, re.S) for n in ("n0", "n1", "n2")}
    assert all(cells.values()), nodes
    in_use = sum(c[1].count('class="gpu-used"') for c in cells.values() if c)
    assert in_use == 6 + 2 + 1

    rows = re.findall(r"<tr>\s*<td>(\d+)</td><td>[^<]*</td>\s*<td>[^<]*ms</td><td>(\d+)</td>", dom["cycles"])
    assert rows, dom["cycles"]
    latest, jobs = map(int, rows[0])
    assert latest >= 2 and jobs >= 5  # newest first; the namespace's five jobs at least

    folder = Path(os.environ.get("KAI_CONSOLE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    for page, path in PAGES.items():
        shot = screenshot(base + path, folder / f"console-{page}.png")
        assert shot.stat().st_size > 10_000  # a page was drawn, not a blank window
