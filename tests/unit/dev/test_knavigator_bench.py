"""bench/knavigator.py without knavigator: the nodes of its workflows, the GPU occupancy, the declared runtimes
of the backfill runs, the schedulers, repeats and summary, the skips without knavigator or Go."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
try:
    import knavigator as bench
finally:
    sys.path.remove(str(ROOT / "bench"))

CONFIG_NODES = {
    "name": "config-nodes",
    "tasks": [{"id": "configure", "type": "Configure",
               "params": {"nodes": [{"type": "dgxa100.80g", "count": 3, "labels": {"nvidia.com/gpu.count": "8"}},
                                    {"type": "dgxh100.80g", "count": 1, "annotations": {"zone": 2},
                                     "conditions": [{"type": "Custom", "status": True, "reason": "R",
                                                     "message": "m"}]}],
                          "timeout": "5m"}}],
}


def test_the_nodes_of_a_configure_task_have_the_charts_shape():
    nodes = bench.configured_nodes(CONFIG_NODES)
    assert len(nodes) == 4
    a100, h100 = nodes[0], nodes[3]
    name = a100["metadata"]["name"]
    assert name.startswith("virtual-dgxa100.80g-") and len(name) == len("virtual-dgxa100.80g-") + 6
    assert len({n["metadata"]["name"] for n in nodes}) == 4
    assert a100["status"]["capacity"] == a100["status"]["allocatable"] == {
        "cpu": "256", "memory": "2Ti", "nvidia.com/gpu": "8", "nvidia.com/mlnxnics": "16",
        "ephemeral-storage": "30Ti", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "pods": "110"}
    assert h100["status"]["capacity"]["cpu"] == "224"
    labels = a100["metadata"]["labels"]
    assert labels["type"] == "kwok" and labels["kubernetes.io/hostname"] == name
    assert labels["nvidia.com/gpu.count"] == "8" and labels["node-role.kubernetes.io/agent"] == ""
    assert a100["metadata"]["annotations"] == {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}
    assert h100["metadata"]["annotations"]["zone"] == "2"
    assert "spec" not in a100  # no taints: kwok manages every node
    conditions = {c["type"]: c["status"] for c in h100["status"]["conditions"]}
    assert conditions == {"MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False",
                          "Ready": "True", "Custom": "True"}


def test_node_names_are_the_same_every_run():
    names = [n["metadata"]["name"] for n in bench.configured_nodes(CONFIG_NODES)]
    assert names == [n["metadata"]["name"] for n in bench.configured_nodes(CONFIG_NODES)]


def test_what_only_knavigators_configure_task_does_is_refused():
    unknown_type = {"tasks": [{"id": "c", "type": "Configure", "params": {"nodes": [{"type": "cpu.x86", "count": 1}]}}]}
    with pytest.raises(ValueError, match="cpu.x86"):
        bench.configured_nodes(unknown_type)
    namespaces = {"tasks": [{"id": "c", "type": "Configure",
                             "params": {"namespaces": [{"name": "x", "op": "create"}]}}]}
    with pytest.raises(ValueError, match="namespaces"):
        bench.configured_nodes(namespaces)


def test_occupancy_counts_the_gpus_of_bound_unfinished_pods_up_to_each_nodes():
    capacity = {"a": 8, "b": 8}
    pods = [bench.PodView("1", "a", "Running", 8), bench.PodView("2", "a", "Pending", 8),
            bench.PodView("3", "b", "Running", 4), bench.PodView("4", "b", "Succeeded", 4),
            bench.PodView("5", "", "Pending", 8)]
    assert bench.occupancy(pods, capacity) == (8 + 4) / 16


def test_a_pods_gpus_come_from_its_requests_else_its_limits():
    two = {"nvidia.com/gpu": "2"}
    pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}},
                                   {"resources": {"requests": two, "limits": two}}, {}]}}
    assert bench.pod_gpus(pod) == 10


def test_without_knavigator_the_benchmark_is_skipped_in_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("KNAVIGATOR_SOURCE", raising=False)
    assert bench.main(["--if-available", "--knavigator", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("knavigator's benchmarks skipped") and out.count("\n") == 1


# -- declared runtimes (project-backfill) ------------------------------------------------------------------

JOB = """apiVersion: batch/v1
kind: Job
metadata:
  name: "{{._NAME_}}"
  namespace: "default"
spec:
  completions: {{.replicas}}
  template:
    metadata:
      annotations:
        pod-complete.stage.kwok.x-k8s.io/delay: {{.ttl}}
    spec:
      schedulerName: kai-scheduler
