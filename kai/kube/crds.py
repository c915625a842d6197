"""``kai-scheduler crds apply``: KAI's CRDs as this version ships them, created or upgraded in the cluster.

Helm installs a chart's ``crds/`` once and never upgrades them; the chart's pre-install and pre-upgrade hook
runs this command instead (KAI's crd-upgrader). Each CRD of the package (``kai/crds``, which ``deploy/crds``
links to) is compared with the stored one through a server-side dry run, and applied with server-side apply
(field manager ``kai-scheduler``, conflicts forced) only when it would change: an unchanged CRD is left as
it is, resource version included.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from kai.kube.client import ApiError, Kube

#: The CRD files shipped in the package.
FOLDER = Path(__file__).resolve().parents[1] / "crds"
CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "kai-scheduler"


def shipped(folder: Path = FOLDER) -> list[dict]:
    """The CRDs of ``folder``, by file name."""
    return [yaml.safe_load(path.read_text()) for path in sorted(folder.glob("*.yaml"))]


def _apply(kube: Kube, crd: dict, dry_run: bool) -> dict:
    query = {"fieldManager": FIELD_MANAGER, "force": True, **({"dryRun": "All"} if dry_run else {})}
    return kube.request("PATCH", f"{CRDS_PATH}/{crd['metadata']['name']}", query, crd, content_type=APPLY_PATCH)


def apply_crd(kube: Kube, crd: dict) -> str:
    """Creates or upgrades one CRD: ``created``, ``upgraded`` or ``unchanged``."""
    try:
        stored = kube.get(f"{CRDS_PATH}/{crd['metadata']['name']}")
    except ApiError as exc:
        if exc.status != 404:
            raise
        _apply(kube, crd, dry_run=False)
        return "created"
    if _apply(kube, crd, dry_run=True)["spec"] == stored["spec"]:
        return "unchanged"
    _apply(kube, crd, dry_run=False)
    return "upgraded"


def apply_all(kube: Kube, crds: list[dict]) -> dict[str, str]:
    """Each CRD's name and what :func:`apply_crd` did."""
    return {crd["metadata"]["name"]: apply_crd(kube, crd) for crd in crds}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="kai-scheduler crds", description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("apply",), help="apply: create or upgrade the CRDs shipped with this version")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    args = p.parse_args(argv)
    try:
        kube = Kube.connect(args.kubeconfig)
    except Exception as exc:  # noqa: BLE001 - kubeconfig and in-cluster loading raise many types
        print(f"kai-scheduler crds: cannot load a Kubernetes configuration: {exc}", file=sys.stderr)
        return 2
    try:
        for name, outcome in apply_all(kube, shipped()).items():
            print(f"{name} {outcome}")
    except ApiError as exc:
        print(f"kai-scheduler crds: {exc}", file=sys.stderr)
        return 1
    return 0
