"""``kai-scheduler podgroup FILE``: the dry run of the podgroupers over a YAML file."""

import json

import yaml

from kai.cli import main

MANIFEST = """\
apiVersion: batch/v1
kind: Job
metadata: {name: pi, namespace: research, uid: job-uid, labels: {kai.scheduler/queue: team-a}}
spec: {parallelism: 2}
---
apiVersion: v1
kind: Pod
metadata:
  name: pi-xk2p
  namespace: research
  ownerReferences: [{apiVersion: batch/v1, kind: Job, name: pi, uid: job-uid}]
spec: {schedulerName: kai-scheduler, priorityClassName: inference}
---
apiVersion: v1
kind: Pod
metadata:
  name: lost
  namespace: research
  ownerReferences: [{apiVersion: batch/v1, kind: Job, name: gone, uid: x}]
spec: {}
"""


def write(tmp_path, text, name="objects.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_json_output_lists_podgroups_and_errors(tmp_path, capsys):
    code = main(["podgroup", write(tmp_path, MANIFEST), "--json"])
    entries = json.loads(capsys.readouterr().out)
    assert code == 1
    first, second = entries
    assert first["pod"] == "pi-xk2p" and first["subgroup"] is None
    podgroup = first["podgroup"]
    assert podgroup["apiVersion"] == "scheduling.run.ai/v2alpha2" and podgroup["kind"] == "PodGroup"
    assert podgroup["metadata"]["name"] == "pg-pi-job-uid"
    assert podgroup["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert podgroup["spec"] == {"minMember": 1, "queue": "team-a", "priorityClassName": "inference"}
    assert second == {
        "pod": "lost",
        "error": 'failed to find Job: <research/gone>, uid: <x>: jobs.batch "gone" not found',
    }


def test_yaml_output_is_a_podgroup_per_pod(tmp_path, capsys):
    text = MANIFEST.split("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: lost")[0]
    assert main(["podgroup", write(tmp_path, text)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# pod: pi-xk2p\n")
    [podgroup] = [doc for doc in yaml.safe_load_all(out) if doc]
    assert podgroup["metadata"]["annotations"]["kai.scheduler/top-owner-metadata"].startswith("name: pi\n")


def test_subgroup_is_reported(tmp_path, capsys):
    text = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: rc, uid: r1}
spec:
  headGroupSpec: {template: {spec: {}}}
  workerGroupSpecs: [{groupName: gpu, replicas: 2, template: {spec: {}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: rc-gpu-1
  labels: {ray.io/group: gpu}
  ownerReferences: [{apiVersion: ray.io/v1, kind: RayCluster, name: rc, uid: r1}]
"""
    assert main(["podgroup", write(tmp_path, text), "--json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["subgroup"] == "gpu"
    assert entry["podgroup"]["spec"]["minMember"] == 3


def test_malformed_yaml_names_file_and_document(tmp_path, capsys):
    path = write(tmp_path, "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\nkind: [unclosed\n", "bad.yaml")
    assert main(["podgroup", path]) == 2
    err = capsys.readouterr().err
    assert path in err and "document 2" in err and "Traceback" not in err


def test_entry_that_is_not_an_object_is_rejected(tmp_path, capsys):
    path = write(tmp_path, "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n- just a list\n", "list.yaml")
    assert main(["podgroup", path]) == 2
    assert "document 2: expected a Kubernetes object" in capsys.readouterr().err


def test_object_without_name_is_rejected(tmp_path, capsys):
    path = write(tmp_path, "apiVersion: v1\nkind: Pod\nmetadata: {}\n", "noname.yaml")
    assert main(["podgroup", path]) == 2
    assert "document 1: missing or invalid metadata.name" in capsys.readouterr().err


def test_missing_file(tmp_path, capsys):
    assert main(["podgroup", str(tmp_path / "absent.yaml")]) == 2
    assert "absent.yaml: cannot read" in capsys.readouterr().err


def test_object_with_invalid_owner_references_is_rejected(tmp_path, capsys):
    path = write(tmp_path, "apiVersion: v1\nkind: Pod\nmetadata: {name: a, ownerReferences: [job]}\n", "refs.yaml")
    assert main(["podgroup", path]) == 2
    assert "document 1: metadata.ownerReferences must be a list of maps" in capsys.readouterr().err
