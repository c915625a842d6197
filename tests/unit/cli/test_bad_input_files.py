"""Every file input of the CLI refuses bad data with exit code 2 and one line naming the file, entry and field."""

from __future__ import annotations

import sys
import types

import pytest

import kai.cli
import kai.run
from kai.cli import main
from kai.common.errors import ConfigError

NODE = "{name: a, cpu: '8', memory: 8Gi"
SCENARIO = """\
- name: s
  actions: [allocate]
  mode: {mode}
  config: {{plugins: default}}
  nodes: {{n0: {{gpus: {gpus}}}}}
  queues: [{{name: q0, deserved_gpus: 2}}]
  jobs: [{{name: j, queue: q0, gpus_per_task: 1, tasks: [{{state: Pending, node: {node}}}]}}]
  expected: {expected}
  simulation: {{rounds_until_match: {rounds}}}
"""


def scenario(mode="single_session", gpus="2", node="null", expected="{}", rounds="2") -> str:
    return SCENARIO.format(mode=mode, gpus=gpus, node=node, expected=expected, rounds=rounds)


def alias_bomb(top_level: str) -> str:
    text = f"{top_level}: &a0 [x, x, x, x, x, x, x, x, x]\n"
    return text + "".join(f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]\n" for k in range(1, 9))


def refused(capsys, tmp_path, argv_before: list[str], content, argv_after=()) -> str:
    """Run the CLI on ``content``; it must exit 2 with one line naming the file. Returns the rest of the line."""
    path = tmp_path / "input.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    assert main([*argv_before, str(path), *argv_after]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and captured.err.endswith("\n")
    prefix = f"kai-scheduler {argv_before[0]}: {path}: "
    assert captured.err.startswith(prefix), captured.err
    return captured.err[len(prefix):-1]


@pytest.mark.parametrize("text, message", [
    (f"nodes: [{NODE}, gpus: [1]}}]", "nodes[0] 'a': field 'gpus' must be a whole number, not a list"),
    ("nodes: [{name: a, cpu: '1e400', memory: 8Gi}]", "nodes[0] 'a': field 'cpu' must be at most 9.22337e+18 in size"),
    ("nodes: [{name: a, cpu: .nan, memory: 8Gi}]", "field 'cpu' must be a finite number, not nan"),
    (f"nodes: [{NODE}, count: 10000000000}}]", "field 'count' must be at most 10000, not 10000000000"),
    (f"nodes: [{NODE}, count: 6000}}, {NODE}, count: 6000}}]",
     "nodes[1] 'a': the file describes more than 10,000 nodes"),
    (f"nodes: [{NODE}, gpu_memory: 1Ei}}]", "field 'gpu_memory' must be at most 2147483647 MiB"),
    (f"nodes: [{NODE}, labels: {{zone: [a]}}}}]", "field 'labels' must map names to strings; 'zone' maps to a list"),
    ("workloads: [{name: w, queue: q, replicas: 100001}]", "field 'replicas' must be at most 100000"),
    ("workloads: [{name: w, queue: q, replicas: 60000}, {name: v, queue: q, replicas: 60000}]",
     "workloads[1] 'v': the file describes more than 100,000 pods"),
    (f"nodes: [{NODE}}}]\nworkloads: [{{name: w, queue: q, running_on: [[a]]}}]",
     "workloads[0] 'w': field 'running_on' must list strings; item 0 is a list"),
    ("workloads: [{name: w, queue: q, priority: 99999999999}]", "field 'priority' must be at most 2147483647"),
    ("workloads: [{name: [w], queue: q}]", "workloads[0]: field 'name' is missing or not a string"),
    ("queues: [{name: q, gpu: {deserved: .inf}}]", "queues[0] 'q': gpu: field 'deserved' must be a finite number"),
    ("queues: [{name: q, gpu: {over_quota_weight: -2}}]", "field 'over_quota_weight' must be at least 0, not -2"),
    ("queues: [{name: q, preempt_min_runtime: 99999999999999999999h}]", "field 'preempt_min_runtime' must be"),
    ("cycles: 1000000", "field 'cycles' must be at most 1000, not 1000000"),
    ("config: {stalenessGracePeriodSeconds: 1.0e+400}", "config: field 'stalenessGracePeriodSeconds' must be a finite"),
    ("config: {usageDBConfig: {clientType: in-process, usageParams: {waitTimeout: -1s}}}",
     "field 'waitTimeout' must be from 0 to 1e+09 seconds, not '-1s'"),
    ("just text", "must be a cluster file (a mapping) or a list of scenarios, not 'just text'"),
    ("", "must be a cluster file (a mapping) or a list of scenarios, not null"),
    (b"nodes: []\n\xc3\x28", "not valid UTF-8 at byte 10"),
    (alias_bomb("nodes"), "not valid YAML: more than 1,000,000 values"),
    ("nodes: &n [*n]", "not valid YAML: alias *n is used inside the node it names"),
    ("nodes: " + "[" * 100 + "]" * 100, "not valid YAML: nested deeper than 64 levels"),
    ('nodes: [{name: "a\\u2028b", cpu: x, memory: 1}]', "nodes[0] 'a\\u2028b': field 'cpu': 'x' is not a Kubernetes"),
])
def test_simulate_refuses_a_bad_cluster_file(capsys, tmp_path, text, message):
    assert message in refused(capsys, tmp_path, ["simulate"], text)


