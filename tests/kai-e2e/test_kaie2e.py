"""What the e2e harness puts in the cluster, where it finds KAI's source and suites, and its command, without Go."""

from __future__ import annotations

import json
import shutil
import subprocess

import kaie2e
import kaisource
import pytest
from kaisuites import load_catalogue

from kai.admission.webhook import MUTATE_PATH, QUEUE_PATH, VALIDATE_PATH
from kai.kube.operatorobjects import default_objects


def test_nodes_are_laid_out_like_kais_kind_cluster():
    nodes = {n["metadata"]["name"]: n for n in kaie2e.cluster_nodes(2, 8, "4", "16Gi", dra_nodes=1)}
    assert sorted(nodes) == ["kai-e2e-control-plane", "kai-e2e-cpu", "kai-e2e-dra-0", "kai-e2e-gpu-0",
                             "kai-e2e-gpu-1"]
    gpu = nodes["kai-e2e-gpu-0"]
    assert gpu["status"]["allocatable"] == {"cpu": "4", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "8",
                                            "ephemeral-storage": "100Gi"}
    assert gpu["metadata"]["labels"]["nvidia.com/gpu.memory"] == "11441"
    assert gpu["metadata"]["labels"]["run.ai/simulated-gpu-node-pool"] == "default"
    for name in ("kai-e2e-cpu", "kai-e2e-control-plane"):
        assert "nvidia.com/gpu" not in nodes[name]["status"]["allocatable"]
        assert not any(label.startswith("nvidia.com/") for label in nodes[name]["metadata"]["labels"])
    assert "spec" not in nodes["kai-e2e-cpu"]
    assert nodes["kai-e2e-control-plane"]["spec"]["taints"] == [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    dra = nodes["kai-e2e-dra-0"]
    assert "nvidia.com/gpu" not in dra["status"]["allocatable"]
    assert dra["metadata"]["labels"]["nvidia.com/gpu.deploy.dra-plugin-gpu"] == "true"


def test_the_dra_workers_publish_their_gpus_through_the_fake_drivers_class():
    device_class, *slices = kaie2e.dra_objects(2, 8)
    assert (device_class["kind"], device_class["metadata"]["name"]) == ("DeviceClass", "gpu.nvidia.com")
    assert [(s["spec"]["nodeName"], s["spec"]["driver"], len(s["spec"]["devices"])) for s in slices] == [
        ("kai-e2e-dra-0", "gpu.nvidia.com", 8), ("kai-e2e-dra-1", "gpu.nvidia.com", 8)]
    device = slices[0]["spec"]["devices"][0]
    assert device["attributes"]["model"] == {"string": "Tesla-K80"}
    assert device["capacity"]["memory"] == {"value": "11441Mi"}


def test_stand_ins_run_on_the_control_plane_node_labeled_as_kais_components():
    binder = kaie2e.stand_in("binder")
    assert binder["metadata"] == {"name": "binder", "namespace": "kai-scheduler", "labels": {"app": "binder"}}
    template = binder["spec"]["template"]
    assert template["metadata"]["labels"] == binder["spec"]["selector"]["matchLabels"] == {"app": "binder"}
    assert template["spec"]["nodeName"] == kaie2e.CONTROL_PLANE_NODE
    assert {"binder", "kai-scheduler-default", "admission"} <= set(kaie2e.STAND_INS)


def test_the_stand_ins_follow_the_config_as_kais_operator_keeps_its_deployments():
    config, _ = default_objects(kaie2e.SYSTEM_NAMESPACE)
    assert all(spec == (1, []) for spec in kaie2e.stand_in_specs(config).values())
    assert kaie2e.stand_in_specs(None) == kaie2e.stand_in_specs(config)
    config["spec"]["scheduler"] = {"service": {"enabled": False}}
    config["spec"]["admission"]["blockNvidiaVisibleDevices"] = True
    specs = kaie2e.stand_in_specs(config)
    assert specs["kai-scheduler-default"] == (0, []) and specs["binder"] == (1, [])
    assert specs["admission"] == (1, ["--block-nvidia-visible-devices=true"])


def test_webhooks_call_the_admission_paths_at_the_given_url():
    validating, mutating = kaie2e.webhook_configurations("https://127.0.0.1:9443", "Q0E=")
    urls = {h["name"]: h["clientConfig"]["url"] for c in (validating, mutating) for h in c["webhooks"]}
    assert urls["pod-validation.kai.scheduler"] == "https://127.0.0.1:9443" + VALIDATE_PATH
    assert urls["pod-mutation.kai.scheduler"] == "https://127.0.0.1:9443" + MUTATE_PATH
    assert urls["queue-validation.kai.scheduler"] == "https://127.0.0.1:9443" + QUEUE_PATH
    assert all(h["clientConfig"]["caBundle"] == "Q0E=" for c in (validating, mutating) for h in c["webhooks"])
    pod_hook = mutating["webhooks"][0]
    assert pod_hook["matchConditions"][0]["expression"] == "object.spec.schedulerName == 'kai-scheduler'"
    assert "kai-scheduler" in pod_hook["namespaceSelector"]["matchExpressions"][0]["values"]


def test_suites_are_the_folders_whose_tests_run_ginkgo(tmp_path):
    base = tmp_path / kaie2e.SUITES_DIR
    for folder, text in (("allocate/quota", "RunSpecs(t, \"Quota\")"), ("allocate/quota/helpers", "package x"),
                         ("consolidation", "RunSpecs(t, \"C\")")):
        (base / folder).mkdir(parents=True)
        (base / folder / "x_test.go").write_text(text)
    assert kaie2e.discover_suites(tmp_path) == ["allocate/quota", "consolidation"]
    assert kaie2e.binary_name("integrations/third_party/ray.io") == "integrations__third_party__ray.io.test"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_source_is_exported_from_a_clone_at_the_commit_once(tmp_path):
    repo = tmp_path / "clone"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "go.mod").write_text("module example.com/kai\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    (repo / "go.mod").write_text("module example.com/changed\n")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)

    source = kaisource.kai_source(tmp_path / "cache", commit, git_dir=repo / ".git")

    assert source == tmp_path / "cache" / "src" / commit
    assert (source / "go.mod").read_text() == "module example.com/kai\n"
    shutil.rmtree(repo)
    assert kaisource.kai_source(tmp_path / "cache", commit, git_dir=repo / ".git") == source  # cached


def test_a_source_folder_without_go_mod_is_refused(tmp_path):
    with pytest.raises(kaisource.KaiE2EError, match="no go.mod"):
        kaisource.kai_source(tmp_path, source=tmp_path)


def test_reports_of_an_earlier_run_are_classified_again_with_the_current_rules(tmp_path, capsys):
    exclusions = tmp_path / "exclusions.yaml"
    exclusions.write_text("suites: [{suite: gitops, category: kai-install, reason: ArgoCD}]\n"
                          "failures: [{message: 'shard .* not found', class: missing-feature, note: shards}]\n")
    failed = {"LeafNodeType": "It", "LeafNodeText": "patches the shard", "State": "failed",
              "Failure": {"Message": 'shard "default" not found', "Location": {"FileName": "a.go", "LineNumber": 3}}}
    passed = {"LeafNodeType": "It", "LeafNodeText": "binds", "State": "passed"}
    (tmp_path / "allocate__quota.test.json").write_text(json.dumps([{"RunTime": 6e10, "SpecReports": [failed]}]))
    (tmp_path / "consolidation.test.json").write_text(json.dumps([{"RunTime": 0, "SpecReports": [passed]}]))
    (tmp_path / "consolidation.test.dry-run.json").write_text("not read")

    results = kaie2e.summarize_again(load_catalogue(exclusions), tmp_path)

    assert [(r.suite, r.passed, r.failed, r.excluded_reason) for r in results] == [
        ("allocate/quota", 0, 1, ""), ("consolidation", 1, 0, ""), ("gitops", 0, 0, "kai-install")]
    assert results[0].failures[0].cls == "missing-feature"
    assert "| allocate/quota | 0 | 1 | 0 | 0 | 1.0 |" in capsys.readouterr().out
    assert "(failed, missing-feature -- shards)" in (tmp_path / "results.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text())[1]["passed"] == 1


def test_the_command_classifies_an_earlier_run_again_and_refuses_a_bad_exclusions_file(tmp_path, capsys):
    exclusions = tmp_path / "exclusions.yaml"
    exclusions.write_text("suites: []\n")
    passed = {"LeafNodeType": "It", "LeafNodeText": "binds", "State": "passed"}
    (tmp_path / "consolidation.test.json").write_text(json.dumps([{"RunTime": 0, "SpecReports": [passed]}]))
    args = ["--summarize-only", "--out", str(tmp_path), "--exclusions", str(exclusions)]
    assert kaie2e.main(args) == 0
    assert "| consolidation | 1 |" in capsys.readouterr().out

    exclusions.write_text("suites: [{suite: gitops}]\n")
    assert kaie2e.main(args) == 2
    assert capsys.readouterr().err.startswith("kai-e2e: ")
