"""``kai-scheduler run`` flags reach the podgrouper, binder and admission components; bad combinations are errors."""

from __future__ import annotations

import pytest

from kai.binder import reservation
from kai.binder.gpusharing import GpuSharing
from kai.binder.plugins import build_plugins
from kai.framework import DEFAULT_CONFIG, PluginError
from kai.metrics import Registry
from kai.run import COMPONENTS, Context, _parser, parse_components, report_config_status


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


def test_the_binder_runs_the_gpusharing_plugin_with_the_gpu_sharing_flags():
    binder = build("binder", "--resource-reservation-namespace", "rr", "--resource-reservation-allocation-timeout",
                   "1m30s", "--runtime-class-name", "nvidia", "--cdi-enabled", "--fake-gpu-nodes")
    _, _, plugin = binder.plugins
    assert isinstance(plugin, GpuSharing) and plugin.cdi
    assert plugin.kube is binder.kube and plugin.reservations.kube is binder.kube
    r = plugin.reservations
    assert (r.namespace, r.timeout, r.runtime_class, r.fake_gpu_nodes) == ("rr", 90.0, "nvidia", True)
    assert (r.image, r.app) == (reservation.IMAGE, reservation.APP)


def test_the_binder_plugins_default_to_volumebinding_dynamicresources_and_gpusharing_and_can_be_switched_off():
    assert [p.name for p in build("binder").plugins] == ["volumebinding", "dynamicresources", "gpusharing"]
    assert build("binder", "--binder-plugins", '{"gpusharing": {"enabled": false}}').plugins[0].timeout == 120.0
    # plugins this build does not have may be named when they are off
    off = '{"volumebinding": {"enabled": false}, "dynamicresources": {"enabled": false}, "other": {"enabled": false}}'
    assert [p.name for p in build("binder", "--binder-plugins", off).plugins] == ["gpusharing"]


def test_gpusharing_arguments_from_the_configuration_win_over_the_flags():
    config = '{"gpusharing": {"arguments": {"cdiEnabled": "true", "image": "mine:1", "allocationTimeout": "5s"}}}'
    _, _, plugin = build("binder", "--resource-reservation-pod-image", "flag:1", "--resource-reservation-namespace",
                         "rr", "--binder-plugins", config).plugins
    assert plugin.cdi
    assert (plugin.reservations.image, plugin.reservations.timeout, plugin.reservations.namespace) == (
        "mine:1", 5.0, "rr")
    # KAI: arguments given replace the default ones, --cdi-enabled's cdiEnabled among them
    *_, plugin = build("binder", "--cdi-enabled", "--binder-plugins", '{"gpusharing": {"arguments": {}}}').plugins
    assert not plugin.cdi


def test_the_binder_plugin_configuration_may_be_a_yaml_file(tmp_path):
    path = tmp_path / "binder-plugins.yaml"
    path.write_text("gpusharing:\n  arguments:\n    cdiEnabled: true\n    fakeGpuNodes: true\n")
    *_, plugin = build("binder", "--binder-plugins", str(path)).plugins
    assert plugin.cdi and plugin.reservations.fake_gpu_nodes


def test_an_unknown_binder_plugin_is_an_error_naming_the_flag():
    with pytest.raises(PluginError, match="--binder-plugins: unknown binder plugin 'nosuchplugin'; installed "
                                          "binder plugins: dynamicresources, gpusharing, hamicore, volumebinding"):
        build("binder", "--binder-plugins", '{"nosuchplugin": {"arguments": {"x": "60"}}}')


@pytest.mark.parametrize(("value", "message"), [
    ('{"gpusharing": {"enabled": "yes"}}', "--binder-plugins: gpusharing.enabled: expected true or false, not 'yes'"),
    ('{"gpusharing": {"priority": 1.5}}', "--binder-plugins: gpusharing.priority: expected an integer"),
    ('{"gpusharing": {"enable": false}}', "--binder-plugins: gpusharing: unknown field.s. enable; the fields are "
                                          "enabled, priority, arguments"),
    ('{"gpusharing": {"arguments": ["x"]}}', "--binder-plugins: gpusharing.arguments: expected a mapping"),
    ('{"gpusharing": ', "--binder-plugins: not valid JSON"),
    ("gpusharing,volumes", "--binder-plugins: gpusharing,volumes: cannot read"),
])
def test_a_malformed_binder_plugin_configuration_is_an_error_naming_the_field(value, message):
    with pytest.raises(ValueError, match=message):
        build("binder", "--binder-plugins", value)


