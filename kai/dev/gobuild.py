"""Go builds of the local control plane's binaries (etcd, kube-apiserver, kube-controller-manager,
kwok), cached by version.

The binaries are compiled from the Go module proxy on first use and cached under
:func:`cache_root` (``$KAI_CONTROL_PLANE_CACHE``, default ``~/.cache/kai-scheduler/control-plane``).
The Kubernetes commands and etcd cannot be ``go install``-ed (their modules carry ``replace``
directives), so a small wrapper module is generated for each in the cache and built there; kwok
installs as is. A binary missing from a version's cache is built on its own, next to the others.
kube-scheduler, not part of the control plane, is built the same way on request (:func:`ensure_kube_scheduler`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import astuple, dataclass
from pathlib import Path

# 1.34.4 is the newest 1.34 patch whose staging modules (v0.34.4) are all on the module proxy.
K8S_VERSION = "1.34.4"
ETCD_VERSION = "3.5.21"
KWOK_VERSION = "0.7.0"

# The k8s.io staging modules that k8s.io/kubernetes requires at the placeholder v0.0.0; the wrapper
# module replaces each with the release tag matching K8S_VERSION (v1.X.Y <-> v0.X.Y).
K8S_STAGING_MODULES = (
    "api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider "
    "cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api "
    "cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms "
    "kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics "
    "mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller"
).split()


def kubernetes_main(command: str, constructor: str) -> str:
    """The ``main`` package of a Kubernetes command, as in k8s.io/kubernetes/cmd/<command>."""
    return f"""\
// The {command} command, as in k8s.io/kubernetes/cmd/{command}.
package main

import (
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/{command}/app"
)

func main() {{
	os.Exit(cli.Run(app.{constructor}()))
}}
"""


APISERVER_MAIN = kubernetes_main("kube-apiserver", "NewAPIServerCommand")
CONTROLLER_MANAGER_MAIN = kubernetes_main("kube-controller-manager", "NewControllerManagerCommand")
SCHEDULER_MAIN = kubernetes_main("kube-scheduler", "NewSchedulerCommand")

ETCD_MAIN = """\
// The etcd command, as in go.etcd.io/etcd/server/v3/main.go.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
"""


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or stopped."""


class MissingToolError(ControlPlaneError):
    """A required program (Go, openssl) is not installed."""


