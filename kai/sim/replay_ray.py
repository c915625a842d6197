"""``kai-scheduler replay --seeds ... --ray ADDRESS``: a sweep's runs as tasks on a Ray cluster (the ``ray`` extra).

Each seed is one Ray task running the same :meth:`run` as a local process would, so the reports are the
same (``wall_s`` aside). ``ADDRESS`` is what ``ray.init`` takes: ``auto`` (the cluster this machine
belongs to), ``ray://host:10001`` (a remote one) or ``local`` (a new single-machine one). A process
already connected to Ray keeps its connection. The node and pod files are read by the tasks, so they
must be readable at the same paths on the Ray workers (the shipped trace is, wherever kai-scheduler is
installed).
"""

from __future__ import annotations

from kai.common.errors import ConfigError


def ray_sweep(replay, seeds: list[int], address: str) -> list[dict]:
    """One report per seed, in seed order, computed as Ray tasks."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray: needs the 'ray' extra (pip install 'kai-scheduler[ray]')") from None
    from kai.sim.replay import run_one

    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(run_one)
        return ray.get([task.remote(replay, seed) for seed in seeds])
    finally:
        if started:
            ray.shutdown()
