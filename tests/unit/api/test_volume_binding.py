"""kube-scheduler's VolumeBinding rules (kai.api.storage) and the predicates plugin applying them in a session."""

from __future__ import annotations

import kai.testing as kt
from kai.api import LabelRequirement, LabelSelector
from kai.api.selectors import NodeSelectorTerm
from kai.api.storage import (
    BIND_CONFLICT,
    NODE_CONFLICT,
    NOT_ENOUGH_SPACE,
    PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
    WAIT_FOR_FIRST_CONSUMER,
    Claim,
    PodClaim,
    Storage,
    StorageCapacity,
    StorageClass,
    Volume,
    claims_problem,
    classify,
    find_matching_volume,
    node_reasons,
)

GI = float(2**30)
LOCAL = StorageClass("local", "kubernetes.io/no-provisioner", WAIT_FOR_FIRST_CONSUMER)
CSI = StorageClass("csi", "csi.example.com", WAIT_FOR_FIRST_CONSUMER)
IMMEDIATE = StorageClass("fast", "csi.example.com", "Immediate")
RWO = ("ReadWriteOnce",)


def on_host(host: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm((LabelRequirement("kubernetes.io/hostname", "In", (host,)),)),)


def labels(host: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": host}


def claim(name="data", cls="local", size=GI, **fields) -> Claim:
    return Claim("default", name, uid=f"uid-{name}", storage_class=cls, request=size, access_modes=RWO, **fields)


def pv(name, host=None, cls="local", size=GI, **fields) -> Volume:
    fields.setdefault("phase", "Available")
    return Volume(name, cls, size, RWO, node_affinity=on_host(host) if host else None, **fields)


DATA = (PodClaim("data"),)


def reasons(storage: Storage, node: str, refs=DATA, taken=()) -> list[str]:
    return node_reasons(classify(refs, "default", storage), node, labels(node), storage, taken)


# --- pre-filter ---------------------------------------------------------------------------------------


def test_a_missing_claim_is_named_as_kube_scheduler_names_it():
    storage = Storage.of([claim("other")])
    assert claims_problem((PodClaim("data"),), "default", "p", storage) == 'persistentvolumeclaim "data" not found'
    assert claims_problem((PodClaim("p-scratch", True, "pod-uid"),), "default", "p", storage) == (
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch"')


def test_deleted_lost_and_foreign_ephemeral_claims_keep_the_pod_pending():
    assert claims_problem((PodClaim("data"),), "default", "p", Storage.of([claim(deleting=True)])) == (
        'persistentvolumeclaim "data" is being deleted')
    lost = Storage.of([claim(phase="Lost", volume_name="gone")])
    assert claims_problem((PodClaim("data"),), "default", "p", lost) == (
        'persistentvolumeclaim "data" bound to non-existent persistentvolume "gone"')
    foreign = Storage.of([claim("p-scratch", controller_pod="someone-else")])
    assert claims_problem((PodClaim("p-scratch", True, "pod-uid"),), "default", "p", foreign) == (
        "PVC default/p-scratch was not created for pod default/p (pod is not owner)")
    own = Storage.of([claim("p-scratch", controller_pod="pod-uid")])
    assert claims_problem((PodClaim("p-scratch", True, "pod-uid"),), "default", "p", own) is None


def test_claims_are_sorted_into_bound_delayed_and_immediate():
    storage = Storage.of([claim("a", volume_name="pv-a", bind_completed=True), claim("b"), claim("c", cls="fast"),
                          claim("d", cls="missing"), claim("e", volume_name="pv-e")], classes=[LOCAL, IMMEDIATE])
    sorted_ = classify([PodClaim(n) for n in "abcde"], "default", storage)
    assert [c.name for c in sorted_.bound] == ["a"]
    assert [c.name for c in sorted_.delayed] == ["b"]
    assert [c.name for c in sorted_.immediate] == ["c", "d", "e"]  # e is pre-bound, not yet bound


# --- bound claims -------------------------------------------------------------------------------------


def test_a_bound_volumes_node_affinity_restricts_the_nodes():
    storage = Storage.of([claim(volume_name="pv-b", bind_completed=True)], [pv("pv-b", "node-b")], [LOCAL])
    assert reasons(storage, "node-a") == [NODE_CONFLICT]
    assert reasons(storage, "node-b") == []


def test_a_claim_bound_to_a_missing_volume_fits_no_node():
    storage = Storage.of([claim(volume_name="gone", bind_completed=True)], [], [LOCAL])
    assert reasons(storage, "node-a") == [PV_NOT_EXIST]


def test_match_fields_on_the_node_name_count():
    by_name = (NodeSelectorTerm(fields=(LabelRequirement("metadata.name", "In", ("node-b",)),)),)
    storage = Storage.of([claim(volume_name="pv-b", bind_completed=True)],
                         [Volume("pv-b", "local", GI, RWO, node_affinity=by_name)], [LOCAL])
    assert reasons(storage, "node-a") == [NODE_CONFLICT]
    assert reasons(storage, "node-b") == []


# --- WaitForFirstConsumer: static volumes ---------------------------------------------------------------


def test_a_delayed_claim_needs_an_available_matching_volume_on_the_node():
    storage = Storage.of([claim()], [pv("pv-b", "node-b")], [LOCAL])
    assert reasons(storage, "node-a") == [BIND_CONFLICT]
    assert reasons(storage, "node-b") == []
    assert reasons(storage, "node-b", taken={"pv-b"}) == [BIND_CONFLICT]


def test_the_smallest_volume_that_matches_class_size_modes_and_selector_is_chosen():
    c = claim(size=2 * GI, selector=LabelSelector((("tier", "gold"),)))
    volumes = [
        pv("small", size=GI, labels={"tier": "gold"}),
        pv("wrong-class", cls="other", size=2 * GI, labels={"tier": "gold"}),
        pv("wrong-mode", size=2 * GI, labels={"tier": "gold"}, volume_mode="Block"),
        Volume("rox", "local", 2 * GI, ("ReadOnlyMany",), labels={"tier": "gold"}, phase="Available"),
        pv("unlabelled", size=2 * GI),
        pv("taken", size=2 * GI, labels={"tier": "gold"}, claim_ref=("other", "x", "u")),
        pv("released", size=2 * GI, labels={"tier": "gold"}, phase="Released"),
        pv("big", size=8 * GI, labels={"tier": "gold"}),
        pv("fit", size=3 * GI, labels={"tier": "gold"}),
    ]
    assert find_matching_volume(c, volumes, "n", {}).name == "fit"
    assert find_matching_volume(c, volumes, "n", {}, excluded={"fit"}).name == "big"


def test_a_volume_pre_bound_to_the_claim_wins_when_reachable():
    c = claim()
    prebound = pv("mine", "node-b", size=10 * GI, claim_ref=("default", "data", ""), phase="Bound")
    volumes = [pv("free", size=GI), prebound]
    assert find_matching_volume(c, volumes, "node-b", labels("node-b")).name == "mine"
    assert find_matching_volume(c, volumes, "node-a", labels("node-a")).name == "free"


# --- WaitForFirstConsumer: dynamic provisioning -------------------------------------------------------


def test_a_class_with_a_provisioner_fits_any_node_it_reaches():
    zoned = StorageClass("csi", "csi.example.com", WAIT_FOR_FIRST_CONSUMER, on_host("node-b"))
    assert reasons(Storage.of([claim(cls="csi")], [], [CSI]), "node-a") == []
    assert reasons(Storage.of([claim(cls="csi")], [], [zoned]), "node-a") == [BIND_CONFLICT]
    assert reasons(Storage.of([claim(cls="csi")], [], [zoned]), "node-b") == []


def test_a_claim_with_a_selected_node_fits_only_that_node():
    storage = Storage.of([claim(cls="csi", selected_node="node-b")], [], [CSI])
    assert reasons(storage, "node-a") == [BIND_CONFLICT]
    assert reasons(storage, "node-b") == []


def test_capacity_is_checked_only_for_drivers_that_publish_it():
    capacity = StorageCapacity("csi", LabelSelector((("kubernetes.io/hostname", "node-b"),)), 5 * GI)
    untracked = Storage.of([claim(cls="csi", size=10 * GI)], [], [CSI], [capacity])
    assert reasons(untracked, "node-a") == []
    tracked = Storage.of([claim(cls="csi", size=4 * GI)], [], [CSI], [capacity], ["csi.example.com"])
    assert reasons(tracked, "node-a") == [NOT_ENOUGH_SPACE]
    assert reasons(tracked, "node-b") == []
    too_big = Storage.of([claim(cls="csi", size=10 * GI)], [], [CSI], [capacity], ["csi.example.com"])
    assert reasons(too_big, "node-b") == [NOT_ENOUGH_SPACE]
    capped = StorageCapacity("csi", LabelSelector((("kubernetes.io/hostname", "node-b"),)), 50 * GI, 2 * GI)
    assert reasons(Storage.of([claim(cls="csi", size=4 * GI)], [], [CSI], [capped], ["csi.example.com"]),
                   "node-b") == [NOT_ENOUGH_SPACE]


# --- in a session -------------------------------------------------------------------------------------


def nodes():
    return [kt.node("node-a", labels=labels("node-a")), kt.node("node-b", labels=labels("node-b"))]


def test_a_pod_with_a_local_volume_claim_goes_to_the_volumes_node():
    storage = Storage.of([claim()], [pv("pv-b", "node-b")], [LOCAL])
    job = kt.job("app", tasks=[kt.task("app-0", claims=(PodClaim("data"),))])
    session = kt.run(kt.cluster(nodes=nodes(), jobs=[job], storage=storage))
    assert kt.placements(session) == {"app-0": "node-b"}


def test_two_pods_do_not_take_the_same_static_volume():
    storage = Storage.of([claim("d0"), claim("d1")], [pv("pv-b", "node-b")], [LOCAL])
    jobs = [kt.job(f"app{i}", tasks=[kt.task(f"app{i}-0", claims=(PodClaim(f"d{i}"),))], creation=i)
            for i in range(2)]
    session = kt.run(kt.cluster(nodes=nodes(), jobs=jobs, storage=storage))
    assert kt.placements(session) == {"app0-0": "node-b"}
    assert kt.fit_error(session, "app1-0") == f"no nodes with enough resources were found: 2 {BIND_CONFLICT}."


def test_a_pod_naming_a_missing_claim_stays_pending_with_the_message():
    job = kt.job("app", tasks=[kt.task("app-0", claims=(PodClaim("nope"),))])
    session = kt.run(kt.cluster(nodes=nodes(), jobs=[job], storage=Storage.of([], [], [LOCAL])))
    assert kt.placements(session) == {}
    assert kt.fit_error(session, "app-0") == ("Scheduling conditions were not met for pod default/app-0:\n"
                                              'VolumeBinding: persistentvolumeclaim "nope" not found.\n')


def test_an_unbound_immediate_claim_keeps_the_pod_pending():
    job = kt.job("app", tasks=[kt.task("app-0", claims=(PodClaim("data"),))])
    session = kt.run(kt.cluster(nodes=nodes(), jobs=[job], storage=Storage.of([claim(cls="fast")], [], [IMMEDIATE])))
    assert kt.placements(session) == {}
    assert kt.fit_error(session, "app-0") == ("Scheduling conditions were not met for pod default/app-0:\n"
                                              f"VolumeBinding: {UNBOUND_IMMEDIATE}.\n")


def test_a_bound_claim_keeps_the_pod_off_nodes_its_volume_cannot_reach():
    storage = Storage.of([claim(volume_name="pv-a", bind_completed=True)], [pv("pv-a", "node-a")], [LOCAL])
    job = kt.job("app", tasks=[kt.task("app-0", claims=(PodClaim("data"),))])
    session = kt.run(kt.cluster(nodes=nodes(), jobs=[job], storage=storage))
    assert kt.placements(session) == {"app-0": "node-a"}
