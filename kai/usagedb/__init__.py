"""Where historical queue usage comes from, for time-based fair share: the sources and their I/O.

A driver (live loop, simulator) uses a source like this::

    source = make_usage_source(config.usage_db)   # None when not configured
    source.start()                                # background fetching, if the source has any
    ... every cycle:
        snapshot.usage = source.usage(snapshot.now)
        session = run_session(snapshot, plugins)
        source.record(session)                    # the in-process source learns from each cycle
    source.close()

Sources, by ``clientType`` (the configuration is :class:`kai.framework.usage.UsageDBConfig`):

* ``in-process`` (KAI's ``fake-with-history`` is read as the same): this scheduler's own
  allocations, recorded after every session (:mod:`kai.usagedb.inprocess`);
* ``prometheus``: KAI's queries against a Prometheus server (:mod:`kai.usagedb.prometheus`).
"""

from __future__ import annotations

import os
from typing import Protocol

from kai.common.errors import ConfigError
from kai.framework.usage import Usage, UsageDBConfig
from kai.usagedb.inprocess import InProcessUsage
from kai.usagedb.prometheus import PrometheusClient, UsageLister


class UsageSource(Protocol):
    def start(self) -> None: ...

    def usage(self, now: float) -> Usage: ...

    def record(self, session) -> None: ...

    def close(self) -> None: ...


def make_usage_source(config: UsageDBConfig | None, query_timer=None) -> UsageSource | None:
    """The source a configuration names (None without one). A missing connection variable is a ConfigError.

    ``query_timer``: for Prometheus, a factory of context managers timing each fetch (a metric).
    """
    if config is None:
        return None
    if config.client_type != "prometheus":
        return InProcessUsage(config.params)
    url = config.connection_string
    if config.connection_string_env_var:
        url = os.environ.get(config.connection_string_env_var, "")
        if not url:
            raise ConfigError(f"usageDBConfig: environment variable {config.connection_string_env_var} "
                              "(connectionStringEnvVar) is not set")
    return UsageLister(PrometheusClient(url, config.params), config.params, query_timer=query_timer)


__all__ = ["UsageSource", "make_usage_source"]
