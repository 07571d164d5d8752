#!/usr/bin/env python3
"""Generates conversation-webhook bodies for the differential harness (scripts/differential).

Structure-aware: every accepted fixture body is a seed; every node of a seed is set to
values of the wrong type and to the boundaries its schema states (both releases' schemas),
enums to each member and to near misses, discriminated unions to unknown and missing kinds,
required keys removed, unknown keys added (where a model forbids them too), and formats
(uuid, date-time) to the forms pydantic's lax mode takes and refuses. A share of the
bodies is then re-encoded as FastAPI reads them: UTF-8 with a BOM, UTF-16 and UTF-32 (with
and without their BOMs), and numbers written as NaN and Infinity.

Cases are written as JSON lines to stdout, deterministic for one --seed. The first line
holds the seeds, each as one line of JSON text ({"seeds": {name: text}}); every case after
it is a splice of its seed, so that 20,000 bodies of a few kilobytes take a few megabytes:
  {"id": "1-17", "seed": "<fixture>", "what": "<mutation>",
   "keep": [head, tail], "text": "<middle>" | "bytes": "<middle, base64>"}
its body being the seed's first `head` bytes, the middle, and the seed's last `tail` bytes
(corpus.py reads them).

Standard library only.
"""

import argparse
import base64
import copy
import json
import pathlib
import random
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCHEMAS = [
    ROOT / "schema" / "conversation_info.agent-server-1.34.schema.json",
    ROOT / "schema" / "conversation_info.agent-server-1.58.schema.json",
]

# Values of every JSON type, and strings of the shapes pydantic's lax mode coerces.
WRONG_TYPES = [
    None, True, False, 0, 1, -1, 2, 1.5, 2.0, -0.0, 2**31, 2**63, 2**64, -(2**63) - 1,
    1e308, 1e-7, "", " ", "x", "7", " 7 ", "7.0", "7.5", "1e3", "0x1f", "1_000",
    "yes", "no", "on", "off", "true", "False", "t", "f", "y", "n", "0", "1", "null", "none",
    "2026-03-01T12:00:00Z", "2026-03-01T12:00:00+05:30", "2026-03-01 12:00:00", "2026-03-01",
    "2026-03-01T12:00", "12:00:00", "2026-02-30T12:00:00Z", 1772366400, 1772366400.5,
    1772366400123, "1772366400", "7f3c2a10-0000-4000-8000-000000000901",
    "7f3c2a10000040008000000000000901", "{7f3c2a10-0000-4000-8000-000000000901}",
    "urn:uuid:7f3c2a10-0000-4000-8000-000000000901", "7F3C2A10-0000-4000-8000-000000000901",
    "7f3c2a10-0000-4000-8000-00000000090", [], {}, [1], ["x"], [None], {"a": 1},
    {"kind": "Nope"}, "\u0000", "a\nb", "é", "💥", "x" * 300,
]
SPECIAL_FLOATS = [float("nan"), float("inf"), float("-inf")]

UNKNOWN_KEY = "zz_unknown_field"


class Schemas:
    """Both releases' schemas; answers what a node of a body may be."""

    def __init__(self, paths):
        self.docs = [json.loads(p.read_text()) for p in paths]

    def resolve(self, doc, node):
        seen = 0
        while isinstance(node, dict) and "$ref" in node and seen < 50:
            name = node["$ref"].rsplit("/", 1)[-1]
            node = {**doc["$defs"][name], **{k: v for k, v in node.items() if k != "$ref"}}
            seen += 1
        return node

    def branches(self, doc, node, value):
        """The schema nodes `value` is checked against (a union picks its branch)."""
        node = self.resolve(doc, node)
        if not isinstance(node, dict):
            return []
        alternatives = node.get("anyOf") or node.get("oneOf")
        if not alternatives:
            return [node]
        out = []
        kind = value.get("kind") if isinstance(value, dict) else None
        for alt in alternatives:
            alt = self.resolve(doc, alt)
            props = alt.get("properties", {}) if isinstance(alt, dict) else {}
            tag = props.get("kind", {})
            if kind is not None and "kind" in props:
                if tag.get("const", tag.get("default")) != kind:
                    continue
            if alt.get("type") == "null" and value is not None:
                continue
            out.extend(self.branches(doc, alt, value))
        return out

    def at(self, path, body):
        """Every schema node (of either release) that applies at `path` in `body`."""
        found = []
        for doc in self.docs:
            nodes = [doc]
            value = body
            for step in path:
                next_nodes = []
                for node in nodes:
                    for branch in self.branches(doc, node, value):
                        if isinstance(step, str):
                            props = branch.get("properties", {})
                            if step in props:
                                next_nodes.append(props[step])
                            elif isinstance(branch.get("additionalProperties"), dict):
                                next_nodes.append(branch["additionalProperties"])
                        elif isinstance(branch.get("items"), dict):
                            next_nodes.append(branch["items"])
                        elif isinstance(branch.get("prefixItems"), list) and step < len(
                            branch["prefixItems"]
                        ):
                            next_nodes.append(branch["prefixItems"][step])
                nodes = next_nodes
                value = value[step]
            for node in nodes:
                found.extend((doc, b) for b in self.branches(doc, node, value))
        return found


