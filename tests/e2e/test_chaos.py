"""Chaos on the real control plane: a stream of ~200 pods while the components are killed, the API server
restarts and nodes vanish; afterwards the API must show that nothing was bound twice, no node gives out
more than it has, no pod was lost, no gang runs in part, every BindRequest is finished, no service lost
more pods to evictions than its PodDisruptionBudget allows, and a new workload still gets scheduled.

The scheduler, the binder (``--fake-gpu-nodes``) and the podgrouper run as separate ``kai-scheduler run``
processes under the chart's ServiceAccounts, with a scheduler name of this test's own; the mutating
webhook for shared-GPU pods is served in this process. A seed decides the workload and the fault times:
``KAI_CHAOS_SEED=<n>`` replays a run. Pods bound to a deleted node stay (nothing deletes them without a
pod garbage collector); they are counted apart and must not keep the rest of the cluster from scheduling.
"""

from __future__ import annotations

import heapq
import json
import os
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml

from kai.admission.webhook import MUTATE_PATH, AdmissionServer
from kai.binder.reservation import NAMESPACE as RESERVATION_NAMESPACE
from kai.kube.client import ApiError
from support import invariants as inv
from support import manifests as m
from support.chaos import SERVICE_LABEL, Job, Recorder, make_plan
from support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kai_chart")]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
SEED = int(os.environ.get("KAI_CHAOS_SEED", "1337"))
NODES, GPUS_PER_NODE = 8, 8
QUEUE_QUOTAS = {"a": 32, "b": 16, "c": 8}
STREAM_SECONDS = 35.0
#: Deadlines, not expectations: a healthy run settles within seconds of the stream's end.
SETTLE_SECONDS, PROBE_SECONDS = 45.0, 45.0
CONFIG = ("actions: allocate, consolidation, reclaim, preempt, stalegangeviction\n"
          "stalenessGracePeriodSeconds: 5\n")


def retrying(call, what: str, timeout: float = 30.0):
    """``call()``, again while the API server is away (connection refused, 5xx)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except ApiError as exc:
            if (exc.status and exc.status < 500) or time.monotonic() > deadline:
                raise AssertionError(f"{what}: {exc}") from exc
            time.sleep(0.3)


def list_all(kube, path: str, query: dict | None = None) -> list[dict]:
    items: list[dict] = []
    query = {"limit": 500, **(query or {})}
    while True:
        page = retrying(lambda: kube.get(path, query), f"list {path}")
        items += page.get("items") or []
        query["continue"] = (page.get("metadata") or {}).get("continue")
        if not query["continue"]:
            return items


def node_ready(kube, name: str) -> bool:
    conditions = (kube.get(f"/api/v1/nodes/{name}").get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def cluster(kube):
    """The test's namespace, nodes, queues and scheduler name; all removed afterwards."""
    ns = f"chaos-{uuid.uuid4().hex[:6]}"
    m.install(kube, DEPLOY)  # priority classes
    for name in (ns, RESERVATION_NAMESPACE):
        m.apply(kube, m.namespace(name))
    nodes = [f"{ns}-n{i}" for i in range(NODES)]
    for name in nodes:
        m.apply(kube, m.gpu_node(name, gpus=GPUS_PER_NODE, cpu="32", memory="128Gi", labels={"chaos": ns}))
    queues = []
    for suffix, quota in QUEUE_QUOTAS.items():
        body = m.queue(f"{ns}-{suffix}", gpu_quota=quota)
        body["metadata"]["labels"] = {"chaos": ns}
        m.apply(kube, body)
        queues.append(body["metadata"]["name"])
    for name in nodes:
        wait_until(lambda name=name: node_ready(kube, name), 30, f"node {name} Ready")
    yield {"namespace": ns, "nodes": nodes, "queues": queues, "scheduler": f"kai-chaos-{ns[-6:]}"}
    retrying(lambda: kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", body={"gracePeriodSeconds": 0}),
             "delete the pods")
    for label in ("chaos", "chaos-probe"):
        retrying(lambda label=label: kube.request("DELETE", "/api/v1/nodes", {"labelSelector": f"{label}={ns}"}),
                 "delete the nodes")
    for queue in queues:
        retrying(lambda queue=queue: kube.delete(f"{m.collection('Queue')}/{queue}"), "delete a queue")


