"""Writes the event kinds of one openhands-sdk release, as Sandgate checks events against
them: for every member of the `Event` union (by its `kind`), the fields its model requires,
the fields it knows, whether it takes others, and the `source` values it takes. Run with the release installed (scripts/install-real-clients does that):

    .tools/agent-server-1.58.2/bin/python runtime-api/src/conversations/event_kinds/generate.py \
        > runtime-api/src/conversations/event_kinds/1.58.2.json
"""

import json
import sys
from importlib.metadata import version

from pydantic import TypeAdapter

from openhands.sdk.event import Event


def kinds() -> dict:
    schema = TypeAdapter(Event).json_schema(mode="validation")
    definitions = schema.get("$defs", {})
    mapping = schema.get("discriminator", {}).get("mapping", {})
    out = {}
    for ref in sorted(set(mapping.values())):
        model = definitions[ref.rsplit("/", 1)[-1]]
        properties = model.get("properties", {})
        kind = properties.get("kind", {}).get("const")
        if kind is None:
            sys.exit(f"{ref} has no constant kind")
        out[kind] = {
            "required": sorted(name for name in model.get("required", []) if name != "kind"),
            "properties": sorted(properties),
            "extra_allowed": model.get("additionalProperties", True) is not False,
            "source": properties.get("source", {}).get("enum"),
        }
    return out


if __name__ == "__main__":
    result = kinds()
    if not result:
        sys.exit("the Event union has no discriminator mapping: nothing to write")
    print(json.dumps({"release": version("openhands-sdk"), "kinds": result}, indent=1, sort_keys=True))
