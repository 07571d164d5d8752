"""schemathesis hooks for the operations that take a ConversationInfo (issue 16).

The service validates a conversation exactly as the agent-server's pydantic models do, and
two kinds of their rules are beyond what a JSON Schema can say. Each is stated in the
document's prose (`info.description`) and encoded here, once, so that schemathesis
neither sends a case the document cannot describe as valid nor calls a rightly accepted
case invalid (`filter_case` when a case is drawn; `filter_failure` as a backstop, for a
case whose body changed after `filter_case` saw it):

- Lax scalars (a negative case that is valid once coerced is not negative): pydantic's lax
  mode takes `"7"`, `7.0` and `true` for an integer, `"1.5"` and `true` for a number, `1`,
  `0` and `"yes"`/`"no"`-like words for a boolean. A case whose body validates once its
  scalars are coerced by those rules is dropped from the negative cases; any other
  violation still has to be refused.
- Rules across fields, and integers past 64 bits (a positive case that breaks one is not
  positive): `low_threshold < medium_threshold` (GraySwanAnalyzer), `keep_first <
  max_size // 2 - 1` (LLMSummarizingCondenser), a `system_prompt` (even empty) beside a
  non-default `system_prompt_filename` (Agent); an integer in float notation past 2**63
  (`1e20`: pydantic refuses it too) or any past 2**64 - 1 (`2**70`: Python's integers are
  unbounded, the service's are not).

The rules mirror `conversation/src/scalars.rs` and `conversation/src/hooks/`; keep them
in step. (What the models' before-validators coerce, `str(working_dir)` and the like, the
document itself takes: `widen_coerced_fields` in `edge/src/openapi/conversation/`.)

One more failure is not one, for the model gateway's operations: a 502 or 504 saying the
upstream could not be reached, for a model `POST /model/new` pointed at a made-up host
(`unreachable_upstream`).
"""

import json
import math
import re

import jsonschema_rs
import schemathesis
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation

# The operations whose body is a ConversationInfo, or a part of one.
BODIES = {
    ("POST", "/api/v1/webhooks/conversations"),
    ("PATCH", "/api/v1/conversations/{id}"),
}

I64 = 2**63
U64 = 2**64
# ASCII digits only, as pydantic-core (and the service) read them.
INT_STR = re.compile(r"\s*[+-]?[0-9]+(_[0-9]+)*(\.0+)?\s*")
BOOL_WORDS = {
    **dict.fromkeys(["1", "on", "t", "true", "y", "yes"], True),
    **dict.fromkeys(["0", "off", "f", "false", "n", "no"], False),
}
UNCHANGED = object()

_validators = {}


def validator(schema, root):
    """A validator of `schema`, a part of the document `root` (its `$ref`s resolve there)."""
    key = id(schema)
    # The schema is kept beside its validator, so that its id is never reused.
    if key not in _validators:
        document = {"allOf": [schema], "components": root.get("components", {})}
        _validators[key] = (schema, jsonschema_rs.validator_for(document))
    return _validators[key][1]


def resolve(schema, root):
    while isinstance(schema, dict) and "$ref" in schema:
        node = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema if isinstance(schema, dict) else {}


def types_of(schema):
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    return list(kind or [])


def parse_float(text):
    """pydantic-core's lax float from a string (finite values only)."""
    candidates = [text.strip()]
    if "_" in text and not text.startswith("_") and not text.endswith("_") and "__" not in text:
        candidates.append(text.replace("_", ""))
    for candidate in candidates:
        try:
            value = float(candidate)
        except ValueError:
            continue
        if math.isfinite(value) and re.fullmatch(r"[0-9eE+\-.]+", candidate):
            return value
    return UNCHANGED


def coerce_scalar(value, kind):
    """`value` as pydantic's lax mode reads it for a JSON Schema `kind`; UNCHANGED when it
    is of that kind already or not taken."""
    if kind == "integer":
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and value.is_integer() and -I64 <= value < I64:
            return int(value)
        if isinstance(value, str) and INT_STR.fullmatch(value):
            number = int(value.strip().replace("_", "").split(".")[0])
            return number if -I64 <= number < U64 else UNCHANGED
    elif kind == "number":
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            return parse_float(value)
    elif kind == "boolean":
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value in (0, 1):
            return value == 1
        if isinstance(value, str):
            return BOOL_WORDS.get(value.strip().lower(), UNCHANGED)
    return UNCHANGED


