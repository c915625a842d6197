"""Hook specifications of kai-scheduler.

Every hook name starts with ``kai_``. Returning ``None`` means "no opinion". Vetoes return a
:class:`kai.api.Reject` naming the plugin and the reason, never a bare ``False``.

Scheduling hooks are implemented by objects built from the ``kai.plugins`` entry-point group;
PodGrouper hooks by objects built from ``kai.podgroupers``. Each hook is documented in
``docs/plugins.md``; a test fails when one is missing there or has no test of its own. A plugin
implementing a hook not specified here (``optionalhook=True`` excepted), or declaring an argument the
hook's specification does not have, fails to load.

Each ``# ---`` section below is a family of hooks with a protocol of the same signatures in
:mod:`kai.sdk` (``ScoreHooks``, ``FilterHooks``, ...) for plugin authors' type checking.

The hot hooks (ordering, predicates, capacity, node subsets, scores, allocation events) are resolved
once per session into plain call lists (:class:`kai.framework.plugins.CallLists`) that the kernel
walks itself, in the order of the plugins in the scheduler configuration; their specs carry no
``firstresult``. ``firstresult`` marks only the hooks the kernel calls through pluggy
(``session.hook``) and whose first non-``None`` answer decides.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

from kai import PROJECT

if TYPE_CHECKING:
    from kai.api import Job, Member, PodSet, Queue, Reject, Resources, SubGroup, Task
    from kai.api.podgroup import PodGroupMetadata
    from kai.framework.nodes import NodeInfo
    from kai.framework.scenario import Scenario
    from kai.framework.session import Session
    from kai.grouping.hub import PodGrouperHub

hookspec = pluggy.HookspecMarker(PROJECT)


def unknown_hook(pm: pluggy.PluginManager) -> tuple[str, str] | None:
    """A plugin of ``pm`` implementing a hook no specification declares: ``(plugin name, what is wrong)``, or None.

    pluggy's ``check_pending`` finds it; implementations marked ``optionalhook=True`` are allowed. What is
    wrong reads ``unknown hook 'kai_node_score' (did you mean 'kai_node_scores'?)``.
    """
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        plugin = exc.plugin
        known = [name for name in vars(pm.hook) if not name.startswith("_") and getattr(pm.hook, name).has_spec()]
        for caller in pm.get_hookcallers(plugin) or ():
            if caller.has_spec() or all(i.optionalhook for i in caller.get_hookimpls() if i.plugin is plugin):
                continue
            close = difflib.get_close_matches(caller.name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return pm.get_name(plugin) or "?", f"unknown hook {caller.name!r}{hint}"
        raise
    return None


def unknown_argument(pm: pluggy.PluginManager, plugin: object) -> str | None:
    """What is wrong with a hook implementation of ``plugin`` declaring an argument its specification in ``pm``
    does not have, or None: ``hook 'kai_node_scores' has no argument 'tsk' (did you mean 'task'?)``."""
    for attr in dir(plugin):
        opts = pm.parse_hookimpl_opts(plugin, attr)
        if opts is None:
            continue
        hook = opts.get("specname") or attr
        caller = getattr(pm.hook, hook, None)
        if caller is None or caller.spec is None:
            continue
        spec_args = [*caller.spec.argnames, *caller.spec.kwargnames]
        for arg in pluggy.HookImpl(plugin, "", getattr(plugin, attr), opts).argnames:
            if arg not in spec_args:
                close = difflib.get_close_matches(arg, spec_args, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                return f"hook {hook!r} has no argument {arg!r}{hint}"
    return None


# --- session life cycle ---------------------------------------------------------------------------


@hookspec
def kai_actions() -> Mapping[str, Callable[[Session], None]] | None:
    """Return a mapping ``{action name: callable(session) -> None}`` of the actions this plugin offers.

    Called once when the plugin manager is built. The shipped actions (``allocate``, ...) come from the
    entry-point group ``kai.actions`` instead; the configuration's ``actions`` list says which actions
    run and in which order. Two providers of one action name are an error.
    """


@hookspec
def kai_session_open(session: Session) -> None:
    """Called when a scheduling session opens, in configuration order, before any action runs.

    Plugins compute their per-session state here (fair shares, indexes) and may keep a reference
    to ``session``. A plugin that raises here fails the cycle: the plugins opened so far are closed
    again and no action runs, since a plugin without its per-cycle state would decide wrongly.
    """


@hookspec
def kai_session_close(session: Session) -> None:
    """Called when the session closes, after every action ran and decisions were collected.

    A plugin that raises here is logged and recorded; the others still close and the decisions stand.
    """


@hookspec
def kai_session_job_added(session: Session, job: Job) -> Reject | None:
    """Called when a job arrives in an open session (:meth:`Session.add_job
    <kai.framework.session.Session.add_job>`), after it joined ``session.jobs``.

    Plugins whose session state depends on the jobs (queue requests and fair shares, indexes of pods
    with affinities) bring it up to date. A plugin whose state cannot take the job in place returns a
    :class:`kai.api.Reject`; the job is then taken out again and the driver opens a new session for it.
    """


# --- ordering (comparators: return <0, >0, or 0/None for "equal / no opinion") -------------------
# The kernel asks the plugins in configuration order and the first non-zero answer decides; a 0
# passes the decision on, which pluggy's firstresult would not do.


@hookspec
def kai_job_order(session: Session, left: Job, right: Job) -> int | None:
    """Compare two jobs of one leaf queue: negative when ``left`` goes first, positive when ``right``.

    The first plugin (in configuration order) returning a non-zero number decides; ``None`` or ``0``
    passes on. Fallback: creation time, then name.
    """


@hookspec
def kai_task_order(session: Session, left: Task, right: Task) -> int | None:
    """Compare two tasks of one job (same conventions as :func:`kai_job_order`).

    Fallback: creation time, then name.
    """


@hookspec
def kai_subgroup_order(session: Session, job: Job, left: Member, right: Member) -> int | None:
    """Compare two direct members (pod sets or subgroups) of one node of ``job``'s subgroup tree for
    allocation (same conventions; eviction takes them in the reverse order). Fallback: name."""


@hookspec
def kai_queue_order(session: Session, left: Queue, right: Queue, left_job: Job | None, right_job: Job | None,
                    left_victims: Sequence[Job], right_victims: Sequence[Job]) -> int | None:
    """Compare two sibling queues, each represented by its best job (same conventions).

    ``left_victims``/``right_victims`` are the jobs already chosen as victims in that queue when the
    order is used for victim selection (``left_job``/``right_job`` are then ``None``), else empty.
    Fallback: creation time, then name.

    Contract: the answer is an order (transitive, like comparing sort keys) and reads only the two
    queues, their subtrees' jobs and tasks, and state that changes only when a job arrives in the
    session. The kernel keeps siblings ordered between pops and compares a queue again only after a
    job of its subtree was taken or put back or one of their tasks moved.
    """


# --- filtering (vetoes: return a Reject to veto, None to accept) -----------------------------------
# The kernel asks the plugins in configuration order and the first Reject wins.


@hookspec
def kai_pre_predicate(session: Session, task: Task, job: Job) -> Reject | None:
    """Veto a task before any node is looked at (``Reject``), or ``None``."""


@hookspec
def kai_predicate(session: Session, task: Task, job: Job, node: NodeInfo) -> Reject | None:
    """Veto placing ``task`` on ``node`` (``Reject`` with the reason), or ``None`` to accept.

    Called only for nodes where the task's resources fit (idle + releasing); the first veto wins.
    """


@hookspec
def kai_nodes_alike(session: Session, task: Task, job: Job) -> bool | None:
    """Whether, for ``task`` (after its pre-predicates), this plugin's ``kai_predicate`` and ``kai_node_scores``
    see a node only through its node class: its allocatable, idle and releasing amounts and pod slots,
    schedulability, readiness, NoSchedule/NoExecute taints and GPU-count label; scores per node, or
    normalised by the minimum and maximum over the nodes given.

    When every plugin with a predicate or node scores answers ``True``, the kernel asks them about one
    node per class instead of every node. A plugin with either hook that does not implement this one
    keeps every node looked at.
    """


# --- capacity (vetoes, asked like the filters) -----------------------------------------------------


@hookspec
def kai_job_over_capacity(session: Session, job: Job, tasks: list[Task]) -> Reject | None:
    """Veto allocating ``tasks`` of ``job`` because of queue capacity (limits, quota), or ``None``."""


@hookspec
def kai_task_over_capacity(session: Session, task: Task, job: Job, node: NodeInfo | None) -> Reject | None:
    """Veto placing ``task`` on ``node`` because its queue would go over a limit or quota, or ``None``.

    Asked by the ``predicates`` plugin for each candidate node of a GPU-memory request (its GPU quota
    depends on the node's device memory), and once per placement attempt with ``node=None`` for
    every other request.
    """


# --- eviction actions (reclaim, preempt, consolidation and the job solver) -------------------------
# Called through pluggy (``session.hook``): firstresult, the first non-None answer decides.


@hookspec(firstresult=True)
def kai_can_reclaim(session: Session, job: Job) -> Reject | None:
    """Veto ``job`` as a reclaimer (``Reject``), or ``None`` to let the reclaim action solve for it.

    Asked once per candidate job of the ``reclaim`` action, before any victim is looked at.
    """


@hookspec(firstresult=True)
def kai_victim_filter(session: Session, action: str, preemptor: Job, victim: Job) -> Reject | None:
    """Veto the job ``victim`` as a victim of ``preemptor`` (``Reject``), or ``None`` to accept it.

    ``action`` is ``"reclaim"`` or ``"preempt"``. Asked while the action builds the victim queue of
    ``preemptor``, after the action's own rules (preemptible, other queue / same queue and lower
    priority, holds resources) have accepted ``victim``.
    """


@hookspec(firstresult=True)
def kai_scenario_validator(session: Session, action: str, scenario: Scenario) -> Reject | None:
    """Veto a solved scenario of ``action`` (``"reclaim"`` or ``"preempt"``) with a ``Reject``, or ``None``.

    ``scenario`` is a :class:`kai.framework.Scenario`: the preemptor, the tasks being placed,
    the victims evicted for good, the victim tasks moved elsewhere, and the victim jobs. It is asked
    after a simulation placed the preemptor's tasks; the session reflects the simulated state.
    """


@hookspec(firstresult=True)
def kai_queue_resources(session: Session, queue: Queue) -> tuple[Resources, Resources, Resources] | None:
    """Return ``(allocated, deserved, fair_share)`` of ``queue`` as :class:`kai.api.Resources`, or ``None``.

    Used for the queue lines of reclaim eviction messages. Units: CPU millicores, memory bytes,
    GPUs in devices; ``-1`` is unlimited.
    """


@hookspec
def kai_job_solution_start(session: Session, job: Job) -> None:
    """Called before the job solver looks for victims for ``job`` (reclaim, preempt, consolidation).

    Plugins may snapshot the state their scenario validator compares against.
    """


# --- node subsets (topology) -------------------------------------------------------------------


@hookspec
def kai_pre_job_allocation(session: Session, job: Job) -> None:
    """Called at the start of every allocation attempt of ``job`` -- by allocate and by the pipeline-only
    attempts of the eviction actions -- before its tasks are chosen. Plugins reset per-attempt state here.
    """


@hookspec
def kai_subset_nodes(session: Session, job: Job, group: SubGroup | PodSet, pod_sets: list[str], tasks: list[Task],
                     nodes: list[NodeInfo]) -> list[list[NodeInfo]] | None:
    """Split ``nodes`` into the node sets the ``tasks`` of ``group`` may be placed on, in the order to try them.

    ``group`` is the job's root (a :class:`kai.api.SubGroup` named ``""`` carrying ``job.topology``), one of
    its subgroups or one of its pod sets; ``pod_sets`` names every pod set under it, ``tasks`` are the tasks
    of this allocation step under it, ``nodes`` the node set (a list of :class:`NodeInfo`) its parent group
    is being tried on. Return a list of node lists, or ``None`` for no opinion (``[nodes]``); an empty list
    means nowhere -- record a job fit error saying why. Each plugin, in configuration order, splits every
    set the plugins before it returned. The kernel tries the sets in order, rolling back between them.
    """


# --- scoring (batched, summed) -----------------------------------------------------------------


@hookspec
def kai_node_scores(session: Session, task: Task, nodes: list[NodeInfo]) -> Sequence[float] | None:
    """Score every candidate node of ``task`` at once.

    ``nodes`` is the list of nodes where the task fits. Return a sequence of floats of the same
    length (higher is better), or ``None``. The kernel sums the vectors of all plugins; ties go to
    the node name (byte order).
    """


@hookspec
def kai_gpu_scores(session: Session, task: Task, node: NodeInfo, groups: list[str | None]) -> Sequence[float] | None:
    """Score the devices of ``node`` a shared-GPU ``task`` could land on.

    ``groups`` lists the ids of the node's shared devices the task fits on, in the order they were
    opened, and ends with ``None`` when the node also has free devices nobody shares yet (one entry
    stands for all of them). Return a sequence of floats of the same length (higher is better), or
    ``None``. The kernel sums the vectors of all plugins; ties keep the order of ``groups``. Called only
    for tasks asking for a fraction or an amount of GPU memory.
    """


# --- allocation events ----------------------------------------------------------------------------


@hookspec
def kai_on_allocate(session: Session, task: Task, node: NodeInfo) -> None:
    """Called after ``task`` was (virtually) placed on ``node`` -- allocated or pipelined -- and
    after an eviction of ``task`` was undone. Plugins keep their session state (queue usage) current.
    """


@hookspec
def kai_on_deallocate(session: Session, task: Task, node: NodeInfo) -> None:
    """Called after ``task`` was (virtually) evicted from ``node``, or its placement undone."""


# --- pod grouping ---------------------------------------------------------------------------------
# Implemented by objects built from the ``kai.podgroupers`` entry-point group. The grouping hub
# (:class:`kai.grouping.hub.PodGrouperHub`) calls only the podgrouper it chose for a pod, directly,
# never through pluggy.


@hookspec
def kai_podgrouper_kinds() -> Iterable[tuple[str, str, str]] | None:
    """Return the top-owner kinds this podgrouper groups, as ``(group, version, kind)`` tuples.

    Called once when the hub is built. The core group is ``""``. A version of ``"*"`` matches any
    version not claimed exactly by another podgrouper; ``("*", "*", "*")`` is the fallback for every
    kind nobody claims (the shipped ``default`` podgrouper). Two podgroupers claiming one tuple is an
    error naming both. A podgrouper returning nothing is reachable only by name (``hub.call``).
    """


@hookspec
def kai_podgroup_metadata(hub: PodGrouperHub, top_owner: dict[str, Any] | None, pod: dict[str, Any],
                          owners: list[dict[str, Any]]) -> PodGroupMetadata:
    """Return the :class:`kai.api.podgroup.PodGroupMetadata` of ``pod``'s PodGroup.

    ``top_owner`` is the pod's top owner (a Kubernetes object map; the pod itself for a pod without
    owners; ``None`` only when a caller has none to give), ``owners`` the owner maps from the
    nearest to the top owner (empty for a bare pod). ``hub`` offers the default grouping rules
    (``hub.default_metadata``, ``hub.queue``, ``hub.priority_class``...), object lookups
    (``hub.get``, ``hub.list_pods``) and hand-over to another kind's podgrouper (``hub.dispatch``).
    Raise :class:`kai.api.podgroup.GroupingError` with KAI's message when the pod cannot be grouped.
    """
    raise NotImplementedError  # a specification: never called, but its return type admits no None
