"""Reservations: a waiting gang holds the nodes that free first; only jobs that end before it starts backfill."""

import pytest

from kai import testing as kt
from kai.api import Reservation, Taint, Toleration
from kai.common.errors import ConfigError
from kai.framework import DEFAULT_CONFIG, Plugins, SchedulerConfig, parse_config, run_session
from kai.framework.reservation import ReservationPolicy

NOW = kt.NOW
ON = ReservationPolicy(enabled=True, min_gpus=16)


def _running(name, node, gpus, runtime_left):
    job = kt.job(name, tasks=1, gpus=gpus, status="Running", node=node)
    job.last_start = NOW - 10
    job.max_runtime = None if runtime_left is None else runtime_left + 10
    return job


def _cluster(extra=(), gang_reservation=None):
    nodes = [kt.node(f"n{i}", gpus=8) for i in range(1, 5)]
    gang = kt.job("gang", tasks=2, gpus=8, priority=90)
    gang.reservation = gang_reservation
    long = kt.job("long", tasks=1, gpus=4, creation=1.0)
    short = kt.job("short", tasks=1, gpus=4, creation=2.0)
    short.max_runtime = 50.0
    jobs = [_running("r1", "n1", 8, 100), _running("r2", "n2", 4, 200), _running("r3", "n3", 8, None),
            _running("r4", "n4", 4, None), gang, long, short, *extra]
    return kt.cluster(nodes, jobs=jobs, now=NOW)


def _run(snapshot, policy=ON):
    return run_session(snapshot, Plugins(SchedulerConfig(("allocate",), DEFAULT_CONFIG.plugins, reservation=policy)))


def test_gang_reserves_the_nodes_that_free_first_and_a_short_job_backfills():
    session = _run(_cluster())
    gang = session.jobs["default/gang"]
    assert gang.reservation == Reservation(("n1", "n2"), NOW, NOW + 3600.0, NOW + 200)
    placed = kt.placements(session)
    assert placed["long-0"] == "n4"  # no declared runtime: kept off the reserved nodes
    assert placed["short-0"] == "n2"  # ends before the gang's expected start


def test_job_ending_after_the_expected_start_does_not_backfill():
    late = kt.job("late", tasks=1, gpus=4, creation=0.5)
    late.max_runtime = 500.0
    placed = kt.placements(_run(_cluster([late])))
    assert placed.get("late-0") == "n4" and "long-0" not in placed and placed["short-0"] == "n2"


def test_off_by_default_and_reservations_released_when_off():
    assert DEFAULT_CONFIG.reservation.enabled is False
    held = Reservation(("n1", "n2"), NOW - 10, NOW + 100)
    session = _run(_cluster(gang_reservation=held), ReservationPolicy())
    assert session.jobs["default/gang"].reservation is None
    assert set(kt.placements(session)) == {"long-0", "short-0"}


def test_a_reservation_found_on_the_job_holds_the_nodes_that_free_first_now_and_an_expired_one_is_made_again():
    found = Reservation(("n3", "n4"), NOW - 10, NOW + 100)
    session = _run(_cluster(gang_reservation=found))
    assert session.jobs["default/gang"].reservation == Reservation(("n1", "n2"), NOW - 10, NOW + 100, NOW + 200)
    assert kt.placements(session) == {"long-0": "n4", "short-0": "n2"}
    expired = Reservation(("n3", "n4"), NOW - 4000, NOW - 400)
    session = _run(_cluster(gang_reservation=expired))
    assert session.jobs["default/gang"].reservation == Reservation(("n1", "n2"), NOW, NOW + 3600.0, NOW + 200)


def test_expected_start_needs_room_for_each_task_not_only_enough_gpus():
    # at +200 n1 has 4 GPUs free and n2 8: 12 GPUs, but room for one 8-GPU task only until +300
    nodes = [kt.node(f"n{i}", gpus=8) for i in (1, 2)]
    gang = kt.job("gang", tasks=2, gpus=8, priority=90)
    gang.reservation = Reservation(("n1", "n2"), NOW - 10, NOW + 1000)
    jobs = [_running("a", "n1", 4, 50), _running("b", "n1", 4, 300), _running("c", "n2", 4, 200), gang]
    session = _run(kt.cluster(nodes, jobs=jobs, now=NOW))
    assert session.jobs["default/gang"].reservation.start == NOW + 300
    assert session.job_fit_errors["default/gang"][-1].reason == "NodesReserved"


def test_policy_limits_who_reserves_and_how_many_gpus():
    for policy in (ReservationPolicy(enabled=True, min_gpus=32), ReservationPolicy(enabled=True, queues=("other",)),
                   ReservationPolicy(enabled=True, min_priority=95), ReservationPolicy(enabled=True, max_gpus=8)):
        assert _run(_cluster(), policy).jobs["default/gang"].reservation is None


