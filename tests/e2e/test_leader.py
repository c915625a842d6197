"""Two ``kai-scheduler run --leader-elect`` replicas of the scheduler (with a binder beside them):
only the lease holder schedules; after ``kill -9`` of the holder the other takes over once the
lease expires (lease duration, plus at most a retry period), and no pod is ever bound twice; after
SIGTERM the holder releases the lease and the standby, which watches it, leads within a second or two.

The replicas use a scheduler name of their own, so pods of other test modules are not theirs.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from kai.kube.client import ApiError, object_path
from support import manifests as m
from support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kai_chart")]

LEASE, RENEW, RETRY = 4.0, 3.0, 1.0
NAMESPACE = "kai-scheduler"


@pytest.fixture(scope="module")
def setup(kube):
    ns = f"e2e-le-{uuid.uuid4().hex[:6]}"
    m.apply(kube, m.namespace(ns))
    node = f"{ns}-n0"
    m.apply(kube, m.gpu_node(node, gpus=16, labels={"e2e": ns}))
    wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                           for c in kube.get(f"/api/v1/nodes/{node}").get("status", {}).get("conditions", [])),
               what="node Ready")
    return ns, f"kai-le-{uuid.uuid4().hex[:6]}"


def holder(kube, lease: str) -> str:
    try:
        return kube.get(object_path("coordination.k8s.io", "v1", "leases", NAMESPACE, lease))["spec"].get(
            "holderIdentity") or ""
    except ApiError as exc:
        if exc.status == 404:
            return ""
        raise


def submit(kube, ns, scheduler_name, name, pods):
    m.apply(kube, m.podgroup(ns, name, min_member=pods))
    names = [f"{name}-{i}" for i in range(pods)]
    for pod in names:
        m.apply(kube, m.pod(ns, pod, name, gpus=1, node_selector={"e2e": ns}, scheduler_name=scheduler_name))
    return names


def bound(kube, ns, names) -> bool:
    pods = {p["metadata"]["name"]: p for p in kube.get(f"/api/v1/namespaces/{ns}/pods").get("items", [])}
    return all(pods[n]["spec"].get("nodeName") for n in names)


def test_one_leader_schedules_and_a_standby_takes_over_after_kill_9(kube, setup, kai_run, component_kubeconfig):
    ns, scheduler_name = setup
    flags = ["--components=scheduler", f"--scheduler-name={scheduler_name}", "--leader-elect",
             f"--leader-elect-lease-duration={LEASE}s", f"--leader-elect-renew-deadline={RENEW}s",
             f"--leader-elect-retry-period={RETRY}s", "--log-format=json"]
    config = component_kubeconfig("scheduler")
    a = kai_run(flags, config, name="replica-a", env={"POD_NAME": "replica-a"})
    wait_until(lambda: holder(kube, scheduler_name).startswith("replica-a_"), what="replica-a leads")
    b = kai_run(flags, config, name="replica-b", env={"POD_NAME": "replica-b"})
    binder = kai_run(["--components=binder"], component_kubeconfig("binder"), name="binder")
    for process in (a, b, binder):
        wait_until(lambda process=process: process.get("/readyz")[0] == 200, what="ready")
    assert "standing by" in b.get("/readyz")[1]  # a standby is ready: healthy and able to take over
    assert b.get("/healthz")[0] == 200

    first = submit(kube, ns, scheduler_name, "first", 2)
    wait_until(lambda: bound(kube, ns, first), what="first job bound by the leader")
    assert '"msg":"scheduler started"' in a.log()
    assert '"msg":"scheduler started"' not in b.log() and '"msg":"cycle"' not in b.log()
    metrics = a.get("/metrics")[1]
    assert '\nkai_e2e_scheduling_latency_milliseconds{shard="default"} ' in metrics
    assert "\nprocess_cpu_seconds_total " in metrics
    assert ('kai_queue_fair_share_gpu{queue_display_name="",queue_metadata_name="default-queue",'
            'queue_name="default-queue",shard="default"}') in metrics

    a.kill()  # SIGKILL: no release, the lease must expire
    killed = time.monotonic()
    wait_until(lambda: holder(kube, scheduler_name).startswith("replica-b_"), timeout=LEASE + 10,
               what="replica-b takes over", interval=0.05)
    takeover = time.monotonic() - killed
    # The standby sees the last renewal through its watch (else at its next read, up to a retry period
    # late) and tries again when that expires: lease + a retry period, plus slack for a busy machine.
    assert takeover <= LEASE + RETRY + 1.0, f"took {takeover:.1f}s"

    second = submit(kube, ns, scheduler_name, "second", 2)
    wait_until(lambda: bound(kube, ns, second), what="second job bound by the new leader")
    assert '"msg":"scheduler started"' in b.log()

    def scheduled_events():
        events = kube.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
        return {pod: sum(1 for e in events if e["involvedObject"]["name"] == pod and e["reason"] == "Scheduled")
                for pod in first + second}

    # the plain pods are bound by the leader itself, each Scheduled event written after its Binding
    wait_until(lambda: all(scheduled_events()[p] for p in second), what="Scheduled events of the second job")
    assert set(scheduled_events().values()) <= {0, 1}  # one decision per pod (a kill may lose an event)
    binds_by_b = [line for line in b.log().splitlines() if '"msg":"bind"' in line]
    assert not [line for line in binds_by_b for p in first if f'"{ns}/{p}"' in line]  # not placed again
    assert not kube.get(object_path("scheduling.run.ai", "v1alpha2", "bindrequests", ns)).get("items")

    assert b.terminate() == 0, b.log()[-3000:]
    assert holder(kube, scheduler_name) == ""  # released on SIGTERM: the next replica need not wait
    assert binder.terminate() == 0
    for process in (a, b, binder):
        assert "Forbidden" not in process.log(), process.log()[-3000:]
    print(f"takeover after kill -9: {takeover:.2f}s (lease {LEASE:g}s, retry {RETRY:g}s)")


def test_sigterm_hands_the_lease_to_the_standby_within_seconds(kube, setup, kai_run, component_kubeconfig):
    """KAI's timings (15 s lease, 5 s retry period): the hand-off waits for neither."""
    ns, _ = setup
    scheduler_name = f"kai-term-{uuid.uuid4().hex[:6]}"
    flags = ["--components=scheduler", f"--scheduler-name={scheduler_name}", "--leader-elect", "--log-format=json"]
    config = component_kubeconfig("scheduler")
    binder = kai_run(["--components=binder", f"--scheduler-name={scheduler_name}"], component_kubeconfig("binder"),
                     name="term-binder")
    leader = kai_run(flags, config, name="term-0", env={"POD_NAME": "term-0"})
    wait_until(lambda: holder(kube, scheduler_name).startswith("term-0_"), what="term-0 leads")
    handoffs, replicas = [], [leader]
    for round_ in range(1, 4):
        standby = kai_run(flags, config, name=f"term-{round_}", env={"POD_NAME": f"term-{round_}"})
        replicas.append(standby)
        wait_until(lambda standby=standby: "standing by" in standby.get("/readyz")[1], what="a standby")
        wait_until(lambda leader=leader: '"msg":"scheduler started"' in leader.log(), what="the leader schedules")
        pods = submit(kube, ns, scheduler_name, f"term-{round_}", 2)  # work in flight while it stops
        leader.proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        wait_until(lambda round_=round_: holder(kube, scheduler_name).startswith(f"term-{round_}_"), timeout=30,
                   what=f"term-{round_} takes over", interval=0.02)
        handoffs.append(time.monotonic() - sent)
        assert leader.proc.wait(30) == 0, leader.log()[-3000:]
        assert '"msg":"released leader lease"' in leader.log()
        wait_until(lambda pods=pods: bound(kube, ns, pods), what="the job bound by one of them")
        leader = standby
    assert leader.terminate() == 0 and holder(kube, scheduler_name) == ""
    pods = [f"term-{r}-{i}" for r in range(1, 4) for i in range(2)]
    binds = [line for replica in replicas for line in replica.log().splitlines() if '"msg":"bind"' in line]
    assert all(sum(f'"{ns}/{pod}"' in line for line in binds) == 1 for pod in pods), binds  # one decision each
    assert binder.terminate() == 0
    print("hand-off after SIGTERM: " + ", ".join(f"{t:.2f}s" for t in handoffs) + " (lease 15s, retry period 5s)")
    # Well below the 5 s retry period: the standby saw the release through its watch instead of waiting
    # for its next read (which made this 5 s before it watched).
    assert max(handoffs) < 4.0, handoffs
