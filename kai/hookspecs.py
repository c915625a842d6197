"""Hook specifications of kai-scheduler.

Every hook name starts with ``kai_``. Returning ``None`` means "no opinion". Vetoes return a
:class:`kai.api.Reject` naming the plugin and the reason, never a bare ``False``.

Scheduling hooks are implemented by objects built from the ``kai.plugins`` entry-point group;
PodGrouper hooks by objects built from ``kai.podgroupers``. Each hook is documented in
``docs/plugins.md``; a test fails when one is missing there or has no test of its own.

The hot hooks (ordering, predicates, node scores, allocation events) are resolved once per session
into plain call lists (:class:`kai.framework.plugins.CallLists`); their call order is the order of
the plugins in the scheduler configuration.
"""

from __future__ import annotations

import pluggy

from kai import PROJECT

hookspec = pluggy.HookspecMarker(PROJECT)


# --- session life cycle ---------------------------------------------------------------------------


@hookspec
def kai_actions():
    """Return a mapping ``{action name: callable(session) -> None}`` of the actions this plugin offers.

    Called once when the plugin manager is built. The kernel offers ``allocate`` itself; the
    configuration's ``actions`` list says which actions run and in which order. Two providers of
    one action name are an error.
    """


@hookspec
def kai_session_open(session):
    """Called when a scheduling session opens, in configuration order, before any action runs.

    Plugins compute their per-session state here (fair shares, indexes) and may keep a reference
    to ``session``.
    """


@hookspec
def kai_session_close(session):
    """Called when the session closes, after every action ran and decisions were collected."""


# --- ordering (firstresult comparators: return <0, >0, or None for "equal / no opinion") ---------


@hookspec(firstresult=True)
def kai_job_order(session, left, right):
    """Compare two jobs of one leaf queue: negative when ``left`` goes first, positive when ``right``.

    The first plugin (in configuration order) returning a non-zero number decides; ``None`` or ``0``
    passes on. Fallback: creation time, then name.
    """


@hookspec(firstresult=True)
def kai_task_order(session, left, right):
    """Compare two tasks of one job (same conventions as :func:`kai_job_order`).

    Fallback: creation time, then name.
    """


@hookspec(firstresult=True)
def kai_podset_order(session, job, left, right):
    """Compare two pod sets of ``job`` for allocation (same conventions). Fallback: name."""


@hookspec(firstresult=True)
def kai_queue_order(session, left, right, left_job, right_job, left_victims, right_victims):
    """Compare two sibling queues, each represented by its best job (same conventions).

    ``left_victims``/``right_victims`` are the jobs already chosen as victims in that queue when the
    order is used for victim selection (else empty). Fallback: creation time, then name.
    """


# --- filtering (firstresult vetoes: return a Reject to veto, None to accept) ------------------------


@hookspec(firstresult=True)
def kai_pre_predicate(session, task, job):
    """Veto a task before any node is looked at (``Reject``), or ``None``."""


@hookspec(firstresult=True)
def kai_predicate(session, task, job, node):
    """Veto placing ``task`` on ``node`` (``Reject`` with the reason), or ``None`` to accept.

    Called only for nodes where the task's resources fit (idle + releasing); the first veto wins.
    """


@hookspec(firstresult=True)
def kai_job_over_capacity(session, job, tasks):
    """Veto allocating ``tasks`` of ``job`` because of queue capacity (limits, quota), or ``None``."""


@hookspec(firstresult=True)
def kai_task_over_capacity(session, task, job, node):
    """Veto placing ``task`` on ``node`` because its queue would go over a limit or quota, or ``None``.

    Asked by the ``predicates`` plugin for each candidate node of a GPU-memory request (its GPU quota
    depends on the node's device memory), and once per placement attempt with ``node=None`` for
    every other request.
    """


# --- eviction actions (reclaim, preempt, consolidation and the job solver) -------------------------


@hookspec(firstresult=True)
def kai_can_reclaim(session, job):
    """Veto ``job`` as a reclaimer (``Reject``), or ``None`` to let the reclaim action solve for it.

    Asked once per candidate job of the ``reclaim`` action, before any victim is looked at.
    """


@hookspec(firstresult=True)
def kai_victim_filter(session, action, preemptor, victim):
    """Veto the job ``victim`` as a victim of ``preemptor`` (``Reject``), or ``None`` to accept it.

    ``action`` is ``"reclaim"`` or ``"preempt"``. Asked while the action builds the victim queue of
    ``preemptor``, after the action's own rules (preemptible, other queue / same queue and lower
    priority, holds resources) have accepted ``victim``.
    """


