"""Metrics registry, the probe server and structured logs."""

from __future__ import annotations

import io
import json
import logging
import urllib.error
import urllib.request

import pytest

from kai import logs
from kai.kube.server import ObservabilityServer, parse_address
from kai.metrics import BinderMetrics, QueueMetrics, Registry, SchedulerMetrics


def test_scheduler_metrics_use_kai_s_names_and_units():
    registry = Registry()
    metrics = SchedulerMetrics(registry)
    with metrics.cycle():
        with metrics.action("allocate"):
            pass
    metrics.podgroup_scheduled("allocate")
    metrics.podgroup_scheduled("allocate")
    metrics.preemption_attempt()
    metrics.task_scheduled(0.012)
    metrics.fair_share("team-a", cpu_millicores=2500, memory_bytes=2e9, gpus=3.5, display_name="Team A")
    metrics.snapshot({"Pending": 3, "Running": 2}, podgroups=4, pending_podgroups=1)

    e2e = registry.value("kai_e2e_scheduling_latency_milliseconds")
    assert e2e is not None and 0 <= e2e < 1000
    assert registry.value("kai_action_scheduling_latency_milliseconds", {"action": "allocate"}) <= e2e
    assert registry.value("kai_podgroups_scheduled_by_action", {"action": "allocate"}) == 2
    assert registry.value("kai_total_preemption_attempts") == 1
    assert registry.value("kai_task_scheduling_latency_milliseconds_bucket", {"le": "20.0"}) == 1
    assert registry.value("kai_task_scheduling_latency_milliseconds_bucket", {"le": "10.0"}) == 0
    # KAI's queue labels: queue_name is the display name when there is one
    team_a = {"queue_name": "Team A", "queue_metadata_name": "team-a", "queue_display_name": "Team A"}
    assert registry.value("kai_queue_fair_share_cpu_cores", team_a) == 2.5
    assert registry.value("kai_queue_fair_share_gpu", team_a) == 3.5
    assert registry.value("kai_queue_fair_share_memory_gb", team_a) == 2.0
    assert registry.value("kai_snapshot_pods", {"status": "Pending"}) == 3
    metrics.snapshot({"Running": 5}, podgroups=4, pending_podgroups=0)
    assert registry.value("kai_snapshot_pods", {"status": "Pending"}) is None  # a vanished status is dropped


def test_registries_are_private_to_their_owner():
    first, second = Registry(), Registry()
    SchedulerMetrics(first).preemption_attempt()
    SchedulerMetrics(second)
    assert first.value("kai_total_preemption_attempts") == 1
    assert second.value("kai_total_preemption_attempts") == 0


def test_metrics_namespace_is_configurable():
    registry = Registry(namespace="acme")
    BinderMetrics(registry).result("succeeded")
    assert registry.value("acme_binder_bind_attempts_total", {"result": "succeeded"}) == 1


def test_queue_metrics_extra_labels_defaults_and_removal():
    registry = Registry()
    metrics = QueueMetrics(registry, label_map={"team": "team_label"}, label_defaults={"team": "none"})
    metrics.set_queue("q1", {"team": "ml"}, {"queue_allocated_gpus": 2.5, "queue_quota_cpu_cores": -1}, "Vision")

    def q1(team):  # the queue controller's queue_name is the Queue's name, display name or not (KAI)
        return {"queue_name": "q1", "queue_metadata_name": "q1", "queue_display_name": "Vision", "team_label": team}

    metrics.set_queue("q2", {}, {})
    assert registry.value("kai_queue_allocated_gpus", q1("ml")) == 2.5
    assert registry.value("kai_queue_quota_cpu_cores", q1("ml")) == -1
    assert registry.value("kai_queue_info", {"queue_name": "q2", "queue_metadata_name": "q2",
                                             "queue_display_name": "", "team_label": "none"}) == 1
    # a label change replaces the series instead of leaving the old one behind
    metrics.set_queue("q1", {"team": "infra"}, {"queue_allocated_gpus": 1}, "Vision")
    assert registry.value("kai_queue_allocated_gpus", q1("ml")) is None
    assert registry.value("kai_queue_allocated_gpus", q1("infra")) == 1
    metrics.remove_queue("q1")
    assert registry.value("kai_queue_info", q1("infra")) is None


