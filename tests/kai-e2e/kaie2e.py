"""KAI's own e2e suites (Go, ginkgo) against ``kai-scheduler run``: ``tox -e kai-e2e [-- ARGS]`` (docs/kai-e2e.md).

1. KAI's source at the pinned commit is put in the cache (:mod:`kaisource`). Each suite that is not
   excluded is compiled once with ``go test -c``.
2. A private control plane (:class:`~kai.dev.controlplane.ControlPlane`) gets what KAI's e2e cluster
   has: the CRDs, default queues and priority classes of ``deploy/``, kwok nodes like KAI's kind workers
   (8 fake GPUs of 11441 MiB each, DRA workers publishing 8 GPUs as DRA devices with the fake GPU driver's
   DeviceClass, a CPU node, a tainted control-plane node; Job pods run until deleted), the admission
   webhooks, and a stand-in Deployment per KAI component -- the suites wait for pods labeled ``app=binder``
   and ``app=kai-scheduler-default`` to run; kwok runs them on the control-plane node, and their replicas
   follow ``Config kai-config`` as KAI's operator's do -- while the components themselves run as one
   ``kai-scheduler run --fake-gpu-nodes`` process, which creates ``Config kai-config`` and ``SchedulingShard
   default`` as it does on any install.
3. Each suite runs with a JSON report and a timeout (a budget per spec that will run, capped per
   suite); :mod:`kaisuites` counts and classifies. The table goes to stdout, the details to
   ``results.md`` and ``results.json`` in the output folder, with each suite's log.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path

from kaisource import KAI_COMMIT, KaiE2EError, cache_dir, kai_source, log
from kaisuites import (
    Catalogue,
    ExclusionsError,
    SuiteResult,
    details,
    ginkgo_args,
    load_catalogue,
    read_report,
    summarize,
    table,
)

from kai.admission.webhook import MUTATE_PATH, PODGROUP_PATH, QUEUE_PATH, TOPOLOGY_PATH, VALIDATE_PATH
from kai.api.names import SCHEDULER_NAME
from kai.common.durations import parse_duration
from kai.common.yamlfile import read_yaml
from kai.dev import dradevices
from kai.dev.controlplane import ControlPlane, free_ports
from kai.dev.gobuild import ControlPlaneError, MissingToolError, go_command, go_environment
from kai.kube.certs import serving_certificate
from kai.kube.client import ApiError, Kube
from support import manifests as m

HERE = Path(__file__).resolve().parent

SUITES_DIR = "test/e2e/suites"
SYSTEM_NAMESPACE = "kai-scheduler"
RESERVATION_NAMESPACE = "kai-resource-reservation"
#: KAI's Deployments, each with pods labeled ``app=<name>``, and the section of ``Config kai-config`` whose
#: ``service.enabled`` turns it on and off; the suites wait for some of them to run or to go away.
STAND_INS = {"admission": "admission", "binder": "binder", "kai-scheduler-default": "scheduler",
             "pod-grouper": "podGrouper", "podgroup-controller": "podGroupController",
             "queue-controller": "queueController"}
CONTROL_PLANE_NODE = "kai-e2e-control-plane"
#: Labels of KAI's kind GPU workers (hack/e2e-kind-config.yaml) and what the fake GPU operator adds.
GPU_NODE_LABELS = {
    "run.ai/simulated-gpu-node-pool": "default",
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.memory": "11441",
    "nvidia.com/gpu.product": "Tesla-K80",
}
#: The admission's argument KAI's operator sets from the Config's ``admission.blockNvidiaVisibleDevices``.
BLOCK_VISIBLE_DEVICES_ARG = "--block-nvidia-visible-devices=true"
#: Each node's ephemeral storage (a kind node reports its disk's).
EPHEMERAL_STORAGE = "100Gi"
#: Labels of KAI's kind DRA workers (hack/generate-kind-config.sh, feature config dra-enabled).
DRA_NODE_LABELS = {"run.ai/simulated-gpu-node-pool": "default", "nvidia.com/gpu.deploy.dra-plugin-gpu": "true"}


# -- KAI's suites, compiled ---------------------------------------------------------------------------
def discover_suites(source: Path) -> list[str]:
    """The suites of KAI's source: folders under test/e2e/suites whose tests call ginkgo's RunSpecs."""
    base = source / SUITES_DIR
    found = {p.parent.relative_to(base).as_posix() for p in base.rglob("*_test.go") if "RunSpecs(" in p.read_text()}
    return sorted(found)


def binary_name(suite: str) -> str:
    return suite.replace("/", "__") + ".test"


def build_suites(root: Path, source: Path, suites: list[str], commit: str = KAI_COMMIT) -> dict[str, Path]:
    """Each suite compiled with ``go test -c`` once per commit; the paths of the test binaries."""
    bin_dir = root / "bin" / commit
    bin_dir.mkdir(parents=True, exist_ok=True)
    go, env = go_command("KAI's e2e suites"), go_environment(root)
    binaries = {}
    for suite in suites:
        target = bin_dir / binary_name(suite)
        if not os.access(target, os.X_OK):
            log(f"building {suite} (go test -c; the first build takes many minutes)")
            tmp = bin_dir / f".{target.name}.tmp"
            proc = subprocess.run([go, "test", "-c", "-o", str(tmp), f"./{SUITES_DIR}/{suite}"], cwd=source, env=env,
                                  stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                raise KaiE2EError(f"'go test -c ./{SUITES_DIR}/{suite}' failed in {source} (exit {proc.returncode})")
            os.replace(tmp, target)
        binaries[suite] = target
    return binaries


# -- the cluster --------------------------------------------------------------------------------------
def node(name: str, cpu: str, memory: str, gpus: int = 0, labels: dict | None = None,
         taints: list | None = None) -> dict:
    """A kwok node; with ``gpus``, one like KAI's kind GPU workers, else one without any GPU resource or label.
    Like a kubelet's, it has ephemeral storage."""
    body = m.gpu_node(name, gpus=gpus, cpu=cpu, memory=memory,
                      labels={**GPU_NODE_LABELS, **(labels or {})} if gpus else labels)
    resources = {k: v for k, v in body["status"]["allocatable"].items() if gpus or k != "nvidia.com/gpu"}
    resources["ephemeral-storage"] = EPHEMERAL_STORAGE
    body["status"] = {"allocatable": resources, "capacity": resources}
    if not gpus:
        del body["metadata"]["labels"]["nvidia.com/gpu.count"]
    if taints:
        body["spec"] = {"taints": taints}
    return body


