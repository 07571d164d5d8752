"""Drives Sandgate's model gateway with the real LLM SDKs, unchanged: openai and anthropic
for Python, and litellm's `litellm_proxy/` provider. Every call's answer is checked as the
SDK parses it; a failed check exits non-zero naming it. Prints one JSON object: the
checks that passed and the SDKs' versions.

    .tools/llm-clients/bin/python tests/real_clients/llm_sdks.py \
        --base http://127.0.0.1:8080 --key sk-master

The gateway's config has `claude` (a `gateway_proxy/` upstream: the Messages API passes
as it is) and `gpt` (an `openai/` upstream: the Messages API is translated), both on the
test's fake upstream, which answers "Hello", a tool use of the first tool when the
request has tools, 3-dimension embeddings, and usage 11/7 (chat), 9/2 (responses).
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version

import anthropic
import httpx
import litellm
import openai

TOOL = {
    "name": "read",
    "description": "Reads a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
MESSAGES = [{"role": "user", "content": "Read the README."}]

passed: list[str] = []


def check(name: str, condition: bool, detail: object = "") -> None:
    if not condition:
        print(f"check failed: {name}: {detail}", file=sys.stderr)
        sys.exit(1)
    passed.append(name)


def openai_sdk(base: str, key: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)

    response = client.responses.create(model="gpt", input="hi")
    check("openai responses.create", response.output_text == "Hello", response)
    check("openai responses.create names the asked model", response.model == "gpt", response)

    events = list(client.responses.create(model="gpt", input="hi", stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    completed = [e for e in events if e.type == "response.completed"]
    check("openai responses.create(stream=True) deltas", deltas == "Hello", events)
    check(
        "openai responses.create(stream=True) usage",
        completed and completed[0].response.usage.total_tokens == 11,
        completed,
    )

    embeddings = client.embeddings.create(model="gpt", input="hi")
    check(
        "openai embeddings.create",
        embeddings.data[0].embedding == [0.25, -0.5, 1.0] and embeddings.model == "gpt",
        embeddings,
    )

    completion = client.completions.create(model="gpt", prompt="hi")
    check("openai completions.create", completion.choices[0].text == "Hello", completion)

    chunks = list(
        client.chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check("openai chat stream", text == "Hello", chunks)
    # The usage chunk the gateway asked for is not the client's.
    check("openai chat stream without usage chunks", all(c.choices for c in chunks), chunks)

    try:
        openai.OpenAI(base_url=f"{base}/v1", api_key="wrong", max_retries=0).responses.create(
            model="gpt", input="hi"
        )
        check("openai: a wrong key is refused", False)
    except openai.AuthenticationError:
        passed.append("openai: a wrong key is refused")


def anthropic_sdk(base: str, key: str) -> None:
    # The SDK sends its key as x-api-key.
    client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
    for model in ("gpt", "claude"):
        message = client.messages.create(
            model=model, max_tokens=100, tools=[TOOL], messages=MESSAGES
        )
        block = message.content[0]
        check(
            f"anthropic messages.create with tools ({model})",
            block.type == "tool_use"
            and block.name == "read"
            and block.input == {"path": "README.md"}
            and message.stop_reason == "tool_use"
            and message.model == model,
            message,
        )
        with client.messages.stream(
            model=model, max_tokens=100, tools=[TOOL], messages=MESSAGES
        ) as stream:
            final = stream.get_final_message()
        block = final.content[0]
        check(
            f"anthropic messages.stream with tools ({model})",
            block.type == "tool_use"
            and block.input == {"path": "README.md"}
            and final.stop_reason == "tool_use"
            and final.usage.output_tokens > 0,
            final,
        )
        with client.messages.stream(model=model, max_tokens=100, messages=MESSAGES) as stream:
            text = "".join(stream.text_stream)
        check(f"anthropic messages.stream text ({model})", text == "Hello", text)
        count = client.messages.count_tokens(model=model, messages=MESSAGES)
        check(
            f"anthropic messages.count_tokens ({model})",
            count.input_tokens == (42 if model == "claude" else 11),
            count,
        )
    try:
        anthropic.Anthropic(base_url=base, api_key="wrong", max_retries=0).messages.create(
            model="gpt", max_tokens=10, messages=MESSAGES
        )
        check("anthropic: a wrong key is refused", False)
    except anthropic.AuthenticationError as err:
        check("anthropic: a wrong key is refused", err.body["error"]["type"] == "authentication_error", err.body)
    try:
        client.messages.create(model="nope", max_tokens=10, messages=MESSAGES)
        check("anthropic: an unknown model is 404", False)
    except anthropic.NotFoundError:
        passed.append("anthropic: an unknown model is 404")


def key_carriers(base: str, key: str) -> None:
    body = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}
    for header, value in (
        ("authorization", f"Bearer {key}"),
        ("x-api-key", key),
        ("api-key", key),
        ("x-litellm-api-key", key),
        ("x-litellm-api-key", f"Bearer {key}"),
    ):
        answer = httpx.post(f"{base}/v1/chat/completions", json=body, headers={header: value})
        check(f"the key in {header}", answer.status_code == 200, answer.text)


def litellm_sdk(base: str, key: str) -> None:
    completion = litellm.completion(
        model="litellm_proxy/gpt", api_base=base, api_key=key, messages=MESSAGES
    )
    check("litellm completion", completion.choices[0].message.content == "Hello", completion)
    embedding = litellm.embedding(
        model="litellm_proxy/gpt", api_base=base, api_key=key, input=["hi"]
    )
    check("litellm embedding", embedding.data[0]["embedding"] == [0.25, -0.5, 1.0], embedding)
    response = litellm.responses(
        model="litellm_proxy/gpt", api_base=base, api_key=key, input="hi"
    )
    texts = [
        part.text
        for item in response.output
        if getattr(item, "type", None) == "message"
        for part in item.content
    ]
    check("litellm responses", texts == ["Hello"], response)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    openai_sdk(args.base, args.key)
    anthropic_sdk(args.base, args.key)
    key_carriers(args.base, args.key)
    litellm_sdk(args.base, args.key)
    print(
        json.dumps(
            {
                "passed": passed,
                "versions": {name: version(name) for name in ("openai", "anthropic", "litellm")},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
