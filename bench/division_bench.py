"""Fair-share division timings, compiled vs pure Python, on a 3-level tree of 1,000 queues.

Run: ``python bench/division_bench.py [--queues-per-level 10 90 900] [--repeat 20]``.
Prints one line per implementation and input kind (lists, or ``array.array`` read in place by the
compiled module) with the best time per call, and the speed-up. Not a test: no pass/fail.
"""

from __future__ import annotations

import argparse
import array
import importlib
import random
import timeit

U = -1


def build_tree(per_level: list[int], seed: int = 7) -> dict:
    """Keyword arguments of ``divide_tree`` for a tree with ``per_level[k]`` queues at depth ``k``."""
    rng = random.Random(seed)
    parent: list[int] = []
    previous: list[int] = []
    for count in per_level:
        level = list(range(len(parent), len(parent) + count))
        parent += [rng.choice(previous) if previous else -1 for _ in level]
        previous = level
    n = len(parent)
    request = [0.0] * n
    for i in range(n - 1, -1, -1):  # leaves ask, parents ask for their subtree
        if i >= n - per_level[-1]:
            request[i] = float(rng.randint(0, 16))
        if parent[i] != -1:
            request[parent[i]] += request[i]
    return {
        "total": float(sum(request) * 0.6),
        "parent": parent,
        "deserved": [rng.choice([U, 0, 1, 2, 4]) for _ in range(n)],
        "max_allowed": [rng.choice([U, U, 8, 32]) for _ in range(n)],
        "over_quota_weight": [rng.choice([0, 1, 1, 2, 3]) for _ in range(n)],
        "priority": [rng.choice([50, 100, 100, 200]) for _ in range(n)],
        "request": request,
        "usage": [rng.random() * 0.2 for _ in range(n)],
        "rank": list(range(n)),
        "k_value": 1.0,
    }


def as_arrays(kw: dict) -> dict:
    out = dict(kw)
    for name in ("deserved", "max_allowed", "over_quota_weight", "request", "usage"):
        out[name] = array.array("d", kw[name])
    for name in ("parent", "priority", "rank"):
        out[name] = array.array("q", kw[name])
    return out


def best_seconds(fn, kw: dict, repeat: int) -> float:
    number = max(1, int(0.2 / max(timeit.timeit(lambda: fn(**kw), number=1), 1e-6)))
    return min(timeit.repeat(lambda: fn(**kw), number=number, repeat=repeat)) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues-per-level", type=int, nargs="+", default=[10, 90, 900])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    kw = build_tree(args.queues_per_level)
    pure = importlib.import_module("kai._native.division_py")
    try:
        native = importlib.import_module("kai._native.division")
    except ImportError:
        native = None
    print(f"divide_tree, {len(kw['parent'])} queues in levels of {args.queues_per_level}")
    pure_s = best_seconds(pure.divide_tree, kw, args.repeat)
    print(f"  pure    lists   {pure_s * 1e3:9.3f} ms")
    if native is None:
        print("  native  (not built)")
        return
    assert native.divide_tree(**kw) == pure.divide_tree(**kw)
    for label, inputs in (("lists", kw), ("arrays", as_arrays(kw))):
        native_s = best_seconds(native.divide_tree, inputs, args.repeat)
        print(f"  native  {label:7} {native_s * 1e3:9.3f} ms   x{pure_s / native_s:.1f}")


if __name__ == "__main__":
    main()
