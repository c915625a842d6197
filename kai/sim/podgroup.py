"""``kai-scheduler podgroup FILE``: print the PodGroup the podgroupers would create for each pod of a file.

FILE holds Kubernetes objects as multi-document YAML (``kind: List`` documents are expanded). Every
Pod is grouped exactly as the podgrouper controller would: its owners are resolved among the
file's objects, the podgrouper of its top owner computes the PodGroup. KAI's installed priority
classes (train, build-preemptible, build, inference) count as existing unless the file redefines them.

Exit codes: 0 every pod grouped, 1 some pod could not be grouped, 2 bad usage or malformed file.
"""

from __future__ import annotations

import argparse
import json
import sys

import yaml

from kai.api.names import NODE_POOL_LABEL, QUEUE_LABEL
from kai.api.podgroup import GroupingError
from kai.common.errors import ConfigError
from kai.common.yamlfile import one_line, read_yaml_documents
from kai.grouping.hub import GroupingConfig, build_hub, podgrouper_arguments
from kai.grouping.objects import MemoryObjects
from kai.grouping.podgroups import skip_reason

KAI_PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


class MalformedFile(ConfigError):
    """The file cannot be read as Kubernetes objects."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kai-scheduler podgroup",
        description="Print the PodGroup the podgroupers would create for each Pod in a YAML file.",
    )
    parser.add_argument("file", metavar="FILE", help="multi-document YAML with Pods and their owners")
    parser.add_argument(
        "--json", action="store_true", help='print a JSON list of {"pod", "podgroup", "subgroup"} or {"pod", "error"}'
    )
    parser.add_argument("--queue-label-key", default=QUEUE_LABEL, help="label naming the queue (%(default)s)")
    parser.add_argument(
        "--nodepool-label-key", default=NODE_POOL_LABEL, help="label naming the node pool (%(default)s)"
    )
    parser.add_argument(
        "--default-priorities-configmap",
        metavar="NAMESPACE/NAME",
        help="ConfigMap (in FILE) with per-workload-type default priority classes",
    )
    parser.add_argument(
        "--knative-gang-schedule",
        choices=("true", "false"),
        default="true",
        help="one PodGroup per Knative revision (%(default)s)",
    )
    parser.add_argument(
        "--search-legacy-pg",
        choices=("true", "false"),
        default="true",
        help="reuse PodGroups named by older releases for Jobs (%(default)s)",
    )
    return parser


def _check_object(obj, where: str) -> dict:
    if not isinstance(obj, dict):
        raise MalformedFile(f"{where}: expected a Kubernetes object (a map), got {type(obj).__name__}")
    for key in ("apiVersion", "kind"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise MalformedFile(f"{where}: missing or invalid {key!r}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise MalformedFile(f"{where}: missing or invalid metadata.name")
    for key in ("labels", "annotations"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            raise MalformedFile(f"{where}: metadata.{key} must be a map")
    refs = meta.get("ownerReferences")
    if refs is not None and not (isinstance(refs, list) and all(isinstance(r, dict) for r in refs)):
        raise MalformedFile(f"{where}: metadata.ownerReferences must be a list of maps")
    if obj.get("spec") is not None and not isinstance(obj["spec"], dict):
        raise MalformedFile(f"{where}: spec must be a map")
    return obj


def load_objects(path: str) -> list[dict]:
    """The objects of a YAML file; raises :class:`MalformedFile` naming the file and the entry."""
    objects: list[dict] = []
    for number, doc in enumerate(read_yaml_documents(path, MalformedFile), start=1):
        if doc is None:
            continue
        where = f"{path}: document {number}"
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            objects += [_check_object(item, f"{where}, item {i}") for i, item in enumerate(doc["items"], 1)]
        else:
            objects.append(_check_object(doc, where))
    return objects


def _config(ns: argparse.Namespace) -> GroupingConfig:
    defaults = None
    if ns.default_priorities_configmap:
        namespace, _, name = ns.default_priorities_configmap.partition("/")
        if not name:
            raise MalformedFile("--default-priorities-configmap must be NAMESPACE/NAME")
        defaults = (namespace, name)
    return GroupingConfig(
        queue_label_key=ns.queue_label_key, node_pool_label_key=ns.nodepool_label_key, defaults_configmap=defaults
    )


def group_pods(objects: list[dict], config: GroupingConfig, arguments: dict) -> list[dict]:
    """One entry per Pod: ``{"pod", "podgroup", "subgroup"}`` or ``{"pod", "error"}``."""
    store = MemoryObjects(
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
        for name, value in KAI_PRIORITY_CLASSES.items()
    )
    for obj in objects:
        store.add(obj)
    hub = build_hub(store, config, arguments)
    results = []
    for obj in objects:
        if obj["kind"] != "Pod" or obj["apiVersion"] != "v1":
            continue
        name = obj["metadata"]["name"]
        reason = skip_reason(obj)
        if reason:
            results.append({"pod": name, "error": f"not grouped: {reason}"})
            continue
        try:
            podgroup, subgroup = hub.podgroup(obj)
        except GroupingError as err:
            results.append({"pod": name, "error": str(err)})
            continue
        results.append({"pod": name, "podgroup": podgroup, "subgroup": subgroup})
    return results


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks."""


def _str(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _render_yaml(results: list[dict]) -> str:
    docs = []
    for entry in results:
        head = f"# pod: {entry['pod']}\n"
        if "error" in entry:
            docs.append(f"{head}# error: {entry['error']}\n")
            continue
        if entry["subgroup"]:
            head += f"# subgroup: {entry['subgroup']}\n"
        docs.append(head + yaml.dump(entry["podgroup"], Dumper=_Dumper, sort_keys=False))
    return "---\n".join(docs)


def main(argv: list[str]) -> int:
    parser = _parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        config = _config(ns)
        objects = load_objects(ns.file)
    except MalformedFile as err:
        print(f"kai-scheduler podgroup: {one_line(str(err))}", file=sys.stderr)
        return 2
    arguments = podgrouper_arguments(ns.search_legacy_pg == "true", ns.knative_gang_schedule == "true")
    results = group_pods(objects, config, arguments)
    if ns.json:
        print(json.dumps(results, indent=2))
    else:
        sys.stdout.write(_render_yaml(results))
    return 1 if any("error" in entry for entry in results) else 0
