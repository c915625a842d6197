"""A local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager and kwok as child
processes.

:class:`ControlPlane` starts the four processes on free loopback ports with a fresh PKI
(:mod:`kai.dev.pki`) and binaries built by :mod:`kai.dev.gobuild`, writes an admin kubeconfig and
records the PIDs in a state directory, so another process (``kai-scheduler dev-cluster down``) can
stop exactly what was started. :meth:`ControlPlane.restart` stops one of them and starts it again
with the same command line (same port, PKI and etcd data), as a crash and restart would.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kai.dev.gobuild import Binaries, ControlPlaneError, ensure_binaries
from kai.dev.kwokstages import RUN_UNTIL_DELETED
from kai.dev.pki import make_pki

#: kwok plays the kubelet of every node in one process: with its default of 4 pod and 4 node updates
#: in flight, a busy API server's latency, not the CPU, caps how fast bound pods turn Running.
KWOK_CONFIGURATION = {
    "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
    "kind": "KwokConfiguration",
    "options": {"podPlayStageParallelism": 32, "nodePlayStageParallelism": 16, "nodeLeaseParallelism": 16},
}

#: kwok renews each node's Lease every quarter of this (a long lease spares the API server on clusters
#: of many nodes); the node-lifecycle controller taints a node unreachable, and evicts its pods, once
#: its Lease is older than the grace period: 1.25 times the lease, as for a kubelet. The default; a
#: ControlPlane takes another (``node_lease_seconds``).
NODE_LEASE_SECONDS = 200


def state_root() -> Path:
    """Default state directory of the dev cluster (PKI, kubeconfig, logs, PIDs, etcd data)."""
    env = os.environ.get("KAI_DEV_CLUSTER_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "kai-scheduler" / "dev-cluster"


def free_ports(count: int) -> list[int]:
    """Distinct TCP ports on 127.0.0.1 that are free right now."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


@dataclass(frozen=True)
class ProcessRecord:
    """Identifies a started process beyond its PID: the executable and the kernel's start time."""

    name: str
    pid: int
    exe: str
    start_time: str

    @classmethod
    def of(cls, name: str, pid: int) -> ProcessRecord:
        return cls(name, pid, os.path.realpath(f"/proc/{pid}/exe"), _proc_start_time(pid) or "")

    def is_alive(self) -> bool:
        """True while the recorded process still runs (not a zombie, not a reused PID)."""
        try:
            exe = os.path.realpath(f"/proc/{self.pid}/exe", strict=True)
        except OSError:
            return False
        return exe == self.exe and _proc_start_time(self.pid) == self.start_time and _proc_state(self.pid) != "Z"


def _proc_stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; it ends at the last ')'.
    return stat[stat.rindex(")") + 2 :].split()


def _proc_state(pid: int) -> str | None:
    fields = _proc_stat_fields(pid)
    return fields[0] if fields else None


def _proc_start_time(pid: int) -> str | None:
    fields = _proc_stat_fields(pid)
    return fields[19] if fields else None  # field 22 of /proc/PID/stat