def cluster_nodes(gpu_nodes: int, gpus: int, cpu: str, memory: str, dra_nodes: int = 0) -> list[dict]:
    """KAI's kind layout: GPU workers, DRA GPU workers (their GPUs only in ResourceSlices, :func:`dra_objects`),
    one CPU worker and a control-plane node no workload may use."""
    nodes = [node(f"kai-e2e-gpu-{i}", cpu, memory, gpus) for i in range(gpu_nodes)]
    nodes += [node(f"kai-e2e-dra-{i}", cpu, memory, labels=DRA_NODE_LABELS) for i in range(dra_nodes)]
    nodes.append(node("kai-e2e-cpu", cpu, memory))
    nodes.append(node(CONTROL_PLANE_NODE, cpu, memory, labels={"node-role.kubernetes.io/control-plane": ""},
                      taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]))
    return nodes


def dra_objects(dra_nodes: int, gpus: int) -> list[dict]:
    """What the fake GPU operator's DRA plugin publishes for the DRA workers: DeviceClass ``gpu.nvidia.com`` and a
    ResourceSlice with each node's GPUs (11441 MiB Tesla-K80s, as the device plugin's)."""
    memory = int(GPU_NODE_LABELS["nvidia.com/gpu.memory"])
    model = GPU_NODE_LABELS["nvidia.com/gpu.product"]
    return [dradevices.device_class(),
            *(dradevices.resource_slice(f"kai-e2e-dra-{i}", gpus, memory, model) for i in range(dra_nodes))]


