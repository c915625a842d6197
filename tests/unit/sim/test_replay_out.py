"""kai-scheduler replay --out: CSVs in both modes, PNG plots with matplotlib, one line without it."""

import csv
import sys
from pathlib import Path

import pytest

from kai import cli

DATA = Path(__file__).parent / "replay_data"
NODES, PODS, TEAMS = str(DATA / "nodes.csv"), str(DATA / "pods.csv"), str(DATA / "teams.csv")
INFLATE = ["replay", "--nodes", NODES, "--pods", PODS, "--json"]
TIMED = ["replay", "--mode", "timed", "--nodes", NODES, "--pods", TEAMS, "--queue-column", "team", "--json"]


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_timed_out_writes_events_and_cycles(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "kai.sim.replay.plots", None)  # as if matplotlib were missing
    assert cli.main([*TIMED, "--out", str(tmp_path)]) == 0
    note = "replay: plots need the 'plot' extra (pip install 'kai-scheduler[plot]'); wrote the CSVs only"
    assert note in capsys.readouterr().err.splitlines()
    events = _rows(tmp_path / "events.csv")
    assert [(e["event"], e["pod"]) for e in events][:3] == [("arrive", "a1"), ("arrive", "a2"), ("place", "a1")]
    assert sum(e["event"] == "complete" for e in events) == 3
    cycles = _rows(tmp_path / "cycles.csv")
    assert {"time_s", "allocated_gpus", "allocated:A", "fair_share:A", "allocated:B", "fair_share:B"} <= set(cycles[0])
    assert (tmp_path / "summary.json").exists() and not list(tmp_path.glob("*.png"))


def test_inflate_out_writes_the_fragmentation(tmp_path, monkeypatch):
    monkeypatch.setattr("kai.sim.replay.cli.FRAG_EVERY", 1)
    monkeypatch.setitem(sys.modules, "kai.sim.replay.plots", None)
    assert cli.main([*INFLATE, "--out", str(tmp_path)]) == 0
    frag = _rows(tmp_path / "fragmentation.csv")
    assert [int(r["arrival"]) for r in frag] == [1, 2, 3, 4, 5]
    assert all(0 <= float(r["fragment_gpus"]) <= float(r["idle_gpus"]) <= 3 for r in frag)


@pytest.mark.parametrize("args, pngs", [(INFLATE, {"unallocated.png", "fragmentation.png"}),
                                        (TIMED, {"delay_jct.png", "utilisation.png", "queues.png"})])
def test_plots_are_drawn_with_matplotlib(tmp_path, args, pngs):
    pytest.importorskip("matplotlib")
    assert cli.main([*args, "--out", str(tmp_path)]) == 0
    written = {p.name for p in tmp_path.glob("*.png")}
    assert written == pngs
    for name in pngs:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
