"""The resource-reservation image's Dockerfile, checked without docker, and the chart's use of the image."""

from __future__ import annotations

import json
import re
from pathlib import Path

import tomllib
import yaml

from kai.binder import reservation
from support.chart import render_chart

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "deploy" / "images" / "resource-reservation" / "Dockerfile"
CHART = ROOT / "deploy" / "chart" / "kai-scheduler"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined, comments dropped), one list per stage."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    found: list[list[str]] = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            if line.startswith("FROM "):
                found.append([])
            found[-1].append(line.strip())
    return found


def test_the_runtime_stage_is_distroless_non_root_without_a_shell():
    *_, runtime = stages()
    assert re.fullmatch(r"FROM gcr\.io/distroless/python3-debian12:nonroot", runtime[0])
    users = [i.split()[1] for i in runtime if i.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert not [i for i in runtime if i.startswith(("RUN ", "SHELL "))]  # nothing runs a shell in the image
    (entrypoint,) = [i for i in runtime if i.startswith("ENTRYPOINT ")]
    assert json.loads(entrypoint.removeprefix("ENTRYPOINT ")) == ["python3", "-m", "kai.binder.reservationapp"]


def test_the_entrypoint_is_the_console_script_and_its_imports_are_installed():
    module, _, function = PYPROJECT["project"]["scripts"]["kai-resource-reservation"].partition(":")
    assert (module, function) == ("kai.binder.reservationapp", "main")
    build = " ".join(stages()[0])
    # what the program imports through kai (tests/unit/binder/test_reservationapp.py) and NVML's binding
    for package in ("pluggy", "attrs", "nvidia-ml-py"):
        assert re.search(rf'"{package}>=[\d.]+"', build), package
    assert PYPROJECT["project"]["optional-dependencies"]["reservation"] == ["nvidia-ml-py>=12.535"]
    # the builder's Python is the runtime's (Debian 12: 3.11): the wheel is built for it
    assert stages()[0][0].startswith("FROM python:3.11-slim-bookworm")


def test_every_copied_source_exists_and_the_package_is_complete():
    copied = {src for stage in stages() for i in stage if i.startswith("COPY ") and "--from" not in i
              for src in i.split()[1:-1]}
    for source in copied:
        assert (ROOT / source).exists(), source
    needed = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values()) | {"pyproject.toml", "setup_cython.py"}
    assert needed <= copied, needed - copied


def test_the_build_command_in_the_header_names_the_charts_default_image():
    tagged = re.search(r"docker build -f (\S+) -t (\S+):(\S+) \.", DOCKERFILE.read_text())
    assert tagged and ROOT / tagged.group(1) == DOCKERFILE
    values = yaml.safe_load((CHART / "values.yaml").read_text())["components"]["binder"]["resourceReservationImage"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (values["repository"], str(chart["appVersion"])) == (tagged.group(2), tagged.group(3))
    assert reservation.IMAGE == f"{tagged.group(2)}:{tagged.group(3)}"  # the binder's own default


def binder_args(docs) -> list[str]:
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kai-binder")
    return deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def test_the_chart_gives_the_binder_the_reservation_image_and_it_can_be_overridden():
    appversion = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])
    assert f"--resource-reservation-pod-image=kai-resource-reservation:{appversion}" in binder_args(render_chart(CHART))
    image = {"repository": "registry.example/kai/resource-reservation", "tag": "v0.17.0"}
    docs = render_chart(CHART, values={"components": {"binder": {"resourceReservationImage": image}}})
    assert "--resource-reservation-pod-image=registry.example/kai/resource-reservation:v0.17.0" in binder_args(docs)


def test_the_chart_gives_reservation_pods_restricted_security_contexts_and_the_resources_asked_for():
    args = binder_args(render_chart(CHART))
    given = {arg.split("=", 1)[0]: json.loads(arg.split("=", 1)[1]) for arg in args if "=" in arg and "{" in arg}
    assert given["--resource-reservation-pod-security-context"] == {
        "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert given["--resource-reservation-container-security-context"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert "--resource-reservation-pod-resources" not in given
    resources = {"requests": {"cpu": "1m", "memory": "10Mi"}, "limits": {"memory": "100Mi"}}
    docs = render_chart(CHART, values={"components": {"binder": {"resourceReservation": {
        "podResources": resources, "podSecurityContext": None}}}})
    given = {arg.split("=", 1)[0]: json.loads(arg.split("=", 1)[1]) for arg in binder_args(docs) if "{" in arg}
    assert given["--resource-reservation-pod-resources"] == resources
    assert "--resource-reservation-pod-security-context" not in given