def stand_in(name: str) -> dict:
    """A Deployment named like KAI's component ``name`` whose pod kwok runs on the control-plane node."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeName": CONTROL_PLANE_NODE, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": name, "image": "kai-scheduler"}]}}},
    }


def stand_in_specs(config: dict | None) -> dict[str, tuple[int, list[str]]]:
    """Each stand-in's replicas and container arguments as KAI's operator keeps its Deployment from
    ``Config kai-config``: no replica while the Config disables the component (``<section>.service.enabled:
    false``), else one; the admission's ``--block-nvidia-visible-devices=true`` while
    ``admission.blockNvidiaVisibleDevices`` is true (``kai-scheduler run`` reads both from the Config itself)."""
    spec = (config or {}).get("spec") or {}
    block = (spec.get("admission") or {}).get("blockNvidiaVisibleDevices") is True
    return {name: (0 if ((spec.get(section) or {}).get("service") or {}).get("enabled") is False else 1,
                   [BLOCK_VISIBLE_DEVICES_ARG] if name == "admission" and block else [])
            for name, section in STAND_INS.items()}


class StandInOperator:
    """Keeps the stand-ins as :func:`stand_in_specs` says, once a second, in a thread: some specs change
    ``Config kai-config`` and wait for KAI's operator to remove a component's pods or roll out new arguments."""

    def __init__(self, kube: Kube, interval: float = 1.0) -> None:
        self.kube, self.interval = kube, interval
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="stand-in-operator", daemon=True)

    def __enter__(self) -> StandInOperator:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopping.set()
        self.thread.join(10)

    def _run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self.sync()
            except (ApiError, OSError) as exc:
                log(f"stand-in operator: {exc}")

    def sync(self) -> None:
        try:
            config = self.kube.get(f"{m.collection('Config')}/kai-config")
        except ApiError as exc:
            if exc.status != 404:
                raise
            config = None
        for name, (replicas, args) in stand_in_specs(config).items():
            path = f"{m.collection('Deployment', SYSTEM_NAMESPACE)}/{name}"
            spec = self.kube.get(path)["spec"]
            (container,) = spec["template"]["spec"]["containers"]
            if spec.get("replicas") != replicas or container.get("args", []) != args:
                self.kube.patch(path, {"spec": {"replicas": replicas, "template": {"spec": {"containers": [
                    {**container, "args": args}]}}}})


def webhook_configurations(url: str, ca_bundle: str, scheduler_name: str = SCHEDULER_NAME) -> list[dict]:
    """The chart's admission webhooks (deploy/chart/.../admission-webhook.yaml) calling ``url`` directly."""

    def hook(name: str, path: str, group: str, version: str, resource: str, scope: str, policy: str,
             operations: list[str]) -> dict:
        body = {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": policy,
                "timeoutSeconds": 10, "clientConfig": {"url": url + path, "caBundle": ca_bundle},
                "rules": [{"apiGroups": [group], "apiVersions": [version], "resources": [resource],
                           "operations": operations, "scope": scope}]}
        if resource == "pods":
            unjudged = {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                        "values": ["kube-system", SYSTEM_NAMESPACE]}
            body["namespaceSelector"] = {"matchExpressions": [unjudged]}
            body["matchConditions"] = [{"name": "scheduler-pods",
                                        "expression": f"object.spec.schedulerName == '{scheduler_name}'"}]
        return body

    write = ["CREATE", "UPDATE"]
    meta = {"name": "kai-admission"}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": meta,
         "webhooks": [
             hook("pod-validation.kai.scheduler", VALIDATE_PATH, "", "v1", "pods", "Namespaced", "Fail", write),
             hook("queue-validation.kai.scheduler", QUEUE_PATH, "scheduling.run.ai", "v2", "queues", "Cluster",
                  "Ignore", write),
             hook("podgroup-validation.kai.scheduler", PODGROUP_PATH, "scheduling.run.ai", "v2alpha2", "podgroups",
                  "Namespaced", "Ignore", write),
             hook("topology-validation.kai.scheduler", TOPOLOGY_PATH, "kai.scheduler", "v1alpha1", "topologies",
                  "Cluster", "Ignore", write)]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": meta,
         "webhooks": [dict(hook("pod-mutation.kai.scheduler", MUTATE_PATH, "", "v1", "pods", "Namespaced", "Fail",
                                ["CREATE"]), reinvocationPolicy="IfNeeded")]},
    ]


