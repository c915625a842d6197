"""``bench/scale.py``: the generated scale shapes load and schedule as described."""

import importlib.util
from pathlib import Path

from kai.framework import Session
from kai.sim.conformance import Runner
from kai.sim.scenario import NOW, job_uid, load_scenarios

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("scale_bench", ROOT / "bench" / "scale.py")
scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale)


def _run(data):
    scenario = load_scenarios("<generated>", [data])[0]
    session = Session(scenario.build(NOW), Runner().plugins(scenario)).open()
    session.run_actions(scenario.actions)
    return scenario, session


def test_allocate_shape_is_kais_allocate_benchmark_grown():
    scenario, session = _run(scale.allocate_shape(4))
    assert len(scenario.data["nodes"]) == 4 and len(scenario.data["jobs"]) == 20
    assert {q["name"] for q in scenario.data["queues"]} == {"dept-a", "dept-b", *(f"queue-{i}" for i in range(4))}
    placed = [d for d in session.decisions if d.kind == "bind"]
    assert len(placed) == 20  # 32 GPUs for 20 single-GPU jobs
    per_node = {}
    for d in placed:
        per_node[d.node] = per_node.get(d.node, 0) + 1
    assert sorted(per_node.values()) == [4, 8, 8]  # binpack fills nodes in name order


def test_cycle_shape_runs_the_full_cycle_on_a_busy_cluster():
    data = scale.cycle_shape(nodes=3, running_per_node=5, gpu_pods_per_node=2, pending=4, queues=2)
    scenario, session = _run(data)
    running = [j for j in data["jobs"] if j["tasks"][0]["state"] == "Running"]
    assert len(running) == 15 and sum(1 for j in running if j["gpus_per_task"]) == 6
    assert scenario.actions == ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
    assert sorted(d.task.job for d in session.decisions if d.kind == "bind") == [job_uid(f"job-{i}") for i in range(4)]


def test_an_unknown_shape_is_refused_with_the_known_ones():
    try:
        scale.shape("allocate-many")
    except SystemExit as exc:
        assert "allocate-500" in str(exc) and "cycle-5000" in str(exc)
    else:
        raise AssertionError("an unknown shape was accepted")


def test_a_steady_run_reports_the_phases_of_cycles_on_a_reused_snapshot():
    result = scale.run_shape("allocate-4", 1, steady=True)
    assert result["steady"] and set(result["phases_cpu_median_s"]) == {"snapshot", "open", "actions", "close"}
    assert abs(sum(result["phases_cpu_median_s"].values()) - result["cpu_median_s"]) < 1e-9
    assert result["peak_rss_mib"] > 0


def test_the_live_cycle_shape_times_the_scheduler_cycle_by_part_while_pods_change():
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import live_cycle
    finally:
        sys.path.remove(str(ROOT / "bench"))
    result = live_cycle.run(50, 10)  # 400 GPUs: 360 running, 16 bound, 10 pods arriving before each of 12 cycles
    assert set(result["phases_cpu_median_s"]) == set(live_cycle.PARTS) and result["repeats"] == 10
    assert result["writes"]["bind"] == 400 - 376  # the free GPUs are taken, no more
    assert result["decisions"] == live_cycle.run(50, 10)["decisions"]