def test_session_rewind_puts_the_reservation_back():
    snapshot = _cluster()
    _run(snapshot)
    snapshot.rewind()
    assert snapshot.jobs["default/gang"].reservation is None


def test_config_reads_the_reservation_policy():
    cfg = parse_config({"reservation": {"enabled": True, "queues": ["research"], "minPriority": 100, "minGPUs": 8,
                                        "maxGPUs": 64, "maxDuration": "2h"}})
    assert cfg.reservation == ReservationPolicy(True, ("research",), 100, 8.0, 64.0, 7200.0)
    assert parse_config({}).reservation == ReservationPolicy()
    for bad in ({"maxDuration": "soon"}, {"maxDuration": "-1h"}, {"minGPUs": -1}, {"enable": True}):
        with pytest.raises(ConfigError):
            parse_config({"reservation": bad})


def _partly_needed(extra=(), policy_gpus=-1.0):
    """A gang of three 4-GPU tasks expected to fit at +100: two on n1, one on n2, where 6 GPUs are idle now and the
    gang needs only 4 of the 8 it has then."""
    nodes = [kt.node(f"n{i}", gpus=8) for i in (1, 2, 3)]
    gang = kt.job("gang", tasks=3, gpus=4, priority=90)
    jobs = [_running("r1", "n1", 8, 100), _running("r2", "n2", 2, 100), _running("r3", "n3", 8, None), gang,
            *extra]
    policy = ReservationPolicy(enabled=True, min_gpus=8, max_gpus=policy_gpus)
    return _run(kt.cluster(nodes, jobs=jobs, now=NOW), policy)


def test_a_job_without_runtime_uses_the_gpus_of_a_reserved_node_the_gang_does_not_need_at_its_start():
    first, second = kt.job("first", tasks=1, gpus=4, creation=1.0), kt.job("second", tasks=1, gpus=2, creation=2.0)
    short = kt.job("short", tasks=1, gpus=2, creation=3.0)
    short.max_runtime = 50.0
    session = _partly_needed([first, second, short])
    assert session.jobs["default/gang"].reservation == Reservation(("n1", "n2"), NOW, NOW + 3600.0, NOW + 100)
    placed = kt.placements(session)
    # n2 has room for the gang's third task at +100 beside the first; the second would take it; the short one ends
    assert placed == {"first-0": "n2", "short-0": "n2"}


def test_max_gpus_counts_the_gpus_the_gangs_need_not_whole_nodes():
    assert _partly_needed(policy_gpus=12).jobs["default/gang"].reservation.nodes == ("n1", "n2")
    assert _partly_needed(policy_gpus=11).jobs["default/gang"].reservation is None


def test_consolidation_does_not_move_a_pod_onto_nodes_reserved_for_a_gang():
    # the gang holds n2 and n3 (8 GPUs each at +100); moving "moved" (2 GPUs) to n2 would free room for "waiting"
    # on n1 but take the room the gang needs there, and "moved" neither ends before the gang starts nor fits beside
    nodes = [kt.node(f"n{i}", gpus=8) for i in (1, 2, 3)]
    gang = kt.job("gang", tasks=2, gpus=8, priority=90)
    moved, kept = kt.job("moved", gpus=2, status="Running", node="n1"), kt.job("kept", gpus=4, status="Running",
                                                                              node="n1")
    waiting = kt.job("waiting", gpus=4, creation=1.0)
    jobs = [_running("r2", "n2", 6, 100), _running("r3", "n3", 6, 100), gang, moved, kept, waiting]
    config = SchedulerConfig(("allocate", "consolidation"), DEFAULT_CONFIG.plugins, reservation=ON)
    session = run_session(kt.cluster(nodes, jobs=jobs, now=NOW), Plugins(config))
    assert session.jobs["default/gang"].reservation.nodes == ("n2", "n3")
    assert session.decisions == []


def test_a_gang_reserves_no_node_with_a_taint_it_does_not_tolerate():
    # n1 frees first but is tainted; the gang holds n2 and n3 unless it tolerates the taint
    taint = Taint("dedicated", "inference")
    nodes = [kt.node("n1", gpus=8, taints=[taint]), kt.node("n2", gpus=8), kt.node("n3", gpus=8)]

    def held(**task_fields):
        gang = kt.job("gang", tasks=2, gpus=8, priority=90, **task_fields)
        jobs = [_running("r1", "n1", 8, 50), _running("r2", "n2", 8, 100), _running("r3", "n3", 8, 200), gang]
        return _run(kt.cluster(nodes, jobs=jobs, now=NOW)).jobs["default/gang"].reservation

    assert held().nodes == ("n2", "n3")
    assert held(tolerations=(Toleration("dedicated", "Equal", "inference"),)).nodes == ("n1", "n2")
