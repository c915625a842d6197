"""Reservations and runtime limits live: read from the PodGroup's annotations and shown by the visibility API
(the committer's writes are in test_commit.py)."""

from __future__ import annotations

from kai import testing as kt
from kai.api import Reservation
from kai.framework import DEFAULT_CONFIG, Plugins, SchedulerConfig, run_session
from kai.framework.reservation import ReservationPolicy
from kai.kube.views import parse_reservation, podgroup_view, reservation_annotation
from kai.scheduler import convert
from kai.scheduler.visibility import build_view, pending_json

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _view(annotations):
    return podgroup_view({"metadata": {"name": "g", "namespace": "ns", "annotations": annotations},
                          "spec": {"queue": "q", "minMember": 2}})


def test_max_runtime_and_reservation_come_from_the_podgroup_annotations():
    held = Reservation(("n1", "n2"), T0, T0 + 3600, None)
    view = _view({"kai.scheduler/max-runtime": "1h30m", "kai.scheduler/reservation": reservation_annotation(held)})
    assert view.invalid == ""
    job = convert.to_job(view, 50)
    assert job.max_runtime == 5400.0 and job.reservation == held
    assert parse_reservation(reservation_annotation(held)) == held


def test_a_bad_max_runtime_is_noted_and_ignored_and_a_bad_reservation_is_none():
    for value in ("soon", "-1h", "0s"):
        view = _view({"kai.scheduler/max-runtime": value, "kai.scheduler/reservation": "{not json"})
        assert "kai.scheduler/max-runtime" in view.invalid
        assert view.max_runtime is None and view.reservation is None


def test_visibility_shows_the_reservation_and_the_max_runtime():
    gang = kt.job("gang", tasks=2, gpus=8)
    gang.max_runtime = 600.0
    gang.reservation = Reservation(("n1",), kt.NOW - 10, kt.NOW + 100, None)
    config = SchedulerConfig(("allocate",), DEFAULT_CONFIG.plugins, reservation=ReservationPolicy(enabled=True))
    session = run_session(kt.cluster([kt.node("n1", gpus=8)], jobs=[gang]), Plugins(config))
    view = build_view(session)
    (entry,) = view.ordered()[0]
    shown = pending_json(entry, view)
    assert shown["max_runtime_seconds"] == 600.0
    assert shown["reservation"]["nodes"] == ["n1"] and shown["reservation"]["expected_start"] is None