@pytest.mark.parametrize(("label_map", "problem"), [
    ({"team": "team-label"}, "'team-label' is not a metric label name"),
    ({"team": "__team"}, "'__team' is not a metric label name"),
    ({"team": "queue_display_name"}, "label 'queue_display_name' is used twice"),
    ({"team": "owner", "group": "owner"}, "label 'owner' is used twice"),
])
def test_queue_metrics_refuse_a_bad_extra_label_naming_the_flag(label_map, problem):
    with pytest.raises(ValueError, match="--queue-label-to-metric-label") as error:
        QueueMetrics(Registry(), label_map=label_map)
    assert problem in str(error.value)


@pytest.mark.parametrize(
    ("address", "expected"),
    [(":8080", ("0.0.0.0", 8080)), ("127.0.0.1:9", ("127.0.0.1", 9)), ("[::1]:80", ("::1", 80))],
)
def test_parse_address(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["8080", "host:", "host:99999", "host:http"])
def test_parse_address_rejects(address):
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address(address)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_server_serves_metrics_health_and_readiness():
    registry = Registry()
    SchedulerMetrics(registry).preemption_attempt()
    state = {"synced": False}
    server = ObservabilityServer("127.0.0.1:0", registry, {"cache": lambda: (state["synced"], "informers")}).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        status, body = _get(base + "/metrics")
        assert status == 200 and "kai_total_preemption_attempts 1.0" in body
        assert _get(base + "/healthz")[0] == 200
        status, body = _get(base + "/readyz")
        assert status == 503 and "[-]cache failed: informers" in body
        state["synced"] = True
        server.add_ready_check("broken", lambda: 1 / 0)
        status, body = _get(base + "/readyz")
        assert status == 503 and "[+]cache ok" in body and "ZeroDivisionError" in body
        del server.ready_checks["broken"]
        assert _get(base + "/readyz")[0] == 200
        assert _get(base + "/nope")[0] == 404
    finally:
        server.stop()


def test_pages_under_a_prefix_get_the_path_and_a_failing_page_answers_500():
    server = ObservabilityServer("127.0.0.1:0", Registry())
    server.add_pages("/pages/", lambda path: (200 if path != "/pages/bad" else 1 / 0, path.encode(), "text/plain",
                                              {"X-Page": "yes"}))
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert _get(base + "/pages/a?b=c") == (200, "/pages/a?b=c")
        assert _get(base + "/pages") == (200, "/pages")
        assert _get(base + "/pages/bad")[0] == 500
        assert _get(base + "/pagesx")[0] == 404
    finally:
        server.stop()


def _capture(fmt: str) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    logs.configure(fmt, "INFO", stream=stream)
    return logging.getLogger("kai.test"), stream


def test_json_logs_carry_the_decision_fields():
    logger, stream = _capture("json")
    try:
        logger.info("bound pod", **logs.fields(pod="ns/p", node="n1", queue=None))
        entry = json.loads(stream.getvalue().strip())
        assert entry["msg"] == "bound pod" and entry["pod"] == "ns/p" and entry["node"] == "n1"
        assert entry["level"] == "info" and "queue" not in entry
    finally:
        logging.getLogger().handlers.clear()


def test_text_logs_append_key_values():
    logger, stream = _capture("text")
    try:
        logger.warning("bind failed", **logs.fields(pod="ns/p", reason="node gone"))
        assert stream.getvalue().rstrip().endswith('bind failed pod=ns/p reason="node gone"')
    finally:
        logging.getLogger().handlers.clear()


def test_unknown_log_format_is_an_error():
    with pytest.raises(ValueError, match="yaml"):
        logs.configure("yaml")


def test_a_server_never_started_stops_at_once():
    ObservabilityServer("127.0.0.1:0", Registry()).stop()


def test_default_handler_follows_a_replaced_stderr(monkeypatch):
    logs.configure("text")
    try:
        first, second = io.StringIO(), io.StringIO()
        monkeypatch.setattr("sys.stderr", first)
        logging.getLogger("kai.test").warning("one")
        monkeypatch.setattr("sys.stderr", second)
        first.close()  # a closed former stderr is never written to again
        logging.getLogger("kai.test").warning("two")
        assert "two" in second.getvalue()
    finally:
        logging.getLogger().handlers.clear()
