"""The scheduler's web console: read-only HTML pages of what the last cycle saw, served under :data:`PREFIX` on
the metrics listener (``kai-scheduler run --console``).

Pages: the queue tree with each queue's deserved quota, fair share, allocation and limit (``/console/``); the
pending jobs in the order the scheduler tries them, each with its dominant reason and what would make it run
(``pending?queue=&offset=``); a GPU map of the nodes, summed per node pool and drawn a page of nodes at a time
(``nodes?offset=``); and the recent cycles (``cycles``). Everything is rendered on the server from the visibility
API's answers (:mod:`kai.scheduler.visibility`: the last cycle's view, so a page never waits for a cycle) and the
loop's summaries of its last cycles, with Jinja2 templates that escape every value, and SVG drawn in the page:
no script, nothing loaded from elsewhere (the Content-Security-Policy says so), no write action.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import jinja2

from kai.scheduler.console.views import (
    BAR_WIDTH,
    CELLS_PER_ROW,
    CHART_BAR,
    CHART_HEIGHT,
    cycle_chart,
    node_map,
    pools,
    queue_tree,
)
from kai.scheduler.loop import CycleSummary
from kai.scheduler.visibility import MAX_LIMIT
from kai.scheduler.visibility import PREFIX as API

PREFIX = "/console/"
#: Pending jobs per page.
PENDING_PER_PAGE = 50
#: Nodes drawn per page of the GPU map (every node counts in the node pools' sums).
NODES_PER_PAGE = 100
#: Queues per page of the queue tree.
QUEUES_PER_PAGE = 200

#: Answers a GET of a visibility API path: (HTTP status, JSON body).
Answer = Callable[[str], "tuple[int, dict[str, Any]]"]
#: A page: (HTTP status, body, content type, headers).
Page = tuple[int, bytes, str, dict[str, str]]

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
HTML = "text/html; charset=utf-8"


def _number(value: float) -> str:
    """``value`` without a fraction when whole, else to two decimals; -1 (unlimited) as a word."""
    if value == -1:
        return "unlimited"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def _cores(millicores: float) -> str:
    return "unlimited" if millicores == -1 else _number(round(millicores / 1000, 2))


def _gib(amount: float) -> str:
    return "unlimited" if amount == -1 else f"{_number(round(amount / 2**30, 1))} GiB"


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _age(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(number=_number, cores=_cores, gib=_gib, utc=_utc, age=_age)
    env.globals.update(prefix=PREFIX, api=API, BAR_WIDTH=BAR_WIDTH, CELLS_PER_ROW=CELLS_PER_ROW, CHART_BAR=CHART_BAR,
                       CHART_HEIGHT=CHART_HEIGHT)
    return env


class Console:
    """The console's pages; calling it with a GET's path (and query) answers the page.

    ``answer`` is the visibility API (:meth:`~kai.scheduler.visibility.Visibility.answer`), ``recent`` gives the
    scheduler loop's last cycles (:attr:`~kai.scheduler.loop.Scheduler.recent`)."""

    def __init__(self, answer: Answer, recent: Callable[[], Sequence[CycleSummary]]) -> None:
        self.answer = answer
        self.recent = recent
        self.env = _environment()
        self.css = (Path(__file__).parent / "templates" / "console.css").read_bytes()

    def __call__(self, path: str) -> Page:
        route, _, query = path.partition("?")
        if route == PREFIX.rstrip("/"):
            return 302, b"", "text/plain", {"Location": PREFIX}
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        page = route[len(PREFIX):]
        if page == "console.css":
            return 200, self.css, "text/css; charset=utf-8", dict(HEADERS)
        if page == "cycles":
            status, head = self.answer(API + "queues")
            recent = self.recent()
            return self._render("cycles.html", 200, head if status == 200 else None, bars=cycle_chart(recent),
                                recent=list(reversed(recent)),
                                longest=max((c.seconds for c in recent), default=0.0))
        pages = {"": self.queues, "pending": self.pending, "nodes": self.nodes}
        if page not in pages:
            return self._render("missing.html", 404, None, route=route)
        status, head = self.answer(API + "queues")
        if status != 200:
            return self._render("waiting.html", status, None, error=head.get("error", ""))
        return pages[page](head, params)

    def _render(self, template: str, status: int, head: dict[str, Any] | None, **values: Any) -> Page:
        body = self.env.get_template(template).render(page=template.removesuffix(".html"), head=head, now=time.time(),
                                                      **values)
        return status, body.encode(), HTML, dict(HEADERS)

    def _pending_counts(self, queues: Sequence[dict[str, Any]]) -> dict[str, int]:
        ask = (API + "pending?" + urlencode({"queue": q["name"], "limit": 0}) for q in queues)
        return {q["name"]: self.answer(path)[1].get("total", 0) for q, path in zip(queues, ask)}

    def queues(self, head: dict[str, Any], params: dict[str, str]) -> Page:
        counts = self._pending_counts(head["items"])
        rows = queue_tree(head["items"], counts)
        offset = _offset(params, len(rows))
        return self._render("queues.html", 200, head, rows=rows[offset:offset + QUEUES_PER_PAGE],
                            paging=_paging(offset, QUEUES_PER_PAGE, len(rows), {}))

    def pending(self, head: dict[str, Any], params: dict[str, str]) -> Page:
        counts = {q: n for q, n in sorted(self._pending_counts(head["items"]).items()) if n}
        queue = params.get("queue", "")
        offset = _offset(params)
        ask = {"offset": offset, "limit": PENDING_PER_PAGE, **({"queue": queue} if queue else {})}
        _, found = self.answer(API + "pending?" + urlencode(ask))
        keep = {"queue": queue} if queue else {}
        return self._render("pending.html", 200, head, counts=counts, queue=queue, items=found.get("items", []),
                            paging=_paging(offset, PENDING_PER_PAGE, found.get("total", 0), keep))

    def nodes(self, head: dict[str, Any], params: dict[str, str]) -> Page:
        every: list[dict[str, Any]] = []
        while True:
            _, found = self.answer(API + "nodes?" + urlencode({"offset": len(every), "limit": MAX_LIMIT}))
            every += found.get("items", [])
            if not found.get("items") or len(every) >= found.get("total", 0):
                break
        every.sort(key=lambda n: (n["node_pool"], n["name"]))
        offset = _offset(params, len(every))
        shown = [node_map(n) for n in every[offset:offset + NODES_PER_PAGE]]
        groups: dict[str, list[Any]] = {}
        for m in shown:
            groups.setdefault(m.node_pool, []).append(m)
        return self._render("nodes.html", 200, head, pools=pools(every), groups=groups,
                            paging=_paging(offset, NODES_PER_PAGE, len(every), {}))


def _offset(params: dict[str, str], total: int | None = None) -> int:
    try:
        offset = max(int(params.get("offset", 0)), 0)
    except ValueError:
        return 0
    return offset if total is None or offset < max(total, 1) else 0


def _paging(offset: int, size: int, total: int, keep: dict[str, str]) -> dict[str, Any]:
    """What a page's links to the previous and next pages need: the range shown and the queries of the links."""
    prev = urlencode({**keep, "offset": max(offset - size, 0)}) if offset > 0 else None
    nxt = urlencode({**keep, "offset": offset + size}) if offset + size < total else None
    return {"first": min(offset + 1, total), "last": min(offset + size, total), "total": total,
            "prev": prev, "next": nxt}
