#!/usr/bin/env python3
"""The oracle of the differential harness: judges cases (generate.py's output) as the
reference receiver does, with the real models of the agent-server release this Python
runs (a venv of scripts/install-real-clients).

The receiver is FastAPI with `ConversationInfo` as the body: the body is read with
`json.loads` (bytes: UTF-8 with or without BOM, UTF-16, UTF-32, as Python detects them;
NaN and Infinity taken), a decode error answers 422 `json_invalid` at ("body", offset), a
body that does not decode as text 400, an empty body 422 `missing`, and the value is then
validated in Python mode, as FastAPI's body field does. A crash of the models (any other
exception) is a 500.

Writes one JSON line per case: {"id", "status", "loc", "type"} (loc and type of the first
error, without FastAPI's "body" prefix), then one line {"validators": [...]} naming every
field and model validator of the models a ConversationInfo reaches, with the cases that
made it return and raise (sys.monitoring watches their code objects).
"""

import base64
import inspect
import json
import os
import sys
import typing

# Some validators reach for the network (an LLM's custom tokenizer is fetched from the
# Hugging Face hub): the oracle runs offline, as a receiver without egress would.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pydantic  # noqa: E402
from openhands.agent_server.models import ConversationInfo  # noqa: E402

ADAPTER = pydantic.TypeAdapter(ConversationInfo)


def read_cases(path):
    """(seeds, cases) of a generate.py file; each case gets its body bytes."""
    with open(path, "rb") as lines:
        seeds = {k: v.encode() for k, v in json.loads(lines.readline())["seeds"].items()}
        cases = []
        for line in lines:
            case = json.loads(line)
            case["body"] = body_of(seeds, case)
            cases.append(case)
    return seeds, cases


def body_of(seeds, case):
    seed = seeds[case["seed"]]
    head, tail = case["keep"]
    middle = case["text"].encode() if "text" in case else base64.b64decode(case["bytes"])
    data = seed[:head] + middle + seed[len(seed) - tail :]
    encoding = case.get("encoding")
    return data if encoding is None else data.decode().encode(encoding)


def judge(body):
    if not body:
        return {"status": 422, "loc": [], "type": "missing"}
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        return {"status": 422, "loc": [e.pos], "type": "json_invalid"}
    except Exception:  # noqa: BLE001 - FastAPI: "There was an error parsing the body"
        return {"status": 400, "loc": [], "type": "body_unreadable"}
    try:
        ADAPTER.validate_python(value, from_attributes=True)
    except pydantic.ValidationError as e:
        first = e.errors(include_url=False)[0]
        return {"status": 422, "loc": list(first["loc"]), "type": first["type"]}
    except Exception as e:  # noqa: BLE001 - the reference's 500
        return {"status": 500, "loc": [], "type": type(e).__name__}
    return {"status": 200}


def models_reached(root):
    """Every pydantic model a ConversationInfo can contain: field types, recursively, and
    every subclass of each (the SDK's discriminated unions resolve kinds by subclass)."""
    seen = {}
    stack = [root]
    while stack:
        t = stack.pop()
        if isinstance(t, type) and issubclass(t, pydantic.BaseModel):
            if t in seen:
                continue
            seen[t] = None
            stack.extend(t.__subclasses__())
            stack.extend(f.annotation for f in t.model_fields.values())
        else:
            stack.extend(typing.get_args(t))
            origin = typing.get_origin(t)
            if origin is not None:
                stack.append(origin)
    return list(seen)


def validators(models):
    """{code object: name} of every field and model validator of `models`."""
    out = {}
    for model in models:
        decorators = model.__pydantic_decorators__
        for kind, table in (("field", decorators.field_validators), ("model", decorators.model_validators)):
            for decorator in table.values():
                func = inspect.unwrap(getattr(decorator.func, "__func__", decorator.func))
                code = getattr(func, "__code__", None)
                if code is None or code in out:
                    continue
                info = decorator.info
                if kind == "field":
                    what = f"field_validator({', '.join(map(repr, info.fields))}, mode={info.mode!r})"
                else:
                    what = f"model_validator(mode={info.mode!r})"
                source = inspect.getsourcefile(func) or "?"
                module = func.__module__
                out[code] = {
                    "validator": f"{module}.{func.__qualname__}",
                    "kind": what,
                    "line": code.co_firstlineno,
                    "file": source.rsplit("site-packages/", 1)[-1],
                }
    return out


def main():
    _, cases = read_cases(sys.argv[1])
    watched = validators(models_reached(ConversationInfo))
    returned = {code: None for code in watched}
    raised = {code: None for code in watched}
    current = {"id": None}

    monitoring = sys.monitoring
    tool = monitoring.DEBUGGER_ID
    monitoring.use_tool_id(tool, "differential")

    def on_return(code, _offset, _value):
        if returned.get(code, 0) is None:
            returned[code] = current["id"]

    def on_unwind(code, _offset, _exception):
        if raised.get(code, 0) is None:
            raised[code] = current["id"]

    monitoring.register_callback(tool, monitoring.events.PY_RETURN, on_return)
    monitoring.register_callback(tool, monitoring.events.PY_UNWIND, on_unwind)
    # PY_UNWIND is a global-only event; PY_RETURN is watched on the validators alone.
    monitoring.set_events(tool, monitoring.events.PY_UNWIND)
    for code in watched:
        monitoring.set_local_events(tool, code, monitoring.events.PY_RETURN)

    out = sys.stdout
    for case in cases:
        current["id"] = case["id"]
        verdict = judge(case["body"])
        verdict["id"] = case["id"]
        out.write(json.dumps(verdict) + "\n")
    monitoring.set_events(tool, 0)
    listed = []
    for code, info in watched.items():
        listed.append({**info, "returned": returned[code], "raised": raised[code]})
    listed.sort(key=lambda v: v["validator"])
    out.write(json.dumps({"validators": listed}) + "\n")


if __name__ == "__main__":
    main()
