"""``kai-scheduler run`` flags reach the podgrouper and admission components; bad combinations are errors."""

from __future__ import annotations

import pytest

from kai.run import COMPONENTS, Context, _parser, parse_components
from kai.framework import DEFAULT_CONFIG
from kai.metrics import Registry


class NoKube:
    """Enough of a client to build components (none of them calls the API before ``run``)."""

    api_client = None
    timeout = 30.0


def build(name: str, *argv: str):
    return COMPONENTS[name](Context(_parser().parse_args(list(argv)), DEFAULT_CONFIG, NoKube(), Registry()))


def test_podgrouper_flags_configure_grouping():
    grouper = build("podgrouper", "--queue-label-key", "team", "--nodepool-label-key", "pool",
                    "--default-priorities-configmap-name", "defaults",
                    "--default-priorities-configmap-namespace", "kai", "--scheduler-name", "other",
                    "--pod-label-selector", "app=x", "--podgrouper-workers", "3")
    assert grouper.name == "podgrouper"
    assert (grouper.config.queue_label_key, grouper.config.node_pool_label_key) == ("team", "pool")
    assert grouper.config.defaults_configmap == ("kai", "defaults")
    assert (grouper.scheduler_name, grouper.pod_label_selector, grouper.workers) == ("other", "app=x", 3)
    assert "pytorchjob" in grouper.hub.names


def test_podgrouper_defaults_are_kais():
    grouper = build("podgrouper")
    assert grouper.config.queue_label_key == "kai.scheduler/queue"
    assert grouper.config.defaults_configmap is None
    assert (grouper.scheduler_name, grouper.workers) == ("kai-scheduler", 10)


def test_a_defaults_configmap_needs_name_and_namespace():
    with pytest.raises(ValueError, match="go together"):
        build("podgrouper", "--default-priorities-configmap-name", "defaults")


def test_admission_flags():
    server = build("admission", "--webhook-addr", "127.0.0.1:9555", "--webhook-host", "kai-admission.kai.svc",
                   "--webhook-host", "10.0.0.7")
    assert server.name == "admission"
    assert server.address == ("127.0.0.1", 9555)
    assert server.hosts == ["kai-admission.kai.svc", "10.0.0.7"]
    assert build("admission").hosts == ["localhost", "127.0.0.1"]
    with pytest.raises(ValueError, match="both"):
        build("admission", "--webhook-cert-file", "tls.crt")


def test_every_kai_component_is_available():
    assert parse_components("scheduler,binder,podgrouper,queue-controller,admission") == [
        "scheduler", "binder", "podgrouper", "queue-controller", "admission"]
