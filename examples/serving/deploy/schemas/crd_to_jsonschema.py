#!/usr/bin/env python3
"""Converts one version of a Kubernetes CustomResourceDefinition into a JSON Schema
(draft 2020-12) that validates manifests of that kind, the way kubeconform's
openapi2jsonschema does, in strict mode:

- `x-kubernetes-int-or-string` becomes "integer or string"; every other
  `x-kubernetes-*` key (list types, map types, CEL rules the API server
  evaluates) is dropped;
- an object with `properties` and neither `additionalProperties` nor
  `x-kubernetes-preserve-unknown-fields` gets `additionalProperties: false`:
  the API server's strict field validation (kubectl's default) rejects an
  unknown field instead of pruning it silently, and so does this schema;
- the root pins `apiVersion` and `kind` and requires `metadata`;
- identical subtrees (the Kubernetes container and pod fields the CRD repeats
  for every predictor, transformer and explainer) are stored once under
  `$defs` and referenced, which changes nothing validated and keeps the file
  small.

    python3 crd_to_jsonschema.py CRD.yaml VERSION --source TEXT > OUT.json

The schemas it wrote, and where their CRDs came from: README.md beside it.
"""
import argparse
import collections
import json
import sys

import yaml

# Subtrees at least this long (as compact JSON) are shared when they repeat.
SHARE_BYTES = 200


def convert(node):
    if isinstance(node, list):
        return [convert(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties"):
            out[key] = {name: convert(s) for name, s in value.items()}
        elif key.startswith("x-kubernetes-") or key == "description":
            continue
        else:
            out[key] = convert(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.pop("format", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable"):
        out.pop("nullable")
        if "type" in out:
            out["type"] = [out["type"], "null"]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def canonical(node):
    return json.dumps(node, sort_keys=True, separators=(",", ":"))


def share_repeats(root):
    """Moves each subtree that repeats (and is long) to `$defs`, once."""
    counts = collections.Counter()
    names = {}

    def count(node, name):
        if isinstance(node, dict):
            c = canonical(node)
            if len(c) >= SHARE_BYTES:
                counts[c] += 1
                names.setdefault(c, name)
                if counts[c] > 1:
                    return
            for key, value in node.items():
                if key == "properties":
                    for p, s in value.items():
                        count(s, p)
                elif key == "items":
                    count(value, name + "Item")
                else:
                    count(value, name)
        elif isinstance(node, list):
            for x in node:
                count(x, name)

    count(root, "root")
    defs, def_names = {}, {}

    def replace(node, top=False):
        if isinstance(node, dict):
            c = canonical(node)
            if not top and counts.get(c, 0) > 1:
                if c not in def_names:
                    base = names[c]
                    name, n = base, 2
                    while name in defs:
                        name, n = f"{base}{n}", n + 1
                    def_names[c] = name
                    defs[name] = None  # reserve the name before recursing
                    defs[name] = replace(node, top=True)
                return {"$ref": f"#/$defs/{def_names[c]}"}
            out = {}
            for key, value in node.items():
                if key == "properties":
                    out[key] = {p: replace(s) for p, s in value.items()}
                else:
                    out[key] = replace(value)
            return out
        if isinstance(node, list):
            return [replace(x) for x in node]
        return node

    body = replace(root, top=True)
    return body, defs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("crd")
    parser.add_argument("version")
    parser.add_argument("--source", required=True, help="where the CRD came from ($comment)")
    args = parser.parse_args()
    with open(args.crd) as f:
        crd = yaml.safe_load(f)
    spec = crd["spec"]
    version = next(v for v in spec["versions"] if v["name"] == args.version)
    schema = convert(version["schema"]["openAPIV3Schema"])
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"const": f"{spec['group']}/{args.version}"}
    props["kind"] = {"const": spec["names"]["kind"]}
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata"})
    body, defs = share_repeats(schema)
    out = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"{spec['names']['kind']} {spec['group']}/{args.version}, converted by "
        f"crd_to_jsonschema.py from {args.source}",
        **body,
    }
    if defs:
        out["$defs"] = defs
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
