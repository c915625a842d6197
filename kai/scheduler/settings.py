"""The scheduler's settings from its SchedulingShard and KAI's Config, prepared off the scheduling thread.

:func:`settings_builder` makes the ``build`` of :class:`kai.kube.kaiconfig.KaiObjects`: the shard laid over
the configuration of ``--config`` (:func:`kai.framework.shard.apply_shard`), and what the next cycle needs
of it -- the plugin set, the usage source, the period, the bind mode. Parts that did not change are reused, so a change
of the period alone does not rebuild the plugins; a plugin that rejects its arguments is an error here,
before anything is swapped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager

import attrs

from kai.api import names
from kai.framework import Plugins, SchedulerConfig
from kai.framework.shard import apply_shard
from kai.kube.kaiconfig import config_field
from kai.kube.views import JsonObject
from kai.logs import fields
from kai.scheduler.bindmode import DIRECT
from kai.usagedb import UsageSource, make_usage_source

log = logging.getLogger(__name__)

#: A factory of context managers timing each fetch of historical usage (a metric).
QueryTimer = Callable[[], AbstractContextManager[None]]


@attrs.define(frozen=True, eq=False)
class Settings:
    """What a cycle runs with: the plugin set (its ``config`` is the scheduler configuration), the usage
    source (None: no historical usage), the period between cycles, seconds, and how placed pods are bound."""

    plugins: Plugins
    usage: UsageSource | None
    period: float
    #: The ``app`` label of the binder's reservation pods (``binder.resourceReservation.appLabel``).
    reservation_app: str = names.RESERVATION_APP[1]
    #: ``scheduler.service.enabled`` of the Config: False stops the cycles (KAI's operator removes the scheduler).
    enabled: bool = True
    #: How placed pods are bound (:mod:`kai.scheduler.bindmode`).
    bind_mode: str = DIRECT


def settings_builder(base: SchedulerConfig, period: float, current: Callable[[], Settings],
                     query_timer: QueryTimer | None = None, reservation_app: str = names.RESERVATION_APP[1],
                     bind_mode: str = DIRECT) -> Callable[[JsonObject | None, JsonObject | None], Settings]:
    """``build(shard, kai_config)``: the settings of ``base``, ``period``, ``reservation_app`` and ``bind_mode``
    with the objects applied."""

    def build(shard: JsonObject | None, kai_config: JsonObject | None) -> Settings:
        applied = apply_shard(base, shard, kai_config)
        now = current()
        config = applied.config
        plugins = now.plugins if config == now.plugins.config else Plugins(config)
        usage = now.usage if config.usage_db == now.plugins.config.usage_db else \
            make_usage_source(config.usage_db, query_timer=query_timer)
        if applied.ignored:
            log.info("SchedulingShard fields this scheduler does not act on",
                     **fields(ignored=",".join(applied.ignored)))
        app = config_field(kai_config, "binder.resourceReservation.appLabel", str)
        enabled = config_field(kai_config, "scheduler.service.enabled", bool) is not False
        settings = Settings(plugins, usage, applied.schedule_period or period, app or reservation_app, enabled,
                            applied.bind_mode or bind_mode)
        return now if _same(settings, now) else settings

    return build


def _same(a: Settings, b: Settings) -> bool:
    return a.plugins is b.plugins and a.usage is b.usage and a.period == b.period and (
        a.reservation_app == b.reservation_app) and a.enabled == b.enabled and a.bind_mode == b.bind_mode
