"""KAI's Go benchmarks and this scheduler's side by side, on the same shapes.

Run: ``python bench/kai_go.py [--kai-source DIR | --kai-git GITDIR] [--repeat N] [--scale 500 1000 ...]
[--if-available]``.

KAI's source at the pinned commit comes from the cache the KAI e2e harness keeps
(``tests/kai-e2e/kaisource.py``; a checkout with ``--kai-source``, or exported from a clone with ``--kai-git``). Its
``pkg/scheduler/actions`` benchmarks are compiled once with ``go test -c``, with the allocate
benchmark grown to the scale shapes of ``bench/scale.py`` added through a build overlay (KAI's tree
is not changed). Each benchmark runs ``N`` times one iteration (``-test.benchtime 1x``); this
scheduler runs the same shape through ``kai-scheduler bench`` (KAI's topology files in
``bench/topologies``) or ``bench/scale.py``. Prints the medians, wall clock for both, and the ratio
(KAI / this scheduler). Not a test: no pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout as _stdout_to
from pathlib import Path

from kai.dev.gobuild import MissingToolError, go_command, go_environment

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "kai-e2e"))  # KAI's source comes from the e2e harness's cache
from kaisource import KAI_COMMIT, KaiE2EError, cache_dir, kai_source  # noqa: E402

ACTIONS = "pkg/scheduler/actions"
OVERLAY_NAME = "zz_scale_benchmark_test.go"
SCALE_SIZES = (500, 1000, 2000)
_LINE = re.compile(r"^(Benchmark\w+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op")


def scale_benchmarks(sizes: tuple[int, ...]) -> str:
    """Go source of the allocate benchmark grown to ``sizes`` nodes, 5 pending jobs per node."""
    funcs = "".join(f"\nfunc BenchmarkScaleAllocate_{n}Nodes(b *testing.B) {{\n"
                    f"\tbenchmarkAllocate(b, {n}, {5 * n})\n}}\n" for n in sizes)
    return f'package actions_test\n\nimport "testing"\n{funcs}'


def build(root: Path, source: Path, sizes: tuple[int, ...]) -> Path:
    """KAI's action benchmarks and the scale ones, compiled into one test binary (cached per sizes)."""
    target = root / "bin" / KAI_COMMIT / f"actions-bench-{'-'.join(map(str, sizes)) or 'kai'}.test"
    if os.access(target, os.X_OK):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kai-go-bench-") as tmp:
        overlay: list[str] = []
        if sizes:
            added = Path(tmp) / OVERLAY_NAME
            added.write_text(scale_benchmarks(sizes))
            (Path(tmp) / "overlay.json").write_text(
                json.dumps({"Replace": {str(source / ACTIONS / OVERLAY_NAME): str(added)}}))
            overlay = [f"-overlay={Path(tmp) / 'overlay.json'}"]
        print(f"building KAI's action benchmarks at {KAI_COMMIT[:8]} (go test -c; the first build takes minutes)",
              file=sys.stderr, flush=True)
        subprocess.run([go_command("KAI's benchmarks"), "test", "-c", *overlay, "-o", str(target), f"./{ACTIONS}"],
                       cwd=source, env=go_environment(root), check=True, stdin=subprocess.DEVNULL)
    return target


def go_seconds(binary: Path, source: Path, name: str, repeat: int) -> float | None:
    """Median seconds per iteration of KAI's benchmark ``name`` over ``repeat`` one-iteration runs; None when
    KAI's package has no such benchmark."""
    proc = subprocess.run([str(binary), "-test.run", "^$", "-test.bench", f"^{name}$", "-test.benchtime", "1x",
                           "-test.count", str(repeat)], cwd=source / ACTIONS, capture_output=True, text=True,
                          check=True)
    times = [float(m.group(2)) / 1e9 for line in proc.stdout.splitlines() if (m := _LINE.match(line))]
    return statistics.median(times) if times else None


def ours_topologies(repeat: int) -> dict[str, float]:
    """Wall-clock medians of ``kai-scheduler bench`` on KAI's topology files, by KAI's benchmark name."""
    from kai.sim.bench import main as bench_main

    with tempfile.TemporaryFile("w+") as out, _stdout_to(out):
        bench_main([str(HERE / "topologies"), "--repeat", str(repeat), "--json"])
        out.seek(0)
        text = out.read()
    return {r["name"]: r["median_s"] for r in json.loads(text) if not r["skipped"]}


def ours_scale(sizes: tuple[int, ...], repeat: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, str(HERE / "scale.py"), "--json", "--repeat", str(repeat), "--shapes",
                          *(f"allocate-{n}" for n in sizes)], capture_output=True, text=True, check=True).stdout
    return {f"BenchmarkScaleAllocate_{r['shape'].split('-')[1]}Nodes": r["median_s"] for r in json.loads(out)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kai-source", type=Path, help="a checkout of KAI at the pinned commit")
    parser.add_argument("--kai-git", type=Path, help="a clone of KAI to export the pinned commit from")
    parser.add_argument("--repeat", type=int, default=3, metavar="N", help="runs per benchmark (default 3)")
    parser.add_argument("--scale", type=int, nargs="*", default=list(SCALE_SIZES), metavar="NODES",
                        help=f"allocate scale shapes (default {' '.join(map(str, SCALE_SIZES))}; none: skip)")
    parser.add_argument("--no-topologies", action="store_true", help="only the scale shapes")
    parser.add_argument("--if-available", action="store_true",
                        help="without Go or KAI's source, say so in one line and exit 0 (as tox -e bench runs it)")
    args = parser.parse_args(argv)
    root = cache_dir()
    sizes = tuple(args.scale)
    try:
        source = kai_source(root, source=args.kai_source, git_dir=args.kai_git)
        binary = build(root, source, sizes)
    except (MissingToolError, KaiE2EError, OSError, subprocess.CalledProcessError) as err:
        if not args.if_available:
            raise
        print(f"KAI's Go benchmarks skipped: {err}")
        return 0
    ours: dict[str, float] = {} if args.no_topologies else ours_topologies(args.repeat)
    if sizes:
        ours.update(ours_scale(sizes, args.repeat))
    print(f"{'benchmark':48} {'KAI Go':>10} {'this':>10} {'KAI/this':>9}")
    for name, mine in ours.items():
        theirs = go_seconds(binary, source, name, args.repeat)
        if theirs is None:
            print(f"{name:48} {'(none)':>10} {mine * 1000:8.1f}ms  not among KAI's {ACTIONS} benchmarks", flush=True)
        else:
            print(f"{name:48} {theirs * 1000:8.1f}ms {mine * 1000:8.1f}ms {theirs / mine:8.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