@pytest.fixture(scope="module")
def webhook(kube, cluster, tmp_path_factory):
    """The mutating webhook for shared-GPU pods, for this namespace and scheduler name only."""
    ns, scheduler = cluster["namespace"], cluster["scheduler"]
    server = AdmissionServer("127.0.0.1:0", scheduler_name=scheduler, hosts=["127.0.0.1"],
                             cert_dir=str(tmp_path_factory.mktemp("chaos-certs"))).start()
    config = yaml.safe_load((DEPLOY / "admission-mutating-webhook.yaml").read_text())
    config["metadata"]["name"] = f"kai-admission-{ns}"
    hook = config["webhooks"][0]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{server.port}{MUTATE_PATH}", "caBundle": server.ca_bundle}
    hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    hook["matchConditions"] = [{"name": "chaos-pods", "expression": f"object.spec.schedulerName == '{scheduler}'"}]
    kube.post(WEBHOOKS, config)
    probe = m.pod(ns, "probe", "probe", annotations={"gpu-fraction": "0.5"}, scheduler_name=scheduler)

    def mutated() -> bool:
        try:
            out = kube.request("POST", f"/api/v1/namespaces/{ns}/pods", {"dryRun": "All"}, probe)
        except ApiError:
            return False
        return "runai/shared-gpu-configmap" in out["metadata"].get("annotations", {})

    wait_until(mutated, 30, "the mutating webhook in force")
    yield server
    retrying(lambda: kube.delete(f"{WEBHOOKS}/{config['metadata']['name']}"), "delete the webhook")
    server.stop()


class Components:
    """The scheduler, the binder and the podgrouper, each a ``kai-scheduler run`` process that can be
    killed and started again; every process started is kept for its log."""

    def __init__(self, kai_run, component_kubeconfig, scheduler_name: str, config: Path) -> None:
        common = [f"--scheduler-name={scheduler_name}", "--log-format=json"]
        self.args = {
            "scheduler": ["--components=scheduler", "--config", str(config), *common],
            "binder": ["--components=binder", "--fake-gpu-nodes", *common],
            "podgrouper": ["--components=podgrouper", *common],
        }
        self.kai_run, self.kubeconfig = kai_run, component_kubeconfig
        self.current: dict = {}
        self.started: dict[str, list] = {role: [] for role in self.args}

    def start(self, role: str) -> None:
        process = self.kai_run(self.args[role], self.kubeconfig(role), name=role)
        self.current[role] = process
        self.started[role].append(process)

    def kill(self, role: str) -> None:
        self.current.pop(role).kill()

    def evicted_in_logs(self) -> set[str]:
        """``namespace/name`` of the pods a scheduler logged evicting: a kill -9 between the eviction and its
        event loses the event, not the log line."""
        return {line["pod"] for line in self.logs("scheduler") if line.get("msg") == "evict" and "pod" in line}

    def logs(self, role: str) -> list[dict]:
        lines = []
        for process in self.started[role]:
            for line in process.log().splitlines():
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    lines.append({"msg": line})
        return lines