def nodes(value, path=()):
    yield path, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from nodes(child, path + (key,))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from nodes(child, path + (i,))


def set_at(body, path, value):
    out = copy.deepcopy(body)
    if not path:
        return value
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return out


def delete_at(body, path):
    out = copy.deepcopy(body)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    return out


def schema_values(schemas, path, body, value):
    """Values the schemas at `path` name: enum members and near misses, numeric and
    length boundaries, consts, formats."""
    out = []
    for doc, node in schemas.at(path, body):
        for member in node.get("enum", []):
            out.append(member)
            if isinstance(member, str):
                out += [member.upper(), member.capitalize(), member + " ", member + "\n"]
        if "const" in node and isinstance(node["const"], str):
            c = node["const"]
            out += [c, c.lower(), c + "x", c[:-1]]
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if key in node and isinstance(node[key], (int, float)):
                b = node[key]
                out += [b - 1, b, b + 1, b - 0.5, b + 0.5, float(b), str(b)]
        for key in ("minLength", "maxLength"):
            if key in node:
                n = node[key]
                out += ["a" * max(n - 1, 0), "a" * n, "a" * (n + 1), " " * n]
        for key in ("minItems", "maxItems"):
            if key in node:
                n = node[key]
                sample = value[0] if isinstance(value, list) and value else "a"
                out += [[sample] * max(n - 1, 0), [sample] * n, [sample] * (n + 1)]
        fmt = node.get("format")
        if fmt == "date-time":
            out += [
                "2026-03-01T12:00:00", "2026-03-01T12:00:00.123456789Z", "2026-03-01T24:00:00Z",
                "2026-03-01t12:00:00z", "2026-3-1T12:00:00Z", "20260301T120000Z", 0, -1,
                1e11, 1e20, "2026-03-01T12:00:00+25:00", "2026-03-01T12:00:00-00:00",
                "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z",
            ]
        elif fmt == "uuid":
            out += [
                "00000000-0000-0000-0000-000000000000", "7f3c2a10-0000-4000-8000-00000000090g",
                "7f3c2a1000004000800000000000090", 123, "7f3c2a10-0000-4000-8000-0000000009011",
            ]
        elif fmt == "uri":
            out += ["http://x", "not a url", "ftp://h/p", "http://"]
    return out


def mutations(schemas, seed_body, rng):
    """(what, body) for every mutation of every node of `seed_body`; each body is made
    only when it is taken (a thunk), as most are not."""
    for path, value in nodes(seed_body):
        where = "/".join(str(p) for p in path) or "<root>"
        candidates = WRONG_TYPES + SPECIAL_FLOATS + schema_values(schemas, path, seed_body, value)
        for new in candidates:
            if new == value and type(new) is type(value):
                continue
            yield f"{where} = {json.dumps(new)[:60]}", lambda p=path, n=new: set_at(seed_body, p, n)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            for new in (value - 1, value + 1, -value, str(value), float(value), value * 10**6):
                yield f"{where} ~ {json.dumps(new)[:60]}", lambda p=path, n=new: set_at(seed_body, p, n)
        if isinstance(value, str):
            for new in (value.upper(), " " + value, value + " ", value + "\n", value * 2, value[:1]):
                yield f"{where} ~ {json.dumps(new)[:60]}", lambda p=path, n=new: set_at(seed_body, p, n)
        if isinstance(value, list):
            for what, new in (
                ("+ dup", value + value[:1]),
                ("+ null", value + [None]),
                ("as object", {str(i): v for i, v in enumerate(value)}),
            ):
                yield f"{where} {what}", lambda p=path, n=new: set_at(seed_body, p, n)
        if isinstance(value, dict):
            new = {**value, UNKNOWN_KEY: 1}
            yield f"{where} + unknown", lambda p=path, n=new: set_at(seed_body, p, n)
            if "kind" in value:
                lower = value["kind"].lower() if isinstance(value["kind"], str) else 1
                for kind in ("Nope", "", None, lower):
                    new = {**value, "kind": kind}
                    yield f"{where}/kind = {kind!r}", lambda p=path, n=new: set_at(seed_body, p, n)
        if path:
            yield f"{where} deleted", lambda p=path: delete_at(seed_body, p)
    # Two faults at once: which one a model reports first.
    paths = [p for p, _ in nodes(seed_body) if p]
    for _ in range(len(paths)):
        a, b = rng.sample(paths, 2)
        x, y = rng.choice(WRONG_TYPES), rng.choice(WRONG_TYPES)

        def both(a=a, b=b, x=x, y=y):
            body = set_at(seed_body, a, x)
            try:
                return set_at(body, b, y)
            except (KeyError, IndexError, TypeError):
                return body  # b was inside a

        yield f"{'/'.join(map(str, a))} and {'/'.join(map(str, b))}", both


