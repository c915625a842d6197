"""Time-based fair share: usage configuration, the in-process history's window and decay math, the
Prometheus client against a local HTTP server, and the division leaning away from heavy past users."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from kai import testing as kt
from kai.common.errors import ConfigError
from kai.framework import Session, parse_config
from kai.framework.usage import UsageParams, parse_usage_db
from kai.usagedb import make_usage_source
from kai.usagedb.inprocess import InProcessUsage
from kai.usagedb.prometheus import PrometheusClient, UsageError, UsageLister
from support.waiting import wait_until

GPU = 2  # index in (CPU, memory, GPU)


# --- configuration ---------------------------------------------------------------------------------


def test_usage_db_config_in_kai_shape():
    config = parse_config({"usageDBConfig": {
        "clientType": "prometheus", "connectionString": "http://prom:9090",
        "usageParams": {"halfLifePeriod": "30m", "windowSize": "24h", "fetchInterval": "2m",
                        "stalenessPeriod": "1m", "extraParams": {"queryResolution": "5m"}},
    }})
    db = config.usage_db
    assert (db.client_type, db.connection_string) == ("prometheus", "http://prom:9090")
    p = db.params
    assert (p.half_life, p.window, p.window_type, p.fetch_interval) == (1800.0, 86400.0, "sliding", 120.0)
    assert p.staleness == 120.0  # never shorter than the fetch interval
    assert p.extra == {"queryResolution": "5m"} and (p.resolution, p.query_timeout) == (300.0, 10.0)
    defaults = parse_usage_db({"clientType": "in-process"}, "c").params
    assert (defaults.half_life, defaults.window, defaults.staleness, defaults.wait_timeout) == (None, 604800.0,
                                                                                              300.0, 60.0)
    assert parse_usage_db({"clientType": "fake-with-history",
                           "usageParams": {"halfLifePeriod": "0s"}}, "c").params.half_life is None
    assert parse_config({}).usage_db is None  # off by default


@pytest.mark.parametrize("data, message", [
    ({"clientType": "influx"}, "clientType' must be one of prometheus"),
    ({"clientType": "prometheus"}, "exactly one of 'connectionString' and 'connectionStringEnvVar'"),
    ({"clientType": "prometheus", "connectionString": "u", "connectionStringEnvVar": "V"}, "exactly one"),
    ({"clientType": "in-process", "usageParams": {"windowType": "cron"}}, "cronString': required for cron windows"),
    ({"clientType": "in-process", "usageParams": {"windowType": "cron", "cronString": "0 0 * *"}},
     "cronString': '0 0 \\* \\*' is not a cron string"),
    ({"clientType": "in-process", "usageParams": {"windowType": "cron", "cronString": "61 * * * *"}},
     "is not a cron string"),
    ({"clientType": "in-process", "usageParams": {"windowType": "tumbling"}}, "tumblingWindowStartTime"),
    ({"clientType": "in-process", "usageParams": {"windowSize": "a week"}}, "'windowSize'.*not a duration"),
    ({"clientType": "in-process", "usageParams": {"windowSize": "0s"}}, "windowSize' must be positive"),
    ({"clientType": "in-process", "usageParams": {"halflife": "1h"}}, "'halflife' is not known"),
    ({"clientType": "in-process", "usageParams": {"extraParams": {"queryResolution": "often"}}},
     "queryResolution.*not a duration"),
])
def test_usage_db_config_errors_name_the_field(data, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_config({"usageDBConfig": data}, "sched.yaml")
    assert str(info.value).startswith("sched.yaml: usageDBConfig")


def test_connection_string_from_the_environment(monkeypatch):
    config = parse_usage_db({"clientType": "prometheus", "connectionStringEnvVar": "PROM_URL"}, "c")
    monkeypatch.delenv("PROM_URL", raising=False)
    with pytest.raises(ConfigError, match="PROM_URL"):
        make_usage_source(config)
    monkeypatch.setenv("PROM_URL", "http://example:9090/")
    assert make_usage_source(config).client.url == "http://example:9090"
    assert make_usage_source(None) is None


# --- in-process history: window and decay ------------------------------------------------------------


def history(**params):
    h = InProcessUsage(UsageParams(resolution=1.0, **params))
    h.add(0.0, [0, 0, 10.0], {"a": [0, 0, 2.0]})
    h.add(50.0, [0, 0, 10.0], {"a": [0, 0, 0.0], "b": [0, 0, 5.0]})
    return h


def test_each_record_counts_until_the_next_one():
    h = history(window=1000.0)
    usage = h.usage(100.0)
    assert usage["a"][GPU] == pytest.approx((50 * 2) / (100 * 10))
    assert usage["b"][GPU] == pytest.approx((50 * 5) / (100 * 10))
    assert usage["a"][0] == 0.0  # no CPU capacity recorded: 0, not a division by zero


def test_sliding_window_forgets_what_is_older():
    h = history(window=100.0)
    assert h.usage(150.0)["a"][GPU] == 0.0  # window [50, 150]: a held nothing
    assert h.usage(100.0)["a"][GPU] == pytest.approx(0.1)
    assert h.usage(125.0)["a"][GPU] == pytest.approx((25 * 2) / (100 * 10))  # window [25, 125]


def test_half_life_weighs_recent_samples_more():
    h = history(window=250.0, half_life=50.0)  # one-second buckets
    # At 100, second s (0 <= s < 100) weighs 0.5^((100 - s - 1/2) / 50); a held 2 of 10 GPUs in [0, 50).
    weight = [0.5 ** ((100 - s - 0.5) / 50) for s in range(100)]
    expected = sum(2 * w for w in weight[:50]) / sum(10 * w for w in weight)
    assert h.usage(100.0)["a"][GPU] == pytest.approx(expected)
    assert expected < history(window=250.0).usage(100.0)["a"][GPU]


def test_tumbling_window_restarts_at_each_boundary():
    h = history(window=100.0, window_type="tumbling", tumbling_start=-20.0)
    # Windows [-20, 80), [80, 180): at 150 only [80, 150] counts, where a held nothing.
    assert h.usage(150.0)["a"][GPU] == 0.0
    assert h.usage(60.0)["a"][GPU] == pytest.approx((50 * 2) / (60 * 10))  # window [-20, 60], data from 0


MONDAY = 1_763_942_400.0  # 2025-11-24T00:00:00Z, a Monday


@pytest.mark.parametrize("cron, now, start", [
    ("0 0 * * 1", MONDAY + 3 * 86400 + 5, MONDAY),  # the Monday before
    ("0 0 * * 1", MONDAY, MONDAY - 7 * 86400),  # at a reset: the one before (KAI's window never has size 0)
    ("@daily", MONDAY + 86400 + 3600, MONDAY + 86400),
    ("30 * * * * 2025", MONDAY + 100, MONDAY - 1800),  # six fields: and a year
    ("15 30 * * * * *", MONDAY + 100, MONDAY - 1800 + 15),  # seven: a second first, a year last
    ("0 0 1 1 * 2099", MONDAY, MONDAY),  # no reset yet: an empty window
])
def test_cron_window_starts_at_the_last_reset(cron, now, start):
    params = parse_usage_db({"clientType": "in-process",
                             "usageParams": {"windowType": "cron", "cronString": cron}}, "c").params
    assert params.window_type == "cron"
    assert params.window_start(now) == start


def test_cron_window_counts_since_its_reset_also_beyond_the_window_size():
    # resets at 00:00 on the first of each month; windowSize (one hour) does not bound it
    params = parse_usage_db({"clientType": "in-process", "usageParams": {
        "windowType": "cron", "cronString": "0 0 1 * *", "windowSize": "1h"}}, "c").params
    h = InProcessUsage(params)
    first = 1_761_955_200.0  # 2025-11-01T00:00:00Z
    h.add(first - 3600, [0, 0, 10.0], {"a": [0, 0, 10.0]})  # before the reset: a held everything
    h.add(first, [0, 0, 10.0], {"a": [0, 0, 2.0]})
    h.add(first + 5 * 86400, [0, 0, 10.0], {"a": [0, 0, 2.0]})
    assert h.usage(first + 5 * 86400)["a"][GPU] == pytest.approx(0.2)
    prometheus = PrometheusClient("http://prometheus:9090", params)
    assert prometheus.query_text("m", first + 86400) == "sum_over_time((m)[24h0m0s:1m0s])"


def test_memory_is_bounded_and_a_rerecorded_time_replaces():
    h = InProcessUsage(UsageParams(window=10.0, resolution=1.0))
    for t in range(100):
        h.add(float(t), [0, 0, 1.0], {"a": [0, 0, 1.0]})
    assert len(h.buckets) <= 12
    assert h.usage(100.0)["a"][GPU] == pytest.approx(1.0)
    h.add(99.0, [0, 0, 1.0], {"a": [0, 0, 0.0]})  # the same cycle recorded again
    assert h.usage(100.0)["a"][GPU] == pytest.approx(0.9)
    week = InProcessUsage(UsageParams())  # a day of 7-second cycles in a one-week window
    for t in range(0, 86400, 7):
        week.add(float(t), [0, 0, 8.0], {"a": [0, 0, 2.0]})
    assert len(week.buckets) <= InProcessUsage.MAX_BUCKETS + 1
    assert week.usage(86400.0)["a"][GPU] == pytest.approx(0.25)


def test_buckets_coarser_than_records_keep_the_integral():
    fine, coarse = history(window=1000.0), InProcessUsage(UsageParams(window=1000.0, resolution=30.0))
    coarse.add(0.0, [0, 0, 10.0], {"a": [0, 0, 2.0]})
    coarse.add(50.0, [0, 0, 10.0], {"a": [0, 0, 0.0], "b": [0, 0, 5.0]})
    want = fine.usage(100.0)
    got = coarse.usage(100.0)
    assert set(got) == set(want) and all(got[q] == pytest.approx(want[q]) for q in want)


# --- the division leans away from heavy past users -------------------------------------------------------


def fair_gpus(usage, k_value=1.0):
    jobs = [kt.job("ja", "a", tasks=8, gpus=1), kt.job("jb", "b", tasks=8, gpus=1)]
    snap = kt.cluster([kt.node("n1", gpus=8)], [kt.queue("a"), kt.queue("b")], jobs)
    snap.usage = usage
    from kai.framework import PluginSpec
    session = Session(snap, kt.plugin_manager([PluginSpec("proportion", {"kValue": k_value})])).open()
    shares = session.plugins.plugin("proportion").shares
    return shares["a"].fair_share[GPU], shares["b"].fair_share[GPU]


def test_division_shifts_away_from_a_heavy_past_user():
    assert fair_gpus({}) == (4.0, 4.0)
    a, b = fair_gpus({"a": (0.0, 0.0, 0.6)})
    assert a < b and a + b == 8.0
    assert fair_gpus({"a": (0.0, 0.0, 0.6)}, k_value=0.0) == (4.0, 4.0)  # kValue 0: usage has no effect


def test_in_process_history_feeds_the_next_sessions_fair_share():
    source = InProcessUsage(UsageParams(window=3600.0))
    # A first cycle: queue a runs 6 of 8 GPUs, b nothing.
    running = kt.job("old", "a", tasks=6, gpus=1, status="Running", node="n1")
    snap = kt.cluster([kt.node("n1", gpus=8)], [kt.queue("a"), kt.queue("b")], [running], now=kt.NOW)
    source.record(kt.run(snap, ["proportion"]))
    usage = source.usage(kt.NOW + 600)
    assert usage["a"][GPU] == pytest.approx(6 / 8) and "b" not in usage
    a, b = fair_gpus(usage)
    assert a < b


def test_simulate_feeds_usage_across_cycles():
    from kai.framework import SchedulerConfig
    from kai.sim.simulate import Run, simulate

    config = parse_config({"usageDBConfig": {"clientType": "in-process"}})
    seen = []

    def build(now):
        snap = kt.cluster([kt.node("n1", gpus=8)], [kt.queue("a")],
                          [kt.job("j", "a", tasks=2, gpus=1, status="Running", node="n1")], now=now)
        seen.append(snap)
        return snap

    run = Run("t", SchedulerConfig(("allocate",), config.plugins, usage_db=config.usage_db), 3, build,
              lambda s: None)
    simulate(run)
    assert seen[0].usage == {}
    assert seen[2].usage["a"][GPU] == pytest.approx(2 / 8)


# --- Prometheus ------------------------------------------------------------------------------------------

CAPACITY = {"cpu": 64.0, "memory": 512e9, "nvidia_com_gpu": 16.0}


class FakePrometheus(BaseHTTPRequestHandler):
    """Answers /api/v1/query like Prometheus 2.x; records every form it receives."""

    queries: list[dict] = []
    fail: bool = False

    def do_POST(self):  # noqa: N802 (http.server's naming)
        length = int(self.headers["Content-Length"])
        form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
        type(self).queries.append({"path": self.path, **form})
        if type(self).fail:
            self._reply(400, {"status": "error", "errorType": "bad_data", "error": "1:15: parse error: boom"})
            return
        query, ts = form["query"], float(form["time"])
        result = []
        for resource, value in CAPACITY.items():
            if f'resource="{resource}"' in query:
                result = [{"metric": {}, "value": [ts, str(value * 60)]}]
        if "kai_queue_allocated_gpus" in query:
            result = [{"metric": {"__name__": "kai_queue_allocated_gpus", "queue_name": "team-a"},
                       "value": [ts, "240"]},
                      {"metric": {"queue_name": "team-b"}, "value": [ts, "96"]}]
        self._reply(200, {"status": "success", "data": {"resultType": "vector", "result": result}})

    def _reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus():
    FakePrometheus.queries, FakePrometheus.fail = [], False
    server = HTTPServer(("127.0.0.1", 0), FakePrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_prometheus_query_text_and_response(prometheus):
    params = UsageParams(half_life=1800.0, window=3600.0)
    client = PrometheusClient(prometheus + "/", params)
    usage = client.fetch(now=1_700_000_000.0)
    assert usage == {"team-a": (0.0, 0.0, 240 / (16 * 60)), "team-b": (0.0, 0.0, 96 / (16 * 60))}
    sent = FakePrometheus.queries
    assert {q["path"] for q in sent} == {"/api/v1/query"} and {q["time"] for q in sent} == {"1700000000.000"}
    decay = "0.5^((1700000000 - time()) / 1800.000000)"
    texts = [q["query"] for q in sent]
    assert texts[0] == f'sum_over_time((((sum(kube_node_status_capacity{{resource="cpu"}})) * ({decay})))[1h0m0s:1m0s])'
    assert f"sum_over_time((((kai_queue_allocated_gpus) * ({decay})))[1h0m0s:1m0s])" in texts
    assert "sum_over_time((((kai_queue_allocated_cpu_cores) * (" in texts[1]


def test_prometheus_queries_without_decay_and_tumbling(prometheus):
    client = PrometheusClient(prometheus, UsageParams(window=604800.0, resolution=30.0,
                                                      extra={"gpuAllocationMetric": "my_gpus"}))
    assert client.query_text("my_gpus", 0.0) == "sum_over_time((my_gpus)[168h0m0s:30s])"
    tumbling = PrometheusClient(prometheus, UsageParams(window=3600.0, window_type="tumbling", tumbling_start=0.0))
    assert tumbling.query_text("m", 7200.0 + 900) == "sum_over_time((m)[15m0s:1m0s])"  # since the reset at 7200


def test_prometheus_errors_are_logged_and_the_last_data_kept(prometheus, caplog):
    clock = [1000.0]
    timed = []

    @contextlib.contextmanager
    def timer():
        yield
        timed.append(True)

    lister = UsageLister(PrometheusClient(prometheus, UsageParams()), UsageParams(fetch_interval=60, staleness=300),
                         clock=lambda: clock[0], query_timer=timer)
    assert lister.refresh() and timed == [True]
    good = lister.usage(clock[0])
    assert good["team-a"][GPU] == pytest.approx(0.25)
    FakePrometheus.fail = True
    with caplog.at_level(logging.ERROR, logger="kai.usage"):
        assert not lister.refresh()
    assert "fetching queue usage failed, keeping the last data" in caplog.text
    assert "Prometheus answered 400 (1:15: parse error: boom)" in caplog.text
    assert lister.usage(clock[0]) == good
    caplog.clear()
    clock[0] += 301
    with caplog.at_level(logging.ERROR, logger="kai.usage"):
        assert lister.usage(clock[0]) == good
        lister.usage(clock[0])  # logged once per fetch interval, not on every read
    assert caplog.text.count("usage data is stale") == 1


def test_unreachable_prometheus_is_a_usage_error():
    client = PrometheusClient("http://127.0.0.1:9", UsageParams(query_timeout=1.0))
    with pytest.raises(UsageError, match="cannot reach Prometheus at http://127.0.0.1:9"):
        client.fetch(now=0.0)


def test_lister_fetches_in_the_background(prometheus):
    params = UsageParams(fetch_interval=0.05, wait_timeout=5.0)
    lister = UsageLister(PrometheusClient(prometheus, params), params)
    lister.start()
    try:
        assert lister.usage(0.0)["team-b"][GPU] == pytest.approx(0.1)  # waited for the first fetch
        seen = len(FakePrometheus.queries)
        wait_until(lambda: len(FakePrometheus.queries) > seen, 5, "another fetch", interval=0.01)  # and keeps fetching
    finally:
        lister.close()
    assert not lister._thread.is_alive()
