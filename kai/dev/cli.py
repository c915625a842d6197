"""``kai-scheduler dev-cluster build|up|down|env|status``: a local control plane for trying and testing."""

from __future__ import annotations

import argparse
import sys

from kai.dev.controlplane import ControlPlane
from kai.dev.gobuild import ControlPlaneError, MissingToolError, ensure_binaries

EPILOG = """\
environment:
  KAI_DEV_CLUSTER_DIR      state directory (default ~/.local/state/kai-scheduler/dev-cluster)
  KAI_CONTROL_PLANE_CACHE  built binaries and Go caches (default ~/.cache/kai-scheduler/control-plane)

The first 'up' compiles etcd, kube-apiserver, kube-controller-manager and kwok with Go (many minutes);
later runs reuse them.
Use it from a shell with:  eval "$(kai-scheduler dev-cluster up)"  or, later,
eval "$(kai-scheduler dev-cluster env)".
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kai-scheduler dev-cluster",
        description="Run a local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kwok) "
        "on 127.0.0.1.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("build", help="only build the binaries (once per version), e.g. to warm a CI cache")
    up = sub.add_parser("up", help="build once, start the control plane, print shell exports")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each component (default 180)")
    sub.add_parser("down", help="stop the processes 'up' started and remove the state")
    sub.add_parser("env", help="print shell exports (KUBECONFIG) for the running control plane")
    sub.add_parser("status", help="show whether the control plane runs; exit 1 if it does not")
    return parser


def _up(timeout: float) -> int:
    plane = ControlPlane.attach()
    if plane is not None and plane.processes and all(plane.running().values()):
        print(f"dev-cluster: already running at {plane.server}", file=sys.stderr)
        print(plane.shell_env(), end="")
        return 0
    if plane is not None:
        plane.stop()  # leftovers of a control plane that died or was half started
    plane = ControlPlane(ready_timeout=timeout).start()
    print(f"dev-cluster: ready at {plane.server} (logs in {plane.logs})", file=sys.stderr)
    print(plane.shell_env(), end="")
    return 0


def _down() -> int:
    plane = ControlPlane.attach()
    if plane is None:
        print("dev-cluster: not running", file=sys.stderr)
        return 0
    plane.stop()
    print("dev-cluster: stopped", file=sys.stderr)
    return 0


def _env() -> int:
    plane = ControlPlane.attach()
    if plane is None:
        print("dev-cluster: not running; start it with 'kai-scheduler dev-cluster up'", file=sys.stderr)
        return 1
    print(plane.shell_env(), end="")
    return 0


def _status() -> int:
    plane = ControlPlane.attach()
    if plane is None:
        print("dev-cluster: not running")
        return 1
    alive = plane.running()
    print(f"dev-cluster: {plane.server} (state in {plane.state_dir})")
    for name, rec in plane.processes.items():
        print(f"  {name:<15} pid {rec.pid:<8} {'running' if alive[name] else 'NOT running'}")
    return 0 if all(alive.values()) else 1


def main(argv: list[str]) -> int:
    """Entry point of ``kai-scheduler dev-cluster``; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            print(ensure_binaries().kube_apiserver.parent)
            return 0
        if args.command == "up":
            return _up(args.timeout)
        if args.command == "down":
            return _down()
        if args.command == "env":
            return _env()
        return _status()
    except MissingToolError as exc:
        print(f"dev-cluster: {exc}", file=sys.stderr)
        return 2
    except ControlPlaneError as exc:
        print(f"dev-cluster: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dev-cluster: interrupted", file=sys.stderr)
        return 130
