"""Checks the objects the `kubernetes` sandbox driver sends, as a real API server and the
`restricted` Pod Security Standard would.

Reads a JSON list of objects (what tests/e2e/kubernetes/ collected from its fake API
server) and checks:
- each one strictly against the Kubernetes schemas of the oldest and newest supported
  releases (kubernetes-validate: unknown fields fail, an object without a schema fails);
- each Deployment's pod template, rule by rule, against the restricted Pod Security
  Standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/), unless
  its name is given with --privileged (a FUSE sandbox of SANDBOX_POD_SECURITY=privileged).

Prints one line per problem; exits 1 when there is one. Run with the python of
.tools/k8s-venv (scripts/check-k8s installs it):

    .tools/k8s-venv/bin/python tests/k8s/check_sandbox_objects.py objects.json \
        [--privileged sandbox-f05e]
"""

from __future__ import annotations

import argparse
import json
import sys

from kubernetes_validate import utils as kv  # from the venv of scripts/check-k8s

VERSIONS = ["1.32.0", "1.37.0"]


def ref(doc: dict) -> str:
    meta = doc.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{doc.get('kind')}/{meta.get('name', '?')}" + (f" ({ns})" if ns else "")


def schema_problems(docs: list[dict], versions: list[str]) -> list[str]:
    """Each object strictly against each version's schemas, as scripts/check-k8s validates
    the chart's (kubernetes-validate --strict)."""
    out = []
    for version in versions:
        for d in docs:
            try:
                kv.validate(d, version, strict=True)
            except kv.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                out.append(f"{ref(d)} ({version}): {path}: {e.message}")
            except (kv.SchemaNotFoundError, kv.InvalidSchemaError, kv.VersionNotSupportedError) as e:
                out.append(f"{ref(d)} ({version}): {getattr(e, 'message', e)}")
    return out

# Volume types the restricted standard allows.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}


def restricted_problems(doc: dict) -> list[str]:
    """The restricted standard's rules (and the baseline's it includes) for a pod spec."""
    pod = doc["spec"]["template"]["spec"]
    where = ref(doc)
    out = []
    pod_sc = pod.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            out.append(f"{where}: {flag} is set")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"{where}: volume {volume['name']} is of a type restricted refuses: {kinds}")
    containers = (pod.get("initContainers") or []) + pod["containers"]
    for container in containers:
        sc = container.get("securityContext") or {}
        name = f"{where} container {container['name']}"
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: adds capabilities {caps['add']}")
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{name}: runAsNonRoot is not true (pod or container)")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{name}: runs as user 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile is {seccomp!r}, not RuntimeDefault or Localhost")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"{name}: hostPort {port['hostPort']}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("objects")
    ap.add_argument("--privileged", action="append", default=[])
    args = ap.parse_args()
    with open(args.objects, encoding="utf-8") as f:
        docs = json.load(f)
    problems = schema_problems(docs, VERSIONS)
    for doc in docs:
        if doc.get("kind") == "Deployment" and doc["metadata"]["name"] not in args.privileged:
            problems += restricted_problems(doc)
    for problem in problems:
        print(problem)
    print(f"{len(docs)} objects checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
