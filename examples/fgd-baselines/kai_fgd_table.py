"""``kai-fgd-table``: the FGD paper's table -- unallocated GPU % at 100 % and 130 % arrival, per policy and
seed -- by running ``kai-scheduler replay`` (inflate mode) once per policy config and seed."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CONFIGS = Path(__file__).resolve().parent / "configs"
POLICIES = ("randomfit", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")
PAPER_AT_100 = {"randomfit": 13.75, "dotprod": 9.45, "gpuclustering": 8.42, "gpupacking": 8.20, "bestfit": 7.09,
                "fgd": 4.77}


def replay(config: Path, trace_dir: Path, pods: str, seed: int) -> dict:
    """One inflate replay's JSON result (run in ``trace_dir``, where ``fgd``'s ``trace`` argument points)."""
    cmd = ["kai-scheduler", "replay", "--mode", "inflate", "--nodes", "openb_node_list_gpu_node.csv",
           "--pods", pods, "--config", str(config), "--seed", str(seed), "--target", "130", "--json"]
    out = subprocess.run(cmd, cwd=trace_dir, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("trace_dir", type=Path, help="folder with the Alibaba GPU trace 2023 CSVs")
    ap.add_argument("--pods", default="openb_pod_list_default.csv")
    ap.add_argument("--seeds", default="42-51", help="first-last (the paper: 42-51)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--extra-config", type=Path, action="append", default=[],
                    help="another scheduler config to put in the table (e.g. examples/configs/fragmentation.yaml)")
    args = ap.parse_args(argv)
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last or first) + 1)
    configs = [(p, CONFIGS / f"{p}.yaml") for p in args.policies.split(",")]
    configs += [(c.stem, c.resolve()) for c in args.extra_config]
    print("policy          " + " ".join(f"{s:>6}" for s in seeds) + "  median@100  median@130  paper@100")
    for name, config in configs:
        runs = [replay(config, args.trace_dir, args.pods, s) for s in seeds]
        at100 = [r["unallocated_pct_at"]["100"] for r in runs]
        at130 = [r["unallocated_pct_at"]["130"] for r in runs]
        paper = PAPER_AT_100.get(name)
        print(f"{name:<16}" + " ".join(f"{x:6.2f}" for x in at100)
              + f"  {statistics.median(at100):10.2f}  {statistics.median(at130):10.2f}  "
              + (f"{paper:9.2f}" if paper is not None else f"{'':>9}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
