#!/usr/bin/env python3
"""Render, validate and check Sandgate's Helm chart (k8s/chart) with example values files.

For every values file given on the command line (k8s/values/dev.yaml, prod.yaml) it
  1. lints the chart with it (`helm lint --strict`) and renders it (`helm template`),
     hooks and `helm test` pods included;
  2. validates every rendered object against the Kubernetes JSON schemas of
     kubernetes-validate, strictly (unknown fields fail; an object with no schema fails);
  3. checks the install's policy: security contexts, resources, probes, no secret values,
     RBAC confined to the sandbox namespace, the gateway key given to model-gw alone,
     network policies, the DNS layout of spec 2.9, and per profile the replicas,
     disruption budgets and autoscalers of prod or the bundled Redis of dev;
  4. proves that each policy check can fail: it breaks the rendered objects in memory, one
     way per check, and expects that check to fail (the "self-test" lines).

It prints one line per check and ends with `N passed, M failed`; it exits 1 when anything
failed. With --values-tests it also proves that the chart's values.schema.json and
render-time guards refuse bad values files, naming the key (VALUES_TESTS), and that a
platform-style values file renders the same objects as the example it mirrors. Run
through scripts/check-k8s, which installs helm (from the npm registry), kubernetes-validate
and PyYAML into .tools/ and calls this file with that venv's python.
"""

from __future__ import annotations

import argparse
import copy
import ipaddress
import json
import os
import posixpath
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import yaml

from k8s_network import Endpoint, admits, connects, default_denies, leaves

APP_NS = "sandgate"
SANDBOX_NS = "sandgate-sandboxes"
SERVICES = ("edge", "runtime-api", "model-gw")
GATEWAY_SECRETS = ("gateway-api-key", "gateway-env-secrets")
TLS_SECRET = "sandgate-wildcard-tls"
# The secrets the install uses (spec 2.8 as it applies to Sandgate, plus the wildcard TLS
# certificate); INSTALL.md tells how to create each one.
KNOWN_SECRETS = {
    "jwt-secret",
    "admin-password",
    "default-api-key",
    "sandbox-api-key",
    "gateway-api-key",
    "gateway-env-secrets",
    "gateway-master-key",
    "cache",
    TLS_SECRET,
}
# What runtime-api's Kubernetes sandbox driver manages in the sandbox namespace.
SANDBOX_RESOURCES = {"deployments", "replicasets", "pods", "persistentvolumeclaims", "services", "ingresses", "secrets"}
RUNTIME_API_NEEDS = [
    # (api group, resource, verbs that must all be granted)
    ("apps", "deployments", {"get", "list", "watch", "create", "patch", "delete"}),
    ("apps", "deployments/scale", {"get", "patch"}),
    ("apps", "replicasets", {"list"}),
    # Each sandbox's session key lives in a Secret of its own: written, never read.
    ("", "secrets", {"create", "patch", "delete"}),
    ("", "pods", {"get", "list", "watch"}),
    ("", "pods/log", {"get"}),
    ("", "persistentvolumeclaims", {"get", "list", "create", "delete"}),
    ("", "services", {"get", "list", "create", "delete"}),
    ("networking.k8s.io", "ingresses", {"get", "list", "create", "delete"}),
    ("", "events", {"get", "list", "watch"}),
]
# troubleshoot.sh's specs: the Secrets `kubectl preflight` and `kubectl support-bundle` read
# (by their label troubleshoot.sh/kind), the keys they read, and the published JSON schemas
# (v1beta2) each kind is validated against, vendored by scripts/vendor-troubleshoot-schemas.
TROUBLESHOOT_KEYS = {"preflight.yaml", "support-bundle-spec", "redactor-spec"}
TROUBLESHOOT_SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "k8s", "schemas", "troubleshoot")
TROUBLESHOOT_SCHEMA_FILES = {
    "Preflight": "preflight-troubleshoot-v1beta2.json",
    "SupportBundle": "supportbundle-troubleshoot-v1beta2.json",
    "Redactor": "redactor-troubleshoot-v1beta2.json",
}
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"}
RELEASE = "sandgate"


# --------------------------------------------------------------------------------------
# The rendered install and helpers over it


@dataclass
class Install:
    name: str  # the values file's name: dev, prod, ...
    docs: list[dict]
    values: dict[str, Any]  # the chart's values merged with the file's: the `sandgate:` section

    def profile(self) -> str:
        return self.name if self.name in ("dev", "prod") else "other"


def ns_of(doc: dict) -> str | None:
    return (doc.get("metadata") or {}).get("namespace")


def name_of(doc: dict) -> str:
    return (doc.get("metadata") or {}).get("name", "?")


def ref(doc: dict) -> str:
    ns = ns_of(doc)
    return f"{doc.get('kind')}/{name_of(doc)}" + (f" ({ns})" if ns else "")


def objects(docs: list[dict], kind: str, ns: str | None = None) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind and (ns is None or ns_of(d) == ns)]


def find(docs: list[dict], kind: str, name: str, ns: str | None = APP_NS) -> dict | None:
    for d in docs:
        if d.get("kind") == kind and name_of(d) == name and (ns is None or ns_of(d) == ns):
            return d
    return None


