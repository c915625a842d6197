"""KAI's source at the pinned commit (:data:`KAI_COMMIT`), for the e2e harness (``kaie2e.py``) and
``bench/kai_go.py``: kept in a cache (``$KAI_E2E_CACHE``, default ``~/.cache/kai-scheduler/kai-e2e``), which
also holds the Go caches and the compiled suites; it comes from the Go module proxy, or is exported from a git
clone, or a checkout is taken as is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kai.dev.gobuild import ControlPlaneError, cache_root, go_command, go_environment

KAI_MODULE = "github.com/kai-scheduler/KAI-scheduler"
KAI_COMMIT = "d5bc503a146317e51037d89775d77172c6d12f71"


class KaiE2EError(ControlPlaneError):
    """KAI's source could not be had, a suite not built, or the cluster not prepared."""


def log(message: str) -> None:
    """A line of the run's progress on stderr."""
    print(f"[kai-e2e] {message}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """KAI's source, the Go caches and the compiled suites."""
    env = os.environ.get("KAI_E2E_CACHE")
    return Path(env).expanduser() if env else cache_root().parent / "kai-e2e"


def kai_source(root: Path, commit: str = KAI_COMMIT, source: Path | None = None, git_dir: Path | None = None) -> Path:
    """A folder with KAI's source at ``commit``: ``source`` as given, else the cached copy, else exported
    from the clone ``git_dir``, else downloaded from the Go module proxy."""
    if source is not None:
        if not (source / "go.mod").is_file():
            raise KaiE2EError(f"{source} has no go.mod: not a checkout of KAI")
        return source
    dest = root / "src" / commit
    if (dest / "go.mod").is_file():
        return dest
    tmp = root / "src" / f".{commit}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if git_dir is not None:
        log(f"exporting {commit} from {git_dir}")
        archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", commit], capture_output=True)
        if archive.returncode != 0:
            raise KaiE2EError(f"git archive {commit} failed in {git_dir}: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    else:
        log(f"downloading {KAI_MODULE}@{commit} from the Go module proxy")
        proc = subprocess.run([go_command("KAI's e2e suites"), "mod", "download", "-json", f"{KAI_MODULE}@{commit}"],
                              capture_output=True, text=True, env=go_environment(root), stdin=subprocess.DEVNULL)
        info = json.loads(proc.stdout or "{}")
        if proc.returncode != 0 or "Dir" not in info:
            raise KaiE2EError(
                f"the Go module proxy did not give {KAI_MODULE}@{commit}: {info.get('Error') or proc.stderr.strip()}; "
                "pass --kai-git with a clone of https://github.com/kai-scheduler/KAI-Scheduler, or --kai-source "
                "with a checkout of that commit")
        shutil.copytree(info["Dir"], tmp, dirs_exist_ok=True)
    os.replace(tmp, dest)
    return dest
