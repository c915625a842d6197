"""KAI's own components, built with Go from KAI's source at the pinned commit, run as processes against a cluster.

:func:`build` compiles ``cmd/scheduler``, ``cmd/binder``, ``cmd/podgrouper``, ``cmd/queuecontroller`` and
``cmd/podgroupcontroller`` once per commit into the cache of the KAI e2e harness (``tests/kai-e2e/kaisource.py``,
which also holds KAI's source and a warm Go module cache). :class:`KaiComponents` starts them against a
kubeconfig with the arguments KAI's operator gives their Deployments for a default install
(``pkg/operator/operands/*/resources.go``: the operator's client QPS 20 and burst 100 for all but the scheduler,
the scheduler's configuration for a default SchedulingShard: every default plugin and action at its default
priority, GPUs and CPUs bin-packed). Where a Deployment listens on fixed ports, each process here gets free
loopback ports; the queue and podgroup controllers run without their admission webhooks (no certificates and
no webhook configurations here). The cluster needs KAI's CRDs (``deploy/crds``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from kai.dev.controlplane import free_ports
from kai.dev.gobuild import go_command, go_environment
from kai.framework.shard import ACTION_PRIORITIES, PLUGIN_PRIORITIES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kai-e2e"))  # KAI's source and Go caches
from kaisource import KAI_COMMIT, cache_dir, kai_source  # noqa: E402

COMPONENTS = ("scheduler", "binder", "podgrouper", "queuecontroller", "podgroupcontroller")
#: The components with a health probe address.
PROBED = ("podgrouper", "podgroupcontroller")
#: What KAI's scheduler logs at the end of a cycle: it has listed the cluster.
FIRST_CYCLE = "End scheduling"
SCHEDULER_NAME = "kai-scheduler"
NAMESPACE = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
NODEPOOL_LABEL = "kai.scheduler/node-pool"
RESERVATION = "kai-resource-reservation"
#: The operator's client settings (``K8sClientConfig`` defaults) for the components other than the scheduler.
CLIENT = ["--qps", "20", "--burst", "100"]
#: A default shard's placement: GPUs and CPUs bin-packed (so ``gpuspread`` is off and consolidation on).
PLACEMENT = "binpack"
#: A default shard's scenario search budgets (``DefaultScenarioSearchBudgets``).
SEARCH_BUDGETS = {"maxActionSearchDuration": {"default": "5m"}, "maxJobSearchDuration": "4m",
                  "minJobSearchDuration": "0s",
                  "maxGeneratorSearchDuration": {"default": "2m", "NodeLocalGreedy": "30s", "MultiNodeGang": "2m"}}


def build(root: Path | None = None) -> dict[str, Path]:
    """The five commands, compiled (once per commit; the first build takes minutes)."""
    root = cache_dir() if root is None else root
    bin_dir = root / "bin" / KAI_COMMIT / "cmd"
    binaries = {c: bin_dir / c for c in COMPONENTS}
    if all(os.access(p, os.X_OK) for p in binaries.values()):
        return binaries
    source = kai_source(root)
    bin_dir.mkdir(parents=True, exist_ok=True)
    print(f"building KAI's components at {KAI_COMMIT[:8]} (go build; the first build takes minutes)",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="kai-cmd-", dir=bin_dir) as tmp:
        subprocess.run([go_command("KAI's components"), "build", "-ldflags", "-s -w", "-o", tmp + "/",
                        *(f"./cmd/{c}" for c in COMPONENTS)],
                       cwd=source, env=go_environment(root), check=True, stdin=subprocess.DEVNULL)
        for component, path in binaries.items():
            os.replace(Path(tmp) / component, path)
    return binaries


def scheduler_config() -> dict:
    """The ``config.yaml`` KAI's operator writes for a default SchedulingShard (plugins and actions by descending
    priority, then by name)."""
    off = {"gpuspread"} if PLACEMENT == "binpack" else {"gpupack", "gpusharingorder"}
    arguments = {"nodeplacement": {"gpu": PLACEMENT, "cpu": PLACEMENT}}
    plugins = [{"name": name, **({"arguments": arguments[name]} if name in arguments else {})}
               for name in sorted(PLUGIN_PRIORITIES, key=lambda n: (-PLUGIN_PRIORITIES[n], n)) if name not in off]
    actions = sorted(ACTION_PRIORITIES, key=lambda n: (-ACTION_PRIORITIES[n], n))
    return {"actions": ", ".join(actions), "tiers": [{"plugins": plugins}], "scenarioSearchBudgets": SEARCH_BUDGETS}


def arguments(component: str, metrics: int, probe: int, config: Path) -> list[str]:
    """The operator's arguments of ``component``, on the loopback ports ``metrics`` and ``probe``."""
    metrics_at, probe_at = f"127.0.0.1:{metrics}", f"127.0.0.1:{probe}"
    if component == "scheduler":
        return [f"--scheduler-conf={config}", f"--scheduler-name={SCHEDULER_NAME}", f"--namespace={NAMESPACE}",
                f"--nodepool-label-key={NODEPOOL_LABEL}", "--partition-label-value=",
                f"--resource-reservation-app-label={RESERVATION}", f"--queue-label-key={QUEUE_LABEL}",
                f"--listen-address={metrics_at}", "--metrics-namespace=kai", f"--plugin-server-port={probe}"]
    if component == "binder":
        plugins = {"volumebinding": {"enabled": True, "priority": 300, "arguments": {"bindTimeoutSeconds": "120"}},
                   "dynamicresources": {"enabled": True, "priority": 200,
                                        "arguments": {"bindTimeoutSeconds": "120"}},
                   "gpusharing": {"enabled": True, "priority": 100, "arguments": {"cdiEnabled": "false"}},
                   "hamicore": {"enabled": False, "priority": 50}}
        return ["--scheduler-name", SCHEDULER_NAME, "--resource-reservation-namespace", RESERVATION,
                "--resource-reservation-service-account", RESERVATION, "--resource-reservation-app-label",
                RESERVATION, "--resource-reservation-pod-image", "ghcr.io/kai-scheduler/kai-scheduler/"
                "resource-reservation", "--scale-adjust-namespace", "kai-scale-adjust",
                "--health-probe-bind-address", probe_at, "--metrics-bind-address", metrics_at,
                "--plugins", json.dumps(plugins), *CLIENT]
    if component == "podgrouper":
        return ["--scheduler-name", SCHEDULER_NAME, "--queue-label-key", QUEUE_LABEL, "--nodepool-label-key",
                NODEPOOL_LABEL, "--generic-karta-fallback=true", *CLIENT, "--metrics-bind-address", metrics_at,
                "--health-probe-bind-address", probe_at]
    if component == "queuecontroller":
        return ["--metrics-listen-address", metrics_at, "--metrics-namespace", "kai", *CLIENT,
                "--enable-webhook=false"]
    return ["--scheduler-name", SCHEDULER_NAME, *CLIENT, "--metrics-bind-address", metrics_at,
            "--health-probe-bind-address", probe_at, "--enable-podgroup-webhook=false"]


