"""Queue-order timings, compiled vs pure Python: sorting sibling queues with KAI's DRF comparison.

Run: ``python bench/queueorder_bench.py [--queues 1000] [--repeat 5]``.
Prints the best time to sort the queues once and per comparison, and the speed-up. Not a test.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import random
import timeit


def build_sides(n: int, seed: int = 7) -> list[list]:
    """One argument list (fair, allocated, request, victims, deserved, limit, priority) per queue."""
    rng = random.Random(seed)
    sides = []
    for _ in range(n):
        deserved = [rng.choice([-1.0, 0.0, 4000.0]), rng.choice([-1.0, 2e10]), float(rng.choice([0, 1, 2, 4]))]
        sides.append([
            [rng.uniform(0, 8000), rng.uniform(0, 4e10), float(rng.randint(0, 8))],
            [rng.uniform(0, 8000), rng.uniform(0, 4e10), float(rng.randint(0, 8))],
            [1000.0, 2**30, float(rng.randint(0, 2))],
            None, deserved, [-1.0, -1.0, rng.choice([-1.0, 16.0])], rng.choice([50, 100, 200]),
        ])
    return sides


def best_seconds(impl, sides, totals, repeat: int) -> tuple[float, int]:
    calls = 0

    def cmp(a, b):
        nonlocal calls
        calls += 1
        return impl.compare(*a, *b, totals) or 0

    key = functools.cmp_to_key(cmp)
    seconds = min(timeit.repeat(lambda: sorted(sides, key=key), number=1, repeat=repeat))
    return seconds, calls // repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sides, totals = build_sides(args.queues), [64000.0, 5e11, 64.0]
    pure = importlib.import_module("kai._native.queueorder_py")
    pure_s, calls = best_seconds(pure, sides, totals, args.repeat)
    print(f"sort {args.queues} sibling queues ({calls} comparisons)")
    print(f"  pure    {pure_s * 1e3:9.3f} ms   {pure_s / calls * 1e6:6.2f} us/comparison")
    try:
        native = importlib.import_module("kai._native.queueorder")
    except ImportError:
        print("  native  (not built)")
        return
    native_s, _ = best_seconds(native, sides, totals, args.repeat)
    per_call = native_s / calls * 1e6
    print(f"  native  {native_s * 1e3:9.3f} ms   {per_call:6.2f} us/comparison   x{pure_s / native_s:.1f}")


if __name__ == "__main__":
    main()
