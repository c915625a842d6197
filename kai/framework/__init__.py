"""The scheduling kernel: plugin manager, Session, Statement (the actions are in kai.actions).

Public names for plugins: :class:`Session`, :class:`Statement`, :class:`NodeInfo`,
:func:`placement_scores` (the compiled scoring loop), the gang helpers and the configuration types.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kai import _native
from kai.common.durations import format_duration, parse_duration
from kai.common.errors import ConfigError
from kai.framework.config import DEFAULT_CONFIG, PluginSpec, SchedulerConfig, load_config, parse_config
from kai.framework.gang import ROOT_GROUP, core_tasks, ordered_pod_sets, should_pipeline, tasks_to_allocate
from kai.framework.nodes import NodeInfo
from kai.framework.plugins import Plugins
from kai.framework.scenario import Scenario
from kai.framework.session import Session
from kai.framework.snapshot import Problem, Snapshot, build_snapshot
from kai.framework.statement import Decision, Statement
from kai.framework.usage import cluster_capacity, max_node_gpu_memory, memory_base, min_node_gpu_memory
from kai.plugin_loader import PluginError

if TYPE_CHECKING:  # a compiled module has the functions of its pure-Python twin
    from kai._native import division_py as _division
    from kai._native import nodefit_py as nodefit
    from kai._native import queueorder_py as _queueorder
else:
    _division, nodefit, _queueorder = _native.load("division"), _native.load("nodefit"), _native.load("queueorder")

placement_scores = nodefit.placement_scores
divide_tree = _division.divide_tree
divide_tree_explained = _division.divide_tree_explained
#: Texts of the reason codes ``divide_tree_explained`` returns.
FAIR_SHARE_REASONS = _division.REASONS
queue_order_compare = _queueorder.compare


def run_session(snapshot: Snapshot, plugins: Plugins, actions: Iterable[str] | None = None) -> Session:
    """Open a session on ``snapshot``, run the configured actions (or ``actions``), close it."""
    session = Session(snapshot, plugins).open()
    session.run_actions(actions)
    session.close()
    return session


__all__ = [
    "ROOT_GROUP",
    "DEFAULT_CONFIG", "FAIR_SHARE_REASONS", "ConfigError", "Decision", "NodeInfo", "PluginError", "PluginSpec",
    "Plugins", "Problem", "Scenario", "SchedulerConfig", "Session", "Snapshot", "Statement", "build_snapshot",
    "cluster_capacity", "divide_tree", "divide_tree_explained", "format_duration", "load_config", "memory_base",
    "max_node_gpu_memory", "min_node_gpu_memory", "ordered_pod_sets", "parse_config", "parse_duration",
    "placement_scores",
    "queue_order_compare", "run_session", "should_pipeline", "tasks_to_allocate", "core_tasks",
]