class Run:
    """Carries out a plan: creates the jobs at their times and injects the faults."""

    def __init__(self, kube, control_plane, cluster, components: Components, recorder: Recorder,
                 rng: random.Random) -> None:
        self.kube, self.control_plane, self.components, self.rng = kube, control_plane, components, rng
        self.recorder = recorder
        self.ns, self.scheduler = cluster["namespace"], cluster["scheduler"]
        self.nodes = cluster["nodes"]
        self.live_nodes = list(self.nodes)
        self.vanished: list[str] = []
        self.created: dict[str, str] = {}  # pod UID -> namespace/name
        self.faults: list[str] = []

    def create(self, job: Job, selector: dict | None = None) -> None:
        selector = selector or {"chaos": self.ns}
        if job.pin is not None:
            selector = {**selector, "kubernetes.io/hostname": self.nodes[job.pin]}
        common = dict(cpu=job.cpu, memory=job.memory, node_selector=selector, scheduler_name=self.scheduler,
                      priority_class=job.priority_class)
        if job.min_member:
            retrying(lambda: m.apply(self.kube, m.podgroup(self.ns, job.name, queue=job.queue,
                                                           min_member=job.min_member,
                                                           priority_class=job.priority_class)), "create a PodGroup")
        for name in job.pod_names():
            if job.fraction:
                body = m.pod(self.ns, name, job.name, annotations={"gpu-fraction": job.fraction}, **common)
            elif job.min_member:
                body = m.pod(self.ns, name, job.name, gpus=job.gpus, **common)
            else:
                labels = {"kai.scheduler/queue": job.queue, **({SERVICE_LABEL: job.service} if job.service else {})}
                body = m.pod(self.ns, name, gpus=job.gpus, labels=labels, **common)
            self._create_pod(body)

    def _create_pod(self, body: dict) -> None:
        path = m.collection("Pod", self.ns)
        name = body["metadata"]["name"]

        def post() -> dict:
            try:
                return self.kube.post(path, body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                return self.kube.get(f"{path}/{name}")  # made by an attempt whose reply was lost

        pod = retrying(post, f"create pod {name}")
        self.created[pod["metadata"]["uid"]] = f"{self.ns}/{name}"

    def fault(self, kind: str, pause: float, at: float, late: float) -> list[tuple[float, str]] | None:
        """Injects one fault, ``late`` seconds after its time; returns what to do later (restarts), or None to
        be asked again shortly (a node is deleted while pods are being bound to it: up to 5 s later; a component
        is killed once its restart after the last kill, still due when the run is late, is done)."""
        verb, _, target = kind.partition(" ")
        if verb == "kill" and target not in self.components.current:
            return None
        if verb == "kill":
            self.components.kill(target)
            self.faults.append(f"{at:5.1f}s kill -9 {target} (back after {pause:.1f}s)")
            return [(time.monotonic() + pause, target)]
        if verb == "restart":
            started = time.monotonic()
            self.control_plane.restart(target)
            self.faults.append(f"{at:5.1f}s restart {target} (down {time.monotonic() - started:.1f}s)")
        else:
            binding, bound = self.recorder.binding(), self.recorder.bound()
            if not any(binding[n] for n in self.live_nodes) and late < 5.0:
                return None
            # of the nodes pods are being bound to, the fullest: the most pods left behind
            node = max(self.live_nodes, key=lambda n: (binding[n] > 0, bound[n], self.rng.random()))
            retrying(lambda: self.kube.delete(f"/api/v1/nodes/{node}"), f"delete node {node}")
            self.live_nodes.remove(node)
            self.vanished.append(node)
            self.faults.append(f"{at + late:5.1f}s delete node {node} ({bound[node]} pods on it, "
                               f"{binding[node]} being bound to it)")
        return []

    def play(self, plan) -> float:
        """Runs the plan's timeline; returns its length in seconds."""
        start = time.monotonic()
        timeline = [(job.at, i, "job", job) for i, job in enumerate(plan.jobs)]
        timeline += [(f.at, len(plan.jobs) + i, "fault", f) for i, f in enumerate(plan.faults)]
        heapq.heapify(timeline)
        seq = len(timeline)
        while timeline:
            at, _, what, item = heapq.heappop(timeline)
            delay = start + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if what == "job":
                self.create(item)
            elif what == "fault":
                later = self.fault(item.kind, item.pause, item.at, time.monotonic() - start - item.at)
                if later is None:
                    later = [(time.monotonic() + 0.02, item)]
                for when, thing in later:
                    seq += 1
                    heapq.heappush(timeline, (when - start, seq, "fault" if thing is item else "start", thing))
            else:
                self.components.start(item)
        return time.monotonic() - start


class State:
    """What the API shows now, read once."""

    def __init__(self, kube, ns: str, nodes: list[str]) -> None:
        self.pods = list_all(kube, m.collection("Pod", ns))
        self.by_uid = {p["metadata"]["uid"]: p for p in self.pods}
        self.podgroups = {pg["metadata"]["name"]: pg for pg in list_all(kube, m.collection("PodGroup", ns))}
        self.bind_requests = list_all(kube, m.collection("BindRequest", ns))
        self.events = list_all(kube, f"/api/v1/namespaces/{ns}/events")
        node_set = set(nodes)
        self.nodes = [n for n in list_all(kube, "/api/v1/nodes") if n["metadata"]["name"] in node_set]
        # every pod on these nodes, whatever its namespace (GPU reservation pods hold devices too)
        self.pods_on_nodes = [p for p in list_all(kube, "/api/v1/pods") if inv.node_of(p) in node_set]


def failure_site(line: dict) -> str:
    """Where a logged exception was raised, and what it was: ``file:line in function: KeyError: 'x'``."""
    trace = (line.get("exception") or "").strip().splitlines()
    frames = [t.strip() for t in trace if t.strip().startswith("File ")]
    where = frames[-1] if frames else "?"
    if where.startswith('File "'):
        path, _, rest = where[len('File "'):].partition('", line ')
        number, _, function = rest.partition(", in ")
        where = f"{'/'.join(Path(path).parts[-2:])}:{number} in {function}"
    return f"{where}: {trace[-1] if trace else line.get('msg')}"


def bound_names(state: State) -> frozenset:
    return frozenset(p["metadata"]["name"] for p in state.pods if inv.node_of(p))


def test_chaos_nothing_bound_twice_nothing_overcommitted_nothing_lost(
        kube, control_plane, cluster, webhook, kai_run, component_kubeconfig, tmp_path_factory):
    began = time.monotonic()
    ns = cluster["namespace"]
    plan = make_plan(SEED, cluster["queues"], NODES, stream_seconds=STREAM_SECONDS)
    print(f"\nchaos seed {SEED} (KAI_CHAOS_SEED={SEED} replays it): {len(plan.jobs)} jobs, {plan.pods} pods, "
          f"{len(plan.faults)} faults")
    config = tmp_path_factory.mktemp("chaos") / "config.yaml"
    config.write_text(CONFIG)
    components = Components(kai_run, component_kubeconfig, cluster["scheduler"], config)
    for role in components.args:
        components.start(role)
    for role, process in components.current.items():
        wait_until(lambda process=process: process.get("/readyz")[0] == 200, 60, f"{role} ready")
    recorder = Recorder(kube, ns).start()
    run = Run(kube, control_plane, cluster, components, recorder, random.Random(SEED))
    for service, min_available in plan.budgets.items():
        m.apply(kube, m.pod_disruption_budget(ns, service, min_available, {SERVICE_LABEL: service}))

    stream = run.play(plan)

    # Settle: nothing being bound, the bound pods Running, the pending ones explained, no gang in part,
    # and no new binding for a few polls.
    settle_started = time.monotonic()
    history: list[frozenset] = []
    settled, moving = False, []
    while time.monotonic() - settle_started < SETTLE_SECONDS:
        state = State(kube, ns, run.live_nodes)
        history.append(bound_names(state))
        _, lost = inv.account_pods(run.created, state.by_uid, state.podgroups, state.events, set(run.live_nodes),
                                   components.evicted_in_logs(), recorder.nodes_seen)
        changed = history[-2] ^ history[-1] if len(history) > 1 else frozenset()
        moving = [*([f"bound pods changed: {sorted(changed)[:5]}"] if changed else []), *lost[:3],
                  *inv.unfinished_bind_requests(state.bind_requests)[:3],
                  *inv.partial_gangs(state.podgroups, state.pods, set(run.live_nodes),
                                     recorder.removed_from_vanished_nodes(set(run.live_nodes)))[:3]]
        if len(history) >= 4 and len(set(history[-4:])) == 1 and not moving:
            settled = True
            break
        time.sleep(1.0)
    settle = time.monotonic() - settle_started

    # The cluster still schedules: a gang and a single on a fresh node (preemptible, so that a queue's quota,
    # whatever the run left allocated, does not hold them back).
    probe_node = f"{ns}-probe"
    m.apply(kube, m.gpu_node(probe_node, gpus=GPUS_PER_NODE, labels={"chaos-probe": ns}))
    probe_started = time.monotonic()
    probe = Job("probe", 0, cluster["queues"][2], "train", 2, 2, 1, "250m", "512Mi")
    probe_single = Job("probe-single", 0, cluster["queues"][1], "train", 1, 0, 1, "250m", "512Mi")
    probe_pods = probe.pod_names() + probe_single.pod_names()
    for job in (probe, probe_single):
        run.create(job, selector={"chaos-probe": ns})

    def probe_running() -> bool:
        pods = {p["metadata"]["name"]: p for p in list_all(kube, m.collection("Pod", ns))}
        return all((pods.get(n, {}).get("status") or {}).get("phase") == "Running" for n in probe_pods)

    probe_ok = True
    try:
        wait_until(probe_running, PROBE_SECONDS, "new pods Running after the faults", interval=0.5)
    except AssertionError:
        probe_ok = False
    probe_seconds = time.monotonic() - probe_started
    recorder.stop()

    nodes = [*run.live_nodes, probe_node]
    state = State(kube, ns, nodes)
    scheduler_logs = components.logs("scheduler")
    evicted_logged = components.evicted_in_logs()
    counts, lost = inv.account_pods(run.created, state.by_uid, state.podgroups, state.events, set(nodes),
                                    evicted_logged, recorder.nodes_seen)
    failed_cycles = [line for line in scheduler_logs if line.get("msg") == "scheduling cycle failed"]
    refused = sum(1 for line in scheduler_logs if line.get("msg") == "eviction refused")
    exited = [f"{role} exited with {p.proc.poll()}" for role, p in components.current.items()
              if p.proc.poll() is not None]
    violations = {
        "no pod bound twice": inv.double_binds(recorder.nodes_seen, recorder.succeeded_on,
                                               inv.bound_event_counts(state.events), state.by_uid, recorder.names),
        "no node over-committed": inv.overcommitted_nodes(state.nodes, state.pods_on_nodes),
        "shared GPUs within their devices": inv.shared_gpu_violations(state.pods_on_nodes, set(nodes)),
        "no pod lost": lost,
        "no gang partly bound": inv.partial_gangs(state.podgroups, state.pods, set(nodes),
                                                  recorder.removed_from_vanished_nodes(set(nodes))),
        "no BindRequest left unfinished": inv.unfinished_bind_requests(state.bind_requests),
        "evictions within the budgets": inv.budget_overruns(plan, ns, inv.evicted_pods(state.events)),
        "new work scheduled after the faults": [] if probe_ok else [
            f"probe pods not Running after {PROBE_SECONDS:.0f}s: " + ", ".join(
                f"{p['metadata']['name']}={p['status'].get('phase')} on {inv.node_of(p) or '-'}"
                for p in state.pods if p["metadata"]["name"] in probe_pods),
            *sorted({f"{e['involvedObject']['name']}: {e['reason']}: {e['message']}" for e in state.events
                     if e["involvedObject"]["name"] in {*probe_pods, probe.name}})],
        "no scheduling cycle failed (log)": [f"{count} cycles failed at {where}" for where, count in
                                             Counter(map(failure_site, failed_cycles)).most_common()],
        "components alive (not killed by the test)": exited,
    }

    phases = Counter((p.get("status") or {}).get("phase") for p in state.pods)
    bound_events = sum(inv.bound_event_counts(state.events).values())
    summary = [
        f"chaos seed {SEED}: {len(plan.jobs)} jobs / {len(run.created)} pods created over {stream:.1f}s "
        f"(plan {STREAM_SECONDS:.0f}s); settled {'in' if settled else 'NOT within'} {settle:.1f}s; "
        f"probe {'Running' if probe_ok else 'NOT Running'} after {probe_seconds:.1f}s; "
        f"whole test {time.monotonic() - began:.0f}s",
        *([] if settled else ["still moving at the settle deadline:", *(f"  {line}" for line in moving)]),
        "faults:", *(f"  {line}" for line in run.faults),
        f"vanished nodes: {', '.join(run.vanished)} (PodGroups with a pod left there: "
        f"{len(inv.touching_vanished_nodes(state.pods, set(nodes)) & set(state.podgroups))})",
        "pods: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) +
        " | phases now: " + ", ".join(f"{k} {v}" for k, v in sorted(phases.items())),
        f"binds: {len(state.bind_requests)} BindRequests now ("
        + ", ".join(f"{k or 'no phase'} {v}" for k, v in sorted(
            Counter((b.get('status') or {}).get('phase', '') for b in state.bind_requests).items()))
        + f"), {bound_events} Bound events, {sum(len(v) for v in recorder.succeeded_on.values())} pods seen with a "
        f"Succeeded BindRequest; evictions: {len(inv.evicted_pods(state.events))} by event, "
        f"{len(evicted_logged)} logged, {refused} refused by a budget; {len(failed_cycles)} failed cycles",
        "invariants:", *(f"  [{'FAIL' if v else ' ok '}] {name}" + "".join(f"\n        {line}" for line in v[:10])
                         + (f"\n        ... {len(v) - 10} more" if len(v) > 10 else "")
                         for name, v in violations.items()),
    ]
    print("\n".join(summary))
    for process in components.current.values():
        if process.proc.poll() is None:
            process.terminate()
    assert not any(violations.values()), "\n".join(summary)