def lax(value, schema, root):
    """`value` with every scalar coerced as pydantic's lax mode reads it under `schema`."""
    schema = resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            for branch in schema[key]:
                candidate = lax(value, branch, root)
                if validator(branch, root).is_valid(candidate):
                    return candidate
            return value
    for branch in schema.get("allOf", []):
        value = lax(value, branch, root)
    kinds = types_of(schema)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {
            key: lax(item, properties[key], root)
            if key in properties
            else lax(item, extra, root)
            if isinstance(extra, dict)
            else item
            for key, item in value.items()
        }
    if isinstance(value, list):
        prefix = schema.get("prefixItems", [])
        items = schema.get("items")
        return [
            lax(item, prefix[index], root)
            if index < len(prefix)
            else lax(item, items, root)
            if isinstance(items, dict)
            else item
            for index, item in enumerate(value)
        ]
    if any(kind_matches(value, kind) for kind in kinds):
        return value
    for kind in kinds:
        coerced = coerce_scalar(value, kind)
        if coerced is not UNCHANGED:
            return coerced
    return value


def kind_matches(value, kind):
    return {
        "integer": isinstance(value, int) and not isinstance(value, bool)
        or isinstance(value, float) and value.is_integer(),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "string": isinstance(value, str),
        "null": value is None,
    }.get(kind, False)


def unreadable_integer(value, schema, root):
    """Whether an integer of `value` is one the service refuses though JSON Schema takes
    it: in float notation past 2**63 (pydantic refuses it too), or any past 2**64 - 1
    (Python's integers are unbounded; the service's are not)."""
    schema = resolve(schema, root)
    branches = schema.get("anyOf", []) + schema.get("oneOf", []) + schema.get("allOf", [])
    if any(unreadable_integer(value, branch, root) for branch in branches):
        return True
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return any(
            unreadable_integer(item, properties.get(key, extra), root)
            for key, item in value.items()
            if isinstance(properties.get(key, extra), dict)
        )
    if isinstance(value, list):
        items = schema.get("items")
        return isinstance(items, dict) and any(
            unreadable_integer(item, items, root) for item in value
        )
    if "integer" in types_of(schema):
        if isinstance(value, float):
            return value.is_integer() and not -I64 <= value < I64
        if isinstance(value, int) and not isinstance(value, bool):
            return not -I64 <= value < U64
    return False


def objects(value):
    """Every object in `value`, itself included."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from objects(item)
    elif isinstance(value, list):
        for item in value:
            yield from objects(item)


def number(value):
    """A field's number as the models compare it (lax, as they read it); None if none."""
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str):
        parsed = parse_float(value)
        return None if parsed is UNCHANGED else parsed
    return None


def breaks_a_cross_field_rule(body):
    for obj in objects(body):
        kind = obj.get("kind")
        if kind == "GraySwanAnalyzer":
            low = number(obj.get("low_threshold", 0.3))
            medium = number(obj.get("medium_threshold", 0.7))
            if low is not None and medium is not None and low >= medium:
                return True
        elif kind == "LLMSummarizingCondenser":
            max_size = number(obj.get("max_size", 240))
            keep_first = number(obj.get("keep_first", 2))
            if (
                max_size is not None
                and keep_first is not None
                and math.floor(max_size / 2) - keep_first - 1 <= 0
            ):
                return True
        elif kind in ("Agent", "ACPAgent"):
            prompt = obj.get("system_prompt")
            filename = obj.get("system_prompt_filename", "system_prompt.j2")
            if prompt is not None and filename != "system_prompt.j2":
                return True
    return False


def conversation_body(case):
    """The JSON body of a case of one of `BODIES`, with its schema as the document has it
    and the document; None for any other case."""
    operation = case.operation
    method = operation.method.upper()
    if (method, operation.path) not in BODIES or not isinstance(case.body, (dict, list)):
        return None
    root = operation.schema.raw_schema
    body = root["paths"][operation.path][method.lower()]["requestBody"]
    return case.body, body["content"]["application/json"]["schema"], root


def valid_once_read_laxly(case):
    """A body the schema refuses that pydantic's lax reading takes: no negative case."""
    found = conversation_body(case)
    if found is None:
        return False
    body, schema, root = found
    return validator(schema, root).is_valid(lax(body, schema, root))


def breaks_a_rule_beyond_the_schema(case):
    """A body the schema takes that the models refuse: no positive case."""
    found = conversation_body(case)
    if found is None:
        return False
    body, schema, root = found
    return unreadable_integer(body, schema, root) or breaks_a_cross_field_rule(body)


@schemathesis.hook
def filter_case(context, case):
    meta = case.meta
    if meta is None:
        return True
    component = meta.components.get(ParameterLocation.BODY)
    mode = component.mode if component is not None else meta.generation.mode
    if mode == GenerationMode.NEGATIVE:
        return not valid_once_read_laxly(case)
    return not breaks_a_rule_beyond_the_schema(case)


# The model gateway's own messages for an upstream it could not reach (502) or that did
# not answer in time (504); `model-gw/src/forward.rs` says them.
UNREACHABLE = {"cannot connect to the upstream", "the upstream did not answer in time"}


