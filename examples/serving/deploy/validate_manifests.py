#!/usr/bin/env python3
"""Validates the deploy manifests against their schemas (`make validate-manifests`).

- `kubernetes/*.yaml`: `kubernetes-validate --strict`, against the Kubernetes
  OpenAPI schemas that package bundles, at each of KUBERNETES_VERSIONS. Strict
  rejects an unknown field, as the API server's strict field validation does.
  The tool only warns about a kind it has no schema for; here that is a failure.
- `kserve/*.yaml`: `check-jsonschema` against KServe's CRD schemas, vendored in
  `schemas/kserve-v0.20.0/` as `<kind>-<version>.json` (schemas/README.md says
  where they come from). A kind or version without a vendored schema fails.

Then the negative test: broken copies of the manifests, one mistake each
(BROKEN below), must each be rejected, and the validator's message must name
the mistake.

The validators come from PyPI, pinned, into .tools/manifests (the Makefile
installs them and runs this with them on PYTHONPATH).
"""
import copy
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parent
KSERVE_SCHEMAS = DEPLOY / "schemas" / "kserve-v0.20.0"
# The oldest and the newest Kubernetes minor the manifests are checked against
# (the newest is the one kubernetes-validate's pinned version bundles last).
KUBERNETES_VERSIONS = ["1.32", "1.37"]

DELETE = object()

# (manifest, mistake, path to the field, new value or DELETE, or ("rename", new
# key), a phrase the validator's output must contain).
BROKEN = [
    ("kubernetes/deployment.yaml", "replicas is a string",
     "spec.replicas", "two", "'two' is not of type 'integer'"),
    ("kubernetes/deployment.yaml", "a misspelt probe field",
     "spec.template.spec.containers.0.readinessProbe", ("rename", "readynessProbe"), "readynessProbe"),
    ("kubernetes/deployment.yaml", "an apiVersion Kubernetes does not have",
     "apiVersion", "apps/v2", "Couldn't find schema"),
    ("kubernetes/service.yaml", "a port without its number",
     "spec.ports.0.port", DELETE, "'port' is a required property"),
    ("kserve/inferenceservice.yaml", "a misspelt predictor field",
     "spec.predictor.minReplicas", ("rename", "minReplica"), "minReplica"),
    ("kserve/inferenceservice.yaml", "a scale metric KServe does not know",
     "spec.predictor.scaleMetric", "latency", "'latency' is not one of"),
    ("kserve/inferenceservice.yaml", "a KServe version without a schema",
     "apiVersion", "serving.kserve.io/v1beta2", "no vendored schema"),
    ("kserve/servingruntime.yaml", "a container without a name",
     "spec.containers.0.name", DELETE, "'name' is a required property"),
    ("kserve/servingruntime.yaml", "autoSelect is a string",
     "spec.supportedModelFormats.0.autoSelect", "yes", "'yes' is not of type 'boolean'"),
    ("kserve/servingruntime.yaml", "a port number as a string",
     "spec.containers.0.ports.0.containerPort", "8080", "'8080' is not of type 'integer'"),
]


def run(command):
    """(exit code, stdout and stderr) of `command`."""
    result = subprocess.run(command, capture_output=True, text=True)
    return result.returncode, (result.stdout + result.stderr).strip()


def validate(path):
    """(ok, output) for one manifest file, by the validator its directory names."""
    if path.parent.name == "kubernetes":
        command = [sys.executable, "-m", "kubernetes_validate", "--strict"]
        for v in KUBERNETES_VERSIONS:
            command += ["-k", v]
        code, output = run(command + [str(path)])
        bad = [line for line in output.splitlines() if not line.startswith("INFO ")]
        return code == 0 and not bad, output
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    if len(documents) != 1:
        return False, f"{path}: expected one document, found {len(documents)}"
    document = documents[0]
    version = str(document.get("apiVersion", "")).split("/")[-1]
    schema = KSERVE_SCHEMAS / f"{str(document.get('kind', '')).lower()}-{version}.json"
    if not schema.is_file():
        return False, (f"{path}: no vendored schema for {document.get('kind')} "
                       f"{document.get('apiVersion')} ({schema.name} is not in {KSERVE_SCHEMAS})")
    code, output = run([sys.executable, "-m", "check_jsonschema", "--schemafile", str(schema), str(path)])
    return code == 0, output


def node_at(document, path):
    """The parent of `path`'s last step, and that step (a key or a list index)."""
    steps = [int(s) if s.isdigit() else s for s in path.split(".")]
    node = document
    for step in steps[:-1]:
        node = node[step]
    return node, steps[-1]


def broken_copy(document, path, change):
    document = copy.deepcopy(document)
    parent, last = node_at(document, path)
    if change is DELETE:
        del parent[last]
    elif isinstance(change, tuple) and change[0] == "rename":
        parent[change[1]] = parent.pop(last)
    else:
        parent[last] = change
    return document


def main():
    failures = []
    manifests = sorted(DEPLOY.glob("kubernetes/*.yaml")) + sorted(DEPLOY.glob("kserve/*.yaml"))
    code, output = run([sys.executable, "-m", "check_jsonschema", "--check-metaschema",
                        *map(str, sorted(KSERVE_SCHEMAS.glob("*.json")))])
    print(f"{'ok' if code == 0 else 'FAIL':8} the vendored KServe schemas are valid JSON Schema")
    if code != 0:
        failures.append(output)
    for path in manifests:
        ok, output = validate(path)
        print(f"{'ok' if ok else 'FAIL':8} {path.relative_to(DEPLOY)}")
        if not ok:
            failures.append(output)
    with tempfile.TemporaryDirectory() as scratch:
        for i, (manifest, mistake, path, change, phrase) in enumerate(BROKEN):
            original = yaml.safe_load((DEPLOY / manifest).read_text())
            # The copy sits in a directory of the same name: that picks its validator.
            copy_path = Path(scratch) / Path(manifest).parent / f"broken{i}-{Path(manifest).name}"
            copy_path.parent.mkdir(exist_ok=True)
            copy_path.write_text(yaml.safe_dump(broken_copy(original, path, change), sort_keys=False))
            ok, output = validate(copy_path)
            rejected = not ok and phrase in output
            message = next((line.strip() for line in output.splitlines() if phrase in line), "")
            print(f"{'rejected' if rejected else 'FAIL':8} {manifest} with {mistake}: {message}")
            if not rejected:
                failures.append(f"{manifest} with {mistake} ({path}) was not rejected with "
                                f"{phrase!r}; the validator said:\n{output}")
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"validate-manifests: {len(manifests)} manifests, {len(BROKEN)} broken copies: "
          f"{'all as expected' if not failures else f'{len(failures)} failure(s)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