class KaiRun:
    """One ``kai-scheduler run`` process with every component, on free loopback ports; output in ``log``."""

    def __init__(self, kubeconfig: Path, folder: Path, extra_args: list[str]) -> None:
        self.metrics_port, self.webhook_port = free_ports(2)
        self.certificate = serving_certificate(folder / "webhook-certs", ["127.0.0.1"])
        self.kubeconfig, self.log, self.extra_args = kubeconfig, folder / "kai-scheduler-run.log", extra_args
        self.proc: subprocess.Popen | None = None

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def start(self, timeout: float = 120.0) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kai.cli", "run", "--kubeconfig", str(self.kubeconfig),
                 f"--metrics-address=127.0.0.1:{self.metrics_port}", f"--webhook-addr=127.0.0.1:{self.webhook_port}",
                 f"--webhook-cert-file={self.certificate.cert_file}", f"--webhook-key-file={self.certificate.key_file}",
                 "--fake-gpu-nodes", *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
                raise KaiE2EError(f"kai-scheduler run did not become ready (log {self.log}):\n{tail}")
            time.sleep(0.5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=5) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def karta_crd(root: Path, source: Path) -> Path | None:
    """The Karta CRD of the Karta module KAI requires (KAI's e2e setup installs it), when it was downloaded."""
    go = go_command("KAI's e2e suites")
    proc = subprocess.run([go, "list", "-m", "-f", "{{.Dir}}", "github.com/run-ai/karta"], cwd=source,
                          env=go_environment(root), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    path = Path(proc.stdout.strip()) / "charts" / "karta" / "crds" / "run.ai_kartas.yaml"
    return path if proc.returncode == 0 and path.is_file() else None


def prepare_cluster(kube: Kube, deploy: Path, run: KaiRun, gpu_nodes: int, dra_nodes: int, gpus: int, cpu: str,
                    memory: str, extra_crds: list[Path]) -> None:
    """Everything KAI's e2e cluster has besides the components (see the module's docstring)."""
    m.install(kube, deploy)
    for path in extra_crds:
        m.apply(kube, read_yaml(path, top=dict, what="a CustomResourceDefinition"))
    for name in (SYSTEM_NAMESPACE, RESERVATION_NAMESPACE):
        m.apply(kube, m.namespace(name))
    m.apply(kube, {"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": RESERVATION_NAMESPACE, "namespace": RESERVATION_NAMESPACE}})
    for obj in [*cluster_nodes(gpu_nodes, gpus, cpu, memory, dra_nodes), *dra_objects(dra_nodes, gpus),
                *map(stand_in, STAND_INS),
                *webhook_configurations(run.webhook_url, run.certificate.ca_bundle())]:
        m.apply(kube, obj)


