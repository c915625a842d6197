"""Field paths of CustomResourceDefinitions: every schema node of every version, with its validations.

Prints, as JSON, for each CRD of a folder of YAML files: its group, kind, scope, short names and per
version whether it is served and stored, its subresources, and ``fields``, which maps each path of
its ``openAPIV3Schema`` to the node's keywords except ``description``, ``properties``, ``items`` and
``additionalProperties`` (those make the paths); ``required`` and ``enum`` are sorted, their order
means nothing. Paths are written as in jq: ``.`` is the root, ``.spec.minMember`` a property,
``.spec.subGroups[]`` the items of an array, ``.status.allocated{}`` the values of a map. Each path
is one line of the output, so a diff of two outputs lists the paths that changed.

tests/unit/deploy/kai_v017_crd_fields.json, the reference that tests/unit/deploy/test_crd_fields.py
checks the chart's CRDs against, is this script's output on KAI Scheduler v0.17's CRDs::

    V017=d5bc503a146317e51037d89775d77172c6d12f71
    git clone https://github.com/kai-scheduler/KAI-Scheduler kai && git -C kai checkout $V017
    python deploy/crd_field_paths.py kai/deployments/kai-scheduler/crds \\
        --source "kai-scheduler/KAI-Scheduler@$V017:deployments/kai-scheduler/crds" \\
        > tests/unit/deploy/kai_v017_crd_fields.json

It needs PyYAML and nothing else (no cluster, no network).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

_STRUCTURE = ("description", "properties", "items", "additionalProperties")
_SETS = ("required", "enum")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # KAI's Config CRD is large
_FIELD_DEPTH = 6  # root, crds, name, versions, version, fields: the field paths' keywords are one line each


def schema_fields(schema: dict, path: str = ".") -> dict[str, dict]:
    """Every node of an OpenAPI v3 schema by its path, with its keywords other than the structural ones."""
    node = {k: v for k, v in schema.items() if k not in _STRUCTURE}
    for key in _SETS:
        if key in node:
            node[key] = sorted(node[key], key=json.dumps)
    fields = {path: node}
    prefix = "" if path == "." else path
    for name, sub in (schema.get("properties") or {}).items():
        fields.update(schema_fields(sub, f"{prefix}.{name}"))
    if isinstance(schema.get("items"), dict):
        fields.update(schema_fields(schema["items"], f"{prefix}[]"))
    if isinstance(schema.get("additionalProperties"), dict):
        fields.update(schema_fields(schema["additionalProperties"], f"{prefix}{{}}"))
    return fields


def crd_fields(crd: dict) -> dict:
    """The identity of one CRD and the fields of each of its versions."""
    spec = crd["spec"]
    return {
        "group": spec["group"],
        "kind": spec["names"]["kind"],
        "scope": spec["scope"],
        "shortNames": sorted(spec["names"].get("shortNames") or ()),
        "versions": {
            v["name"]: {
                "served": v["served"],
                "storage": v["storage"],
                "subresources": sorted(v.get("subresources") or ()),
                "fields": schema_fields(v["schema"]["openAPIV3Schema"]),
            }
            for v in spec["versions"]
        },
    }


def folder_fields(folder: Path) -> dict[str, dict]:
    """:func:`crd_fields` of every CRD in the ``*.yaml`` files of ``folder``, by name; ValueError names a bad file."""
    crds = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            for doc in yaml.load_all(path.read_text(), Loader=_LOADER):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    crds[doc["metadata"]["name"]] = crd_fields(doc)
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not YAML: {exc}") from exc
        except KeyError as exc:
            raise ValueError(f"{path}: a CustomResourceDefinition without the field {exc}") from exc
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"{path}: a malformed CustomResourceDefinition: {exc}") from exc
    return crds


def dumps(value, depth: int = 0) -> str:
    """JSON with sorted keys, one line per field path."""
    if not isinstance(value, dict) or not value or depth >= _FIELD_DEPTH:
        return json.dumps(value, sort_keys=True)
    pad = " " * (depth + 1)
    items = ",\n".join(f"{pad}{json.dumps(k)}: {dumps(v, depth + 1)}" for k, v in sorted(value.items()))
    return "{\n" + items + "\n" + " " * depth + "}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of CRD YAML files")
    parser.add_argument("--source", default="", help="where the files come from, recorded in the output")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(f"{args.folder}: not a folder", file=sys.stderr)
        return 2
    try:
        crds = folder_fields(args.folder)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if not crds:
        print(f"{args.folder}: no CustomResourceDefinition in its *.yaml files", file=sys.stderr)
        return 2
    print(dumps({"source": args.source, "crds": crds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