ENCODINGS = ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]


def canonical(body):
    return json.dumps(body).encode()


def encoded(body, rng):
    """(what, bytes, encoding) for the JSON text of `body` as FastAPI may receive it: mostly
    as the seeds are written, some with raw non-ASCII, some in another encoding. The bytes
    are UTF-8; `encoding` (when not None) is the one the case is sent in."""
    choice = rng.random()
    if choice < 0.9:
        return "", canonical(body), None
    if choice < 0.94:
        text = json.dumps(body, ensure_ascii=False)
        return " [raw utf-8]", text.encode(errors="surrogatepass"), None
    encoding = rng.choice(ENCODINGS)
    return f" [{encoding}]", canonical(body), encoding


def reencode(data, encoding):
    """What corpus readers do with a case's `encoding`: the UTF-8 (ASCII) text, re-encoded
    as Python's codec of that name does (BOMs included)."""
    return data if encoding is None else data.decode().encode(encoding)


def splice(seed, data):
    """The case fields that rebuild `data` from `seed`: what both share at the start and at
    the end is kept, the rest written out."""
    head = 0
    limit = min(len(seed), len(data))
    while head < limit and seed[head] == data[head]:
        head += 1
    tail = 0
    while tail < limit - head and seed[-1 - tail] == data[-1 - tail]:
        tail += 1
    middle = data[head : len(data) - tail]
    try:
        fields = {"text": middle.decode()}
    except UnicodeDecodeError:
        fields = {"bytes": base64.b64encode(middle).decode()}
    return {"keep": [head, tail], **fields}


def byte_level(seed_bytes, rng):
    """Faults below JSON: truncation, stray bytes, invalid UTF-8, duplicate keys."""
    n = len(seed_bytes)
    out = []
    for _ in range(40):
        cut = rng.randrange(1, n)
        out.append((f"truncated at {cut}", seed_bytes[:cut]))
    for junk in (b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80", b"}", b",", b"\\"):
        at = rng.randrange(1, n)
        out.append((f"{junk!r} at {at}", seed_bytes[:at] + junk + seed_bytes[at:]))
    out.append(("trailing garbage", seed_bytes + b" x"))
    out.append(("trailing whitespace", seed_bytes + b" \n\t\r"))
    out.append(("leading whitespace", b" \n" + seed_bytes))
    body = json.loads(seed_bytes)
    if isinstance(body, dict) and body:
        first = next(iter(body))
        text = json.dumps(body)
        dup = text[:-1] + f', "{first}": ' + json.dumps(body[first]) + "}"
        out.append(("duplicate key, same value", dup.encode()))
        dup = text[:-1] + f', "{first}": 12345' + "}"
        out.append(("duplicate key, wrong value last", dup.encode()))
    for text in ("", " ", "null", "[]", "1", '"x"', "{}", "[{}]", "NaN", "{" * 600 + "}" * 600):
        out.append((f"body {text[:10]!r}", text.encode()))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=pathlib.Path, required=True, help="shared/fixtures/webhook")
    parser.add_argument(
        "--extra-seeds",
        type=pathlib.Path,
        help="more seed bodies (the repository's: fields no shared fixture carries)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=24000)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    schemas = Schemas(SCHEMAS)

    seeds = {}
    paths = sorted((args.fixtures / "accept").glob("*.json"))
    if args.extra_seeds is not None:
        paths += sorted(args.extra_seeds.glob("*.json"))
    for path in paths:
        if path.name.endswith(".expected.json"):
            continue
        seeds[path.stem] = canonical(json.loads(path.read_bytes()))
    print(json.dumps({"seeds": {k: v.decode() for k, v in seeds.items()}}))

    pool = []
    for name, text in seeds.items():
        body = json.loads(text)
        for what, mutated in mutations(schemas, body, rng):
            pool.append((name, what, mutated))
        for what, data in byte_level(text, rng):
            pool.append((name, what, lambda d=data: d))
    rng.shuffle(pool)
    # Every seed's mutations are interleaved; take the first --count distinct bodies.
    seen = set()
    written = 0
    for name, what, make in pool:
        if written >= args.count:
            break
        body = make()
        if isinstance(body, bytes):
            suffix, data, encoding = "", body, None
        else:
            suffix, data, encoding = encoded(body, rng)
        if (data, encoding) in seen:
            continue
        seen.add((data, encoding))
        written += 1
        case = {"id": f"{args.seed}-{written}", "seed": name, "what": what + suffix}
        case.update(splice(seeds[name], data))
        if encoding is not None:
            case["encoding"] = encoding
        print(json.dumps(case))
    print(f"generate: {written} cases from {len(seeds)} seeds ({len(pool)} mutations)", file=sys.stderr)


if __name__ == "__main__":
    main()