#: Feature gates of kube-apiserver and kube-controller-manager beyond Kubernetes' defaults.
FEATURE_GATES = "DRAExtendedResource=true"


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kwok on loopback, with its state under ``state_dir``.

    ``start()`` builds the binaries if needed and returns once every process is ready; ``stop()``
    stops what was started and removes the state. A ControlPlane is also a context manager.
    :meth:`attach` reopens one started by another process (from its state directory).
    kube-controller-manager runs its default controllers, as on a real cluster: Jobs, Deployments and
    StatefulSets get their pods, ResourceClaimTemplates their claims (DRA, with the alpha gate
    ``DRAExtendedResource`` on), the garbage collector follows
    ownerReferences and pod GC removes the pods of deleted nodes. kwok runs with its built-in stages:
    every Node is managed (made Ready, heartbeats by Lease) and pods bound to a node become Running;
    pods owned by a Job complete (unless ``job_pods_complete`` is False); deleted pods go away.
    """

    STATE_FILE = "state.json"
    STOP_ORDER = ("kube-controller-manager", "kwok", "kube-apiserver", "etcd")

    def __init__(self, state_dir: Path | None = None, cache_dir: Path | None = None, ready_timeout: float = 180.0,
                 job_pods_complete: bool = True, apiserver_args: tuple[str, ...] = (),
                 node_lease_seconds: int = NODE_LEASE_SECONDS):
        self.state_dir = (state_root() if state_dir is None else Path(state_dir)).absolute()
        #: More flags of kube-apiserver (an audit log, say).
        self.apiserver_args = apiserver_args
        self.cache_dir = cache_dir
        self.ready_timeout = ready_timeout
        #: False: kwok runs the pods of Jobs until they are deleted (:mod:`kai.dev.kwokstages`).
        self.job_pods_complete = job_pods_complete
        #: The nodes' Lease duration (kwok renews each every quarter of it: 4 x nodes / this renewals a second).
        self.node_lease_seconds = node_lease_seconds
        self.server = ""
        self.processes: dict[str, ProcessRecord] = {}
        self._children: dict[str, subprocess.Popen] = {}
        #: How each process was started, for :meth:`restart`: command line, extra environment, readiness check.
        self._launches: dict[str, tuple[list[str], dict[str, str] | None, Callable[[], bool]]] = {}

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @classmethod
    def attach(cls, state_dir: Path | None = None) -> ControlPlane | None:
        """The control plane recorded in ``state_dir``, or None when there is no record."""
        plane = cls(state_dir)
        try:
            data = json.loads((plane.state_dir / cls.STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        plane.server = data["server"]
        plane.processes = {name: ProcessRecord(**rec) for name, rec in data["processes"].items()}
        return plane

    def running(self) -> dict[str, bool]:
        """Whether each recorded process is still alive."""
        return {name: rec.is_alive() for name, rec in self.processes.items()}

    def env(self) -> dict[str, str]:
        """Environment variables that point clients at this control plane."""
        return {"KUBECONFIG": str(self.kubeconfig)}

    def shell_env(self) -> str:
        """``export`` lines for a POSIX shell."""
        return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.env().items())

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Builds (once), starts etcd, kube-apiserver, kube-controller-manager and kwok and waits until
        they are ready."""
        previous = self.attach(self.state_dir)
        if previous is not None and any(previous.running().values()):
            raise ControlPlaneError(f"a control plane is already running from {self.state_dir}")
        binaries = ensure_binaries(self.cache_dir)
        self._clear_state(keep_logs=False)
        self.logs.mkdir(parents=True)
        try:
            self._start(binaries)
        except BaseException:
            self.stop(keep_logs=True)
            raise
        return self

    def _start(self, binaries: Binaries) -> None:
        make_pki(self.pki)
        etcd_port, peer_port, api_port, kwok_port, kcm_port = free_ports(5)
        self.server = f"https://127.0.0.1:{api_port}"
        self._write_kubeconfig(self.kubeconfig, "kai-dev-admin", "admin")

        etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        self._launch(
            "etcd",
            [
                str(binaries.etcd),
                "--name=node0",
                f"--data-dir={self.state_dir / 'etcd-data'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=node0={peer_url}",
                "--auto-compaction-retention=1",
                "--quota-backend-bytes=8589934592",
                "--unsafe-no-fsync=true",
                "--logger=zap",
                "--log-level=warn",
            ],
            lambda: b'"health":"true"' in self._get(f"{etcd_url}/health"),
        )

        pki = self.pki
        self._launch(
            "kube-apiserver",
            [
                str(binaries.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                # A pod made right after its namespace would wait for the namespace's default ServiceAccount,
                # a new node for the node-lifecycle controller to lift its not-ready taint, and volumes
                # would carry protection finalizers: none of it helps on kwok.
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,StorageObjectInUseProtection",
                # Loopback addresses are not valid endpoints of the 'kubernetes' Service.
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=0",
                "--max-mutating-requests-inflight=0",
                "--profiling=false",
                # Close the watches on SIGTERM: without it the server waits 60 s for them, and stop() kills it.
                "--shutdown-watch-termination-grace-period=2s",
                # DRA (resource.k8s.io/v1) is GA and served by default in 1.34; DRA-backed extended resources
                # (KEP-5004: DeviceClass extendedResourceName, pod extendedResourceClaimStatus) are alpha.
                f"--feature-gates={FEATURE_GATES}",
                "--v=1",
                *self.apiserver_args,
            ],
            lambda: self._get(f"{self.server}/readyz") == b"ok"
            and all(self._get(f"{self.server}/api/v1/namespaces/{ns}") for ns in ("default", "kube-node-lease")),
        )

        kcm_dir = self.state_dir / "controller-manager"
        kcm_dir.mkdir(exist_ok=True)
        kcm_kubeconfig = kcm_dir / "kubeconfig"
        self._write_kubeconfig(kcm_kubeconfig, "system:kube-controller-manager", "controller-manager")
        self._launch(
            "kube-controller-manager",
            [
                str(binaries.kube_controller_manager),
                f"--kubeconfig={kcm_kubeconfig}",
                # Its HTTPS port (healthz, metrics) checks client certificates against the CA below and
                # asks the API server about tokens and permissions; the API server has no front-proxy
                # CA for it to look up.
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                "--authentication-skip-lookup=true",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--tls-cert-file={pki / 'controller-manager-serving.crt'}",
                f"--tls-private-key-file={pki / 'controller-manager-serving.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--flex-volume-plugin-dir={kcm_dir / 'flexvolume'}",  # created at start: not under /usr
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                # Each controller acts as its own ServiceAccount, under the RBAC roles of a real cluster.
                "--use-service-account-credentials=true",
                "--controllers=*",
                "--leader-elect=false",
                f"--node-monitor-grace-period={self.node_lease_seconds * 5 // 4}s",
                # as long for a new node kwok has not made Ready yet (busy with thousands of them)
                f"--node-startup-grace-period={self.node_lease_seconds * 5 // 4}s",
                "--profiling=false",
                f"--feature-gates={FEATURE_GATES}",
                "--v=1",
            ],
            lambda: self._get(f"https://127.0.0.1:{kcm_port}/healthz") == b"ok",
        )

        kwok_dir = self.state_dir / "kwok"
        kwok_dir.mkdir(exist_ok=True)
        documents = [KWOK_CONFIGURATION, *(() if self.job_pods_complete else RUN_UNTIL_DELETED)]
        (kwok_dir / "kwok.yaml").write_text("---\n".join(json.dumps(d) + "\n" for d in documents))
        self._launch(
            "kwok",
            [
                str(binaries.kwok),
                f"--config={kwok_dir / 'kwok.yaml'}",
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=true",
                f"--server-address=127.0.0.1:{kwok_port}",
                f"--node-lease-duration-seconds={self.node_lease_seconds}",
                "--cidr=10.244.0.1/16",
            ],
            lambda: self._get(f"http://127.0.0.1:{kwok_port}/healthz") == b"ok",
            extra_env={"KWOK_WORKDIR": str(kwok_dir)},
        )

    def restart(self, name: str) -> None:
        """Stops the process ``name`` (SIGTERM, then SIGKILL) and starts it again with the same command
        line and environment -- same port, PKI and etcd data -- returning once it is ready again.

        Only the ControlPlane object that started the processes knows their command lines.
        """
        if name not in self._launches:
            raise ControlPlaneError(f"cannot restart {name!r}: not started by this object "
                                    f"(started: {', '.join(self._launches) or 'none'})")
        rec = self.processes.get(name)
        if rec is not None:
            self._terminate(rec, self._children.pop(name, None))
        argv, extra_env, ready = self._launches[name]
        self._launch(name, argv, ready, extra_env)

    def _launch(self, name: str, argv: list[str], ready: Callable[[], bool],
                extra_env: dict[str, str] | None = None) -> None:
        """Starts ``name`` and waits until ``ready()``; remembers how, for :meth:`restart`."""
        self._launches[name] = (argv, extra_env, ready)
        self._spawn(name, argv, extra_env)
        self._wait(name, ready)

    def _write_kubeconfig(self, path: Path, user: str, certificate: str) -> None:
        """A kubeconfig for this server authenticating with the client certificate ``pki/CERTIFICATE.crt``."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "kai-dev",
                            "cluster": {"server": self.server, "certificate-authority": str(self.pki / "ca.crt")},
                        }
                    ],
                    "users": [
                        {
                            "name": user,
                            "user": {
                                "client-certificate": str(self.pki / f"{certificate}.crt"),
                                "client-key": str(self.pki / f"{certificate}.key"),
                            },
                        }
                    ],
                    "contexts": [{"name": "kai-dev", "context": {"cluster": "kai-dev", "user": user}}],
                    "current-context": "kai-dev",
                },
                indent=2,
            )
            + "\n"
        )

    def _spawn(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> None:
        # etcd and kwok take ETCD_* / KWOK_* environment variables as flags: never pass the caller's.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ETCD_", "KWOK_"))}
        env.update(extra_env or {})
        with open(self.logs / f"{name}.log", "ab") as log:  # a restarted process appends to its log
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.state_dir,
                start_new_session=True,  # outlives `up`, deaf to the terminal's Ctrl-C
            )
        self._children[name] = proc
        self.processes[name] = ProcessRecord.of(name, proc.pid)
        self._save_state()

    def _save_state(self) -> None:
        data = {"server": self.server, "processes": {n: vars(r) for n, r in self.processes.items()}}
        tmp = self.state_dir / (self.STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.state_dir / self.STATE_FILE)

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _get(self, url: str) -> bytes:
        """Body of a successful GET, or b"" on any error."""
        ctx = self._ssl_context() if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
                return resp.read()
        except OSError:
            return b""

    def _wait(self, name: str, ready) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while not ready():
            if not self.processes[name].is_alive():
                raise ControlPlaneError(f"{name} exited during startup\n{self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name} not ready after {self.ready_timeout:.0f}s\n{self.log_tail(name)}")
            time.sleep(0.25)

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The last lines of a component's log."""
        path = self.logs / f"{name}.log"
        try:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"(no log at {path})"
        return f"--- last lines of {path} ---\n" + "\n".join(tail)

    def stop(self, keep_logs: bool = False) -> None:
        """Stops the recorded processes (only if they are still the ones started) and removes the state."""
        for name in [*self.STOP_ORDER, *(n for n in self.processes if n not in self.STOP_ORDER)]:
            rec = self.processes.get(name)
            if rec is not None:
                self._terminate(rec, self._children.pop(name, None))
        self.processes.clear()
        self._launches.clear()
        self._clear_state(keep_logs)

    def _clear_state(self, keep_logs: bool) -> None:
        """Removes what this class writes to the state directory (never anything else in it)."""
        entries = ["pki", "etcd-data", "kwok", "controller-manager", "kubeconfig", self.STATE_FILE]
        entries += [] if keep_logs else ["logs"]
        for name in entries:
            path = self.state_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.state_dir.rmdir()  # only if now empty

    @staticmethod
    def _terminate(rec: ProcessRecord, child: subprocess.Popen | None, grace: float = 10.0) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not rec.is_alive():
                break
            os.kill(rec.pid, sig)
            deadline = time.monotonic() + grace
            while rec.is_alive() and time.monotonic() < deadline:
                if child is not None:
                    child.poll()  # reap our own child so that it does not linger as a zombie
                time.sleep(0.05)
        if child is not None:
            child.poll()
