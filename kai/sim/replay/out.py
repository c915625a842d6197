"""``kai-scheduler replay --out DIR``: the run's CSVs, its JSON summary and, with matplotlib, its plots.

Inflate mode writes ``events.csv`` (per arrival) and ``fragmentation.csv``; timed mode ``events.csv``
(per arrival, placement, eviction and completion) and ``cycles.csv`` (per cycle, with each queue's
allocated GPUs and fair share). Both write ``summary.json``.
"""

from __future__ import annotations

import csv
import json
import os

#: What is said when matplotlib is missing.
NO_PLOTS = "replay: plots need the 'plot' extra (pip install 'kai-scheduler[plot]'); wrote the CSVs only"


def write_run(directory: str, record, report: dict) -> str | None:
    """Write the run's files into ``directory``; a one-line note when the plots could not be drawn."""
    os.makedirs(directory, exist_ok=True)
    if report["mode"] == "timed":
        _write_timed(directory, record)
    else:
        _write_inflate(directory, record, report["gpus"] * 1000)
    with open(os.path.join(directory, "summary.json"), "w") as f:
        json.dump(report, f, indent=1)
    try:
        from kai.sim.replay.plots import write_plots
    except ImportError:
        return NO_PLOTS
    write_plots(directory, record, report)
    return None


def _csv(directory: str, name: str, header: list[str], rows) -> None:
    with open(os.path.join(directory, name), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _write_inflate(directory: str, record, capacity: int) -> None:
    _csv(directory, "events.csv",
         ["arrival", "arrived_gpu_milli", "allocated_gpu_milli", "arrived_pct", "allocated_pct"],
         ([i, s.arrived_milli, s.used_milli, round(100 * s.arrived_milli / capacity, 4),
           round(100 * s.used_milli / capacity, 4)] for i, s in enumerate(record.samples, 1)))
    _csv(directory, "fragmentation.csv",
         ["arrival", "arrived_pct", "fragment_gpus", "idle_gpus", "fragment_pct_of_idle"],
         ([n, round(100 * arrived / capacity, 4), round(frag / 1000, 3), round(idle / 1000, 3),
           round(100 * frag / idle, 3) if idle else 0.0] for n, arrived, frag, idle in record.fragmentation))


def _write_timed(directory: str, timeline) -> None:
    _csv(directory, "events.csv", ["time_s", "event", "pod", "queue", "node", "gpu_milli", "allocated_gpu_milli"],
         timeline.events)
    queues = list(dict.fromkeys(q for row in timeline.cycles for q in row[4]))
    _csv(directory, "cycles.csv",
         ["time_s", "allocated_gpus", "pending", "running"]
         + [f"{kind}:{q}" for q in queues for kind in ("allocated", "fair_share")],
         ([t, used / 1000, pending, running] + [v for q in queues for v in shares.get(q, ("", ""))]
          for t, used, pending, running, shares in timeline.cycles))
