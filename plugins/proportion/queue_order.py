"""KAI's order of sibling queues (proportion plugin), each represented by its best job."""

from __future__ import annotations

from kai.plugins.proportion.shares import leq

LEFT, RIGHT = -1, 1


def _prefer(left_flag: bool, right_flag: bool) -> int:
    """LEFT when only the left has the flag, RIGHT when only the right has it, else 0."""
    if left_flag and not right_flag:
        return LEFT
    if right_flag and not left_flag:
        return RIGHT
    return 0


def compare(plugin, session, lq, rq, ljob, rjob, lvictims, rvictims) -> int | None:
    ls, rs = plugin.shares.get(lq.name), plugin.shares.get(rq.name)
    if ls is None or rs is None:
        return None
    lreq = plugin.job_request(session, ljob) if ljob is not None else [0.0, 0.0, 0.0]
    rreq = plugin.job_request(session, rjob) if rjob is not None else [0.0, 0.0, 0.0]
    lwith = [a + b for a, b in zip(ls.allocated, lreq)]
    rwith = [a + b for a, b in zip(rs.allocated, rreq)]

    # 1. A queue using more than its fair share in every resource goes after one that does not.
    lover = all(f < a for f, a in zip(ls.fair_share, ls.allocated))
    rover = all(f < a for f, a in zip(rs.fair_share, rs.allocated))
    result = _prefer(not lover, not rover)
    if result:
        return result
    # 2. A queue that stays within its deserved quota with the job goes first.
    result = _prefer(all(leq(a, d) for a, d in zip(lwith, ls.deserved)),
                     all(leq(a, d) for a, d in zip(rwith, rs.deserved)))
    if result:
        return result
    # 3. Higher queue priority first.
    if ls.priority != rs.priority:
        return LEFT if ls.priority > rs.priority else RIGHT
    # 4. A queue that would use a resource it has no allocatable share of goes last.
    lzero = any(ls.allocatable(r) == 0 and lwith[r] > 0 for r in range(3))
    rzero = any(rs.allocatable(r) == 0 and rwith[r] > 0 for r in range(3))
    result = _prefer(not lzero, not rzero)
    if result:
        return result
    # 5. Smaller dominant resource share with the job (minus chosen victims), 6. without it.
    totals = plugin.totals
    lshare = ls.dominant_share(_minus_victims(plugin, session, lwith, lvictims), totals)
    rshare = rs.dominant_share(_minus_victims(plugin, session, rwith, rvictims), totals)
    if lshare != rshare:
        return LEFT if lshare < rshare else RIGHT
    lshare, rshare = ls.dominant_share(ls.allocated, totals), rs.dominant_share(rs.allocated, totals)
    if lshare != rshare:
        return LEFT if lshare < rshare else RIGHT
    # 7. The queue with the strictly smaller allocatable share first.
    la = [ls.allocatable(r) for r in range(3)]
    ra = [rs.allocatable(r) for r in range(3)]
    if la != ra:
        if all(leq(a, b) for a, b in zip(la, ra)):
            return LEFT
        if all(leq(b, a) for a, b in zip(la, ra)):
            return RIGHT
    # 8. Older queue first.
    return LEFT if (ls.creation, ls.name.encode()) < (rs.creation, rs.name.encode()) else RIGHT


def _minus_victims(plugin, session, amounts, victims):
    if not victims:
        return amounts
    out = list(amounts)
    for job in victims:
        for r, v in enumerate(plugin.job_allocated(session, job)):
            out[r] -= v
    return out
