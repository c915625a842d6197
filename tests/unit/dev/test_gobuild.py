"""The binaries cache: a binary missing from an existing version's cache is built alone, next to the others;
kube-scheduler only when asked for."""

from __future__ import annotations

import os

from kai.dev import gobuild
from kai.dev.gobuild import Binaries, ensure_binaries, ensure_kube_scheduler, version_key


class RecordingBuilder:
    """Stands in for the Go builds: writes an empty executable and records its name."""

    built: list[str] = []

    def __init__(self, root) -> None:
        self.root = root

    def _build(self, target) -> None:
        target.write_text("")
        target.chmod(0o755)
        self.built.append(target.name)

    build_etcd = build_kwok = build_kube_apiserver = build_kube_controller_manager = build_kube_scheduler = _build


def test_a_cache_without_the_controller_manager_gets_only_that_built(tmp_path, monkeypatch):
    bin_dir = tmp_path / version_key() / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("etcd", "kube-apiserver", "kwok"):
        (bin_dir / name).write_text("")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setattr(gobuild, "_GoBuilder", RecordingBuilder)
    monkeypatch.setattr(RecordingBuilder, "built", [])

    binaries = ensure_binaries(tmp_path)

    assert RecordingBuilder.built == ["kube-controller-manager"]
    assert binaries == Binaries.in_dir(bin_dir)
    assert binaries.missing() == [] and os.access(binaries.kube_controller_manager, os.X_OK)
    assert ensure_binaries(tmp_path) == binaries and RecordingBuilder.built == ["kube-controller-manager"]


def test_an_empty_cache_gets_all_four(tmp_path, monkeypatch):
    monkeypatch.setattr(gobuild, "_GoBuilder", RecordingBuilder)
    monkeypatch.setattr(RecordingBuilder, "built", [])
    ensure_binaries(tmp_path)
    assert sorted(RecordingBuilder.built) == ["etcd", "kube-apiserver", "kube-controller-manager", "kwok"]


def test_kube_scheduler_is_built_once_on_request_beside_the_control_planes_binaries(tmp_path, monkeypatch):
    monkeypatch.setattr(gobuild, "_GoBuilder", RecordingBuilder)
    monkeypatch.setattr(RecordingBuilder, "built", [])
    ensure_binaries(tmp_path)
    assert "kube-scheduler" not in RecordingBuilder.built

    path = ensure_kube_scheduler(tmp_path)

    assert path == tmp_path / version_key() / "bin" / "kube-scheduler" and os.access(path, os.X_OK)
    assert ensure_kube_scheduler(tmp_path) == path and RecordingBuilder.built.count("kube-scheduler") == 1