# -- running the suites -------------------------------------------------------------------------------
def _run_binary(binary: Path, args: list[str], cwd: Path, env: dict[str, str], log: Path, timeout: float) -> str:
    """Runs one suite binary; "" when it ended by itself, else why it was stopped."""
    with open(log, "ab") as out:
        proc = subprocess.Popen([str(binary), *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout)
            return ""
        except subprocess.TimeoutExpired:
            return f"killed after {timeout / 60:.0f} min"
        finally:  # also on Ctrl-C: the suite runs in a session of its own
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def specs_to_run(binary: Path, catalogue: Catalogue, suite: str, cwd: Path, env: dict[str, str], folder: Path) -> int:
    """How many specs of the suite will run with its exclusions (a ginkgo dry run)."""
    report = folder / f"{binary_name(suite)}.dry-run.json"
    _run_binary(binary, ginkgo_args(catalogue, suite, report, 600, dry_run=True), cwd, env,
                folder / f"{binary_name(suite)}.dry-run.log", 120)
    try:
        return sum((r.get("PreRunStats") or {}).get("SpecsThatWillRun", 0) for r in read_report(report))
    except (OSError, ValueError):
        return 0


def run_suite(binary: Path, catalogue: Catalogue, suite: str, source: Path, kubeconfig: Path, folder: Path,
              spec_timeout: float, suite_timeout: float) -> SuiteResult:
    """One suite against the cluster: its report summed up; a run without a report says why."""
    cwd = source / SUITES_DIR / suite
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    count = specs_to_run(binary, catalogue, suite, cwd, env, folder)
    timeout = min(suite_timeout, max(count, 1) * spec_timeout)
    report = folder / f"{binary_name(suite)}.json"
    log(f"{suite}: {count} specs to run, timeout {timeout / 60:.0f} min")
    # ginkgo stops the suite at its timeout and still writes the report; the kill is for a process that hangs
    stopped = _run_binary(binary, ginkgo_args(catalogue, suite, report, timeout), cwd, env,
                          folder / f"{binary_name(suite)}.log", timeout + 120)
    try:
        result = summarize(suite, read_report(report), catalogue)
    except (OSError, ValueError) as exc:
        result = SuiteResult(suite, error=f"no report ({stopped or exc})")
    if stopped and not result.error:
        result.error = stopped
    return result


def run(catalogue: Catalogue, deploy: Path, out: Path, suites: list[str] | None = None, *,
        source: Path | None = None, git_dir: Path | None = None, spec_timeout: float = 360.0,
        suite_timeout: float = 2700.0, gpu_nodes: int = 4, dra_nodes: int = 2, gpus: int = 8, cpu: str = "4",
        memory: str = "16Gi",
        run_args: list[str] | None = None, build_only: bool = False) -> list[SuiteResult]:
    """Builds the suites, prepares the cluster, runs them; writes results.md and results.json to ``out``."""
    root = cache_dir()
    src = kai_source(root, source=source, git_dir=git_dir)
    known = discover_suites(src)
    chosen = known if not suites else [s for s in known if any(s == p or s.startswith(p + "/") for p in suites)]
    if suites and not chosen:
        raise KaiE2EError(f"no suite matches {', '.join(suites)}; KAI's suites: {', '.join(known)}")
    results = {s: SuiteResult(s, excluded_reason=e.category) for s in chosen if (e := catalogue.excluded_suite(s))}
    binaries = build_suites(root, src, [s for s in chosen if s not in results])
    if build_only:
        return []
    out.mkdir(parents=True, exist_ok=True)
    # KAI's pods run "sleep infinity": kwok runs Job pods until they are deleted, as a kubelet would
    with (tempfile.TemporaryDirectory(prefix="kai-e2e-") as tmp,
          ControlPlane(state_dir=Path(tmp) / "cp", job_pods_complete=False) as plane):
        kube = Kube.connect(plane.kubeconfig)
        kai = KaiRun(plane.kubeconfig, out, run_args or [])
        prepare_cluster(kube, deploy, kai, gpu_nodes, dra_nodes, gpus, cpu, memory,
                        [p for p in [karta_crd(root, src)] if p])
        kai.start()
        try:
            with StandInOperator(kube):
                for suite, binary in binaries.items():
                    if not kai.alive():
                        log("kai-scheduler run exited; starting it again")
                        kai.start()
                    results[suite] = run_suite(binary, catalogue, suite, src, plane.kubeconfig, out, spec_timeout,
                                               suite_timeout)
                    r = results[suite]
                    log(f"{suite}: {r.passed} passed, {r.failed} failed, {r.skipped} skipped, {r.excluded} excluded"
                         + (f" ({r.error})" if r.error else ""))
                    write_results([results[s] for s in chosen if s in results], catalogue, out)
        finally:
            kai.stop()
    ordered = [results[s] for s in chosen]
    write_results(ordered, catalogue, out)
    print(table(ordered), end="")
    return ordered


def summarize_again(catalogue: Catalogue, out: Path) -> list[SuiteResult]:
    """The suites' JSON reports of an earlier run in ``out`` summed up and classified again with the
    current exclusions file (to classify new failures without running the suites again)."""
    ran = {p.name.removesuffix(".test.json").replace("__", "/"): p for p in out.glob("*.test.json")}
    if not ran:
        raise KaiE2EError(f"{out} has no suite reports (*.test.json)")
    excluded = {e.target: e.category for e in catalogue.exclusions if e.kind == "suite"}
    results = {s: SuiteResult(s, excluded_reason=c) for s, c in excluded.items()}
    for suite, report in ran.items():
        results[suite] = summarize(suite, read_report(report), catalogue)
    ordered = [results[s] for s in sorted(results)]
    write_results(ordered, catalogue, out)
    print(table(ordered), end="")
    return ordered


def write_results(results: list[SuiteResult], catalogue: Catalogue, out: Path) -> None:
    """results.md and results.json, rewritten after every suite so that a long run shows what it has so far."""
    (out / "results.md").write_text(details(results, catalogue))
    (out / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")


# -- the command --------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tox -e kai-e2e --",
        description="Build KAI's e2e suites (Go) once, start a private control plane with kwok GPU nodes and "
        "'kai-scheduler run', run every suite not excluded and print passed/failed/skipped/excluded per suite.")
    parser.add_argument("suites", nargs="*", metavar="SUITE",
                        help="suites (paths under KAI's test/e2e/suites, or folders of them); default: all")
    parser.add_argument("--exclusions", type=Path, default=HERE / "exclusions.yaml",
                        help="exclusions and failure classes (default: exclusions.yaml beside this harness)")
    parser.add_argument("--deploy", type=Path, default=HERE.parents[1] / "deploy",
                        help="the deploy folder (default: the repository's)")
    parser.add_argument("--out", type=Path, default=Path("kai-e2e-results"),
                        help="results.md, results.json, reports and logs (default: %(default)s)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--kai-git", type=Path, metavar="GIT_DIR",
                        help="export KAI's source at the pinned commit from this clone (default: the Go module proxy)")
    source.add_argument("--kai-source", type=Path, metavar="DIR", help="a checkout of KAI at the pinned commit")
    parser.add_argument("--spec-timeout", type=parse_duration, default=360.0, metavar="DURATION",
                        help="time budget per spec that will run (default: 6m)")
    parser.add_argument("--suite-timeout", type=parse_duration, default=2700.0, metavar="DURATION",
                        help="most time one suite may take (default: 45m)")
    parser.add_argument("--gpu-nodes", type=int, default=4, help="kwok nodes with 8 GPUs each (default: %(default)s)")
    parser.add_argument("--dra-nodes", type=int, default=2,
                        help="kwok nodes publishing 8 GPUs each as DRA devices (default: %(default)s)")
    parser.add_argument("--run-arg", action="append", default=[], metavar="ARG",
                        help="an extra argument of 'kai-scheduler run' (repeatable)")
    parser.add_argument("--build-only", action="store_true", help="only build the suites")
    parser.add_argument("--summarize-only", action="store_true",
                        help="only sum up and classify again the reports of an earlier run in --out")
    return parser


def main(argv: list[str]) -> int:
    """Run the suites as the command line asks; the exit code (1 when a spec failed or a suite was cut short)."""
    args = _parser().parse_args(argv)
    try:
        catalogue = load_catalogue(args.exclusions)
        if args.summarize_only:
            results = summarize_again(catalogue, args.out)
        elif not (args.deploy / "crds").is_dir():
            print(f"kai-e2e: {args.deploy} has no crds/; pass --deploy", file=sys.stderr)
            return 2
        else:
            # a TERM (a background run cannot be stopped with INT) unwinds like Ctrl-C: the suite, kai-scheduler
            # run and the control plane are stopped
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
            results = run(catalogue, args.deploy, args.out, args.suites, source=args.kai_source, git_dir=args.kai_git,
                          spec_timeout=args.spec_timeout, suite_timeout=args.suite_timeout, gpu_nodes=args.gpu_nodes,
                          dra_nodes=args.dra_nodes, run_args=args.run_arg, build_only=args.build_only)
    except (ExclusionsError, MissingToolError) as exc:
        print(f"kai-e2e: {exc}", file=sys.stderr)
        return 2
    except ControlPlaneError as exc:
        print(f"kai-e2e: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kai-e2e: interrupted", file=sys.stderr)
        return 130
    return 1 if any(r.failed or r.failures or r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
