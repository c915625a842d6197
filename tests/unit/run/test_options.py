"""Options of ``kai-scheduler run`` for metrics, leader election and the queue controller."""

from __future__ import annotations

import argparse
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kai.common.durations import duration_flag
from kai.kube.server import parse_address
from kai.metrics import Registry
from kai.run import (
    Leading,
    _parser,
    _readiness,
    lease_name,
    observability_servers,
    run_as_leader,
    run_components,
    scheduler_config,
)


@pytest.mark.parametrize(("text", "seconds"), [("15s", 15), ("500ms", 0.5), ("2m", 120), ("1h", 3600), ("4", 4),
                                               ("2.5s", 2.5), ("1m30s", 90), ("1h0m0.5s", 3600.5), ("0", 0)])
def test_duration_flag(text, seconds):
    assert duration_flag(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "10d", "-1s", "1 5s", "1e3", "nan"])
def test_duration_flag_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        duration_flag(text)


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1.0), ("1m30s", 90.0), ("2", 2.0)])
def test_schedule_period_is_a_go_duration(text, seconds):
    assert _parser().parse_args(["--schedule-period", text]).schedule_period == seconds


def test_plain_pods_are_bound_directly_unless_bind_requests_are_asked_for():
    assert _parser().parse_args([]).bind_mode == "direct"
    assert _parser().parse_args(["--bind-mode", "bindRequest"]).bind_mode == "bindRequest"
    with pytest.raises(SystemExit):
        _parser().parse_args(["--bind-mode", "binder"])


@pytest.mark.parametrize("flag", ["--schedule-period", "--leader-elect-lease-duration", "--leader-elect-renew-deadline",
                                  "--leader-elect-retry-period", "--resource-reservation-allocation-timeout"])
def test_every_duration_flag_takes_go_durations_and_names_itself_when_wrong(flag, capsys):
    assert getattr(_parser().parse_args([flag, "1m30s"]), flag.lstrip("-").replace("-", "_")) == 90.0
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args([flag, "5 minutes"])
    assert exit_.value.code == 2
    assert f"argument {flag}: '5 minutes' is not a duration" in capsys.readouterr().err


def test_lease_names_differ_per_component_set():
    assert lease_name("kai-scheduler", ["scheduler"]) == "kai-scheduler"
    assert lease_name("kai-scheduler", ["binder"]) == "kai-scheduler-binder"
    assert lease_name("kai-scheduler", ["scheduler", "binder", "queue-controller"]) == \
        "kai-scheduler-binder-queue-controller"


def test_defaults_and_key_value_maps():
    args = _parser().parse_args(["--queue-label-to-metric-label=team=team_name, org=org"])
    assert args.metrics_address == ":8080" and args.metrics_namespace == "kai"
    assert (args.leader_elect_lease_duration, args.leader_elect_renew_deadline, args.leader_elect_retry_period) == \
        (15, 10, 5)
    assert args.queue_label_to_metric_label == {"team": "team_name", "org": "org"}
    assert args.bind_workers == 10


def test_bad_key_values_are_usage_errors(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["--queue-label-to-metric-label=team"])
    assert "KEY=VALUE" in capsys.readouterr().err


class Elector:
    def __init__(self, leading=False, keep=True):
        self.leading, self.lost, self.keep = leading, False, keep
        self.state = "leading" if leading else "standing by"

    def run(self, stop, lead):
        self.leading = True
        over = threading.Event()
        over.set()  # leadership ends at once
        lead(over)
        self.lost = not self.keep
        return self.keep


class Component:
    name = "c"

    def __init__(self, ready=(False, "listing")):
        self._ready, self.ran = ready, False

    def ready(self):
        return self._ready

    def run(self, stop):
        self.ran = True
        stop.wait()


def test_standby_is_ready_leader_reports_its_components():
    component = Component()
    assert _readiness(component, Elector(leading=False))() == (True, "standing by")
    assert _readiness(component, Elector(leading=True))() == (False, "listing")
    assert _readiness(component, None)() == (False, "listing")


def test_lost_lease_exits_1_and_components_ran_only_while_leading():
    component = Component()
    assert run_as_leader(Elector(keep=False), [component], threading.Event()) == 1
    assert component.ran
    assert run_as_leader(Elector(keep=True), [Component()], threading.Event()) == 0


def _get(server, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_metrics_listen_on_every_interface_by_default_as_documented():
    args = _parser().parse_args([])
    assert args.metrics_address == ":8080" and args.health_probe_address == ""
    assert parse_address(args.metrics_address) == ("0.0.0.0", 8080)
    deploy = (Path(__file__).resolve().parents[3] / "docs" / "deploy.md").read_text()
    assert "`--metrics-address` (`:8080`, every interface" in deploy


def test_metrics_can_listen_on_loopback_only_with_the_probes_on_their_own_address():
    args = _parser().parse_args(["--metrics-address=127.0.0.1:0", "--health-probe-address=127.0.0.1:0"])
    metrics, probes = servers = observability_servers(args, Registry())
    try:
        for server in servers:
            server.start()
        assert metrics.address == ("127.0.0.1", metrics.port) and metrics.port != probes.port
        assert [_get(metrics, p) for p in ("/metrics", "/healthz", "/readyz")] == [200, 404, 404]
        assert [_get(probes, p) for p in ("/metrics", "/healthz", "/readyz")] == [404, 200, 200]
    finally:
        for server in servers:
            server.stop()


def test_one_server_answers_metrics_and_probes_without_a_probe_address():
    (server,) = observability_servers(_parser().parse_args(["--metrics-address=127.0.0.1:0"]), Registry())
    try:
        server.start()
        assert [_get(server, p) for p in ("/metrics", "/healthz", "/readyz")] == [200, 200, 200]
    finally:
        server.stop()


def test_a_probe_address_that_cannot_be_bound_is_an_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = _parser().parse_args(["--metrics-address=127.0.0.1:0", f"--health-probe-address=127.0.0.1:{port}"])
        with pytest.raises(OSError):
            observability_servers(args, Registry())


def test_restrict_node_scheduling_flag_and_configuration_setting(tmp_path):
    assert scheduler_config(_parser().parse_args([])).restrict_node_scheduling is False
    assert scheduler_config(_parser().parse_args(["--restrict-node-scheduling"])).restrict_node_scheduling is True
    path = tmp_path / "config.yaml"
    path.write_text("restrictSchedulingNodes: true\n")
    assert scheduler_config(_parser().parse_args(["--config", str(path)])).restrict_node_scheduling is True


def test_components_beside_the_shards_run_under_the_process_lease_and_a_lost_one_fails():
    component = Component()
    assert run_components([Leading(Elector(keep=False), [component])], threading.Event(), stop_timeout=1.0) == 1
    assert component.ran
    assert run_components([Leading(Elector(keep=True), [Component()])], threading.Event(), stop_timeout=1.0) == 0
