"""``kai-scheduler dev-cluster build|up|down|env|status|kai-e2e``: a local control plane for trying and testing."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from kai.common.durations import parse_duration
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
    e2e = sub.add_parser(
        "kai-e2e", help="run KAI's own e2e suites against kai-scheduler run on a private control plane",
        description="Build KAI's e2e suites (Go) once, start a private control plane with kwok GPU nodes and "
        "'kai-scheduler run', run every suite not excluded and print passed/failed/skipped/excluded per suite. "
        "Run from the repository's root (it reads deploy/ and tests/kai-e2e/exclusions.yaml).")
    e2e.add_argument("suites", nargs="*", metavar="SUITE",
                     help="suites (paths under KAI's test/e2e/suites, or folders of them); default: all")
    e2e.add_argument("--exclusions", type=Path, default=Path("tests/kai-e2e/exclusions.yaml"),
                     help="exclusions and failure classes (default: %(default)s)")
    e2e.add_argument("--deploy", type=Path, default=Path("deploy"), help="the deploy folder (default: %(default)s)")
    e2e.add_argument("--out", type=Path, default=Path("kai-e2e-results"),
                     help="results.md, results.json, reports and logs (default: %(default)s)")
    source = e2e.add_mutually_exclusive_group()
    source.add_argument("--kai-git", type=Path, metavar="GIT_DIR",
                        help="export KAI's source at the pinned commit from this clone (default: the Go module proxy)")
    source.add_argument("--kai-source", type=Path, metavar="DIR", help="a checkout of KAI at the pinned commit")
    e2e.add_argument("--spec-timeout", type=parse_duration, default=360.0, metavar="DURATION",
                     help="time budget per spec that will run (default: 6m)")
    e2e.add_argument("--suite-timeout", type=parse_duration, default=2700.0, metavar="DURATION",
                     help="most time one suite may take (default: 45m)")
    e2e.add_argument("--gpu-nodes", type=int, default=4, help="kwok nodes with 8 GPUs each (default: %(default)s)")
    e2e.add_argument("--run-arg", action="append", default=[], metavar="ARG",
                     help="an extra argument of 'kai-scheduler run' (repeatable)")
    e2e.add_argument("--build-only", action="store_true", help="only build the suites")
    e2e.add_argument("--summarize-only", action="store_true",
                     help="only sum up and classify again the reports of an earlier run in --out")
    return parser


def _kai_e2e(args: argparse.Namespace) -> int:
    from kai.dev import kaie2e
    from kai.dev.kaisuites import ExclusionsError, load_catalogue

    try:
        catalogue = load_catalogue(args.exclusions)
    except ExclusionsError as exc:
        print(f"dev-cluster: {exc}", file=sys.stderr)
        return 2
    if args.summarize_only:
        results = kaie2e.summarize_again(catalogue, args.out)
        return 1 if any(r.failed or r.failures or r.error for r in results) else 0
    if not (args.deploy / "crds").is_dir():
        print(f"dev-cluster: {args.deploy} has no crds/; run from the repository's root or pass --deploy",
              file=sys.stderr)
        return 2
    # a TERM (a background run cannot be stopped with INT) unwinds like Ctrl-C: the suite, kai-scheduler run and
    # the control plane are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = kaie2e.run(catalogue, args.deploy, args.out, args.suites, source=args.kai_source,
                         git_dir=args.kai_git, spec_timeout=args.spec_timeout, suite_timeout=args.suite_timeout,
                         gpu_nodes=args.gpu_nodes, run_args=args.run_arg, build_only=args.build_only)
    return 1 if any(r.failed or r.failures or r.error for r in results) else 0


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
        if args.command == "kai-e2e":
            return _kai_e2e(args)
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