@pytest.mark.parametrize("content, message", [
    (scenario(gpus="'1e400'"), "scenario 's': nodes['n0']: field 'gpus' must be a whole number, not '1e400'"),
    (scenario(gpus="-1"), "nodes['n0']: field 'gpus' must be at least 0, not -1"),
    (scenario(node="[n0]"), "scenario 's': job 'j': task 'j-0': field 'node' must be a string, not a list"),
    (scenario().replace("state: Pending", "state: Running"),
     "task 'j-0': field 'node' is missing: a Running task occupies a node"),
    (scenario(expected="{max_binds: -1}"), "scenario 's': expected: field 'max_binds' must be at least 0"),
    (scenario(expected="{jobs: {j: {status: Nowhere}}}"), "expected.jobs['j']: field 'status' must be one of"),
    (scenario(mode="simulation", rounds="1000000000"), "simulation: field 'rounds_until_match' must be at most 1000"),
    (scenario(mode="later"), "scenario 's': field 'mode' must be one of single_session, simulation, not 'later'"),
    ("- 1\n", "entry 0: must be a mapping, not 1"),
])
@pytest.mark.parametrize("command", [["simulate"], ["fairshare"], ["conformance"], ["bench", "--repeat", "1"]])
def test_every_scenario_command_refuses_a_bad_scenario_file(capsys, tmp_path, command, content, message):
    assert message in refused(capsys, tmp_path, command[:1], content, command[1:])


def test_bench_names_the_scenario_whose_plugins_cannot_be_built(capsys, tmp_path):
    text = scenario().replace("config: {plugins: default}", "config: {plugins: [nosuch]}")
    assert "scenario 's': unknown plugin 'nosuch'" in refused(capsys, tmp_path, ["bench"], text)


def test_conformance_refuses_a_bad_podgrouper_case_file(capsys, tmp_path):
    text = "- {name: c, grouper: job, pod: {metadata: {name: p}}, objects: [], top_owner: 3, expected: {}}\n"
    assert "case 'c': field 'top_owner' must name objects by their index" in refused(
        capsys, tmp_path, ["conformance"], text)


@pytest.mark.parametrize("content, message", [
    (b"apiVersion: v1\nkind: Pod\nmetadata: {name: \xff}\n", "not valid UTF-8 at byte 42"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n" + alias_bomb("a"),
     "document 2: not valid YAML: more than 1,000,000 values"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: [a]}\n", "document 1: missing or invalid metadata.name"),
])
def test_podgroup_refuses_a_bad_object_file(capsys, tmp_path, content, message):
    assert message in refused(capsys, tmp_path, ["podgroup"], content)


@pytest.mark.parametrize("content, message", [
    (alias_bomb("tiers"), "not valid YAML: more than 1,000,000 values"),
    ("actions: allocate\nmaxConsolidationPreemptees: 1.0e+30", "field 'maxConsolidationPreemptees' must be a whole"),
    ("- allocate\n", "must be a mapping with 'actions' and 'tiers', not a list"),
    ("tiers: [{plugins: [{name: proportion, arguments: [1]}]}]", "field 'arguments' must be a mapping, not a list"),
])
def test_run_refuses_a_bad_configuration_file(capsys, tmp_path, monkeypatch, content, message):
    monkeypatch.setattr(kai.run, "_stop_on_signals", lambda stop: None)
    assert message in refused(capsys, tmp_path, ["run", "--kubeconfig", str(tmp_path / "none"), "--config"],
                              content)


def subcommand(monkeypatch, func) -> None:
    """Make ``kai-scheduler simulate`` run ``func``."""
    module = types.ModuleType("fake_subcommand")
    module.main = func
    monkeypatch.setitem(sys.modules, "fake_subcommand", module)
    monkeypatch.setitem(kai.cli.SUBCOMMANDS, "simulate", ("fake_subcommand:main", "help"))


def test_an_input_error_a_subcommand_leaves_unreported_is_one_line(capsys, monkeypatch):
    def fails(argv):
        raise ConfigError("f.yaml: entry 'a\nb': field 'x' is missing")

    subcommand(monkeypatch, fails)
    assert main(["simulate"]) == 2
    assert capsys.readouterr().err == "kai-scheduler simulate: f.yaml: entry 'a\\nb': field 'x' is missing\n"


def test_a_bug_keeps_its_traceback(monkeypatch):
    def breaks(argv):
        raise KeyError("a bug, not bad input")

    subcommand(monkeypatch, breaks)
    with pytest.raises(KeyError, match="a bug"):
        main(["simulate"])