"""


def test_the_job_template_gets_the_gang_and_max_runtime_annotations_on_the_job_only():
    adjusted = bench.annotated(JOB, {**bench.GANG, **bench.RUNTIME})
    rendered = adjusted.replace("{{._NAME_}}", "job1").replace("{{.replicas}}", "2").replace(
        "{{.ttl}}", "2m").replace("{{.maxRuntime}}", "180s")
    job = yaml.safe_load(rendered)
    assert job["metadata"] == {"annotations": {"kai.scheduler/batch-min-member": "2",
                                               "kai.scheduler/max-runtime": "180s"},
                               "name": "job1", "namespace": "default"}
    assert job["spec"]["template"]["metadata"]["annotations"] == {"pod-complete.stage.kwok.x-k8s.io/delay": "2m"}
    added = '  annotations:\n    kai.scheduler/batch-min-member: "{{.replicas}}"\n'
    assert bench.annotated(JOB, bench.GANG).replace(added, "") == JOB


def test_a_job_template_with_annotations_or_without_metadata_is_refused():
    with pytest.raises(ValueError, match="annotations"):
        bench.annotated(JOB.replace('metadata:\n  name', 'metadata:\n  annotations:\n    a: b\n  name', 1),
                        bench.GANG)
    with pytest.raises(ValueError, match="metadata"):
        bench.annotated("apiVersion: v1\nkind: Pod\n", bench.GANG)


def test_the_declared_runtime_is_the_ttl_and_the_margin():
    assert bench.RUNTIME_MARGIN == 60
    assert bench.max_runtime("2m") == "180s"
    assert bench.max_runtime("1m30s") == "150s"
    assert bench.max_runtime("2m", 120) == "240s"


def knavigator_checkout(root: Path) -> Path:
    (root / "resources/benchmarks/templates/kai").mkdir(parents=True)
    (root / bench.JOB_TEMPLATE).write_text(JOB)
    folder = root / "resources/benchmarks/gang-scheduling/workflows"
    folder.mkdir(parents=True)
    config = {"name": "config", "tasks": [
        {"id": "register-queue", "type": "RegisterObj", "params": {"template": "resources/templates/kai/queue.yaml"}},
        {"id": "register", "type": "RegisterObj",
         "params": {"template": bench.JOB_TEMPLATE, "nameFormat": "job{{._ENUM_}}", "podCount": "{{.replicas}}"}},
        {"id": "test-queue", "type": "SubmitObj", "params": {"refTaskId": "register-queue", "params": {"name": "t"}}}]}
    test = {"name": "test", "tasks": [
        {"id": "job1", "type": "SubmitObj", "params": {"refTaskId": "register", "count": 1,
                                                        "params": {"replicas": 32, "ttl": "2m"}}},
        {"id": "queue", "type": "SubmitObj", "params": {"refTaskId": "register-queue", "params": {"name": "x"}}},
        {"id": "job2", "type": "SubmitObj", "params": {"refTaskId": "register", "count": 2,
                                                        "params": {"replicas": 16, "ttl": "5m"}}}]}
    (folder / "config-kai.yaml").write_text(yaml.safe_dump(config))
    (folder / "run-test.yaml").write_text(yaml.safe_dump(test))
    return folder


@pytest.mark.parametrize("runtimes", [True, False])
def test_the_workflow_copies_differ_only_in_the_template_and_the_declared_runtimes(tmp_path, runtimes):
    source, workdir = tmp_path / "knavigator", tmp_path / "run"
    workdir.mkdir()
    folder = knavigator_checkout(source)
    config_path, test_path = bench.adjusted_workflows(folder, bench.BENCHMARKS["gang-scheduling"], source, workdir,
                                                      gangs=True, margin=60 if runtimes else None)
    assert (config_path, test_path) == (workdir / "config-kai.yaml", workdir / "run-test.yaml")
    config, original = yaml.safe_load(config_path.read_text()), yaml.safe_load((folder / "config-kai.yaml").read_text())
    assert config["tasks"][1]["params"]["template"] == str(workdir / "job.yaml")
    original["tasks"][1]["params"]["template"] = str(workdir / "job.yaml")
    assert config == original
    assert (workdir / "job.yaml").read_text() == bench.annotated(JOB, {**bench.GANG,
                                                                       **(bench.RUNTIME if runtimes else {})})
    test, original = yaml.safe_load(test_path.read_text()), yaml.safe_load((folder / "run-test.yaml").read_text())
    declared = ["180s", None, "360s"] if runtimes else [None, None, None]
    assert [t["params"]["params"].get("maxRuntime") for t in test["tasks"]] == declared
    for task in test["tasks"]:
        task["params"]["params"].pop("maxRuntime", None)
    assert test == original


def test_a_workflow_without_the_job_template_or_a_job_without_ttl_is_refused():
    with pytest.raises(ValueError, match="registers no"):
        bench.registering({"tasks": [{"id": "r", "type": "RegisterObj", "params": {"template": "other.yaml"}}]}, "x")
    no_ttl = {"tasks": [{"id": "j", "type": "SubmitObj", "params": {"refTaskId": "register",
                                                                     "params": {"replicas": 1}}}]}
    with pytest.raises(ValueError, match="ttl"):
        bench.declaring_runtimes(no_ttl, {"register"})


# -- schedulers, repeats and the summary --------------------------------------------------------------------


def result(scheduler: str, ran: float | None, occupancy: float = 0.5) -> dict:
    components = ["go-scheduler"] if scheduler == "kai" else ["scheduler"]
    return {"benchmark": "scaling-multi", "scheduler": scheduler, "components": components, "all_ran_s": ran,
            "all_finished_s": None if ran is None else ran + 300, "pods_per_s": None if ran is None else 700 / ran,
            "gpu_occupancy": occupancy, "cpu_s": {components[0]: 10.0, "kube-apiserver": 100.0}}


def test_the_summary_gives_every_run_and_the_ratio_of_the_means_to_kais():
    rows = bench.summary([result("project", 40), result("kai", 100), result("kai", 80), result("project", 50)])
    assert rows[0] == ["scaling-multi", "project", "kai", "project / kai"]
    assert rows[1] == ["every pod ran (s)", "40.0, 50.0", "100.0, 80.0", "0.50"]
    assert rows[4] == ["average GPU occupancy (%)", "50.0, 50.0", "50.0, 50.0", "1.00"]
    assert rows[5] == ["scheduler's components, CPU s", "10.0, 10.0", "10.0, 10.0", "1.00"]
    assert rows[6] == ["control plane, CPU s", "100.0, 100.0", "100.0, 100.0", "1.00"]


def test_a_run_that_did_not_get_that_far_has_no_figure_and_no_ratio():
    rows = bench.summary([result("project", None), result("kai", 80)])
    assert rows[1] == ["every pod ran (s)", "-", "80.0", "-"]
    assert bench.summary([result("project", 40)])[1] == ["every pod ran (s)", "40.0"]  # no KAI: no ratio


@pytest.fixture
def checkout(tmp_path):
    binary = tmp_path / "knavigator"
    binary.write_text("")
    binary.chmod(0o755)
    knavigator_checkout(tmp_path / "src")
    return ["--knavigator", str(binary), "--knavigator-source", str(tmp_path / "src")]


def test_the_schedulers_alternate_over_the_repeats(checkout, monkeypatch):
    made = []
    monkeypatch.setattr(bench.kai_live, "build", lambda: {})
    monkeypatch.setattr(bench, "private_run", lambda name, scheduler, args: made.append(scheduler) or
                        result(scheduler, 10))
    assert bench.main([*checkout, "--benchmark", "gang-scheduling", "--scheduler", "project", "kai",
                       "project-backfill", "--gangs", "--repeat", "3"]) == 0
    assert made == ["project", "kai", "project-backfill", "project-backfill", "kai", "project",
                    "project", "kai", "project-backfill"]


def test_without_go_kais_runs_are_left_out_in_one_line(checkout, monkeypatch, capsys):
    def no_go():
        raise bench.ControlPlaneError("the Go toolchain is needed")

    made = []
    monkeypatch.setattr(bench.kai_live, "build", no_go)
    monkeypatch.setattr(bench, "private_run", lambda name, scheduler, args: made.append(scheduler) or
                        result(scheduler, 10))
    assert bench.main([*checkout, "--if-available", "--benchmark", "gang-scheduling", "--scheduler", "kai"]) == 0
    assert made == [] and capsys.readouterr().out == (
        "knavigator's benchmarks against KAI skipped: the Go toolchain is needed\n")
    assert bench.main([*checkout, "--if-available", "--benchmark", "gang-scheduling",
                       "--scheduler", "kai", "project"]) == 0
    assert made == ["project"]
    with pytest.raises(bench.ControlPlaneError):
        bench.main([*checkout, "--scheduler", "kai"])


def test_backfill_runs_need_gangs_and_take_no_configuration_of_their_own(checkout, capsys):
    with pytest.raises(SystemExit):
        bench.main([*checkout, "--scheduler", "project-backfill"])
    assert "give --gangs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main([*checkout, "--scheduler", "project-backfill", "--gangs", "--", "--config=mine.yaml"])
    assert "project-backfill gives kai-scheduler run its own --config" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main([*checkout, "--repeat", "0"])
