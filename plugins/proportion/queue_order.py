"""KAI's order of sibling queues (proportion plugin), each represented by its best job.

The comparison itself is the compiled ``queueorder`` kernel (rules in its docstring); this module
gathers each queue's vectors for it (one more resource per GPU type either queue takes part in,
:mod:`.gputypes`) and breaks the last tie by creation time, then name.
"""

from __future__ import annotations

from kai.sdk import queue_order_compare

from .gputypes import order_vectors

LEFT, RIGHT = -1, 1
NO_REQUEST = (0.0, 0.0, 0.0)


def compare(plugin, session, lq, rq, ljob, rjob, lvictims, rvictims) -> int | None:
    ls, rs = plugin.shares.get(lq.name), plugin.shares.get(rq.name)
    if ls is None or rs is None:
        return None
    lreq, lvic = _request(plugin, session, ljob), _victims(plugin, session, lvictims)
    rreq, rvic = _request(plugin, session, rjob), _victims(plugin, session, rvictims)
    if plugin.types is None:
        result = queue_order_compare(ls.fair_share, ls.allocated, lreq, lvic, ls.deserved, ls.limit, ls.priority,
                                     rs.fair_share, rs.allocated, rreq, rvic, rs.deserved, rs.limit, rs.priority,
                                     plugin.totals)
    else:
        lf, la, lr, lv, ld, ll, rf, ra, rr, rv, rd, rl, totals = order_vectors(
            plugin, session, lq, rq, ljob, rjob, lvictims, rvictims,
            [ls.fair_share, ls.allocated, lreq, lvic, ls.deserved, ls.limit,
             rs.fair_share, rs.allocated, rreq, rvic, rs.deserved, rs.limit, plugin.totals])
        result = queue_order_compare(lf, la, lr, lv, ld, ll, ls.priority, rf, ra, rr, rv, rd, rl, rs.priority, totals)
    if result:
        return result
    return LEFT if (ls.creation, ls.name.encode()) < (rs.creation, rs.name.encode()) else RIGHT


def _request(plugin, session, job):
    if job is None:
        return NO_REQUEST
    request = plugin.requests.get(job.uid)
    return plugin.job_request(session, job) if request is None else request


def _victims(plugin, session, victims):
    """What the chosen victims hold, summed per resource, or None."""
    if not victims:
        return None
    out = [0.0, 0.0, 0.0]
    for job in victims:
        for r, v in enumerate(plugin.job_allocated(session, job)):
            out[r] += v
    return out