def pod_spec(doc: dict) -> dict | None:
    kind = doc.get("kind")
    if kind == "Pod":
        return doc.get("spec") or {}
    if kind == "CronJob":
        return (((doc.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
    if kind in WORKLOAD_KINDS:
        return ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    return None


def pod_labels(doc: dict) -> dict:
    if doc.get("kind") == "Pod":
        return (doc.get("metadata") or {}).get("labels") or {}
    if doc.get("kind") == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"].get("metadata", {}).get("labels") or {}
    return ((doc.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}


def workloads(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d.get("kind") in WORKLOAD_KINDS]


def hook(doc: dict) -> str | None:
    """The Helm hook an object is (`test`, `pre-install,pre-upgrade`, ...), or None."""
    return ((doc.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook")


def is_test_hook(doc: dict) -> bool:
    return hook(doc) == "test"


def long_running(w: dict) -> bool:
    """A workload that serves (a Deployment's pods), not a hook's Job or `helm test` pod."""
    return w.get("kind") in ("Deployment", "StatefulSet", "DaemonSet") and hook(w) is None


def containers(spec: dict) -> list[dict]:
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def each_container(docs: list[dict]) -> Iterable[tuple[dict, dict, dict]]:
    for w in workloads(docs):
        spec = pod_spec(w)
        for c in containers(spec):
            yield w, spec, c


def env_value(container: dict, name: str) -> str | None:
    for e in container.get("env") or []:
        if e.get("name") == name:
            return e.get("value")
    return None


def service_container(docs: list[dict], service: str) -> dict | None:
    w = find(docs, "Deployment", service)
    if w is None:
        return None
    for c in pod_spec(w).get("containers") or []:
        if c.get("name") == service:
            return c
    return None


def is_redis(w: dict) -> bool:
    for c in containers(pod_spec(w)):
        repo = c.get("image", "").split("@")[0].rsplit("/", 1)[-1].split(":")[0]
        if repo.startswith("redis"):
            return True
    return False


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """Kubernetes label selector semantics; an empty selector matches everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and key in labels and labels[key] in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def secret_refs(spec: dict) -> set[str]:
    """Names of the secrets a pod spec pulls in (env, envFrom, volumes)."""
    names: set[str] = set()
    for c in containers(spec):
        for e in c.get("env") or []:
            ref_ = ((e.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")
            if ref_:
                names.add(ref_)
        for ef in c.get("envFrom") or []:
            ref_ = (ef.get("secretRef") or {}).get("name")
            if ref_:
                names.add(ref_)
    for v in spec.get("volumes") or []:
        if (v.get("secret") or {}).get("secretName"):
            names.add(v["secret"]["secretName"])
        for src in (v.get("projected") or {}).get("sources") or []:
            if (src.get("secret") or {}).get("name"):
                names.add(src["secret"]["name"])
    return names


def port_number(port: Any, container_ports: list[dict]) -> int | None:
    if isinstance(port, int):
        return port
    for p in container_ports:
        if p.get("name") == port:
            return p.get("containerPort")
    return None


def listen_port(addr: str | None) -> int | None:
    if not addr or ":" not in addr:
        return None
    try:
        return int(addr.rsplit(":", 1)[1])
    except ValueError:
        return None


# --------------------------------------------------------------------------------------
# Network policy evaluation: who may reach a workload's pods, on which ports


@dataclass(frozen=True)
class Peer:
    kind: str  # "anyone" | "pods" (same namespace) | "namespaces" | "ipblock" | "unknown"
    namespaces: frozenset[str] = frozenset()  # for "namespaces": explicit names
    pod_selector: str = ""  # json of the pod selector, for "pods"
    detail: str = ""


def namespace_names(selector: dict) -> frozenset[str] | None:
    """The explicit namespace names a namespaceSelector picks, or None when it picks by
    anything but kubernetes.io/metadata.name (or picks every namespace)."""
    names: set[str] | None = None
    key = "kubernetes.io/metadata.name"
    for k, v in (selector.get("matchLabels") or {}).items():
        if k != key:
            return None
        names = {v} if names is None else names & {v}
    for e in selector.get("matchExpressions") or []:
        if e.get("key") != key or e.get("operator") != "In":
            return None
        vals = set(e.get("values") or [])
        names = vals if names is None else names & vals
    return frozenset(names) if names is not None else None


def ingress_allowed(docs: list[dict], w: dict) -> list[tuple[Peer, int | str]] | None:
    """Every (peer, port) the network policies let reach the workload's pods; port "*" is
    every port. None when no policy selects the pods (then anyone may connect)."""
    labels = pod_labels(w)
    ns = ns_of(w)
    cports = [p for c in containers(pod_spec(w)) for p in c.get("ports") or []]
    selected = False
    allowed: list[tuple[Peer, int | str]] = []
    for pol in objects(docs, "NetworkPolicy", ns):
        if is_test_hook(pol):
            continue  # made by `helm test`, deleted once it passed: see helm_test
        spec = pol.get("spec") or {}
        types = spec.get("policyTypes") or ["Ingress"]
        if "Ingress" not in types or not selector_matches(spec.get("podSelector", {}), labels):
            continue
        selected = True
        for rule in spec.get("ingress") or []:
            ports: list[int | str] = []
            for p in rule.get("ports") or []:
                if "port" not in p:
                    ports.append("*")
                else:
                    n = port_number(p["port"], cports)
                    ports.append(n if n is not None else f"unknown port {p['port']}")
            if not ports:
                ports = ["*"]
            peers: list[Peer] = []
            for f in rule.get("from") or []:
                if "ipBlock" in f:
                    peers.append(Peer("ipblock", detail=str(f["ipBlock"].get("cidr"))))
                elif "namespaceSelector" in f:
                    names = namespace_names(f["namespaceSelector"])
                    if names is None:
                        peers.append(Peer("unknown", detail=f"namespaceSelector {f['namespaceSelector']}"))
                    else:
                        peers.append(Peer("namespaces", namespaces=names))
                elif "podSelector" in f:
                    peers.append(Peer("pods", pod_selector=json.dumps(f["podSelector"], sort_keys=True)))
            if not rule.get("from"):
                peers = [Peer("anyone")]
            allowed.extend((peer, port) for peer in peers for port in ports)
    return allowed if selected else None


def pods_peer_matches(docs: list[dict], peer: Peer, ns: str) -> set[str]:
    """Names of the workloads in ns whose pods a same-namespace pod peer selects."""
    sel = json.loads(peer.pod_selector)
    return {name_of(w) for w in workloads(docs) if ns_of(w) == ns and selector_matches(sel, pod_labels(w))}


def describe(docs: list[dict], peer: Peer, ns: str) -> str:
    if peer.kind == "pods":
        return "pods of " + (", ".join(sorted(pods_peer_matches(docs, peer, ns))) or "nothing")
    if peer.kind == "namespaces":
        return "namespace " + ", ".join(sorted(peer.namespaces))
    if peer.kind == "ipblock":
        return "ipBlock " + peer.detail
    if peer.kind == "anyone":
        return "anyone"
    return peer.detail


# --------------------------------------------------------------------------------------
# The checks. Each takes the rendered install and returns its problems (empty: passed).
# `mutations` break the rendered objects so that the check must fail (the self-test).

Mutation = tuple[str, Callable[[list[dict]], None]]


@dataclass
class Check:
    title: str
    fn: Callable[[Install], list[str]]
    profiles: tuple[str, ...]  # which example values files (dev, prod, other) it applies to
    mutations: list[Mutation] = field(default_factory=list)


CHECKS: list[Check] = []


def check(title: str, profiles: tuple[str, ...] = ("dev", "prod", "other"), mutations: list[Mutation] | None = None):
    def register(fn: Callable[[Install], list[str]]):
        CHECKS.append(Check(title, fn, profiles, mutations or []))
        return fn

    return register


def container_of(docs: list[dict], deployment: str, ns: str = APP_NS) -> dict:
    w = find(docs, "Deployment", deployment, ns)
    assert w is not None, f"self-test: no Deployment {deployment}"
    return pod_spec(w)["containers"][0]


def spec_of(docs: list[dict], deployment: str, ns: str = APP_NS) -> dict:
    w = find(docs, "Deployment", deployment, ns)
    assert w is not None, f"self-test: no Deployment {deployment}"
    return pod_spec(w)


def set_sc(docs, deployment, key, value):
    container_of(docs, deployment).setdefault("securityContext", {})[key] = value


@check(
    "no environment variable is set to an empty value, none twice",
    mutations=[
        ("runtime-api's STORAGE_CLASS is empty", lambda d: [e.update(value="") for e in container_of(d, "runtime-api")["env"] if e["name"] == "STORAGE_CLASS"]),
        ("the edge sets REDIS_URL twice", lambda d: container_of(d, "edge")["env"].append({"name": "REDIS_URL", "value": "redis://x"})),
    ],
)
def env_values_set(inst: Install) -> list[str]:
    out = []
    for w, _, c in each_container(inst.docs):
        names = [e.get("name") for e in c.get("env") or []]
        for e in c.get("env") or []:
            if "value" in e and str(e["value"]) == "":
                out.append(f"{ref(w)} container {c['name']}: {e['name']} is empty")
        out += [f"{ref(w)} container {c['name']}: {n} is set twice" for n in sorted({n for n in names if names.count(n) > 1})]
    return out


@check(
    "every container runs as non-root, with a non-root uid",
    mutations=[
        ("edge runs as uid 0", lambda d: set_sc(d, "edge", "runAsUser", 0)),
        ("model-gw drops runAsNonRoot", lambda d: (set_sc(d, "model-gw", "runAsNonRoot", False))),
    ],
)
def non_root(inst: Install) -> list[str]:
    out = []
    for w, spec, c in each_container(inst.docs):
        psc, csc = spec.get("securityContext") or {}, c.get("securityContext") or {}
        non_root_ = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        if non_root_ is not True:
            out.append(f"{ref(w)} container {c['name']}: runAsNonRoot is not true")
        if uid is None or uid == 0:
            out.append(f"{ref(w)} container {c['name']}: runAsUser is {uid!r}, want a non-root uid")
    return out


@check(
    "every container has a read-only root filesystem",
    mutations=[("runtime-api's root filesystem is writable", lambda d: set_sc(d, "runtime-api", "readOnlyRootFilesystem", False))],
)
def read_only_root(inst: Install) -> list[str]:
    return [
        f"{ref(w)} container {c['name']}: readOnlyRootFilesystem is not true"
        for w, _, c in each_container(inst.docs)
        if (c.get("securityContext") or {}).get("readOnlyRootFilesystem") is not True
    ]


@check(
    "every container drops ALL capabilities and cannot escalate privileges",
    mutations=[
        ("edge allows privilege escalation", lambda d: set_sc(d, "edge", "allowPrivilegeEscalation", True)),
        ("model-gw keeps NET_RAW", lambda d: set_sc(d, "model-gw", "capabilities", {"add": ["NET_RAW"]})),
    ],
)
def no_privileges(inst: Install) -> list[str]:
    out = []
    for w, _, c in each_container(inst.docs):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{ref(w)} container {c['name']}: allowPrivilegeEscalation is not false")
        if sc.get("privileged"):
            out.append(f"{ref(w)} container {c['name']}: privileged")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{ref(w)} container {c['name']}: capabilities do not drop ALL")
        if caps.get("add"):
            out.append(f"{ref(w)} container {c['name']}: adds capabilities {caps['add']}")
    return out


@check(
    "every container runs under the RuntimeDefault seccomp profile",
    mutations=[("runtime-api's pod is Unconfined", lambda d: spec_of(d, "runtime-api")["securityContext"].update(seccompProfile={"type": "Unconfined"}))],
)
def seccomp(inst: Install) -> list[str]:
    out = []
    for w, spec, c in each_container(inst.docs):
        prof = ((c.get("securityContext") or {}).get("seccompProfile") or (spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
        if prof != "RuntimeDefault":
            out.append(f"{ref(w)} container {c['name']}: seccomp profile is {prof!r}")
    return out


@check(
    "every container has cpu and memory requests and limits",
    mutations=[
        ("edge has no memory limit", lambda d: container_of(d, "edge")["resources"]["limits"].pop("memory")),
        ("model-gw has no requests", lambda d: container_of(d, "model-gw")["resources"].pop("requests")),
    ],
)
def resources(inst: Install) -> list[str]:
    out = []
    for w, _, c in each_container(inst.docs):
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if not (res.get(kind) or {}).get(r):
                    out.append(f"{ref(w)} container {c['name']}: no {r} {kind[:-1]}")
    return out


@check(
    "every serving container has readiness and liveness probes; Sandgate's run `sandgate health-check`",
    mutations=[
        ("runtime-api has no readiness probe", lambda d: container_of(d, "runtime-api").pop("readinessProbe")),
        ("the edge probes with curl", lambda d: container_of(d, "edge")["livenessProbe"]["exec"].update(command=["curl", "-f", "http://127.0.0.1:8080/health"])),
    ],
)
def probes(inst: Install) -> list[str]:
    out = []
    for w, spec, c in each_container(inst.docs):
        if c in (spec.get("initContainers") or []) or not long_running(w):
            continue
        for probe in ("readinessProbe", "livenessProbe"):
            if probe not in c:
                out.append(f"{ref(w)} container {c['name']}: no {probe}")
    for svc in SERVICES:
        c = service_container(inst.docs, svc)
        if c is None:
            out.append(f"no Deployment {svc} with a container {svc}")
            continue
        flag = "--http" if svc == "edge" else "--grpc"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            cmd = ((c.get(probe) or {}).get("exec") or {}).get("command") or []
            if cmd[:3] != ["/sandgate", "health-check", flag]:
                out.append(f"{svc}: {probe} runs {cmd!r}, want /sandgate health-check {flag} ...")
    return out


@check(
    "no Secret object carries values (data or stringData)",
    mutations=[("a Secret with data is rendered", lambda d: d.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "jwt-secret", "namespace": APP_NS}, "data": {"jwt-secret": "c2VjcmV0"}}))],
)
def no_secret_values(inst: Install) -> list[str]:
    # A troubleshoot.sh spec is no secret value; its Secret holds the spec's keys only.
    return [
        f"{ref(d)} carries {k}"
        for d in objects(inst.docs, "Secret")
        for k in ("data", "stringData")
        if d.get(k) and not (troubleshoot_kind(d) and k == "stringData" and set(d[k]) <= TROUBLESHOOT_KEYS)
    ]


@check(
    "secrets are referenced by the names the install documents",
    mutations=[("runtime-api reads a secret named admin-pasword", lambda d: container_of(d, "runtime-api")["env"].append({"name": "Y", "valueFrom": {"secretKeyRef": {"name": "admin-pasword", "key": "admin-password"}}}))],
)
def known_secrets(inst: Install) -> list[str]:
    out = []
    for w in workloads(inst.docs):
        for s in sorted(secret_refs(pod_spec(w)) - KNOWN_SECRETS):
            out.append(f"{ref(w)} references secret {s!r}, not one of INSTALL.md's")
    for ing in objects(inst.docs, "Ingress"):
        for t in (ing.get("spec") or {}).get("tls") or []:
            if t.get("secretName") not in KNOWN_SECRETS:
                out.append(f"{ref(ing)} uses TLS secret {t.get('secretName')!r}")
    return out


@check(
    "no ClusterRole or ClusterRoleBinding, and no RoleBinding to a ClusterRole",
    mutations=[
        ("a ClusterRole is rendered", lambda d: d.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "x"}, "rules": []})),
        ("runtime-api is bound to ClusterRole edit", lambda d: find(d, "RoleBinding", "runtime-api-sandboxes", SANDBOX_NS)["roleRef"].update(kind="ClusterRole", name="edit")),
    ],
)
def no_cluster_rbac(inst: Install) -> list[str]:
    out = [ref(d) for d in inst.docs if d.get("kind") in ("ClusterRole", "ClusterRoleBinding")]
    out += [f"{ref(b)} binds ClusterRole {b['roleRef'].get('name')}" for b in objects(inst.docs, "RoleBinding") if (b.get("roleRef") or {}).get("kind") != "Role"]
    return out


def grants(rule: dict, resources_: set[str]) -> set[str]:
    res = set(rule.get("resources") or [])
    if "*" in res:
        return set(resources_)
    return {r for r in res if r.split("/")[0] in resources_}


@check(
    "rights on sandbox resources are in the sandbox namespace, bound only to runtime-api",
    mutations=[
        ("the sandbox Role is in the app namespace", lambda d: find(d, "Role", "runtime-api-sandboxes", SANDBOX_NS)["metadata"].update(namespace=APP_NS)),
        ("the edge is bound to the sandbox Role", lambda d: find(d, "RoleBinding", "runtime-api-sandboxes", SANDBOX_NS)["subjects"].append({"kind": "ServiceAccount", "name": "edge", "namespace": APP_NS})),
    ],
)
def sandbox_rbac(inst: Install) -> list[str]:
    out = []
    want_subject = [{"kind": "ServiceAccount", "name": "runtime-api", "namespace": APP_NS}]
    for role in objects(inst.docs, "Role"):
        granted = set().union(*[grants(r, SANDBOX_RESOURCES) for r in role.get("rules") or []] or [set()])
        if not granted:
            continue
        if ns_of(role) != SANDBOX_NS:
            out.append(f"{ref(role)} grants {sorted(granted)} outside {SANDBOX_NS}")
        for b in objects(inst.docs, "RoleBinding"):
            if (b.get("roleRef") or {}).get("name") != name_of(role) or ns_of(b) != ns_of(role):
                continue
            subjects = [{k: s.get(k) for k in ("kind", "name", "namespace")} for s in b.get("subjects") or []]
            if subjects != want_subject:
                out.append(f"{ref(b)} binds {ref(role)} to {subjects}, want only runtime-api's ServiceAccount")
    return out


@check(
    "runtime-api is granted what its sandbox driver needs in the sandbox namespace",
    mutations=[("the Role lacks ingresses", lambda d: find(d, "Role", "runtime-api-sandboxes", SANDBOX_NS).update(rules=[r for r in find(d, "Role", "runtime-api-sandboxes", SANDBOX_NS)["rules"] if "ingresses" not in r["resources"]]))],
)
def runtime_api_rights(inst: Install) -> list[str]:
    rules: list[dict] = []
    for b in objects(inst.docs, "RoleBinding", SANDBOX_NS):
        if any(s.get("kind") == "ServiceAccount" and s.get("name") == "runtime-api" and s.get("namespace") == APP_NS for s in b.get("subjects") or []):
            role = find(inst.docs, "Role", (b.get("roleRef") or {}).get("name", ""), SANDBOX_NS)
            if role:
                rules += role.get("rules") or []
    out = []
    for group, resource, verbs in RUNTIME_API_NEEDS:
        have: set[str] = set()
        for r in rules:
            if group in (r.get("apiGroups") or []) and resource in (r.get("resources") or []):
                have |= set(r.get("verbs") or [])
        if "*" not in have and not verbs <= have:
            out.append(f"runtime-api lacks {sorted(verbs - have)} on {group or 'core'}/{resource} in {SANDBOX_NS}")
    return out


# What runtime-api's sandbox Role may do to secrets: write each sandbox's session-key
# Secret, never read one (the sandbox namespace also holds the wildcard certificate).
SANDBOX_SECRET_VERBS = {"create", "patch", "delete"}


@check(
    "no Role (or ClusterRole) can read secrets; only runtime-api's sandbox Role writes them",
    mutations=[
        ("the sandbox Role can read secrets", lambda d: find(d, "Role", "runtime-api-sandboxes", SANDBOX_NS)["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})),
        ("the sandbox Role lists secrets", lambda d: find(d, "Role", "runtime-api-sandboxes", SANDBOX_NS)["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "create"]})),
    ],
)
def no_secret_rights(inst: Install) -> list[str]:
    out = []
    for role in objects(inst.docs, "Role") + objects(inst.docs, "ClusterRole"):
        sandbox_role = role.get("kind") == "Role" and name_of(role) == "runtime-api-sandboxes" and ns_of(role) == SANDBOX_NS
        for r in role.get("rules") or []:
            groups, res = set(r.get("apiGroups") or []), set(r.get("resources") or [])
            if not ((groups & {"", "*"}) and (res & {"secrets", "*"})):
                continue
            verbs = set(r.get("verbs") or [])
            if sandbox_role and res == {"secrets"} and verbs <= SANDBOX_SECRET_VERBS:
                continue
            out.append(f"{ref(role)} grants {sorted(verbs)} on {sorted(res)}")
    return out


@check(
    "gateway-api-key and gateway-env-secrets are given to model-gw's pods (and its preflight Job) only",
    mutations=[
        ("the edge reads gateway-api-key", lambda d: container_of(d, "edge")["env"].append({"name": "GATEWAY_API_KEY", "valueFrom": {"secretKeyRef": {"name": "gateway-api-key", "key": "gateway-api-key"}}})),
        ("runtime-api mounts gateway-env-secrets", lambda d: spec_of(d, "runtime-api")["volumes"].append({"name": "s", "secret": {"secretName": "gateway-env-secrets"}})),
        ("the runtime-api preflight reads gateway-api-key", lambda d: pod_spec(find(d, "Job", "preflight"))["containers"][0]["env"].append({"name": "K", "valueFrom": {"secretKeyRef": {"name": "gateway-api-key", "key": "gateway-api-key"}}})),
        ("model-gw no longer loads gateway-env-secrets", lambda d: container_of(d, "model-gw").pop("envFrom")),
    ],
)
def gateway_secrets_scoped(inst: Install) -> list[str]:
    out = []
    for secret in GATEWAY_SECRETS:
        users = sorted(ref(w) for w in workloads(inst.docs) if secret in secret_refs(pod_spec(w)))
        want = sorted(ref(w) for w in (find(inst.docs, "Deployment", "model-gw"), find(inst.docs, "Job", "preflight-model-gw")) if w)
        if users != want:
            out.append(f"{secret} is referenced by {users or 'nothing'}, want only {want or 'Deployment/model-gw'} (model-gw and its preflight)")
    return out


@check(
    "model-gw's ServiceAccount is its own; only runtime-api's pods get an API token",
    mutations=[
        ("the edge runs as model-gw's ServiceAccount", lambda d: spec_of(d, "edge").update(serviceAccountName="model-gw")),
        ("model-gw's pods get a token", lambda d: spec_of(d, "model-gw").update(automountServiceAccountToken=True)),
    ],
)
def service_accounts(inst: Install) -> list[str]:
    out = []
    sas = {(ns_of(s), name_of(s)): s for s in objects(inst.docs, "ServiceAccount")}
    for w in workloads(inst.docs):
        spec = pod_spec(w)
        sa = spec.get("serviceAccountName") or "default"
        if sa == "model-gw" and name_of(w) != "model-gw":
            out.append(f"{ref(w)} runs as model-gw's ServiceAccount")
        if name_of(w) in SERVICES and sa != name_of(w):
            out.append(f"{ref(w)} runs as ServiceAccount {sa!r}, want {name_of(w)!r}")
        token = spec.get("automountServiceAccountToken")
        if token is None:
            token = (sas.get((ns_of(w), sa)) or {}).get("automountServiceAccountToken", True)
        if token and name_of(w) != "runtime-api":
            out.append(f"{ref(w)}: its pods get a Kubernetes API token (automountServiceAccountToken)")
    return out


@check(
    "the store: every service reads REDIS_URL with $(REDIS_PASSWORD) from secret cache",
    mutations=[
        ("model-gw's REDIS_URL carries the password inline", lambda d: [e.update(value="redis://:hunter2@redis:6379/0") for e in container_of(d, "model-gw")["env"] if e["name"] == "REDIS_URL"]),
        ("REDIS_PASSWORD is declared after REDIS_URL", lambda d: container_of(d, "edge").update(env=[e for e in container_of(d, "edge")["env"] if e["name"] != "REDIS_PASSWORD"] + [e for e in container_of(d, "edge")["env"] if e["name"] == "REDIS_PASSWORD"])),
    ],
)
def redis_url(inst: Install) -> list[str]:
    out = []
    urls = set()
    for svc in SERVICES:
        c = service_container(inst.docs, svc)
        if c is None:
            out.append(f"no Deployment {svc}")
            continue
        names = [e.get("name") for e in c.get("env") or []]
        url = env_value(c, "REDIS_URL")
        if not url or not re.match(r"^rediss?://", url):
            out.append(f"{svc}: REDIS_URL is {url!r}")
            continue
        urls.add(url)
        if "$(REDIS_PASSWORD)" not in url:
            out.append(f"{svc}: REDIS_URL does not take its password from $(REDIS_PASSWORD)")
        pw = next((e for e in c.get("env") or [] if e.get("name") == "REDIS_PASSWORD"), None)
        kref = ((pw or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
        if (kref.get("name"), kref.get("key")) != ("cache", "redis-password"):
            out.append(f"{svc}: REDIS_PASSWORD is not secret cache, key redis-password")
        elif names.index("REDIS_PASSWORD") > names.index("REDIS_URL"):
            out.append(f"{svc}: REDIS_PASSWORD is declared after REDIS_URL, so $(REDIS_PASSWORD) is not expanded")
    if len(urls) > 1:
        out.append(f"the services use different stores: {sorted(urls)}")
    return out


@check(
    "runtime-api's sandbox settings: kubernetes driver, sandbox namespace, storage class, sandbox ingress class and TLS",
    mutations=[
        ("SANDBOX_NAMESPACE is the app namespace", lambda d: [e.update(value=APP_NS) for e in container_of(d, "runtime-api")["env"] if e["name"] == "SANDBOX_NAMESPACE"]),
        ("sandbox Ingresses use another TLS secret", lambda d: [e.update(value="other-tls") for e in container_of(d, "runtime-api")["env"] if e["name"] == "SANDBOX_TLS_SECRET"]),
    ],
)
def runtime_api_settings(inst: Install) -> list[str]:
    c = service_container(inst.docs, "runtime-api")
    if c is None:
        return ["no Deployment runtime-api"]
    out = []
    want = {"SANDBOX_DRIVER": "kubernetes", "SANDBOX_NAMESPACE": SANDBOX_NS}
    for k, v in want.items():
        if env_value(c, k) != v:
            out.append(f"runtime-api: {k} is {env_value(c, k)!r}, want {v!r}")
    for k in ("STORAGE_CLASS", "EPHEMERAL_STORAGE_SIZE", "RECONCILE_INTERVAL", "RUNTIME_DEAD_SECONDS", "WARM_RUNTIME_CONFIG_OVERLAY"):
        if not env_value(c, k):
            out.append(f"runtime-api: {k} is not set")
    if env_value(c, "SANDBOX_TLS_SECRET") != TLS_SECRET:
        out.append(f"runtime-api: SANDBOX_TLS_SECRET is {env_value(c, 'SANDBOX_TLS_SECRET')!r}, want {TLS_SECRET!r} (the wildcard certificate)")
    classes = {(i.get("spec") or {}).get("ingressClassName") for i in objects(inst.docs, "Ingress", APP_NS)}
    if env_value(c, "SANDBOX_INGRESS_CLASS") not in classes:
        out.append(f"runtime-api: SANDBOX_INGRESS_CLASS {env_value(c, 'SANDBOX_INGRESS_CLASS')!r} is not the app Ingresses' class {sorted(map(str, classes))}")
    for k in ("RECONCILE_INTERVAL", "RUNTIME_DEAD_SECONDS"):
        if env_value(c, k) and not str(env_value(c, k)).isdigit():
            out.append(f"runtime-api: {k} is {env_value(c, k)!r}, want seconds")
    for k in ("ADMIN_PASSWORD", "JWT_SECRET", "DEFAULT_API_KEY", "SANDGATE_WEBHOOK_API_KEYS"):
        e = next((e for e in c.get("env") or [] if e.get("name") == k), None)
        if not e or "secretKeyRef" not in (e.get("valueFrom") or {}):
            out.append(f"runtime-api: {k} does not come from a secret")
    return out


@check(
    "the DNS layout: https sandbox URLs one label under the base domain (spec 2.9)",
    mutations=[
        ("RUNTIME_URL_PATTERN names another domain", lambda d: [e.update(value="https://{runtime_id}-runtime.other.example") for e in container_of(d, "runtime-api")["env"] if e["name"] == "RUNTIME_URL_PATTERN"]),
        ("RUNTIME_DISABLE_SSL is true", lambda d: [e.update(value="true") for e in container_of(d, "runtime-api")["env"] if e["name"] == "RUNTIME_DISABLE_SSL"]),
        ("the app host is two labels down", lambda d: find(d, "Ingress", "app")["spec"]["rules"][0].update(host="www.app.sandgate.example.com")),
    ],
)
def dns_layout(inst: Install) -> list[str]:
    out = []
    hosts = [r.get("host", "") for ing in objects(inst.docs, "Ingress", APP_NS) for r in (ing.get("spec") or {}).get("rules") or []]
    app = find(inst.docs, "Ingress", "app")
    if not app or not hosts:
        return ["no Ingress app"]
    base = app["spec"]["rules"][0]["host"].split(".", 1)[-1]
    for h in hosts:
        if h.split(".", 1)[-1] != base or "*" in h:
            out.append(f"Ingress host {h!r} is not one label under {base!r}")
    c = service_container(inst.docs, "runtime-api")
    if c is None:
        return out + ["no Deployment runtime-api"]
    base_url, sep, pattern = env_value(c, "RUNTIME_BASE_URL"), env_value(c, "RUNTIME_URL_SEPARATOR"), env_value(c, "RUNTIME_URL_PATTERN")
    if not base_url or base_url.split(".", 1)[-1] != base or base_url.count(".") != base.count(".") + 1:
        out.append(f"RUNTIME_BASE_URL {base_url!r} is not <label>.{base}")
    if sep is None or "." in sep:
        out.append(f"RUNTIME_URL_SEPARATOR {sep!r} would put sandbox hosts more than one label under {base}")
    want = f"https://{{runtime_id}}{sep}{base_url}"
    if pattern != want:
        out.append(f"RUNTIME_URL_PATTERN {pattern!r} does not match separator and base URL: want {want!r}")
    if env_value(c, "RUNTIME_DISABLE_SSL") != "false":
        out.append(f"RUNTIME_DISABLE_SSL is {env_value(c, 'RUNTIME_DISABLE_SSL')!r}: must be \"false\" for https sandbox URLs")
    return out


@check(
    "ingresses: app and runtime-api hosts, TLS from sandgate-wildcard-tls, backends exist",
    mutations=[
        ("the runtime-api Ingress has no TLS", lambda d: find(d, "Ingress", "runtime-api")["spec"].pop("tls")),
        ("the app Ingress routes to a missing Service", lambda d: find(d, "Ingress", "app")["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"].update(name="web")),
    ],
)
def ingresses(inst: Install) -> list[str]:
    out = []
    for name in ("app", "runtime-api"):
        if not find(inst.docs, "Ingress", name):
            out.append(f"no Ingress {name}")
    for ing in objects(inst.docs, "Ingress"):
        spec = ing.get("spec") or {}
        tls_hosts = {h for t in spec.get("tls") or [] if t.get("secretName") == TLS_SECRET for h in t.get("hosts") or []}
        if not spec.get("ingressClassName"):
            out.append(f"{ref(ing)}: no ingressClassName")
        for rule in spec.get("rules") or []:
            if rule.get("host") not in tls_hosts:
                out.append(f"{ref(ing)}: host {rule.get('host')!r} is not served with TLS secret {TLS_SECRET}")
            for p in (rule.get("http") or {}).get("paths") or []:
                svc = (p.get("backend") or {}).get("service") or {}
                s = find(inst.docs, "Service", svc.get("name", ""), ns_of(ing))
                port = (svc.get("port") or {})
                if s is None:
                    out.append(f"{ref(ing)}: backend Service {svc.get('name')!r} does not exist")
                elif not any(port.get("name") == sp.get("name") or port.get("number") == sp.get("port") for sp in s["spec"].get("ports") or []):
                    out.append(f"{ref(ing)}: backend port {port} is not a port of {ref(s)}")
    return out


def routes(path: str, path_type: str, target: str) -> bool:
    """Whether an Ingress path of that type routes the request path target."""
    if path_type == "Exact":
        return path == target
    prefix = path.rstrip("/")
    return target == prefix or target.startswith(prefix + "/")


@check(
    "no Ingress exposes /metrics (scraped in-cluster only)",
    mutations=[("the app Ingress routes every path", lambda d: find(d, "Ingress", "app")["spec"]["rules"][0]["http"]["paths"].append({"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "edge", "port": {"name": "http"}}}}))],
)
def metrics_private(inst: Install) -> list[str]:
    out = []
    for ing in objects(inst.docs, "Ingress"):
        for rule in (ing.get("spec") or {}).get("rules") or []:
            for p in (rule.get("http") or {}).get("paths") or []:
                if routes(p.get("path", "/"), p.get("pathType", "Prefix"), "/metrics"):
                    out.append(f"{ref(ing)}: {rule.get('host')}{p.get('path')} ({p.get('pathType')}) routes /metrics")
    return out


@check(
    "every Service selects pods and targets ports they declare",
    mutations=[("the model-gw Service targets a port named grcp", lambda d: find(d, "Service", "model-gw")["spec"]["ports"][0].update(targetPort="grcp"))],
)
def services_match(inst: Install) -> list[str]:
    out = []
    for s in objects(inst.docs, "Service"):
        sel = (s.get("spec") or {}).get("selector")
        pods = [w for w in workloads(inst.docs) if ns_of(w) == ns_of(s) and sel and all(pod_labels(w).get(k) == v for k, v in sel.items())]
        if not pods:
            out.append(f"{ref(s)} selects no pods")
            continue
        cports = [p for w in pods for c in containers(pod_spec(w)) for p in c.get("ports") or []]
        for sp in s["spec"].get("ports") or []:
            tp = sp.get("targetPort", sp.get("port"))
            if port_number(tp, cports) is None or (isinstance(tp, int) and tp not in [p.get("containerPort") for p in cports]):
                out.append(f"{ref(s)}: targetPort {tp!r} is not a port of its pods")
    return out


@check(
    "the installer files: warm-runtimes.json with v1_current, gateway.yaml's model list, mounted where the env says",
    mutations=[
        ("warm-runtimes.json has no v1_current", lambda d: find(d, "ConfigMap", "warm-runtimes")["data"].update({"warm-runtimes.json": '{"count": 1, "configs": [{"name": "other", "image": "i", "working_dir": "/w", "command": [], "environment": {}}]}'})),
        ("the warm-runtimes volume uses subPath (no live reload)", lambda d: [m.update(subPath="warm-runtimes.json") for m in container_of(d, "runtime-api")["volumeMounts"] if m["name"] == "warm-runtimes"]),
        ("a model entry lacks api_base", lambda d: find(d, "ConfigMap", "gateway-config")["data"].update({"gateway.yaml": "model_list:\n  - model_name: m\n    gateway_params: {model: openai/x/y, api_key: k}\n"})),
    ],
)
def installer_files(inst: Install) -> list[str]:
    out = []

    def mounted(svc: str, env: str, cm: str) -> str | None:
        c = service_container(inst.docs, svc)
        if c is None:
            out.append(f"no Deployment {svc}")
            return None
        path = env_value(c, env)
        if not path:
            out.append(f"{svc}: {env} is not set")
            return None
        d, key = posixpath.split(path)
        vols = {v["name"]: v for v in pod_spec(find(inst.docs, "Deployment", svc)).get("volumes") or []}
        mounts = [m for m in c.get("volumeMounts") or [] if m.get("mountPath") == d and (vols.get(m.get("name")) or {}).get("configMap", {}).get("name") == cm]
        if not mounts:
            out.append(f"{svc}: no ConfigMap {cm} mounted at {d} ({env}={path})")
        elif any("subPath" in m for m in mounts):
            out.append(f"{svc}: ConfigMap {cm} is mounted with subPath: edits would never reach the pods")
        obj = find(inst.docs, "ConfigMap", cm)
        if obj is None or key not in (obj.get("data") or {}):
            out.append(f"no ConfigMap {cm} with key {key}")
            return None
        return obj["data"][key]

    warm = mounted("runtime-api", "WARM_RUNTIMES_FILE", "warm-runtimes")
    if warm is not None:
        try:
            doc = json.loads(warm)
            configs = doc.get("configs") or []
            if not isinstance(doc.get("count", 1), int):
                out.append("warm-runtimes.json: count is not an integer")
            names = [c.get("name") for c in configs]
            if "v1_current" not in names:
                out.append("warm-runtimes.json: no default entry named v1_current")
            for c in configs:
                missing = [k for k in ("name", "image", "working_dir", "command", "environment") if k not in c]
                if missing:
                    out.append(f"warm-runtimes.json: {c.get('name')!r} lacks {missing}")
                if "source" in c:
                    out.append(f"warm-runtimes.json: {c.get('name')!r} has a source field")
            images = [c.get("image") for c in configs]
            if len(set(images)) != len(images):
                out.append("warm-runtimes.json: two configurations share an image (spec 2.1 rule 3)")
        except (ValueError, AttributeError) as e:
            out.append(f"warm-runtimes.json does not parse: {e}")
    gw = mounted("model-gw", "GATEWAY_CONFIG", "gateway-config")
    if gw is not None:
        try:
            doc = yaml.safe_load(gw) or {}
            entries = doc.get("model_list") or []
            if not entries:
                out.append("gateway.yaml: empty model_list")
            for e in entries:
                params = e.get("gateway_params") or {}
                missing = [k for k in ("model", "api_base", "api_key") if not params.get(k)]
                if not e.get("model_name") or missing:
                    out.append(f"gateway.yaml: entry {e.get('model_name')!r} lacks {missing or ['model_name']}")
                key = str(params.get("api_key", ""))
                if key.startswith("os.environ/"):
                    var = key.split("/", 1)[1]
                    c = service_container(inst.docs, "model-gw") or {}
                    has_env = any(x.get("name") == var for x in c.get("env") or [])
                    has_from = any((x.get("secretRef") or {}).get("name") == "gateway-env-secrets" for x in c.get("envFrom") or [])
                    if not has_env and not has_from:
                        out.append(f"gateway.yaml: {var} (entry {e.get('model_name')!r}) is not in model-gw's environment")
            fwd = (doc.get("general_settings") or {}).get("forward_client_headers_to_llm_api", False)
            if not isinstance(fwd, bool):
                out.append("gateway.yaml: forward_client_headers_to_llm_api is not a boolean")
        except (yaml.YAMLError, AttributeError) as e:
            out.append(f"gateway.yaml does not parse: {e}")
    return out


@check(
    "network policy: ingress is denied by default in the app namespace",
    mutations=[("the default-deny policy is gone", lambda d: d.remove(find(d, "NetworkPolicy", "default-deny-ingress")))],
)
def default_deny(inst: Install) -> list[str]:
    for pol in objects(inst.docs, "NetworkPolicy", APP_NS):
        spec = pol.get("spec") or {}
        if spec.get("podSelector") == {} and "Ingress" in (spec.get("policyTypes") or []) and not spec.get("ingress"):
            return []
    return [f"no NetworkPolicy in {APP_NS} selects every pod and allows no ingress"]


def service_policy_problems(inst: Install, svc: str, served: int, allowed_serving: Callable[[Peer], bool], serving_desc: str, positive: list[Peer]) -> list[str]:
    """The pods of svc accept, on port `served`, only peers allowed_serving accepts; on its
    metrics port only the monitoring namespace; nothing else."""
    w = find(inst.docs, "Deployment", svc)
    if w is None:
        return [f"no Deployment {svc}"]
    allowed = ingress_allowed(inst.docs, w)
    if allowed is None:
        return [f"{svc}: no NetworkPolicy selects its pods: anyone may connect"]
    c = service_container(inst.docs, svc) or {}
    metrics = listen_port(env_value(c, "SANDGATE_METRICS_LISTEN")) or served
    monitoring = Peer("namespaces", namespaces=frozenset({inst.values["monitoringNamespace"]}))
    out = []
    for peer, port in allowed:
        ports = [p.get("containerPort") for p in c.get("ports") or []] if port == "*" else [port]
        for p in ports:
            ok = (p == served and allowed_serving(peer)) or (p == metrics and peer == monitoring)
            if not ok:
                out.append(f"{svc}: {describe(inst.docs, peer, APP_NS)} may connect to port {p} (want {serving_desc} on {served}, {inst.values['monitoringNamespace']} on {metrics})")
    for peer in positive:
        if not any(pr == peer and pt in (served, "*") for pr, pt in allowed):
            out.append(f"{svc}: {describe(inst.docs, peer, APP_NS)} may not connect to port {served}")
    return out


def edge_pods_only(inst: Install) -> Callable[[Peer], bool]:
    return lambda peer: peer.kind == "pods" and pods_peer_matches(inst.docs, peer, APP_NS) == {"edge"}


@check(
    "network policy: runtime-api and model-gw accept gRPC from the edge only",
    mutations=[
        ("runtime-api accepts every pod of the namespace", lambda d: find(d, "NetworkPolicy", "runtime-api")["spec"]["ingress"][0].update({"from": [{"podSelector": {}}]})),
        ("model-gw's gRPC rule has no from (anyone)", lambda d: find(d, "NetworkPolicy", "model-gw")["spec"]["ingress"][0].pop("from")),
    ],
)
def grpc_from_edge(inst: Install) -> list[str]:
    out = []
    for svc in ("runtime-api", "model-gw"):
        c = service_container(inst.docs, svc) or {}
        grpc = listen_port(env_value(c, "SANDGATE_GRPC_LISTEN"))
        if grpc is None:
            out.append(f"{svc}: SANDGATE_GRPC_LISTEN has no port")
            continue
        out += service_policy_problems(inst, svc, grpc, edge_pods_only(inst), "the edge", [])
        allowed = ingress_allowed(inst.docs, find(inst.docs, "Deployment", svc)) or []
        if not any(p.kind == "pods" and "edge" in pods_peer_matches(inst.docs, p, APP_NS) and pt in (grpc, "*") for p, pt in allowed):
            out.append(f"{svc}: the edge may not connect to port {grpc}")
    return out


@check(
    "network policy: the edge accepts the ingress controller's namespace (and sandboxes, monitoring) only",
    mutations=[("the edge accepts 0.0.0.0/0", lambda d: find(d, "NetworkPolicy", "edge")["spec"]["ingress"][0]["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}}))],
)
def edge_from_ingress(inst: Install) -> list[str]:
    c = service_container(inst.docs, "edge") or {}
    port = listen_port(env_value(c, "SANDGATE_LISTEN"))
    if port is None:
        return ["edge: SANDGATE_LISTEN has no port"]
    ctrl = inst.values["ingressControllerNamespace"]
    allowed_ns = {ctrl, SANDBOX_NS, inst.values["monitoringNamespace"]}
    return service_policy_problems(
        inst,
        "edge",
        port,
        lambda peer: peer.kind == "namespaces" and peer.namespaces <= allowed_ns,
        f"namespaces {sorted(allowed_ns)}",
        [Peer("namespaces", namespaces=frozenset({ctrl}))],
    )


# --------------------------------------------------------------------------------------
# The sandbox namespace's network and model-gw's egress (issue 40): connections probed
# against the rendered policies (scripts/k8s_network.py). The addresses stand for what a
# cluster has: pods and Services in the private ranges, the metadata service on
# link-local, the Kubernetes API behind a Service address and on a node.

METADATA = [Endpoint("the cloud metadata address", "169.254.169.254"), Endpoint("the cloud metadata address (IPv6)", "fd00:ec2::254")]
KUBE_API = [
    (Endpoint("the Kubernetes API's Service address", "10.96.0.1"), 443),
    (Endpoint("the Kubernetes API server", "172.20.0.5", "kube-system", {"component": "kube-apiserver"}), 6443),
]
INTERNET = Endpoint("an internet address", "93.184.216.34")


def sandbox_pod(runtime_id: str, ip: str) -> Endpoint:
    """A sandbox pod as runtime-api's driver labels it."""
    labels = {"app.kubernetes.io/managed-by": "sandgate", "sandgate.dev/runtime-id": runtime_id, "sandgate.dev/pool": "cold"}
    return Endpoint(f"sandbox {runtime_id}", ip, SANDBOX_NS, labels, {"http": 8000})


def service_pod(inst: Install, svc: str, ip: str) -> Endpoint | None:
    w = find(inst.docs, "Deployment", svc)
    if w is None:
        return None
    ports = {p.get("name"): p.get("containerPort") for c in containers(pod_spec(w)) for p in c.get("ports") or []}
    return Endpoint(svc, ip, APP_NS, pod_labels(w), ports)


def dns_pod(inst: Install) -> Endpoint:
    return Endpoint("the cluster DNS", "10.244.9.9", inst.values["dnsNamespace"], {"k8s-app": "kube-dns"})


def egress_rules_of(docs: list[dict], name: str, ns: str) -> list[dict]:
    pol = find(docs, "NetworkPolicy", name, ns)
    assert pol is not None, f"self-test: no NetworkPolicy {name}"
    return pol["spec"]["egress"]


def unblock(docs: list[dict], cidr: str) -> None:
    """Takes `cidr` out of every ipBlock's except in the sandbox and model-gw policies."""
    for pol in objects(docs, "NetworkPolicy"):
        for rule in (pol.get("spec") or {}).get("egress") or []:
            for peer in rule.get("to") or []:
                block = peer.get("ipBlock") or {}
                if cidr in block.get("except", []):
                    block["except"].remove(cidr)


def forbidden_and_needed(inst: Install, source: Endpoint, forbidden: list[tuple[Endpoint, int, str]], needed: list[tuple[Endpoint, int, str]]) -> list[str]:
    out = []
    for dest, port, proto in forbidden:
        if leaves(inst.docs, source, dest, port, proto):
            out.append(f"{source.what} reaches {dest.what} ({dest.ip}) on {port}/{proto}")
    for dest, port, proto in needed:
        if not connects(inst.docs, source, dest, port, proto):
            out.append(f"{source.what} does not reach {dest.what} on {port}/{proto}")
    return out


@check(
    "network policy: the sandbox namespace denies ingress and egress by default",
    mutations=[("the sandbox namespace's default deny is gone", lambda d: d.remove(find(d, "NetworkPolicy", "sandbox-default-deny", SANDBOX_NS)))],
)
def sandbox_default_deny(inst: Install) -> list[str]:
    return [f"no NetworkPolicy in {SANDBOX_NS} selects every pod and allows no {direction.lower()}" for direction in ("Ingress", "Egress") if not default_denies(inst.docs, SANDBOX_NS, direction)]


@check(
    "network policy: a sandbox reaches DNS, the edge and the internet; never another sandbox, a metadata address, the Kubernetes API or Sandgate's other services",
    mutations=[
        ("sandboxes reach every pod of their namespace", lambda d: egress_rules_of(d, "sandboxes", SANDBOX_NS).append({"to": [{"podSelector": {}}]})),
        ("the link-local range is no longer blocked", lambda d: unblock(d, "169.254.0.0/16")),
        ("10.0.0.0/8 is no longer blocked", lambda d: unblock(d, "10.0.0.0/8")),
        ("the edge rule is gone", lambda d: egress_rules_of(d, "sandboxes", SANDBOX_NS).pop(1)),
    ],
)
def sandbox_egress(inst: Install) -> list[str]:
    me = sandbox_pod("a", "10.244.1.10")
    forbidden = [(sandbox_pod("b", "10.244.1.11"), 8000, "TCP")]
    forbidden += [(m, port, "TCP") for m in METADATA for port in (80, 443)]
    forbidden += [(api, port, "TCP") for api, port in KUBE_API]
    for i, svc in enumerate(("runtime-api", "model-gw")):
        pod = service_pod(inst, svc, f"10.244.2.{i + 1}")
        if pod is not None:
            forbidden += [(pod, port, "TCP") for port in pod.ports.values()]
    forbidden.append((Endpoint("a node's kubelet", "10.0.0.7"), 10250, "TCP"))
    needed = [(dns_pod(inst), 53, "UDP"), (dns_pod(inst), 53, "TCP")]
    edge = service_pod(inst, "edge", "10.244.3.3")
    if edge is None:
        return ["no Deployment edge"]
    needed.append((edge, edge.ports.get("http", 8080), "TCP"))
    if inst.values["sandboxEgress"]["internet"]:
        needed.append((INTERNET, 443, "TCP"))
    else:
        forbidden.append((INTERNET, 443, "TCP"))
    return forbidden_and_needed(inst, me, forbidden, needed)


@check(
    "network policy: a sandbox accepts the ingress controller and runtime-api only",
    mutations=[
        ("sandboxes accept every pod of the app namespace", lambda d: find(d, "NetworkPolicy", "sandboxes", SANDBOX_NS)["spec"]["ingress"][0]["from"][1].pop("podSelector")),
        ("sandboxes accept each other", lambda d: find(d, "NetworkPolicy", "sandboxes", SANDBOX_NS)["spec"]["ingress"][0]["from"].append({"podSelector": {}})),
    ],
)
def sandbox_ingress(inst: Install) -> list[str]:
    me = sandbox_pod("a", "10.244.1.10")
    ctrl = Endpoint("the ingress controller", "10.244.5.5", inst.values["ingressControllerNamespace"], {"app.kubernetes.io/name": "ingress-nginx"})
    out = []
    runtime_api = service_pod(inst, "runtime-api", "10.244.2.1")
    allowed = [ctrl] + ([runtime_api] if runtime_api else [])
    refused = [sandbox_pod("b", "10.244.1.11"), Endpoint("a pod of another namespace", "10.244.6.6", "default", {"app": "x"})]
    refused += [p for i, svc in enumerate(("edge", "model-gw")) if (p := service_pod(inst, svc, f"10.244.4.{i + 1}"))]
    for source in allowed:
        if not connects(inst.docs, source, me, 8000):
            out.append(f"{source.what} cannot reach a sandbox")
    for source in refused:
        if admits(inst.docs, me, source, 8000):
            out.append(f"{source.what} reaches a sandbox")
    return out


@check(
    "network policy: model-gw reaches DNS, the store and its providers' ports only",
    mutations=[
        ("model-gw's egress policy is gone", lambda d: d.remove(find(d, "NetworkPolicy", "model-gw-egress"))),
        ("model-gw's provider rule takes every port", lambda d: egress_rules_of(d, "model-gw-egress", APP_NS)[-1].pop("ports")),
        ("the link-local range is no longer blocked", lambda d: unblock(d, "169.254.0.0/16")),
    ],
)
def model_gw_egress(inst: Install) -> list[str]:
    me = service_pod(inst, "model-gw", "10.244.7.7")
    if me is None:
        return []  # no gateway in this install
    forbidden = [(m, port, "TCP") for m in METADATA for port in (80, 443)]
    forbidden += [(api, port, "TCP") for api, port in KUBE_API]
    forbidden += [(sandbox_pod("a", "10.244.1.10"), 8000, "TCP"), (Endpoint("an internal service", "10.1.2.3"), 443, "TCP"), (INTERNET, 22, "TCP")]
    runtime_api = service_pod(inst, "runtime-api", "10.244.2.1")
    if runtime_api is not None:
        forbidden.append((runtime_api, runtime_api.ports.get("grpc", 50051), "TCP"))
    needed = [(dns_pod(inst), 53, "UDP")]
    for port in inst.values["modelGwEgress"]["ports"]:
        needed.append((INTERNET, port, "TCP"))
    redis = next((w for w in workloads(inst.docs) if is_redis(w)), None)
    if redis is not None:
        ports = {p.get("name"): p.get("containerPort") for c in containers(pod_spec(redis)) for p in c.get("ports") or []}
        needed.append((Endpoint("the bundled Redis", "10.244.8.8", APP_NS, pod_labels(redis), ports), 6379, "TCP"))
    for cidr in inst.values["storeEgress"]["cidrs"]:
        first = str(next(ipaddress.ip_network(cidr, strict=False).hosts()))
        needed.append((Endpoint("the external store", first), inst.values["storeEgress"]["port"], "TCP"))
    return forbidden_and_needed(inst, me, forbidden, needed)


@check(
    "network policy: every service's metrics port is open to the monitoring namespace",
    mutations=[("model-gw's metrics rule is gone", lambda d: find(d, "NetworkPolicy", "model-gw")["spec"].update(ingress=find(d, "NetworkPolicy", "model-gw")["spec"]["ingress"][:1]))],
)
def metrics_reachable(inst: Install) -> list[str]:
    out = []
    mon = inst.values["monitoringNamespace"]
    for svc in SERVICES:
        w = find(inst.docs, "Deployment", svc)
        c = service_container(inst.docs, svc) or {}
        port = listen_port(env_value(c, "SANDGATE_METRICS_LISTEN") or env_value(c, "SANDGATE_LISTEN"))
        if w is None or port is None:
            out.append(f"{svc}: no metrics port")
            continue
        allowed = ingress_allowed(inst.docs, w) or []
        if not any(p.kind == "namespaces" and mon in p.namespaces and pt in (port, "*") for p, pt in allowed):
            out.append(f"{svc}: namespace {mon} may not reach /metrics on port {port}")
    return out


@check(
    "network policy: the bundled Redis accepts the three services only",
    profiles=("dev",),
    mutations=[("redis accepts every pod", lambda d: find(d, "NetworkPolicy", "redis")["spec"]["ingress"][0].update({"from": [{"podSelector": {}}]}))],
)
def redis_policy(inst: Install) -> list[str]:
    out = []
    for w in [w for w in workloads(inst.docs) if is_redis(w)]:
        allowed = ingress_allowed(inst.docs, w)
        if allowed is None:
            out.append(f"{ref(w)}: no NetworkPolicy selects its pods")
            continue
        reached: set[str] = set()
        for peer, port in allowed:
            if peer.kind != "pods":
                out.append(f"{ref(w)}: {describe(inst.docs, peer, ns_of(w))} may connect")
                continue
            names = pods_peer_matches(inst.docs, peer, ns_of(w))
            if not names <= set(SERVICES):
                out.append(f"{ref(w)}: pods of {sorted(names - set(SERVICES))} may connect")
            reached |= names
        if reached != set(SERVICES):
            out.append(f"{ref(w)}: {sorted(set(SERVICES) - reached)} may not connect")
    return out


@check(
    "every image is pinned to a tag or digest (not latest)",
    mutations=[("model-gw runs :latest", lambda d: container_of(d, "model-gw").update(image="registry.example.com/sandgate:latest"))],
)
def pinned_images(inst: Install) -> list[str]:
    out = []
    for w, _, c in each_container(inst.docs):
        img = c.get("image", "")
        tag = img.rsplit("/", 1)[-1].split(":", 1)[1] if ":" in img.rsplit("/", 1)[-1] else ""
        if "@sha256:" not in img and tag in ("", "latest", "unset"):
            out.append(f"{ref(w)} container {c['name']}: image {img!r} is not pinned")
    return out


def min_replicas(inst: Install, svc: str) -> int:
    w = find(inst.docs, "Deployment", svc)
    if w is None:
        return 0
    hpa = next((h for h in objects(inst.docs, "HorizontalPodAutoscaler", APP_NS) if (h["spec"].get("scaleTargetRef") or {}).get("name") == svc), None)
    if hpa is not None:
        return hpa["spec"].get("minReplicas", 1)
    return w["spec"].get("replicas", 1)


@check(
    "edge, runtime-api and model-gw keep at least 2 replicas",
    profiles=("prod",),
    mutations=[("runtime-api has 1 replica", lambda d: find(d, "Deployment", "runtime-api")["spec"].update(replicas=1))],
)
def prod_replicas(inst: Install) -> list[str]:
    return [f"{svc}: at least {min_replicas(inst, svc)} replica(s), want 2 or more" for svc in SERVICES if min_replicas(inst, svc) < 2]


@check(
    "a PodDisruptionBudget per service that selects its pods and allows a drain",
    profiles=("prod",),
    mutations=[
        ("model-gw's PDB is gone", lambda d: d.remove(find(d, "PodDisruptionBudget", "model-gw"))),
        ("the edge's PDB wants all replicas up", lambda d: find(d, "PodDisruptionBudget", "edge")["spec"].update(minAvailable=2)),
    ],
)
def prod_pdbs(inst: Install) -> list[str]:
    out = []
    for svc in SERVICES:
        w = find(inst.docs, "Deployment", svc)
        pdbs = [p for p in objects(inst.docs, "PodDisruptionBudget", APP_NS) if w and selector_matches(p["spec"].get("selector"), pod_labels(w))]
        if not pdbs:
            out.append(f"{svc}: no PodDisruptionBudget selects its pods")
        for p in pdbs:
            ma, mu = p["spec"].get("minAvailable"), p["spec"].get("maxUnavailable")
            if (isinstance(ma, int) and ma >= min_replicas(inst, svc)) or mu in (0, "0%") or ma == "100%":
                out.append(f"{ref(p)}: blocks every eviction at {min_replicas(inst, svc)} replicas")
    return out


@check(
    "autoscaling/v2 HPAs for the edge and model-gw, which own their replica counts",
    profiles=("prod",),
    mutations=[
        ("the edge's HPA is gone", lambda d: d.remove(find(d, "HorizontalPodAutoscaler", "edge"))),
        ("model-gw's Deployment sets replicas under its HPA", lambda d: find(d, "Deployment", "model-gw")["spec"].update(replicas=2)),
    ],
)
def prod_hpas(inst: Install) -> list[str]:
    out = []
    for svc in ("edge", "model-gw"):
        hpa = find(inst.docs, "HorizontalPodAutoscaler", svc)
        if hpa is None or hpa.get("apiVersion") != "autoscaling/v2":
            out.append(f"{svc}: no autoscaling/v2 HorizontalPodAutoscaler named {svc}")
            continue
        target = hpa["spec"].get("scaleTargetRef") or {}
        if (target.get("kind"), target.get("name")) != ("Deployment", svc):
            out.append(f"{ref(hpa)} scales {target}, want Deployment {svc}")
        if hpa["spec"].get("minReplicas", 1) < 2 or hpa["spec"].get("maxReplicas", 0) < hpa["spec"].get("minReplicas", 1):
            out.append(f"{ref(hpa)}: minReplicas {hpa['spec'].get('minReplicas')} / maxReplicas {hpa['spec'].get('maxReplicas')}")
        w = find(inst.docs, "Deployment", svc)
        if w and "replicas" in w["spec"]:
            out.append(f"Deployment {svc} sets replicas: re-applying would reset what its HPA chose")
    return out


@check(
    "the preflight: pre-install/pre-upgrade Jobs run `sandgate check-config` per service with the service's own environment",
    mutations=[
        ("the preflight is a post-install hook", lambda d: find(d, "Job", "preflight")["metadata"]["annotations"].update({"helm.sh/hook": "post-install"})),
        ("the runtime-api check lacks STORAGE_CLASS", lambda d: pod_spec(find(d, "Job", "preflight"))["containers"][0].update(env=[e for e in pod_spec(find(d, "Job", "preflight"))["containers"][0]["env"] if e["name"] != "STORAGE_CLASS"])),
        ("the preflight retries", lambda d: find(d, "Job", "preflight")["spec"].update(backoffLimit=3)),
    ],
)
def preflight(inst: Install) -> list[str]:
    out = []
    checked: set[str] = set()
    for job in objects(inst.docs, "Job", APP_NS):
        if "check-config" not in json.dumps(pod_spec(job)):
            continue
        if set((hook(job) or "").split(",")) != {"pre-install", "pre-upgrade"}:
            out.append(f"{ref(job)} is hook {hook(job)!r}, want pre-install,pre-upgrade")
        if job["spec"].get("backoffLimit") != 0 or not job["spec"].get("activeDeadlineSeconds"):
            out.append(f"{ref(job)}: want backoffLimit 0 and an activeDeadlineSeconds (a pod that cannot start must fail the install)")
        for c in containers(pod_spec(job)):
            args = c.get("args") or []
            if args[:2] != ["check-config", "--service"] or len(args) < 3:
                out.append(f"{ref(job)} container {c['name']}: runs {args!r}")
                continue
            svc = args[2]
            checked.add(svc)
            served = service_container(inst.docs, svc)
            if served is None:
                out.append(f"{ref(job)} checks {svc}, which is not deployed")
                continue
            extra = {"NODE_EPHEMERAL_STORAGE", "SANDBOX_NODES"}
            have = [e for e in c.get("env") or [] if e.get("name") not in extra]
            if have != (served.get("env") or []) or c.get("envFrom") != served.get("envFrom"):
                out.append(f"{ref(job)} container {c['name']}: its environment is not {svc}'s")
    deployed = {svc for svc in SERVICES if find(inst.docs, "Deployment", svc)}
    if checked != deployed:
        out.append(f"the preflight checks {sorted(checked)}, want {sorted(deployed)}")
    return out


def troubleshoot_kind(doc: dict) -> str | None:
    return ((doc.get("metadata") or {}).get("labels") or {}).get("troubleshoot.sh/kind")


def troubleshoot_docs(inst: Install, name: str, kind: str, out: list[str]) -> dict[str, list[dict]]:
    """The specs in Secret `name`, by key, once the Secret is labelled troubleshoot.sh/kind: `kind`."""
    secret = find(inst.docs, "Secret", name)
    if secret is None:
        out.append(f"no Secret {name} in {APP_NS}")
        return {}
    if troubleshoot_kind(secret) != kind:
        out.append(f"{ref(secret)} is labelled troubleshoot.sh/kind={troubleshoot_kind(secret)!r}, want {kind!r}")
    return {key: [d for d in yaml.safe_load_all(text) if d] for key, text in (secret.get("stringData") or {}).items()}


_schemas: dict[str, Any] = {}
_missing_schemas: set[str] = set()


def troubleshoot_schema_problems(doc: dict, where: str) -> list[str]:
    """`doc` against troubleshoot.sh's published schema of its kind (v1beta2)."""
    import jsonschema  # from the venv of scripts/check-k8s

    kind = doc.get("kind")
    if doc.get("apiVersion") != "troubleshoot.sh/v1beta2" or kind not in TROUBLESHOOT_SCHEMA_FILES:
        return [f"{where}: {doc.get('apiVersion')}/{kind} is not a troubleshoot.sh/v1beta2 Preflight, SupportBundle or Redactor"]
    path = os.path.join(TROUBLESHOOT_SCHEMAS, TROUBLESHOOT_SCHEMA_FILES[kind])
    if not os.path.exists(path):
        # Not to be had on this machine (see scripts/vendor-troubleshoot-schemas): said
        # once, and the rest of the spec's checks still run.
        if kind not in _missing_schemas:
            _missing_schemas.add(kind)
            print(f"skipped: {where} not validated against troubleshoot.sh's {kind} schema (not in {TROUBLESHOOT_SCHEMAS})")
        return []
    if kind not in _schemas:
        with open(path) as f:
            _schemas[kind] = json.load(f)
    validator = jsonschema.validators.validator_for(_schemas[kind])(_schemas[kind])
    return [f"{where}: {'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def quantity_bytes(text: str) -> float:
    units = {"": 1, "m": 1e-3, "k": 1e3, "Ki": 2**10, "M": 1e6, "Mi": 2**20, "G": 1e9, "Gi": 2**30, "T": 1e12, "Ti": 2**40}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", text)
    return float(m.group(1)) * units[m.group(2)] if m else float("nan")


def referenced_secrets(inst: Install) -> set[tuple[str, str, str | None]]:
    """(namespace, secret, key) the workloads and ingresses read; key None for a whole secret."""
    refs: set[tuple[str, str, str | None]] = set()
    for w in workloads(inst.docs):
        if hook(w) or is_test_hook(w):
            continue
        for c in containers(pod_spec(w)):
            for e in c.get("env") or []:
                r = (e.get("valueFrom") or {}).get("secretKeyRef")
                if r:
                    refs.add((ns_of(w), r["name"], r.get("key")))
            for ef in c.get("envFrom") or []:
                if (ef.get("secretRef") or {}).get("name"):
                    refs.add((ns_of(w), ef["secretRef"]["name"], None))
    for ing in objects(inst.docs, "Ingress"):
        for t in (ing.get("spec") or {}).get("tls") or []:
            refs.add((ns_of(ing), t.get("secretName"), "tls.crt"))
    c = service_container(inst.docs, "runtime-api")
    if c is not None and env_value(c, "SANDBOX_TLS_SECRET"):
        refs.add((SANDBOX_NS, env_value(c, "SANDBOX_TLS_SECRET"), "tls.crt"))
    return refs


def analyzers(spec: dict, kind: str) -> list[dict]:
    return [a[kind] for a in spec.get("analyzers") or [] if kind in a]


def collectors(spec: dict, kind: str) -> list[dict]:
    return [c[kind] for c in spec.get("collectors") or [] if kind in c]


def preflight_spec(inst: Install) -> dict:
    return troubleshoot_docs(inst, f"{RELEASE}-preflight", "preflight", [])["preflight.yaml"][0]


def support_bundle_spec(inst: Install) -> dict:
    return troubleshoot_docs(inst, f"{RELEASE}-support-bundle", "support-bundle", [])["support-bundle-spec"][0]


@check(
    "troubleshoot.sh: Secrets <release>-preflight and <release>-support-bundle, labelled troubleshoot.sh/kind, hold a Preflight, a SupportBundle and a Redactor valid against troubleshoot.sh's v1beta2 schemas",
    mutations=[
        ("the preflight Secret loses its troubleshoot.sh/kind label", lambda d: find(d, "Secret", f"{RELEASE}-preflight")["metadata"]["labels"].pop("troubleshoot.sh/kind")),
        ("the support-bundle Secret has no redactors", lambda d: find(d, "Secret", f"{RELEASE}-support-bundle")["stringData"].pop("redactor-spec")),
    ]
    # The schema's own mutation, where the schemas are there to judge it (see
    # scripts/vendor-troubleshoot-schemas).
    + ([("the support bundle's log limit is not a number (schema)", lambda d: find(d, "Secret", f"{RELEASE}-support-bundle")["stringData"].update({"support-bundle-spec": find(d, "Secret", f"{RELEASE}-support-bundle")["stringData"]["support-bundle-spec"].replace("maxLines: ", "maxLines: lots-of-")}))]
       if os.path.isdir(TROUBLESHOOT_SCHEMAS) else []),
)
def troubleshoot_specs(inst: Install) -> list[str]:
    out: list[str] = []
    want = {
        f"{RELEASE}-preflight": ("preflight", {"preflight.yaml": "Preflight"}),
        f"{RELEASE}-support-bundle": ("support-bundle", {"support-bundle-spec": "SupportBundle", "redactor-spec": "Redactor"}),
    }
    for name, (kind, keys) in want.items():
        specs = troubleshoot_docs(inst, name, kind, out)
        for key, spec_kind in keys.items():
            docs = specs.get(key)
            if not docs:
                out.append(f"Secret {name} has no {key}")
                continue
            if [d.get("kind") for d in docs] != [spec_kind]:
                out.append(f"Secret {name} key {key} holds {[d.get('kind') for d in docs]}, want [{spec_kind!r}]")
            for d in docs:
                out += troubleshoot_schema_problems(d, f"Secret {name} key {key}")
    return out


@check(
    "troubleshoot.sh preflight: the Kubernetes version, every secret and key the install reads, the storage class, the ingress class, the sandbox namespace, and ephemeral storage for every warm sandbox",
    mutations=[
        ("the preflight no longer checks secret jwt-secret", lambda d: find(d, "Secret", f"{RELEASE}-preflight")["stringData"].update({"preflight.yaml": yaml.safe_dump({**preflight_spec(Install("x", d, {})), "spec": {**preflight_spec(Install("x", d, {}))["spec"], "analyzers": [a for a in preflight_spec(Install("x", d, {}))["spec"]["analyzers"] if (a.get("secret") or {}).get("secretName") != "jwt-secret"]}})})),
        ("the node capacity check asks for one warm sandbox less", lambda d: find(d, "Secret", f"{RELEASE}-preflight")["stringData"].update({"preflight.yaml": re.sub(r"ephemeralStorageAllocatable\) < ([0-9]+)", lambda m: f"ephemeralStorageAllocatable) < {int(m.group(1)) - 1}", find(d, "Secret", f"{RELEASE}-preflight")["stringData"]["preflight.yaml"])})),
        ("the preflight forgets the sandbox namespace", lambda d: find(d, "Secret", f"{RELEASE}-preflight")["stringData"].update({"preflight.yaml": find(d, "Secret", f"{RELEASE}-preflight")["stringData"]["preflight.yaml"].replace("kind: Namespace", "kind: Node")})),
    ],
)
def troubleshoot_preflight(inst: Install) -> list[str]:
    out: list[str] = []
    spec = preflight_spec(inst).get("spec") or {}
    if not analyzers(spec, "clusterVersion"):
        out.append("no clusterVersion analyzer")
    checked = {(a.get("namespace"), a.get("secretName"), a.get("key")) for a in analyzers(spec, "secret")}
    collected = {(c.get("namespace"), c.get("name"), c.get("key")) for c in collectors(spec, "secret")}
    for r in sorted(referenced_secrets(inst), key=str):
        if r not in checked:
            out.append(f"the install reads secret {r[1]!r} key {r[2]!r} in {r[0]}: no secret analyzer checks it")
        elif r not in collected:
            out.append(f"secret {r[1]!r} key {r[2]!r} in {r[0]} is analyzed but never collected")
    for c in collectors(spec, "secret"):
        if c.get("includeValue"):
            out.append(f"the preflight collects secret {c.get('name')!r}'s value")
    runtime = service_container(inst.docs, "runtime-api")
    storage_class = env_value(runtime, "STORAGE_CLASS") if runtime else None
    if storage_class and storage_class not in {a.get("storageClassName") for a in analyzers(spec, "storageClass")}:
        out.append(f"no storageClass analyzer for {storage_class!r}")
    if not any(a.get("fileName") == "cluster-resources/ingress-classes.json" for a in analyzers(spec, "textAnalyze")):
        out.append("no ingress class analyzer (textAnalyze of cluster-resources/ingress-classes.json)")
    if not any(a.get("kind") == "Namespace" and a.get("name") == SANDBOX_NS for a in analyzers(spec, "clusterResource")):
        out.append(f"no clusterResource analyzer for Namespace {SANDBOX_NS}")
    # The pools' ephemeral storage: EPHEMERAL_STORAGE_SIZE times the warm sandboxes asked for.
    cm = find(inst.docs, "ConfigMap", "warm-runtimes")
    warm = 0
    if cm is not None:
        doc = json.loads(cm["data"]["warm-runtimes.json"])
        warm = sum(c.get("count", doc.get("count", 1)) for c in doc.get("configs") or [])
    size = env_value(runtime, "EPHEMERAL_STORAGE_SIZE") if runtime else None
    needed = quantity_bytes(size or "25Gi") * warm
    whens = [o["fail"].get("when", "") for a in analyzers(spec, "nodeResources") for o in a.get("outcomes") or [] if "fail" in o]
    m = [re.fullmatch(r"sum\(ephemeralStorageAllocatable\) < ([0-9]+)", w) for w in whens]
    if not any(m_ and abs(int(m_.group(1)) - needed) < 1 for m_ in m):
        out.append(f"no nodeResources analyzer failing when sum(ephemeralStorageAllocatable) < {needed:.0f} ({warm} warm sandboxes x {size}): {whens}")
    return out


@check(
    "troubleshoot.sh support bundle: Sandgate's pods' logs (bounded), both namespaces' resources and events, and `sandgate support-bundle` run in runtime-api's pod",
    mutations=[
        ("the support bundle's logs are unbounded", lambda d: find(d, "Secret", f"{RELEASE}-support-bundle")["stringData"].update({"support-bundle-spec": re.sub(r"\n +limits:\n( +max\w+: .*\n)+", "\n", find(d, "Secret", f"{RELEASE}-support-bundle")["stringData"]["support-bundle-spec"])})),
        ("the sandbox namespace's resources are not collected", lambda d: find(d, "Secret", f"{RELEASE}-support-bundle")["stringData"].update({"support-bundle-spec": find(d, "Secret", f"{RELEASE}-support-bundle")["stringData"]["support-bundle-spec"].replace(f'"{SANDBOX_NS}"', '"elsewhere"')})),
        ("Sandgate's own diagnostics are not collected", lambda d: find(d, "Secret", f"{RELEASE}-support-bundle")["stringData"].update({"support-bundle-spec": find(d, "Secret", f"{RELEASE}-support-bundle")["stringData"]["support-bundle-spec"].replace('"support-bundle", ', "")})),
    ],
)
def troubleshoot_support_bundle(inst: Install) -> list[str]:
    out: list[str] = []
    spec = support_bundle_spec(inst).get("spec") or {}
    namespaces = {ns for c in collectors(spec, "clusterResources") for ns in c.get("namespaces") or []}
    if not {APP_NS, SANDBOX_NS} <= namespaces:
        out.append(f"clusterResources collects {sorted(namespaces)}, want {APP_NS} and {SANDBOX_NS}")
    logs = [c for c in collectors(spec, "logs") if c.get("namespace") == APP_NS]
    if not logs:
        out.append(f"no logs collector in {APP_NS}")
    for c in logs:
        limits = c.get("limits") or {}
        if not (limits.get("maxLines") or limits.get("maxBytes")) or not (limits.get("maxAge") or limits.get("sinceTime")):
            out.append(f"logs collector {c.get('name')!r} is unbounded: {limits}")
        labels = dict(s.split("=", 1) for s in c.get("selector") or [])
        services = [svc for svc in SERVICES if find(inst.docs, "Deployment", svc) and selector_matches({"matchLabels": labels}, pod_labels(find(inst.docs, "Deployment", svc)))]
        if len(services) != len([svc for svc in SERVICES if find(inst.docs, "Deployment", svc)]):
            out.append(f"logs collector {c.get('name')!r} selects {services}, not every Sandgate service")
    runtime = find(inst.docs, "Deployment", "runtime-api")
    execs = [c for c in collectors(spec, "exec") if (c.get("args") or [])[:1] == ["support-bundle"]]
    if not execs:
        out.append("no exec collector runs `sandgate support-bundle`")
    for c in execs:
        labels = dict(s.split("=", 1) for s in c.get("selector") or [])
        if runtime is None or not selector_matches({"matchLabels": labels}, pod_labels(runtime)):
            out.append(f"exec collector {c.get('name')!r} does not select runtime-api's pods")
        metrics = listen_port(env_value(service_container(inst.docs, "runtime-api") or {}, "SANDGATE_METRICS_LISTEN"))
        url = (c.get("args") or [])[(c.get("args") or []).index("--url") + 1] if "--url" in (c.get("args") or []) else ""
        if metrics is None or not url.endswith(f":{metrics}"):
            out.append(f"exec collector {c.get('name')!r} asks {url!r}, not runtime-api's metrics listener (:{metrics})")
    return out


@check(
    "helm test: a pod per service runs `sandgate health-check` on it; the test's NetworkPolicy lets in those pods only, as a test hook",
    mutations=[
        ("the test policy admits every pod", lambda d: find(d, "NetworkPolicy", "helm-test")["spec"]["ingress"][0].update({"from": [{"podSelector": {}}]})),
        ("the test policy is a plain object (always there)", lambda d: find(d, "NetworkPolicy", "helm-test")["metadata"].pop("annotations")),
        ("model-gw's test pod is gone", lambda d: d.remove(find(d, "Pod", "test-model-gw"))),
        ("the test policy stays after the test", lambda d: find(d, "NetworkPolicy", "helm-test")["metadata"]["annotations"].update({"helm.sh/hook-delete-policy": "before-hook-creation"})),
    ],
)
def helm_test(inst: Install) -> list[str]:
    out = []
    tests = [p for p in objects(inst.docs, "Pod", APP_NS) if is_test_hook(p)]
    targets = set()
    for p in tests:
        for c in containers(pod_spec(p)):
            args = c.get("args") or []
            if args[:1] == ["health-check"] and len(args) >= 3:
                targets.add(args[2].split("//", 1)[-1].split(":", 1)[0])
    deployed = {svc for svc in SERVICES if find(inst.docs, "Deployment", svc)}
    if targets != deployed:
        out.append(f"helm test checks {sorted(targets)}, want {sorted(deployed)}")
    test_labels = [pod_labels(p) for p in tests]
    for pol in objects(inst.docs, "NetworkPolicy", APP_NS):
        peers = [f.get("podSelector") for r in (pol.get("spec") or {}).get("ingress") or [] for f in r.get("from") or []]
        admits_tests = any(sel is not None and any(selector_matches(sel, l) for l in test_labels) for sel in peers)
        if not admits_tests:
            continue
        if not is_test_hook(pol):
            out.append(f"{ref(pol)} lets helm test pods in, and is not a test hook: it would stay after the test")
        elif "hook-succeeded" not in ((pol["metadata"].get("annotations") or {}).get("helm.sh/hook-delete-policy") or ""):
            out.append(f"{ref(pol)} stays after a passed test (no hook-succeeded delete policy)")
        for r in (pol.get("spec") or {}).get("ingress") or []:
            for f in r.get("from") or [{}]:
                sel = f.get("podSelector")
                if sel is None or not test_labels or any(selector_matches(sel, pod_labels(w)) for w in workloads(inst.docs) if not is_test_hook(w)):
                    out.append(f"{ref(pol)} admits more than the helm test pods: {f}")
    return out


def add_redis(docs: list[dict]) -> None:
    redis = copy.deepcopy(find(docs, "Deployment", "model-gw"))
    redis["metadata"]["name"] = "redis"
    pod_spec(redis)["containers"][0]["image"] = "docker.io/library/redis:7.4-alpine"
    docs.append(redis)


@check(
    "no bundled Redis; the store is external",
    profiles=("prod",),
    mutations=[("a redis Deployment is rendered", lambda d: add_redis(d))],
)
def prod_no_redis(inst: Install) -> list[str]:
    out = [f"{ref(w)} runs Redis" for w in workloads(inst.docs) if is_redis(w)]
    for svc in SERVICES:
        url = env_value(service_container(inst.docs, svc) or {}, "REDIS_URL") or ""
        host = re.sub(r"^rediss?://([^@]*@)?", "", url).split(":")[0].split("/")[0]
        if host in ("redis", f"redis.{APP_NS}", f"redis.{APP_NS}.svc", f"redis.{APP_NS}.svc.cluster.local", "localhost", "127.0.0.1"):
            out.append(f"{svc}: REDIS_URL points at {host!r}, not an external Redis")
    return out


@check(
    "a bundled Redis with its Service and volume, and the services use it",
    profiles=("dev",),
    mutations=[("the redis Deployment is gone", lambda d: d.remove(find(d, "Deployment", "redis")))],
)
def dev_redis(inst: Install) -> list[str]:
    redis = [w for w in workloads(inst.docs) if is_redis(w)]
    if not redis:
        return ["no Redis workload"]
    out = []
    svc = find(inst.docs, "Service", "redis")
    if svc is None or not selector_matches({"matchLabels": svc["spec"].get("selector") or {}}, pod_labels(redis[0])):
        out.append("no Service redis selecting the Redis pods")
    for s in SERVICES:
        url = env_value(service_container(inst.docs, s) or {}, "REDIS_URL") or ""
        if not re.match(r"^redis://:\$\(REDIS_PASSWORD\)@redis(\.[a-z.-]+)?:6379(/\d+)?$", url):
            out.append(f"{s}: REDIS_URL {url!r} is not the bundled redis Service")
    args = " ".join(str(a) for c in containers(pod_spec(redis[0])) for a in (c.get("args") or []) + (c.get("command") or []))
    if "--requirepass" not in args or "$(REDIS_PASSWORD)" not in args:
        out.append("the bundled Redis does not require the password of secret cache")
    return out


# --------------------------------------------------------------------------------------
# Rendering, schema validation, and the run


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def line(self, ok: bool, title: str, problems: Iterable[str] = ()) -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {title}", flush=True)
        for p in problems:
            print(f"       - {p}")
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def render(helm: str, chart: str, values: list[str], sets: list[str] = ()) -> tuple[list[dict] | None, str]:
    """`helm template` of the chart with these values files (and --set-json pairs), as the
    release RELEASE in namespace APP_NS: the objects, or None and helm's error."""
    cmd = [helm, "template", RELEASE, chart, "--namespace", APP_NS]
    for v in values:
        cmd += ["--values", v]
    for kv in sets:
        cmd += ["--set-json", kv]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, proc.stderr.strip() or f"exit {proc.returncode}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d], proc.stdout


def lint(helm: str, chart: str, values: str) -> list[str]:
    proc = subprocess.run([helm, "lint", "--strict", chart, "--namespace", APP_NS, "--values", values], capture_output=True, text=True)
    return [] if proc.returncode == 0 else [line for line in (proc.stdout + proc.stderr).splitlines() if "[ERROR]" in line or "[WARNING]" in line or "Error" in line]


def merged(base: Any, over: Any) -> Any:
    """Helm's merge of values: maps merge key by key, anything else is replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merged(base.get(k), v) if k in base else v
        return out
    return over


def chart_values(chart: str, values: str) -> dict[str, Any]:
    with open(os.path.join(chart, "values.yaml")) as f:
        base = yaml.safe_load(f) or {}
    with open(values) as f:
        return merged(base, yaml.safe_load(f) or {})


# Bad values files (as --set-json changes to the prod example) that the schema or the
# render-time guards must refuse, and what helm's error must say: the key, named.
VALUES_TESTS: list[tuple[str, list[str], list[str]]] = [
    ("a wrong type: runtime-api.replicaCount as a string", ['runtime-api.replicaCount="two"'], ["replicaCount"]),
    ("a wrong type: tls.enabled as a string", ['tls.enabled="yes"'], ["/tls/enabled"]),
    ("a wrong type: a warm configuration's command as a number", ['runtime-api.warmRuntimes.configs[0].command=5'], ["command"]),
    ("a typo in a known section: ingress.hots", ['ingress.hots="app.example.com"'], ["hots"]),
    ("a typo in runtime-api: sandbox_namepsace", ['runtime-api.sandbox_namepsace="sandboxes"'], ["sandbox_namepsace"]),
    ("a typo in runtime-api.env: RUNTIME_BASE_ULR", ['runtime-api.env.RUNTIME_BASE_ULR="runtime.example.com"'], ["RUNTIME_BASE_ULR"]),
    ("a typo at the top: ingres", ['ingres={"enabled":true}'], ["ingres"]),
    ("a typo in Sandgate's own: sandgate.redis.uri", ['sandgate.redis.uri="redis://x"'], ["uri"]),
    ("a missing required host: ingress.host", ['ingress.host=""'], ["ingress.host"]),
    ("a missing required host: runtime-api.ingress.host (and no sandbox.apiHostname)", ['runtime-api.ingress.host=""', 'sandbox.apiHostname=""'], ["runtime-api.ingress.host"]),
    ("a host with a scheme: ingress.host", ['ingress.host="https://app.example.com"'], ["/ingress/host"]),
    ("sandbox.apiHostname naming another host than runtime-api.ingress.host", ['sandbox.apiHostname="https://api.other.example.com"'], ["sandbox.apiHostname", "runtime-api.ingress.host"]),
    ("RUNTIME_URL_PATTERN disagreeing with RUNTIME_BASE_URL", ['env.RUNTIME_URL_PATTERN="https://{runtime_id}-runtime.other.example.com"'], ["env.RUNTIME_URL_PATTERN", "RUNTIME_BASE_URL"]),
    ("RUNTIME_URL_PATTERN disagreeing with the separator", ['runtime-api.env.RUNTIME_URL_SEPARATOR="--"'], ["env.RUNTIME_URL_PATTERN", "RUNTIME_URL_SEPARATOR"]),
    ("RUNTIME_URL_PATTERN https while RUNTIME_DISABLE_SSL is true", ['runtime-api.env.RUNTIME_DISABLE_SSL="true"'], ["env.RUNTIME_URL_PATTERN", "RUNTIME_DISABLE_SSL"]),
    ("a missing STORAGE_CLASS", ['runtime-api.env.STORAGE_CLASS=""'], ["runtime-api.env.STORAGE_CLASS"]),
    ("no Redis: neither sandgate.redis.url nor bundled", ['sandgate.redis.url=""'], ["sandgate.redis.url"]),
    ("a model entry without gateway_params", ['gateway-helm.proxy_config.model_list=[{"model_name":"m"}]'], ["model_list"]),
    ("disruption budgets over a single replica", ['runtime-api.replicaCount=1'], ["sandgate.podDisruptionBudgets", "runtime-api.replicaCount"]),
    ("a support bundle taking no log lines: sandgate.troubleshoot.logs.maxLines 0", ['sandgate.troubleshoot.logs.maxLines=0'], ["maxLines"]),
    ("a typo in the troubleshoot.sh specs' values: sandgate.troubleshoot.enable", ['sandgate.troubleshoot.enable=false'], ["enable"]),
]


def runtime_env(docs: list[dict]) -> dict[str, str]:
    c = service_container(docs, "runtime-api") or {}
    return {e["name"]: e.get("value") for e in c.get("env") or []}


# Values that switch parts of the install, rendered as changes to the prod example, and
# what the rendering must then show (an empty list of problems).
SWITCHES: list[tuple[str, list[str], Callable[[list[dict]], list[str]]]] = [
    (
        "tls.enabled false: no Ingress serves TLS, sandboxes get no TLS secret",
        ["tls.enabled=false"],
        lambda d: [f"{ref(i)} has tls" for i in objects(d, "Ingress") if i["spec"].get("tls")]
        + (["SANDBOX_TLS_SECRET is set"] if "SANDBOX_TLS_SECRET" in runtime_env(d) else []),
    ),
    (
        "an empty ingress.class: the cluster's default class, for the sandboxes too",
        ['ingress.class=""'],
        lambda d: [f"{ref(i)} names a class" for i in objects(d, "Ingress") if "ingressClassName" in i["spec"]]
        + (["SANDBOX_INGRESS_CLASS is set"] if "SANDBOX_INGRESS_CLASS" in runtime_env(d) else []),
    ),
    (
        "runtime-api.ingress.host empty: taken from sandbox.apiHostname",
        ['runtime-api.ingress.host=""'],
        lambda d: [] if (find(d, "Ingress", "runtime-api") or {}).get("spec", {}).get("rules", [{}])[0].get("host") == "runtime-api.sandgate.example.com" else ["the runtime-api Ingress's host is not sandbox.apiHostname's"],
    ),
    (
        "gateway-helm.enabled false: no model-gw, the edge without its URL",
        ["gateway-helm.enabled=false"],
        lambda d: [ref(o) for o in d if name_of(o) in ("model-gw", "gateway-config", "preflight-model-gw", "test-model-gw")]
        + [e["name"] for e in (service_container(d, "edge") or {}).get("env") or [] if e["name"] == "SANDGATE_MODEL_GW_URL"],
    ),
    (
        "another sandbox namespace: the Role, SANDBOX_NAMESPACE and the edge's policy follow",
        ['runtime-api.sandbox_namespace="agents"'],
        lambda d: ([] if find(d, "Role", "runtime-api-sandboxes", "agents") else ["no Role in agents"])
        + ([] if runtime_env(d).get("SANDBOX_NAMESPACE") == "agents" else ["SANDBOX_NAMESPACE is not agents"])
        + ([] if "agents" in json.dumps(find(d, "NetworkPolicy", "edge")) else ["the edge's policy does not let agents in"]),
    ),
    (
        "sandgate.redis.minReplicasAck 1: every service acknowledges with a replica",
        ["sandgate.redis.minReplicasAck=1"],
        lambda d: [f"{svc}: no REDIS_MIN_REPLICAS_ACK=1" for svc in SERVICES if env_value(service_container(d, svc) or {}, "REDIS_MIN_REPLICAS_ACK") != "1"],
    ),
]


def values_tests(report: "Report", helm: str, chart: str, example: str, platform: str | None) -> None:
    print(f"== values: the chart refuses bad values files, naming the key ({example} changed)")
    for what, sets, want in VALUES_TESTS:
        docs, err = render(helm, chart, [example], sets)
        missing = [w for w in want if w not in err]
        ok = docs is None and not missing
        detail = [] if ok else (["rendered without an error"] if docs is not None else [f"the error does not name {missing}: {err}"])
        report.line(ok, f"values: refused, naming {', '.join(want)}: {what}", detail)
    for what, sets, problems_of in SWITCHES:
        docs, err = render(helm, chart, [example], sets)
        problems = [err] if docs is None else problems_of(docs)
        if docs is not None:
            problems += schema_problems(docs, ["1.37.0"])
        report.line(not problems, f"values: {what}", problems)
    if platform:
        a, err_a = render(helm, chart, [example])
        b, err_b = render(helm, chart, [platform])
        problems = [e for e in (err_a if a is None else "", err_b if b is None else "") if e]
        if not problems:
            ka = {ref(d): d for d in a}
            kb = {ref(d): d for d in b}
            problems += [f"only with {example}: {k}" for k in sorted(ka.keys() - kb.keys())]
            problems += [f"only with {platform}: {k}" for k in sorted(kb.keys() - ka.keys())]
            problems += [f"{k} differs" for k in sorted(ka.keys() & kb.keys()) if ka[k] != kb[k]]
        report.line(not problems, f"values: the platform-style {platform} renders the same objects as {example}", problems)


def schema_problems(docs: list[dict], versions: list[str]) -> list[str]:
    from kubernetes_validate import utils as kv  # from the venv of scripts/check-k8s

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


def namespace_problems(docs: list[dict]) -> list[str]:
    out = [f"{ref(d)} is not a Namespace" for d in docs if d.get("kind") != "Namespace"]
    names = {name_of(d): d for d in docs if d.get("kind") == "Namespace"}
    for ns in (APP_NS, SANDBOX_NS):
        if ns not in names:
            out.append(f"no Namespace {ns}")
    labels = ((names.get(APP_NS) or {}).get("metadata") or {}).get("labels") or {}
    if labels.get("pod-security.kubernetes.io/enforce") != "restricted":
        out.append(f"Namespace {APP_NS} does not enforce the restricted Pod Security Standard")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--helm", default="helm", help="the helm (4 or later) that lints and renders the chart")
    ap.add_argument("--chart", default="k8s/chart", help="the chart's directory")
    ap.add_argument("--kubernetes-version", action="append", dest="versions", help="validate against this Kubernetes version's schemas (repeatable)")
    ap.add_argument("--no-self-test", action="store_true", help="skip proving that each check can fail")
    ap.add_argument("--write-rendered", metavar="DIR", help="also write each rendering to DIR/<values file's name>.yaml")
    ap.add_argument("--namespaces", metavar="FILE", help="also validate and check the namespaces file (k8s/namespaces.yaml)")
    ap.add_argument("--values-tests", metavar="EXAMPLE", help="prove the chart refuses bad values (VALUES_TESTS, as changes to this values file)")
    ap.add_argument("--platform-values", metavar="FILE", help="with --values-tests: a platform-style values file that must render as EXAMPLE does")
    ap.add_argument("values", nargs="+", help="example values files, e.g. k8s/values/dev.yaml; the name (dev, prod, other) picks the profile checked")
    args = ap.parse_args()
    versions = args.versions or ["1.37.0"]

    report = Report()
    installs: list[Install] = []
    for values in args.values:
        name = os.path.splitext(os.path.basename(values))[0]
        print(f"== {name} ({values})")
        problems = lint(args.helm, args.chart, values)
        report.line(not problems, f"{name}: helm lint --strict", problems)
        docs, text = render(args.helm, args.chart, [values])
        report.line(docs is not None, f"{name}: renders with helm template (hooks and tests included)", [] if docs is not None else [text])
        if docs is None:
            continue
        if args.write_rendered:
            os.makedirs(args.write_rendered, exist_ok=True)
            with open(os.path.join(args.write_rendered, f"{name}.yaml"), "w") as f:
                f.write(text)
        problems = schema_problems(docs, versions)
        report.line(not problems, f"{name}: {len(docs)} objects validate against the Kubernetes {', '.join(versions)} schemas (strict)", problems)
        inst = Install(name, docs, chart_values(args.chart, values)["sandgate"])
        installs.append(inst)
        for chk in CHECKS:
            if inst.profile() not in chk.profiles:
                continue
            try:
                problems = chk.fn(inst)
            except Exception as e:  # a check that crashes has failed, and says why
                problems = [f"the check crashed: {type(e).__name__}: {e}"]
            report.line(not problems, f"{name}: {chk.title}", problems)

    if args.values_tests:
        values_tests(report, args.helm, args.chart, args.values_tests, args.platform_values)

    if args.namespaces:
        print(f"== namespaces ({args.namespaces})")
        with open(args.namespaces) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        problems = schema_problems(docs, versions)
        report.line(not problems, f"namespaces: {len(docs)} objects validate against the Kubernetes {', '.join(versions)} schemas (strict)", problems)
        problems = namespace_problems(docs)
        report.line(not problems, f"namespaces: {APP_NS} (enforcing the restricted Pod Security Standard) and {SANDBOX_NS}, nothing else", problems)
        if not args.no_self_test:
            broken = copy.deepcopy(docs)
            for d in broken:
                (d.get("metadata") or {}).get("labels", {}).pop("pod-security.kubernetes.io/enforce", None)
            report.line(bool(namespace_problems(broken)), "namespaces: the check fails when the app namespace enforces no Pod Security Standard")

    if not args.no_self_test:
        print("== self-test: each check fails on objects broken for it")
        for inst in installs:
            for chk in CHECKS:
                if inst.profile() not in chk.profiles:
                    continue
                if not chk.mutations:
                    report.line(False, f"{inst.name}: \"{chk.title}\" has no self-test")
                    continue
                missed = []
                for what, mutate in chk.mutations:
                    broken = copy.deepcopy(inst.docs)
                    try:
                        mutate(broken)
                        if not chk.fn(Install(inst.name, broken, inst.values)):
                            missed.append(f"passed although {what}")
                    except Exception as e:
                        missed.append(f"{what}: {type(e).__name__}: {e}")
                whats = "; ".join(what for what, _ in chk.mutations)
                report.line(not missed, f"{inst.name}: \"{chk.title}\" fails when {whats}", missed)
            # The schema check too: an unknown field must not pass strict validation.
            broken = copy.deepcopy(inst.docs)
            container_of(broken, "edge")["securityContext"]["readOnlyRootFileSystem"] = True
            report.line(bool(schema_problems(broken, versions[-1:])), f"{inst.name}: the schema validation fails when a field is misspelt (readOnlyRootFileSystem)")

    print(f"{report.passed} passed, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
