"""kai-scheduler replay --mode timed on tiny traces: event order, waiting, eviction, queue mapping, bad input."""

import json
from pathlib import Path

import attrs
import pytest

from kai import cli
from kai.framework import DEFAULT_CONFIG
from kai.framework.reservation import ReservationPolicy
from kai.sim.replay.timed import TimedReplay, percentiles

DATA = Path(__file__).parent / "replay_data"
NODES, PODS = str(DATA / "nodes.csv"), str(DATA / "pods.csv")
ONE_NODE, TEAMS = str(DATA / "one_node.csv"), str(DATA / "teams.csv")


def _pod_events(timeline, pod):
    return [(t, kind) for t, kind, name, *_ in timeline.events if name == pod]


def test_events_are_in_time_order_and_each_pod_runs_its_run_time_from_its_placement():
    report, timeline = TimedReplay(NODES, PODS, DEFAULT_CONFIG, 10, "qos").run(42)
    times = [e[0] for e in timeline.events]
    assert times == sorted(times)
    runs = {"pod-0": 100, "pod-1": 190, "pod-2": 280, "pod-3": 370, "pod-4": 460}
    for pod, run in runs.items():
        kinds = _pod_events(timeline, pod)
        assert [k for _, k in kinds] == ["arrive", "place", "complete"]
        (arrived, _), (placed, _), (done, _) = kinds
        assert arrived <= placed and done == placed + run
    assert report["pods"] == report["placed"] == report["completed"] == 5 and report["failed"] == 0


def test_a_pod_that_does_not_fit_waits_and_is_placed_after_a_completion():
    report, timeline = TimedReplay(NODES, PODS, DEFAULT_CONFIG, 10, "qos").run(42)
    # pod-4 asks 2 GPUs at t=40: only node-a has 2, busy with pod-1 (to 200) and pod-2 (to 300)
    assert _pod_events(timeline, "pod-4") == [(40.0, "arrive"), (300.0, "place"), (760.0, "complete")]
    assert report["queueing_delay_s"]["max"] == 260.0
    assert report["jct_s"]["max"] == 720.0
    # no cycle between pod-4's arrival and the completions that could free room: cycles run on events
    assert [row[0] for row in timeline.cycles] == [0.0, 10.0, 20.0, 30.0, 40.0, 100.0, 200.0, 300.0]


@pytest.mark.parametrize("queues", ["teams.yaml", "teams-kai.yaml"])
def test_reclaim_evicts_and_the_evicted_pod_waits_again(queues):
    replay = TimedReplay(ONE_NODE, TEAMS, DEFAULT_CONFIG, 10, "team", str(DATA / queues))
    report, timeline = replay.run(42)
    assert report["evictions"] == 1 and report["failed"] == 0 and report["completed"] == 3
    # b1's queue is under its quota of 1 GPU, a's holds both: reclaim frees one for b1
    assert _pod_events(timeline, "a2") == [(0.0, "arrive"), (0.0, "place"), (30.0, "evict"), (140.0, "place"),
                                           (1140.0, "complete")]
    assert _pod_events(timeline, "b1") == [(30.0, "arrive"), (40.0, "place"), (140.0, "complete")]
    names = {row[3] for row in timeline.events}
    assert names == ({"a", "b"} if queues == "teams.yaml" else {"A", "B"})
    assert set(report["queues"]) == names
    assert timeline.cycles[1][4] == {q: (1.0, 1.0) for q in names}  # fair share split once b1 asks


def test_cli_timed_json(capsys):
    args = ["replay", "--mode", "timed", "--nodes", ONE_NODE, "--pods", TEAMS, "--queue-column", "team", "--json"]
    assert cli.main(args) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("pods", "placed", "failed", "wall_s", "queueing_delay_s", "jct_s", "gpu_utilisation_pct",
                "evictions", "queues"):
        assert key in report
    assert set(report["queues"]) == {"A", "B"}
    assert report["evictions"] == 1  # no quota: equal weights give B half the cluster, reclaimed from A


def test_speedup_brings_arrivals_closer_and_keeps_run_times():
    report, timeline = TimedReplay(NODES, PODS, DEFAULT_CONFIG, 10, "qos", speedup=10).run(42)
    runs = {"pod-0": 100, "pod-1": 190, "pod-2": 280, "pod-3": 370, "pod-4": 460}
    arrivals = {name: t for t, kind, name, *_ in timeline.events if kind == "arrive"}
    assert arrivals == {f"pod-{k}": float(k) for k in range(5)}
    for pod, run in runs.items():
        placed = [t for t, kind in _pod_events(timeline, pod) if kind == "place"]
        done = [t for t, kind in _pod_events(timeline, pod) if kind == "complete"]
        assert done == [placed[-1] + run]
    assert report["speedup"] == 10 and report["completed"] == 5