def test_bad_gpusharing_arguments_are_an_error_naming_them():
    with pytest.raises(PluginError, match=r"binder plugin 'gpusharing': invalid arguments .*: unknown argument.s. nm"):
        build_plugins(["gpusharing"], {"gpusharing": {"nmespace": "x"}}, NoKube())
    with pytest.raises(PluginError, match="allocationTimeout: 'soon' is not a duration"):
        build_plugins(["gpusharing"], {"gpusharing": {"allocationTimeout": "soon"}}, NoKube())
    with pytest.raises(PluginError, match="cdiEnabled: 'yes' is not a boolean"):
        build_plugins(["gpusharing"], {"gpusharing": {"cdiEnabled": "yes"}}, NoKube())


@pytest.mark.parametrize("name", ["binder", "podgrouper", "admission"])
def test_the_config_named_by_kai_config_is_watched_over_the_flags_and_none_without(name):
    component = build(name, "--kai-config", "other-config", "--gpu-sharing-enabled=false", "--cdi-enabled",
                      "--queue-label-key", "team")
    settings = component.settings
    assert settings.informers["config"].selectors == {"fieldSelector": "metadata.name=other-config"}
    assert "shard" not in settings.informers
    # built from the flags, which stay in force until the Config is listed
    config = {"spec": {"admission": {"gpuSharing": True}, "binder": {"cdiEnabled": False},
                       "global": {"queueLabelKey": "team/queue"}}}
    if name == "admission":
        assert not settings.value.gpu_sharing and settings.build(None, config).gpu_sharing
    elif name == "binder":
        assert [p.cdi for p in settings.value.plugins if p.name == "gpusharing"] == [True]
        assert [p.cdi for p in settings.build(None, config).plugins if p.name == "gpusharing"] == [False]
    else:
        assert settings.value.flags.config.queue_label_key == "team"
        assert settings.build(None, config).flags.config.queue_label_key == "team/queue"
    assert build(name, "--kai-config", "").settings is None


def test_the_config_s_status_is_reported_by_one_component_of_the_process():
    everything = [build(name) for name in ("scheduler", "binder", "podgrouper", "admission")]
    report_config_status(everything)
    assert [c.settings.report_config for c in everything[1:]] == [True, False, False]  # the binder's
    alone = [build("podgroup-controller"), build("admission")]
    report_config_status(alone)
    assert alone[1].settings.report_config
    report_config_status([build("scheduler", "--kai-config", "")])  # nothing takes the Config up: no one reports


def test_kai_s_operator_objects_are_created_unless_switched_off():
    assert _parser().parse_args([]).create_default_objects is True
    assert _parser().parse_args(["--create-default-objects=false"]).create_default_objects is False


def test_node_scale_adjuster_flags_and_kai_s_defaults():
    from kai.controllers import nodescaleadjuster
    from kai.run import OPT_IN

    adjuster = build("node-scale-adjuster")
    assert adjuster.name == "node-scale-adjuster"
    assert (adjuster.namespace, adjuster.app, adjuster.service_account, adjuster.memory_ratio,
            adjuster.scheduler_name) == ("kai-scale-adjust", "scaling-pod", "scaling-pod", 0.1, "kai-scheduler")
    assert adjuster.image == nodescaleadjuster.IMAGE
    adjuster = build("node-scale-adjuster", "--scale-adjust-namespace", "scale", "--scaling-pod-image", "img:1",
                     "--scaling-pod-app-label", "sp", "--scaling-pod-service-account", "",
                     "--gpu-memory-to-fraction-ratio", "0.25", "--scheduler-name", "other")
    assert (adjuster.namespace, adjuster.image, adjuster.app, adjuster.service_account, adjuster.memory_ratio,
            adjuster.scheduler_name) == ("scale", "img:1", "sp", "", 0.25, "other")
    # off unless named, as KAI's global.clusterAutoscaling
    assert OPT_IN == ("node-scale-adjuster",)
    assert "node-scale-adjuster" not in parse_components(_parser().parse_args([]).components)
    assert parse_components("scheduler,node-scale-adjuster") == ["scheduler", "node-scale-adjuster"]
