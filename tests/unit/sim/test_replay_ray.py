"""A replay sweep on Ray gives the same reports as local processes (skipped without the ray extra)."""

from pathlib import Path

import pytest

from kai.framework import DEFAULT_CONFIG
from kai.sim.replay.inflate import Replay
from kai.sim.replay.sweep import sweep
from kai.sim.replay.timed import TimedReplay

ray = pytest.importorskip("ray")

DATA = Path(__file__).parent / "replay_data"


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _without_wall(reports):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in reports]


@pytest.mark.parametrize("replay", [
    Replay(str(DATA / "nodes.csv"), str(DATA / "pods.csv"), DEFAULT_CONFIG),
    TimedReplay(str(DATA / "one_node.csv"), str(DATA / "teams.csv"), DEFAULT_CONFIG, 10, "team"),
], ids=["inflate", "timed"])
def test_ray_sweep_equals_the_local_sweep(local_ray, replay):
    seeds = [3, 4, 5]
    on_ray = sweep(replay, seeds, 1, "auto")
    local = sweep(replay, seeds, 2, None)
    assert [r["seed"] for r in on_ray] == seeds
    assert _without_wall(on_ray) == _without_wall(local)
