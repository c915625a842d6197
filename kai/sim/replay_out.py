"""``kai-scheduler replay --out DIR``: the per-arrival CSV and the run's JSON summary."""

from __future__ import annotations

import csv
import json
import os

from kai.sim.replay_metric import Sample


def write_samples(directory: str, samples: list[Sample], report: dict) -> None:
    """``events.csv`` (arrival, arrived and allocated milli-GPU, their % of capacity) and ``summary.json``."""
    os.makedirs(directory, exist_ok=True)
    capacity = report["gpus"] * 1000
    with open(os.path.join(directory, "events.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arrival", "arrived_gpu_milli", "allocated_gpu_milli", "arrived_pct", "allocated_pct"])
        for i, s in enumerate(samples, 1):
            w.writerow([i, s.arrived_milli, s.used_milli, round(100 * s.arrived_milli / capacity, 4),
                        round(100 * s.used_milli / capacity, 4)])
    with open(os.path.join(directory, "summary.json"), "w") as f:
        json.dump(report, f, indent=1)
