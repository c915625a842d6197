"""The FGD fragmentation measure of the replay."""

from kai.sim.replay.frag import Fragmentation, typical_shapes
from kai.sim.replay.trace import TracePod


def _pod(name, cpu, milli, num=1, spec=()):
    return TracePod(name, cpu, 1024, num, milli, spec)


def test_typical_shapes_keep_the_most_frequent_until_the_coverage():
    pods = [_pod(f"a{i}", 1000, 1000) for i in range(6)] + [_pod(f"b{i}", 2000, 500) for i in range(3)] + [
        _pod("c", 0, 0, 0)]
    shapes = typical_shapes(pods, 0.85)
    assert shapes == [((1000, 1000, 1, ()), 6 / 9), ((2000, 500, 1, ()), 3 / 9)]


def test_node_fragment_follows_the_paper_cases():
    frag = Fragmentation([_pod("x", 1000, 600)])  # one shape: 1 CPU, 0.6 GPU
    assert frag.node((1000, 300), 8000, "") == 300  # fits on the whole GPU: only the 0.3 sliver is fragment
    assert frag.node((1000, 300), 500, "") == 1300  # too little CPU: every idle GPU is fragment
    assert frag.node((500, 300), 8000, "") == 800  # no device with 0.6 free
    only_t4 = Fragmentation([_pod("y", 1000, 1000, 1, ("T4",))])
    assert only_t4.node((1000,), 8000, "V100") == 1000 and only_t4.node((1000,), 8000, "T4") == 0
    cpu_only = Fragmentation([_pod("z", 1000, 0, 0)])
    assert cpu_only.node((1000, 1000), 8000, "") == 2000
