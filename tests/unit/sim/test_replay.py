"""kai-scheduler replay on a tiny trace: inflate order, the metric, placements, bad input."""

import json
from pathlib import Path

from kai import cli
from kai.framework import DEFAULT_CONFIG
from kai.sim.replay.cli import parse_seeds
from kai.sim.replay.inflate import Replay, inflate
from kai.sim.replay.metric import Sample, unallocated_pct_at
from kai.sim.replay.trace import read_nodes, read_pods, seeded_names

DATA = Path(__file__).parent / "replay_data"
NODES, PODS = str(DATA / "nodes.csv"), str(DATA / "pods.csv")


def test_metric_averages_the_samples_at_each_rounded_arrival_point():
    # capacity 10 GPUs; arrived 4.96 and 5.04 round to 50 %: allocated 40 % and 50 %, mean 45 -> 55 unallocated
    samples = [Sample(4960, 4000), Sample(5040, 5000), Sample(7900, 6000), Sample(8100, 7000)]
    at = unallocated_pct_at(samples, 10_000)
    assert at["50"] == 55.0
    assert at["80"] == 35.0  # none at 80: the samples at 79 and 81, mean allocation 65 %
    assert at["100"] is None


def test_inflate_appends_resampled_pods_until_the_target_and_is_seeded():
    pods = read_pods(PODS)  # 4.5 GPUs asked of a 3-GPU cluster: nothing to add at 130 %
    assert len(inflate(pods, 3000, 130, 1)) == 5
    grown = inflate(pods, 6000, 130, 7)  # 7.8 GPUs wanted
    assert sum(p.gpu_milli_total for p in grown) <= 7800 and len(grown) > 5
    assert all("-tuned-" in p.name for p in grown[5:])
    assert [p.name for p in grown] == [p.name for p in inflate(pods, 6000, 130, 7)]


def test_node_names_get_a_seeded_prefix_that_orders_ties():
    nodes = read_nodes(NODES)
    a, b = seeded_names(nodes, 42), seeded_names(nodes, 42)
    assert [n.name for n in a] == [n.name for n in b]
    assert sorted(n.name.split("-", 1)[1] for n in a) == sorted(n.name for n in nodes)
    assert sorted(n.name.split("-", 1)[0] for n in a) == [str(k) for k in range(len(nodes))]
    orders = {tuple(sorted(a.name.split("-", 1)[1] for a in seeded_names(nodes, s))) for s in range(20)}
    assert len(orders) == 1  # the same nodes under every seed
    firsts = {min(seeded_names(nodes, s), key=lambda n: n.name).name.split("-", 1)[1] for s in range(20)}
    assert len(firsts) > 1  # but a different node wins a tie


def test_replay_is_deterministic_by_seed_and_drops_what_does_not_fit():
    replay = Replay(NODES, PODS, DEFAULT_CONFIG)
    a, record = replay.run(42)
    samples = record.samples
    b, _ = replay.run(42)
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
    assert a["pods"] == 5 and a["gpus"] == 3
    # 4.5 GPUs asked of 3: the 2-GPU pod and the T4-only pod compete for node-a, one of them fails
    assert a["placed"] + a["failed"] == 5 and a["failed"] >= 1
    assert samples[-1].arrived_milli == 4500
    assert samples[-1].used_milli <= 3000


def test_parse_seeds():
    assert parse_seeds("42-44,50") == [42, 43, 44, 50]


def test_cli_json(capsys):
    assert cli.main(["replay", "--nodes", NODES, "--pods", PODS, "--seed", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["unallocated_pct_at"]) == {"50", "80", "90", "100", "110", "120", "130"}
    assert report["pods"] == report["placed"] + report["failed"] == 5


def test_bad_csv_row_exits_2_naming_file_and_field(tmp_path, capsys):
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,one,1000\n")
    assert cli.main(["replay", "--nodes", NODES, "--pods", str(bad), "--json"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "num_gpu" in err
