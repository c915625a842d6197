"""The binder section of Config kai-config over the binder's flags, and the binder taking new plugins up between
binds."""

from __future__ import annotations

import pytest

from kai.binder.gpusharing import GpuSharing
from kai.binder.pluginconfig import PluginConfig
from kai.binder.settings import BinderFlags, build_chosen, chosen_plugins, plugins_builder
from kai.binder.volumebinding import VolumeBinding
from kai.common.errors import ConfigError

RESERVATION = {"namespace": "kai-resource-reservation", "appLabel": "kai-resource-reservation",
               "serviceAccount": "kai-resource-reservation", "allocationTimeout": 40.0, "fakeGpuNodes": True}
FLAGS = BinderFlags({}, False, RESERVATION)


def config(**binder) -> dict:
    return {"apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"},
            "spec": {"binder": binder}}


def test_without_a_config_the_flags_choose_the_plugins():
    assert chosen_plugins(FLAGS, None) == chosen_plugins(FLAGS, config()) == [
        ("volumebinding", {"bindTimeoutSeconds": "120"}), ("dynamicresources", {"bindTimeoutSeconds": "120"}),
        ("gpusharing", {**RESERVATION, "cdiEnabled": "false"})]


def test_cdi_and_the_volume_binding_timeout_set_the_default_arguments():
    chosen = dict(chosen_plugins(FLAGS, config(cdiEnabled=True, volumeBindingTimeoutSeconds=30)))
    assert chosen["volumebinding"] == chosen["dynamicresources"] == {"bindTimeoutSeconds": "30"}
    assert chosen["gpusharing"]["cdiEnabled"] == "true"
    # the flag's cdi stays when the Config does not set it
    assert dict(chosen_plugins(BinderFlags({}, True, RESERVATION), config()))["gpusharing"]["cdiEnabled"] == "true"


def test_the_config_plugins_are_laid_over_the_flag_plugins():
    flags = BinderFlags({"volumebinding": PluginConfig(enabled=False), "gpusharing": PluginConfig(priority=500)},
                        False, RESERVATION)
    assert [name for name, _ in chosen_plugins(flags, None)] == ["gpusharing", "dynamicresources"]
    chosen = chosen_plugins(flags, config(cdiEnabled=True, plugins={
        "volumebinding": {"enabled": True, "priority": 900}, "gpusharing": {"arguments": {"appLabel": "x"}}}))
    assert [name for name, _ in chosen] == ["volumebinding", "gpusharing", "dynamicresources"]
    # arguments given replace the defaults; cdiEnabled left out comes from binder.cdiEnabled, as KAI's operator does
    assert chosen[1][1] == {**RESERVATION, "appLabel": "x", "cdiEnabled": "true"}


def test_resource_reservation_fields_become_the_gpusharing_arguments():
    chosen = dict(chosen_plugins(FLAGS, config(resourceReservation={
        "namespace": "rr", "appLabel": "reserve", "serviceAccountName": "sa", "allocationTimeout": 25,
        "runtimeClassName": "nvidia"})))
    assert chosen["gpusharing"] == {**RESERVATION, "namespace": "rr", "appLabel": "reserve", "serviceAccount": "sa",
                                    "allocationTimeout": "25s", "runtimeClass": "nvidia", "cdiEnabled": "false"}
    plugin = build_chosen(list(chosen.items()), None).plugins[2]
    assert isinstance(plugin, GpuSharing)
    assert (plugin.reservations.namespace, plugin.reservations.app, plugin.reservations.timeout) == ("rr", "reserve",
                                                                                                      25.0)


def test_reservation_pod_objects_come_from_the_config_and_the_container_falls_back_to_the_global_context():
    resources = {"requests": {"cpu": "5m"}}
    pod_context, global_context = {"runAsNonRoot": True}, {"readOnlyRootFilesystem": True}
    with_global = config(resourceReservation={"podResources": resources, "reservationPodSecurityContext": pod_context})
    with_global["spec"]["global"] = {"securityContext": global_context}
    chosen = dict(chosen_plugins(FLAGS, with_global))
    assert chosen["gpusharing"]["podResources"] == resources
    assert chosen["gpusharing"]["podSecurityContext"] == pod_context
    assert chosen["gpusharing"]["containerSecurityContext"] == global_context
    own = {"allowPrivilegeEscalation": False}
    with_global["spec"]["binder"]["resourceReservation"]["reservationContainerSecurityContext"] = own
    chosen = dict(chosen_plugins(FLAGS, with_global))
    assert chosen["gpusharing"]["containerSecurityContext"] == own


@pytest.mark.parametrize(("binder", "message"), [
    ({"resourceReservation": {"podResources": "cpu=1"}},
     "spec.binder.resourceReservation.podResources: expected a mapping"),
    ({"cdiEnabled": "yes"}, "spec.binder.cdiEnabled: expected true or false"),
    ({"volumeBindingTimeoutSeconds": 0}, "spec.binder.volumeBindingTimeoutSeconds: must be positive"),
    ({"resourceReservation": {"allocationTimeout": "40s"}},
     "spec.binder.resourceReservation.allocationTimeout: expected a whole number"),
    ({"resourceReservation": {"appLabel": 7}}, "spec.binder.resourceReservation.appLabel: expected a string"),
    ({"plugins": {"gpusharing": {"priority": "high"}}}, "spec.binder.plugins: gpusharing.priority"),
    ({"plugins": ["gpusharing"]}, "spec.binder.plugins: expected a mapping"),
])
def test_a_malformed_field_is_an_error_naming_it(binder, message):
    with pytest.raises((ValueError, ConfigError), match="^" + message):
        chosen_plugins(FLAGS, config(**binder))


def test_the_builder_keeps_unchanged_plugins_and_names_the_field_of_a_plugin_that_cannot_be_built():
    kube = None  # the plugins keep their client for later calls; none is made here
    initial = build_chosen(chosen_plugins(FLAGS, None), kube)
    current = [initial]
    build = plugins_builder(FLAGS, kube, lambda: current[0])
    assert build(None, config()) is initial
    changed = build(None, config(resourceReservation={"appLabel": "other"}))
    volumes, claims, sharing = changed.plugins
    assert volumes is initial.plugins[0] and isinstance(volumes, VolumeBinding)
    assert claims is initial.plugins[1]
    assert sharing is not initial.plugins[2] and sharing.reservations.app == "other"
    with pytest.raises(ConfigError, match=r"^spec.binder: .*nosuchplugin"):
        build(None, config(plugins={"nosuchplugin": {}}))
    with pytest.raises(ConfigError, match=r"^spec.binder: .*bindTimeoutSeconds must be a number"):
        build(None, config(plugins={"volumebinding": {"arguments": {"bindTimeoutSeconds": "soon"}}}))