def unreachable_upstream(response):
    """A documented 502 or 504 of the model gateway for an upstream it could not reach: the
    right answer to a call of a model that `POST /model/new` pointed at a host schemathesis
    made up (the run's configured model's upstream is always there)."""
    if response is None or response.status_code not in (502, 504):
        return False
    try:
        return json.loads(response.content)["error"]["message"] in UNREACHABLE
    except (ValueError, KeyError, TypeError):
        return False


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """The same judgement, as a backstop for a case whose body changed after it was drawn
    (schemathesis' stateful phase may fill a body from earlier responses; no run so far
    needed it): a failure of an accepted negative case, or of a refused positive one,
    stands only if the case is what its mode says. And a "server error" that is the
    gateway saying an added model's made-up upstream is unreachable is not one. The run's
    summary counts the failures dropped here."""
    if failure.code == "ST101" and unreachable_upstream(response):
        return False
    if failure.code == "ST201":
        return not valid_once_read_laxly(case)
    if failure.code == "ST202":
        return not breaks_a_rule_beyond_the_schema(case)
    return True


def _check():
    """`python3 schemathesis_hooks.py`: the coercions on a few values."""
    assert coerce_scalar("7", "integer") == 7
    assert coerce_scalar(" 1_000.00 ", "integer") == 1000
    assert coerce_scalar(True, "integer") == 1
    assert coerce_scalar(7.0, "integer") == 7
    assert coerce_scalar(1e20, "integer") is UNCHANGED
    assert coerce_scalar("1.5", "number") == 1.5
    assert coerce_scalar(False, "number") == 0.0
    assert coerce_scalar("Yes", "boolean") is True
    assert coerce_scalar(2, "boolean") is UNCHANGED
    assert coerce_scalar("\u0663", "integer") is UNCHANGED
    assert coerce_scalar("nan", "number") is UNCHANGED
    root = {
        "components": {
            "schemas": {
                "Analyzer": {
                    "type": "object",
                    "properties": {
                        "kind": {"const": "GraySwanAnalyzer"},
                        "low_threshold": {"type": "number"},
                        "history_limit": {"type": "integer", "minimum": 1},
                        "enabled": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
                    },
                }
            }
        }
    }
    schema = {"$ref": "#/components/schemas/Analyzer"}
    # Through an operation, as the hooks see cases.
    document = {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/api/v1/webhooks/conversations": {
                "post": {
                    "requestBody": {"content": {"application/json": {"schema": schema}}},
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
        **root,
    }
    operation = schemathesis.openapi.from_dict(document)["/api/v1/webhooks/conversations"]["POST"]

    def still_invalid(body):
        case = operation.Case(body=body, media_type="application/json")
        return not valid_once_read_laxly(case)

    # Taken by the lax reading: not negative.
    assert not still_invalid({"low_threshold": "0.5", "history_limit": "2", "enabled": "on"})
    assert not still_invalid({"low_threshold": False, "history_limit": 3.0, "enabled": 1})
    # Refused however read: negative.
    assert still_invalid({"history_limit": "0"})
    assert still_invalid({"history_limit": "two"})
    assert still_invalid({"history_limit": 1.5})
    assert still_invalid({"enabled": 2})
    assert still_invalid({"low_threshold": []})
    assert not breaks_a_rule_beyond_the_schema(operation.Case(body={"history_limit": 1}))
    assert breaks_a_rule_beyond_the_schema(operation.Case(body={"history_limit": 2**70}))
    assert unreadable_integer({"history_limit": 1e20}, schema, root)
    assert unreadable_integer({"history_limit": 2**70}, schema, root)
    assert not unreadable_integer({"history_limit": 2**63}, schema, root)
    assert breaks_a_cross_field_rule({"kind": "GraySwanAnalyzer", "low_threshold": 0.8})
    assert not breaks_a_cross_field_rule({"kind": "GraySwanAnalyzer", "low_threshold": 0.5})
    assert breaks_a_cross_field_rule({"kind": "LLMSummarizingCondenser", "max_size": 6})
    assert breaks_a_cross_field_rule({"kind": "Agent", "system_prompt": "", "system_prompt_filename": "x"})

    class Answer:
        def __init__(self, status_code, content):
            self.status_code, self.content = status_code, content

    assert unreachable_upstream(Answer(502, b'{"error": {"message": "cannot connect to the upstream"}}'))
    assert unreachable_upstream(
        Answer(504, b'{"type": "error", "error": {"message": "the upstream did not answer in time"}}')
    )
    assert not unreachable_upstream(Answer(500, b'{"error": {"message": "cannot connect to the upstream"}}'))
    assert not unreachable_upstream(Answer(502, b'{"error": {"message": "the upstream\'s answer failed"}}'))
    assert not unreachable_upstream(Answer(502, b"<html>"))
    print(json.dumps("ok"))


if __name__ == "__main__":
    _check()