def cache_root() -> Path:
    """Where the Go caches and the built binaries live."""
    env = os.environ.get("KAI_CONTROL_PLANE_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kai-scheduler" / "control-plane"


def version_key() -> str:
    """Names the cache directory of one combination of component versions."""
    return f"k8s-{K8S_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}"


@dataclass(frozen=True)
class Binaries:
    """Paths of the control-plane executables."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kwok: Path

    @classmethod
    def in_dir(cls, bin_dir: Path) -> Binaries:
        return cls(bin_dir / "etcd", bin_dir / "kube-apiserver", bin_dir / "kube-controller-manager", bin_dir / "kwok")

    def missing(self) -> list[Path]:
        return [p for p in astuple(self) if not os.access(p, os.X_OK)]


def _log(message: str) -> None:
    print(f"[dev-cluster] {message}", file=sys.stderr, flush=True)


def go_command(purpose: str = "the control plane's binaries") -> str:
    """The ``go`` executable, 1.24 or newer; :class:`MissingToolError` says how to install it otherwise
    and that ``purpose`` needs it."""
    install = "install it (https://go.dev/doc/install, or the 'golang' package) and retry"
    go = shutil.which("go")
    if go is None:
        raise MissingToolError(f"the Go toolchain (1.24 or newer) is needed to build {purpose} once; {install}")
    found = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    digits = found.removeprefix("go").split(".")[:2]
    if not all(d.isdigit() for d in digits) or tuple(map(int, digits)) < (1, 24):
        raise MissingToolError(f"Go 1.24 or newer is needed, found {found or 'an unknown version'}; {install}")
    return go


def go_environment(root: Path) -> dict[str, str]:
    """The environment of Go builds whose module and build caches live under ``root``: the caller's
    environment without its GO* settings, except those naming the module proxy and checksum database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    env.update(
        GOPATH=str(root / "go"),
        GOMODCACHE=str(root / "go" / "mod"),
        GOCACHE=str(root / "go" / "build"),
        GOFLAGS="-modcacherw -trimpath -buildvcs=false",
        GOTOOLCHAIN="local",
        GOWORK="off",
        CGO_ENABLED="0",
    )
    for key in ("GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GONOPROXY", "GOINSECURE", "GOAUTH"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


class _GoBuilder:
    """Builds the binaries of one version combination into ``<cache>/<versions>/bin``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.work = root / version_key()
        self.bin_dir = self.work / "bin"
        self.go = go_command()
        self.env = go_environment(root)

    def _go(self, *args: str, cwd: Path) -> None:
        _log(f"go {' '.join(args)}")
        proc = subprocess.run([self.go, *args], cwd=cwd, env=self.env, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise ControlPlaneError(f"'go {' '.join(args)}' failed in {cwd} (exit {proc.returncode})")

    def _module(self, name: str, go_mod: str, main_go: str, requires: list[str]) -> Path:
        """Writes a wrapper module under ``src/NAME`` and resolves its dependencies once."""
        src = self.work / "src" / name
        resolved = src / ".resolved"
        src.mkdir(parents=True, exist_ok=True)
        (src / "main.go").write_text(main_go)
        if not resolved.exists():
            (src / "go.mod").write_text(go_mod)
            (src / "go.sum").unlink(missing_ok=True)
            self._go("get", *requires, cwd=src)
            self._go("mod", "tidy", cwd=src)
            resolved.touch()
        return src

    def _install(self, built: Path, target: Path) -> None:
        os.replace(built, target)
        _log(f"built {target}")

    def _build_kubernetes_command(self, name: str, main_go: str, target: Path) -> None:
        """Builds a command of k8s.io/kubernetes at K8S_VERSION from a wrapper module ``src/NAME``."""
        staging = "v0." + K8S_VERSION.split(".", 1)[1]
        replaces = "".join(f"\tk8s.io/{m} => k8s.io/{m} {staging}\n" for m in K8S_STAGING_MODULES)
        go_mod = f"module kaidevcluster/{name}\n\ngo 1.24.0\n\ngodebug default=go1.24\n\nreplace (\n{replaces})\n"
        requires = [f"k8s.io/kubernetes@v{K8S_VERSION}", f"k8s.io/component-base@{staging}"]
        src = self._module(name, go_mod, main_go, requires)
        minor = K8S_VERSION.split(".")[1]
        ldflags = ["-s", "-w"]
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            ldflags += [
                f"-X {pkg}.gitVersion=v{K8S_VERSION}",
                f"-X {pkg}.gitMajor=1",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
                f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
            ]
        out = self.bin_dir / f".{name}.tmp"
        self._go("build", "-ldflags", " ".join(ldflags), "-o", str(out), ".", cwd=src)
        self._install(out, target)

    def build_kube_apiserver(self, target: Path) -> None:
        self._build_kubernetes_command("kube-apiserver", APISERVER_MAIN, target)

    def build_kube_controller_manager(self, target: Path) -> None:
        self._build_kubernetes_command("kube-controller-manager", CONTROLLER_MANAGER_MAIN, target)

    def build_kube_scheduler(self, target: Path) -> None:
        self._build_kubernetes_command("kube-scheduler", SCHEDULER_MAIN, target)

    def build_etcd(self, target: Path) -> None:
        # etcd 3.5 still requires reflect2 v1.0.1, which predates Go 1.18; use Kubernetes' versions.
        src = self._module(
            "etcd",
            "module kaidevcluster/etcd\n\ngo 1.23.0\n",
            ETCD_MAIN,
            [
                f"go.etcd.io/etcd/server/v3@v{ETCD_VERSION}",
                "github.com/modern-go/reflect2@v1.0.2",
                "github.com/json-iterator/go@v1.1.12",
            ],
        )
        out = self.bin_dir / ".etcd.tmp"
        self._go("build", "-ldflags", "-s -w", "-o", str(out), ".", cwd=src)
        self._install(out, target)

    def build_kwok(self, target: Path) -> None:
        with tempfile.TemporaryDirectory(dir=self.bin_dir) as gobin:
            self.env["GOBIN"] = gobin
            try:
                self._go("install", "-ldflags", "-s -w", f"sigs.k8s.io/kwok/cmd/kwok@v{KWOK_VERSION}", cwd=self.bin_dir)
            finally:
                del self.env["GOBIN"]
            self._install(Path(gobin) / "kwok", target)


def ensure_binaries(root: Path | None = None) -> Binaries:
    """Returns the cached binaries, building the missing ones first (minutes, once per version)."""
    root = cache_root() if root is None else root
    bin_dir = root / version_key() / "bin"
    binaries = Binaries.in_dir(bin_dir)
    if not binaries.missing():
        return binaries
    bin_dir.mkdir(parents=True, exist_ok=True)
    with open(root / version_key() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent `up` waits for this build instead of racing it
        builder = _GoBuilder(root)
        start = time.monotonic()
        for path, build in (
            (binaries.etcd, builder.build_etcd),
            (binaries.kwok, builder.build_kwok),
            (binaries.kube_apiserver, builder.build_kube_apiserver),
            (binaries.kube_controller_manager, builder.build_kube_controller_manager),
        ):
            if not os.access(path, os.X_OK):
                _log(f"building {path.name} (once per version; the first build takes many minutes)")
                build(path)
        _log(f"binaries ready in {bin_dir} ({time.monotonic() - start:.0f}s)")
    return binaries


def ensure_kube_scheduler(root: Path | None = None) -> Path:
    """kube-scheduler at K8S_VERSION, from the same modules as the control plane's kube-apiserver (built once
    per version, beside the control plane's binaries; benchmarks compare against it)."""
    root = cache_root() if root is None else root
    target = root / version_key() / "bin" / "kube-scheduler"
    if os.access(target, os.X_OK):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(root / version_key() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.access(target, os.X_OK):
            _log("building kube-scheduler (once per version; the first build takes minutes)")
            _GoBuilder(root).build_kube_scheduler(target)
    return target
