"""``kai-fgd-table``: the FGD paper's table -- unallocated GPU % at 100 % and 130 % arrival, per policy and
seed -- by running ``kai-scheduler replay`` (inflate mode) once per policy config over all seeds, or from the
saved ``--json`` output of an earlier run (``--results``); ``--plot`` draws the curves of all policies."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from importlib import resources
from pathlib import Path

from kai.testing import trace_file

CONFIGS = Path(str(resources.files("kai_fgd_configs")))
DEFAULT_PODS = "openb_pod_list_default.csv"
POLICIES = ("randomfit", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")
#: The paper's unallocated GPU % on the default pod list over seeds 42-51 (its artifact's results):
#: (median, p25, p75) at 100 % arrival, and the median at 130 %.
PAPER = {"randomfit": ((13.75, 13.41, 13.92), 12.62), "dotprod": ((9.45, 9.31, 9.48), 9.20),
         "gpuclustering": ((8.42, 8.01, 8.67), 8.21), "gpupacking": ((8.20, 7.90, 8.61), 7.94),
         "bestfit": ((7.09, 7.04, 7.27), 6.89), "fgd": ((4.77, 4.70, 4.86), 4.60)}


def replay(config: Path, trace_dir: Path, pods: str, seeds: str, jobs: int) -> list[dict]:
    """The JSON results of one inflate replay per seed (run in ``trace_dir``, where ``fgd``'s ``trace``
    argument points)."""
    cmd = [sys.executable, "-m", "kai.cli", "replay", "--mode", "inflate", "--nodes", "openb_node_list_gpu_node.csv",
           "--pods", pods, "--config", str(config), "--seeds", seeds, "--jobs", str(jobs), "--target", "130",
           "--json"]
    out = subprocess.run(cmd, cwd=trace_dir, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)["runs"]


def reached(runs: list[dict], arrived: str) -> list[float]:
    """The runs' unallocated GPU % at ``arrived`` % arrival, of those that got there."""
    return [v for r in runs if (v := r["unallocated_pct_at"].get(arrived)) is not None]


def spread(values: list[float]) -> str:
    """``median [p25, p75]`` (quartiles interpolated between the sorted values, as numpy does)."""
    if not values:
        return "--"
    if len(values) < 2:
        return f"{values[0]:5.2f} [{values[0]:5.2f}, {values[0]:5.2f}]"
    p25, p50, p75 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{p50:5.2f} [{p25:5.2f}, {p75:5.2f}]"


def load_results(path: Path) -> dict[str, list[dict]]:
    """The saved ``--json`` output of an earlier run: policy name to its runs."""
    try:
        results = json.loads(path.read_text())
        if not isinstance(results, dict) or not results:
            raise ValueError("expected an object mapping policy names to lists of runs")
        for name, runs in results.items():
            if not isinstance(runs, list) or not runs or not all(
                    isinstance(r, dict) and isinstance(r.get("unallocated_pct_at"), dict) for r in runs):
                raise ValueError(f"policy {name!r}: expected a non-empty list of runs with 'unallocated_pct_at'")
    except (OSError, ValueError) as err:
        sys.stderr.write(f"kai-fgd-table: {path}: {err}\n")
        raise SystemExit(2) from None
    return results


def curves(runs: list[dict]) -> list[tuple[float, float, float, float]]:
    """``(arrived %, p25, median, p75)`` of the unallocated GPU % over the runs, at each arrived % they all reached."""
    points = []
    for key in runs[0]["unallocated_pct_at"]:
        values = reached(runs, key)
        if len(values) == len(runs):
            p25, p50, p75 = statistics.quantiles(values * 2, n=4, method="inclusive")
            points.append((float(key), p25, p50, p75))
    return sorted(points)


def plot(results: dict[str, list[dict]], path: Path) -> None:
    """Unallocated GPU % against arrived workload from 80 % on, where the policies part, one line per policy
    (median over the seeds, the band between the quartiles), beside the ideal ``max(0, 100 - X)``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("--plot needs matplotlib: pip install 'kai-scheduler[plot]'")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    top, high = 100.0, 20.0
    for name, runs in results.items():
        pts = [p for p in curves(runs) if p[0] >= 80]
        if not pts:
            continue
        x = [p[0] for p in pts]
        line, = ax.plot(x, [p[2] for p in pts], marker="o", markersize=3, label=f"{name} ({len(runs)} seeds)")
        ax.fill_between(x, [p[1] for p in pts], [p[3] for p in pts], color=line.get_color(), alpha=0.2)
        top, high = max(top, x[-1]), max(high, max(p[3] for p in pts))
    ax.plot([80, 100, top], [20, 0, 0], ":", color="black", label="ideal: max(0, 100 - X)")
    ax.set(xlabel="arrived workload (% of GPU capacity)", ylabel="unallocated GPUs (%)", xlim=(80, top),
           ylim=(0, high * 1.05))
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("trace_dir", type=Path, nargs="?", default=Path(trace_file("nodes")).parent,
                    help="folder with the Alibaba GPU trace 2023 CSVs (default: the trace kai-scheduler ships)")
    ap.add_argument("--pods", default=DEFAULT_PODS, help="pod list in the trace folder (the paper's values are for "
                    "the default one)")
    ap.add_argument("--seeds", default="42-51", help="as kai-scheduler replay takes them (the paper: 42-51)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel replays")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--extra-config", type=Path, action="append", default=[],
                    help="another scheduler config to put in the table (e.g. examples/configs/fragmentation.yaml)")
    ap.add_argument("--json", action="store_true", help="print every run's result as one JSON object instead")
    ap.add_argument("--results", type=Path, help="take the runs from this saved --json output instead of replaying")
    ap.add_argument("--plot", type=Path, help="also draw the policies' curves into this PNG (the plot extra)")
    args = ap.parse_args(argv)
    configs = {p: CONFIGS / f"{p}.yaml" for p in args.policies.split(",") if p}
    unknown = [p for p, c in configs.items() if not c.is_file()]
    if unknown:
        ap.error(f"unknown policies {', '.join(unknown)} (known: {', '.join(POLICIES)})")
    configs.update((c.stem, c.resolve()) for c in args.extra_config)
    saved = load_results(args.results) if args.results else None
    results: dict[str, list[dict]] = {}
    if not args.json:
        print(f"{'policy':<14} {'ours at 100 %':>20}  {'paper at 100 %':>20}  {'ours at 130 %':>20}  "
              f"{'paper':>6}  per seed at 100 %")
    for name in saved or configs:
        runs = results[name] = saved[name] if saved else replay(configs[name], args.trace_dir, args.pods, args.seeds,
                                                                  args.jobs)
        if args.json:
            continue
        at100 = reached(runs, "100")
        at130 = reached(runs, "130")
        paper100, paper130 = PAPER.get(name, (None, None)) if args.pods == DEFAULT_PODS else (None, None)
        paper = f"{paper100[0]:5.2f} [{paper100[1]:5.2f}, {paper100[2]:5.2f}]" if paper100 else ""
        print(f"{name:<14} {spread(at100):>20}  {paper:>20}  {spread(at130):>20}  {paper130 or '':>6}  "
              + " ".join(f"{x:.2f}" for x in at100), flush=True)
    if args.json:
        print(json.dumps(results))
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
