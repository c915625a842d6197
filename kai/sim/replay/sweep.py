"""``kai-scheduler replay --seeds ...``: one run per seed, in local processes or as tasks on a Ray cluster.

With ``--ray ADDRESS`` (the ``ray`` extra) each seed is one Ray task running the same :func:`run_one` as a
local process would, so the reports are the same (``wall_s`` aside). ``ADDRESS`` is what ``ray.init``
takes: ``auto`` (the cluster this machine belongs to), ``ray://host:10001`` (a remote one) or ``local`` (a
new single-machine one). A process already connected to Ray keeps its connection. The node and pod files
are read by the tasks, so they must be readable at the same paths on the Ray workers (the shipped trace
is, wherever kai-scheduler is installed).
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from kai.common.errors import ConfigError


def sweep(replay, seeds: list[int], jobs: int, ray_address: str | None) -> list[dict]:
    """One report per seed, in seed order: on a Ray cluster when ``ray_address`` is given, else in ``jobs``
    local processes."""
    if ray_address:
        return ray_sweep(replay, seeds, ray_address)
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(run_one, [replay] * len(seeds), seeds))


def run_one(replay, seed: int) -> dict:
    """The report of one seeded run (what a sweep's worker returns)."""
    return replay.run(seed)[0]


def ray_sweep(replay, seeds: list[int], address: str) -> list[dict]:
    """One report per seed, in seed order, computed as Ray tasks."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray: needs the 'ray' extra (pip install 'kai-scheduler[ray]')") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(run_one)
        return ray.get([task.remote(replay, seed) for seed in seeds])
    finally:
        if started:
            ray.shutdown()