class Processes:
    """The processes a benchmark started (``procs``, by name) and the ``/metrics`` URL of each (``metrics``)."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self.metrics: dict[str, str] = {}

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


class KaiComponents(Processes):
    """KAI's components as processes (keyed ``go-<component>``), logging into ``workdir``; ``ready`` is what tells
    each is ready."""

    def __init__(self, kubeconfig: str, workdir: Path, binaries: dict[str, Path]) -> None:
        super().__init__()
        self.kubeconfig, self.workdir, self.binaries = kubeconfig, workdir, binaries
        self.ready: dict[str, str] = {}

    def start(self, timeout: float = 120.0) -> None:
        """Starts every component and returns once each is ready (its probe, else its metrics, answers; the
        scheduler has ended a cycle)."""
        config = self.workdir / "kai-scheduler-config.json"
        config.write_text(json.dumps(scheduler_config(), indent=1))
        env = {**os.environ, "KUBECONFIG": self.kubeconfig, "NAMESPACE": NAMESPACE}
        for component, binary in self.binaries.items():
            metrics, probe = free_ports(2)
            name = f"go-{component}"
            with open(self.workdir / f"{name}.log", "wb") as log:
                self.procs[name] = subprocess.Popen(
                    [str(binary), *arguments(component, metrics, probe, config)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
            # The podgroup controller takes no metrics address: it serves its metrics on port 8080.
            self.metrics[name] = f"http://127.0.0.1:{8080 if component == 'podgroupcontroller' else metrics}/metrics"
            self.ready[name] = (f"http://127.0.0.1:{probe}/readyz" if component in PROBED else self.metrics[name])
        deadline = time.monotonic() + timeout
        for name, url in self.ready.items():
            while not _serves(url) or (name == "go-scheduler" and FIRST_CYCLE not in self._log(name)):
                if self.procs[name].poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{name} did not start; see {self.workdir}/{name}.log")
                time.sleep(0.2)

    def _log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

def _serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
