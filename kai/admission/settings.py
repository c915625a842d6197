"""The pod webhooks' options from the ``admission`` section of KAI's ``Config kai-config``, over the flags.

:func:`policy_builder` makes the ``build`` of :class:`kai.kube.kaiconfig.KaiObjects`: each field the Config
sets replaces the flag's value (``gpuSharing``, ``blockNvidiaVisibleDevices``, ``gpuFractionRuntimeClassName``
and its deprecated spelling ``gpuPodRuntimeClassName``, which loses when both are set); a field it leaves
unset, or no Config, keeps the flag's.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import attrs

from kai.admission.pods import PodPolicy
from kai.kube.kaiconfig import config_field

#: A runtime class name is a DNS subdomain (the API server refuses a pod naming another).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
RUNTIME_CLASS_FIELDS = ("admission.gpuFractionRuntimeClassName", "admission.gpuPodRuntimeClassName")


def pod_policy(base: PodPolicy, kai_config: dict | None) -> PodPolicy:
    """``base`` (the flags) with the fields the Config sets; ValueError naming a malformed field."""
    changes: dict[str, object] = {}
    for path, attribute in (("admission.gpuSharing", "gpu_sharing"),
                            ("admission.blockNvidiaVisibleDevices", "block_visible_devices")):
        value = config_field(kai_config, path, bool)
        if value is not None:
            changes[attribute] = value
    for path in RUNTIME_CLASS_FIELDS:
        value = config_field(kai_config, path, str)
        if value is None:
            continue
        if value and (len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value)):
            raise ValueError(f"spec.{path}: {value!r} is not a runtime class name (a DNS subdomain)")
        changes["runtime_class"] = value
        break
    return attrs.evolve(base, **changes)  # type: ignore[arg-type]


def policy_builder(base: PodPolicy) -> Callable[[dict | None, dict | None], PodPolicy]:
    """``build(shard, kai_config)`` of the admission component (the shard is not read)."""
    return lambda _shard, kai_config: pod_policy(base, kai_config)
