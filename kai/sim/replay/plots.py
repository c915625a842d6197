"""The PNG plots of ``kai-scheduler replay --out DIR``, drawn with matplotlib (the ``plot`` extra).

Inflate mode: ``unallocated.png`` (unallocated GPU % against arrived workload, beside the ideal
``max(0, 100 - X)``) and ``fragmentation.png`` (the FGD measure as arrivals come). Timed mode:
``delay_jct.png`` (distributions of queueing delay and job completion time), ``utilisation.png``
(allocated GPU % over time) and ``queues.png`` (each queue's allocated GPUs beside its fair share).
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend is chosen first

DAY = 86400.0


def write_plots(directory: str, record, report: dict) -> list[str]:
    """Draw the mode's plots into ``directory``; the files written."""
    capacity = report["gpus"] * 1000
    if report["mode"] == "timed":
        figures = {"delay_jct.png": _delay_jct(record), "utilisation.png": _utilisation(record, capacity),
                   "queues.png": _queues(record)}
    else:
        figures = {"unallocated.png": _unallocated(record, capacity),
                   "fragmentation.png": _fragmentation(record, capacity)}
    written = []
    for name, fig in figures.items():
        path = os.path.join(directory, name)
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written


def _unallocated(record, capacity: int):
    fig, ax = plt.subplots(figsize=(6, 4))
    x = [100 * s.arrived_milli / capacity for s in record.samples]
    ax.plot(x, [100 - 100 * s.used_milli / capacity for s in record.samples], label="replay")
    top = max(x, default=100.0)
    ax.plot([0, 100, max(top, 100)], [100, 0, 0], "--", color="grey", label="ideal: max(0, 100 - X)")
    ax.set(xlabel="arrived workload (% of GPU capacity)", ylabel="unallocated GPUs (%)", xlim=(0, top), ylim=(0, 100))
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


def _fragmentation(record, capacity: int):
    fig, ax = plt.subplots(figsize=(6, 4))
    x = [100 * arrived / capacity for _, arrived, _, _ in record.fragmentation]
    ax.plot(x, [frag / 1000 for _, _, frag, _ in record.fragmentation], label="fragment GPUs")
    ax.plot(x, [idle / 1000 for _, _, _, idle in record.fragmentation], label="idle GPUs")
    ax.set(xlabel="arrived workload (% of GPU capacity)", ylabel="GPUs", title="FGD fragmentation")
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


def _per_pod(timeline) -> tuple[list[float], list[float]]:
    """Queueing delays (first placement - arrival) and completion times (completion - arrival), seconds."""
    arrived: dict[str, float] = {}
    placed: dict[str, float] = {}
    jct = []
    for t, kind, pod, *_ in timeline.events:
        if kind == "arrive":
            arrived[pod] = t
        elif kind == "place":
            placed.setdefault(pod, t)
        elif kind == "complete":
            jct.append(t - arrived[pod])
    return [t - arrived[p] for p, t in placed.items()], jct


def _delay_jct(timeline):
    delays, jct = _per_pod(timeline)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, values, what in ((axes[0], delays, "queueing delay"), (axes[1], jct, "job completion time")):
        s = sorted(values)
        ax.step([max(v, 1.0) for v in s], [(i + 1) / len(s) for i in range(len(s))], where="post")
        ax.set(xscale="log", xlabel=f"{what} (s, below 1 s shown at 1 s)", ylabel="share of pods", ylim=(0, 1),
               title=f"{what} ({len(s)} pods)")
        ax.grid(alpha=0.3)
    return fig


def _utilisation(timeline, capacity: int):
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.step([e[0] / DAY for e in timeline.events], [100 * e[6] / capacity for e in timeline.events], where="post",
            linewidth=0.7)
    ax.set(xlabel="trace time (days)", ylabel="allocated GPUs (%)", title="GPU utilisation")
    ax.grid(alpha=0.3)
    return fig


def _queues(timeline):
    fig, ax = plt.subplots(figsize=(8, 4))
    names = list(dict.fromkeys(q for row in timeline.cycles for q in row[4]))
    times = [row[0] / DAY for row in timeline.cycles]
    for i, name in enumerate(names):
        color = f"C{i % 10}"
        values = [row[4].get(name, (0.0, 0.0)) for row in timeline.cycles]
        ax.step(times, [v[0] for v in values], where="post", color=color, linewidth=0.8, label=f"{name} allocated")
        ax.step(times, [v[1] for v in values], where="post", color=color, linewidth=0.8, linestyle="--",
                label=f"{name} fair share")
    ax.set(xlabel="trace time (days)", ylabel="GPUs", title="per-queue allocation (solid) and fair share (dashed)")
    if names:
        ax.legend(fontsize="small", ncol=2)
    ax.grid(alpha=0.3)
    return fig
