"""Which connections a rendered install's NetworkPolicies allow, for scripts/k8s_policy.py.

A connection is a source pod, a destination (a pod, or an address outside the cluster)
and a port. It is allowed when the policies selecting the source let it out (or none of
them restricts egress) and the policies selecting a destination pod let it in (or none
restricts ingress), as Kubernetes defines it: rules are additive, a rule without `to` /
`from` takes every peer, a rule without `ports` every port. A pod also has an address,
which ipBlocks match (as most network plugins do for pods, and always for Services' and
nodes' addresses).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Endpoint:
    """A pod (namespace and labels set) or an address outside the cluster (namespace None)."""

    what: str  # for messages: "another sandbox", "the metadata address", ...
    ip: str
    namespace: str | None = None
    labels: dict = field(default_factory=dict, hash=False, compare=False)
    # Its containers' named ports, which policies may name.
    ports: dict = field(default_factory=dict, hash=False, compare=False)


def _selector_matches(selector: dict | None, labels: dict) -> bool:
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


def _namespace_labels(name: str) -> dict:
    # The label Kubernetes sets on every namespace; policies select namespaces by it.
    return {"kubernetes.io/metadata.name": name}


def _peer_matches(peer: dict, policy_ns: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(other.ip)
        cidr = ipaddress.ip_network(block.get("cidr", ""), strict=False)
        if address.version != cidr.version or address not in cidr:
            return False
        return not any(
            address.version == ipaddress.ip_network(e, strict=False).version
            and address in ipaddress.ip_network(e, strict=False)
            for e in block.get("except") or []
        )
    if other.namespace is None:
        return False  # pod and namespace selectors pick pods only
    if "namespaceSelector" in peer:
        if not _selector_matches(peer["namespaceSelector"], _namespace_labels(other.namespace)):
            return False
    elif other.namespace != policy_ns:
        return False
    return "podSelector" not in peer or _selector_matches(peer["podSelector"], other.labels)


def _port_matches(ports: list[dict] | None, port: int, protocol: str, named: dict) -> bool:
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        start = p["port"]
        if not isinstance(start, int):
            # A named port is the destination pod's; one it does not have matches nothing.
            if named.get(start) == port:
                return True
            continue
        if start <= port <= p.get("endPort", start):
            return True
    return False


def _allowed_by(docs: list[dict], direction: str, pod: Endpoint, other: Endpoint, port: int, protocol: str) -> bool:
    """Whether the policies of `pod` let `other` through in `direction` (Ingress: other
    connects to pod's port; Egress: pod connects to other's port)."""
    selected = False
    for pol in docs:
        if pol.get("kind") != "NetworkPolicy" or (pol.get("metadata") or {}).get("namespace") != pod.namespace:
            continue
        if ((pol.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook") == "test":
            continue  # made by `helm test` and deleted once it passed
        spec = pol.get("spec") or {}
        types = spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"])
        if direction not in types or not _selector_matches(spec.get("podSelector", {}), pod.labels):
            continue
        selected = True
        key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
        for rule in spec.get(key) or []:
            destination = pod if direction == "Ingress" else other
            if not _port_matches(rule.get("ports"), port, protocol, destination.ports):
                continue
            peers = rule.get(peers_key)
            if not peers or any(_peer_matches(p, pod.namespace or "", other) for p in peers):
                return True
    return not selected


def leaves(docs: list[dict], source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Whether the source's own policies let the connection out, whatever the
    destination's say: isolation must not rest on the other end's policy alone."""
    return _allowed_by(docs, "Egress", source, destination, port, protocol)


def admits(docs: list[dict], destination: Endpoint, source: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Whether the destination pod's own policies let the connection in."""
    return _allowed_by(docs, "Ingress", destination, source, port, protocol)


def connects(docs: list[dict], source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Whether the policies let `source` (a pod) open a connection to `destination`."""
    if not _allowed_by(docs, "Egress", source, destination, port, protocol):
        return False
    if destination.namespace is None:
        return True
    return _allowed_by(docs, "Ingress", destination, source, port, protocol)


def default_denies(docs: list[dict], namespace: str, direction: str) -> bool:
    """Whether a policy of `namespace` selects every pod for `direction` and allows nothing."""
    for pol in docs:
        if pol.get("kind") != "NetworkPolicy" or (pol.get("metadata") or {}).get("namespace") != namespace:
            continue
        spec = pol.get("spec") or {}
        if spec.get("podSelector") == {} and direction in (spec.get("policyTypes") or []) and not spec.get(direction.lower()):
            return True
    return False
