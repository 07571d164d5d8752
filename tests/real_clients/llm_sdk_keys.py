"""Drives Sandgate's virtual keys with the real LLM SDKs, unchanged: a key generated
through `/key/generate` with the body LiteLLM's documentation shows calls chat, responses
and messages through openai, anthropic and litellm's `litellm_proxy/` provider; a model
outside its list and a spent budget are refused as the SDKs expect LiteLLM to refuse
them. Prints one JSON object: the checks that passed, and the key's spend.

    .tools/llm-clients/bin/python tests/real_clients/llm_sdk_keys.py \
        --base http://127.0.0.1:8080 --master sk-master --budget 0.1

The gateway's config has `gpt` and `claude` (priced), and `other`, which the key may not
call.
"""

from __future__ import annotations

import argparse
import json
import sys

import anthropic
import httpx
import litellm
import openai

MESSAGES = [{"role": "user", "content": "hi"}]
# litellm prints help for a failed call on stdout, where this script's report goes.
litellm.suppress_debug_info = True
passed: list[str] = []


def check(name: str, condition: bool, detail: object = "") -> None:
    if not condition:
        print(f"check failed: {name}: {detail}", file=sys.stderr)
        sys.exit(1)
    passed.append(name)


def generate(base: str, master: str, budget: float) -> str:
    # LiteLLM's documented body (docs.litellm.ai, "Virtual Keys"), and a budget.
    answer = httpx.post(
        f"{base}/key/generate",
        headers={"Authorization": f"Bearer {master}"},
        json={
            "models": ["gpt", "claude"],
            "metadata": {"user": "ishaan@berri.ai"},
            "max_budget": budget,
        },
    )
    check("/key/generate", answer.status_code == 200, answer.text)
    key = answer.json()["key"]
    check("the key is LiteLLM-shaped", key.startswith("sk-"), key)
    return key


def calls(base: str, key: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
    chat = client.chat.completions.create(model="gpt", messages=MESSAGES)
    check("openai chat.completions with a virtual key", chat.choices[0].message.content == "Hello", chat)
    chunks = list(client.chat.completions.create(model="gpt", messages=MESSAGES, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check("openai chat stream with a virtual key", text == "Hello", chunks)
    response = client.responses.create(model="gpt", input="hi")
    check("openai responses with a virtual key", response.output_text == "Hello", response)

    messages = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
    message = messages.messages.create(model="claude", max_tokens=50, messages=MESSAGES)
    check(
        "anthropic messages with a virtual key",
        message.content[0].type == "text" and message.content[0].text == "Hello",
        message,
    )
    completion = litellm.completion(
        model="litellm_proxy/gpt", api_base=base, api_key=key, messages=MESSAGES
    )
    check("litellm completion with a virtual key", completion.choices[0].message.content == "Hello", completion)


def refusals(base: str, key: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
    try:
        client.chat.completions.create(model="other", messages=MESSAGES)
        check("openai: a model outside the key's list is refused", False)
    except openai.PermissionDeniedError as err:
        check(
            "openai: a model outside the key's list is refused",
            err.body.get("type") == "key_model_access_denied" and err.body.get("param") == "model",
            err.body,
        )
    models = [model.id for model in client.models.list()]
    check("openai: the key lists its models only", models == ["gpt", "claude"], models)
    added = httpx.post(
        f"{base}/model/new",
        headers={"Authorization": f"Bearer {key}"},
        json={"model_name": "mine", "gateway_params": {"model": "openai/x", "api_base": "http://example.com"}},
    )
    check("a virtual key may not add models", added.status_code == 403, added.text)


def spend_to_the_budget(base: str, key: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
    messages = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
    # Calls until the budget is spent: the spend of each is written just after it ends.
    for _ in range(200):
        try:
            client.chat.completions.create(model="gpt", messages=MESSAGES)
        except openai.UnprocessableEntityError as err:
            check(
                "openai: over budget, LiteLLM's budget_exceeded",
                err.body.get("type") == "budget_exceeded"
                and err.body.get("message", "").startswith("Budget has been exceeded!"),
                err.body,
            )
            break
    else:
        check("the budget is reached", False)
    try:
        messages.messages.create(model="claude", max_tokens=10, messages=MESSAGES)
        check("anthropic: over budget", False)
    except anthropic.UnprocessableEntityError as err:
        check("anthropic: over budget", err.body["error"]["type"] == "budget_exceeded", err.body)
    try:
        litellm.completion(model="litellm_proxy/gpt", api_base=base, api_key=key, messages=MESSAGES, num_retries=0)
        check("litellm: over budget", False)
    except Exception as err:  # litellm maps the proxy's 422 to its own exception classes
        check("litellm: over budget", "budget_exceeded" in str(err) or "Budget has been exceeded" in str(err), err)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--master", required=True)
    parser.add_argument("--budget", type=float, required=True)
    args = parser.parse_args()
    key = generate(args.base, args.master, args.budget)
    calls(args.base, key)
    refusals(args.base, key)
    spend_to_the_budget(args.base, key)
    info = httpx.get(f"{args.base}/key/info", headers={"Authorization": f"Bearer {key}"}).json()
    print(json.dumps({"passed": passed, "spend": info["info"]["spend"], "token": info["info"]["token"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