def test_speedup_is_for_timed_mode_only(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["replay", "--nodes", ONE_NODE, "--pods", TEAMS, "--speedup", "2"])
    assert stop.value.code == 2 and "--speedup" in capsys.readouterr().err


def test_percentiles_nearest_rank():
    assert percentiles([float(v) for v in range(1, 101)]) == {"p50": 50.0, "p90": 90.0, "p99": 99.0, "mean": 50.5,
                                                            "max": 100.0}
    assert percentiles([])["p50"] is None


def _fails(capsys, args, *words):
    assert cli.main(["replay", "--mode", "timed", "--nodes", ONE_NODE, *args]) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_value_no_queue_maps_exits_2_naming_the_files_and_the_column(tmp_path, capsys):
    queues = tmp_path / "q.yaml"
    queues.write_text("queues:\n  - name: a\nmap: {A: a}\n")
    _fails(capsys, ["--pods", TEAMS, "--queue-column", "team", "--queues", str(queues)], TEAMS, "team", "'B'",
           str(queues))


def test_bad_queue_files_exit_2_naming_file_and_field(tmp_path, capsys):
    bad = tmp_path / "q.yaml"
    bad.write_text("queues:\n  - name: a\n    gpu: {deserved: lots}\n")
    _fails(capsys, ["--pods", TEAMS, "--queue-column", "team", "--queues", str(bad)], str(bad), "deserved")
    bad.write_text("queues:\n  - name: a\nmap: {A: nowhere}\n")
    _fails(capsys, ["--pods", TEAMS, "--queue-column", "team", "--queues", str(bad)], str(bad), "map", "nowhere")
    kai = (DATA / "teams-kai.yaml").read_text().replace("overQuotaWeight: 1}\n    cpu", "overQuotaWeight: -3}\n    cpu")
    bad.write_text(kai)
    _fails(capsys, ["--pods", TEAMS, "--queue-column", "team", "--queues", str(bad)], str(bad), "overQuotaWeight")


def test_bad_trace_input_exits_2_naming_file_and_field(tmp_path, capsys):
    _fails(capsys, ["--pods", TEAMS, "--queue-column", "tenant"], TEAMS, "tenant")
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\np,1,1,1,1000,50,20\n")
    _fails(capsys, ["--pods", str(bad)], str(bad), "deletion_time")
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\np,1,1,1,1000,nan\n")
    _fails(capsys, ["--pods", str(bad)], str(bad), "creation_time")
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1000\n")
    _fails(capsys, ["--pods", str(bad)], str(bad), "creation_time")


GANG_TRACE = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,replicas,max_runtime
a,1000,1024,1,1000,0,100,1,100
b,1000,1024,1,1000,0,100,1,100
gang,1000,1024,2,1000,10,110,2,300
c,1000,1024,1,1000,20,120,1,
d,1000,1024,1,1000,70,170,1,
e,1000,1024,1,1000,110,210,1,
f,1000,1024,1,1000,150,250,1,
"""


def _gang_replay(tmp_path, reservation):
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,2,T4\nn2,16000,65536,2,T4\n")
    pods.write_text(GANG_TRACE)
    config = attrs.evolve(DEFAULT_CONFIG, reservation=ReservationPolicy(enabled=reservation, min_gpus=4))
    return TimedReplay(str(nodes), str(pods), config, 10).run(42)


def test_a_gang_runs_as_one_and_a_reservation_starts_it_before_the_stream_of_small_jobs(tmp_path):
    _, off = _gang_replay(tmp_path, False)
    report, on = _gang_replay(tmp_path, True)
    assert [k for _, k in _pod_events(on, "gang")] == ["arrive", "place", "complete"]
    assert [e[5] for e in on.events if e[2] == "gang"] == [4000, 4000, 4000]  # both pods, as one
    assert _pod_events(on, "gang")[1] == (100.0, "place")  # as soon as a and b end; c waited for it
    assert _pod_events(off, "gang")[1] == (250.0, "place")  # the small jobs kept taking the free GPUs
    assert report["placed"] == report["completed"] == 7


def test_a_job_past_its_declared_runtime_is_stopped_not_queued_again(tmp_path):
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,16000,65536,2,T4\n")
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,max_runtime\n"
                    "late,1000,1024,1,1000,0,500,60\nok,1000,1024,1,1000,0,50,60\n")
    report, timeline = TimedReplay(str(nodes), str(pods), DEFAULT_CONFIG, 10).run(42)
    assert [k for _, k in _pod_events(timeline, "late")] == ["arrive", "place", "evict"]
    assert _pod_events(timeline, "late")[2] == (60.0, "evict")
    assert report["stopped_at_runtime_limit"] == 1 and report["evictions"] == 1
