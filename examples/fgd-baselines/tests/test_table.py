"""kai-fgd-table replays each policy over the seeds and reports the paper's metric per seed."""

import json

import pytest
from kai_fgd_table import main, spread

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"node-{k},{32000 if k % 2 else 96000},262144,{2 if k % 2 else 8},{'T4' if k % 2 else 'G2'}\n" for k in range(8))
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
    f"pod-{k:03d},{4000 + 1000 * (k % 7)},8192,{1 if k % 4 else 0},{(300, 1000, 500, 1000)[k % 4]},\n"
    for k in range(60))


def test_spread_is_median_and_quartiles():
    assert spread([7.06, 7.03, 7.11, 7.07, 7.00, 7.16, 7.32, 6.96, 7.36, 7.31]) == " 7.09 [ 7.04,  7.27]"


def test_table_runs_every_policy_over_the_seeds(tmp_path, capsys):
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    args = [str(tmp_path), "--pods", "pods.csv", "--seeds", "42-43", "--policies", "bestfit,randomfit", "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert sorted(first) == ["bestfit", "randomfit"]
    for runs in first.values():
        assert [r["seed"] for r in runs] == [42, 43]
        assert all(r["pods"] > 60 and r["unallocated_pct_at"]["100"] is not None for r in runs)
    main(args)
    again = json.loads(capsys.readouterr().out)
    assert [[r["placed"] for r in runs] for runs in again.values()] == [[r["placed"] for r in runs]
                                                                         for runs in first.values()]


def test_saved_results_give_the_table_and_the_plot(tmp_path, capsys):
    runs = [{"seed": s, "unallocated_pct_at": {"50": 0.1, "100": 7.0 + (s - 42) / 5, "130": 6.5}} for s in (42, 43, 44)]
    saved = tmp_path / "runs.json"
    saved.write_text(json.dumps({"bestfit": runs, "mine": runs[:1]}))
    png = tmp_path / "curves.png"
    assert main(["--results", str(saved), "--plot", str(png)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].startswith("bestfit") and " 7.20 [ 7.10,  7.30]" in table[1] and "7.09" in table[1]
    assert table[2].startswith("mine") and " 7.00 [ 7.00,  7.00]" in table[2]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_malformed_results_file_exits_2_naming_it(tmp_path, capsys):
    saved = tmp_path / "runs.json"
    saved.write_text(json.dumps({"bestfit": [{"seed": 42}]}))
    with pytest.raises(SystemExit) as stop:
        main(["--results", str(saved)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert str(saved) in err and "'bestfit'" in err