@hookspec(firstresult=True)
def kai_scenario_validator(session, action, scenario):
    """Veto a solved scenario of ``action`` (``"reclaim"`` or ``"preempt"``) with a ``Reject``, or ``None``.

    ``scenario`` is a :class:`kai.framework.Scenario`: the preemptor, the tasks being placed,
    the victims evicted for good, the victim tasks moved elsewhere, and the victim jobs. It is asked
    after a simulation placed the preemptor's tasks; the session reflects the simulated state.
    """


@hookspec(firstresult=True)
def kai_queue_resources(session, queue):
    """Return ``(allocated, deserved, fair_share)`` of ``queue`` as :class:`kai.api.Resources`, or ``None``.

    Used for the queue lines of reclaim eviction messages. Units: CPU millicores, memory bytes,
    GPUs in devices; ``-1`` is unlimited.
    """


@hookspec
def kai_job_solution_start(session, job):
    """Called before the job solver looks for victims for ``job`` (reclaim, preempt, consolidation).

    Plugins may snapshot the state their scenario validator compares against.
    """


# --- node subsets (topology) -------------------------------------------------------------------


@hookspec
def kai_pre_job_allocation(session, job):
    """Called at the start of every allocation attempt of ``job`` -- by allocate and by the pipeline-only
    attempts of the eviction actions -- before its tasks are chosen. Plugins reset per-attempt state here.
    """


@hookspec
def kai_subset_nodes(session, job, group, pod_sets, tasks, nodes):
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
def kai_node_scores(session, task, nodes):
    """Score every candidate node of ``task`` at once.

    ``nodes`` is the list of nodes where the task fits. Return a sequence of floats of the same
    length (higher is better), or ``None``. The kernel sums the vectors of all plugins; ties go to
    the node name (byte order).
    """


@hookspec
def kai_gpu_scores(session, task, node, groups):
    """Score the devices of ``node`` a shared-GPU ``task`` could land on.

    ``groups`` lists the ids of the node's shared devices the task fits on, in the order they were
    opened, and ends with ``None`` when the node also has free devices nobody shares yet (one entry
    stands for all of them). Return a sequence of floats of the same length (higher is better), or
    ``None``. The kernel sums the vectors of all plugins; ties keep the order of ``groups``. Called only
    for tasks asking for a fraction or an amount of GPU memory.
    """


# --- allocation events ----------------------------------------------------------------------------


@hookspec
def kai_on_allocate(session, task, node):
    """Called after ``task`` was (virtually) placed on ``node`` -- allocated or pipelined -- and
    after an eviction of ``task`` was undone. Plugins keep their session state (queue usage) current.
    """


@hookspec
def kai_on_deallocate(session, task, node):
    """Called after ``task`` was (virtually) evicted from ``node``, or its placement undone."""


# --- pod grouping ---------------------------------------------------------------------------------
# Implemented by objects built from the ``kai.podgroupers`` entry-point group. The grouping hub
# (:class:`kai.grouping.hub.PodGrouperHub`) calls only the podgrouper it chose for a pod.


@hookspec
def kai_podgrouper_kinds():
    """Return the top-owner kinds this podgrouper groups, as ``(group, version, kind)`` tuples.

    Called once when the hub is built. The core group is ``""``. A version of ``"*"`` matches any
    version not claimed exactly by another podgrouper; ``("*", "*", "*")`` is the fallback for every
    kind nobody claims (the shipped ``default`` podgrouper). Two podgroupers claiming one tuple is an
    error naming both. A podgrouper returning nothing is reachable only by name (``hub.call``).
    """


@hookspec(firstresult=True)
def kai_podgroup_metadata(hub, top_owner, pod, owners):
    """Return the :class:`kai.api.podgroup.PodGroupMetadata` of ``pod``'s PodGroup.

    ``top_owner`` is the pod's top owner (a Kubernetes object map; the pod itself for a pod without
    owners; ``None`` only when a caller has none to give), ``owners`` the owner maps from the
    nearest to the top owner (empty for a bare pod). ``hub`` offers the default grouping rules
    (``hub.default_metadata``, ``hub.queue``, ``hub.priority_class``...), object lookups
    (``hub.get``, ``hub.list_pods``) and hand-over to another kind's podgrouper (``hub.dispatch``).
    Raise :class:`kai.api.podgroup.GroupingError` with KAI's message when the pod cannot be grouped.
    """
