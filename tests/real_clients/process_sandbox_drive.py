"""The whole loop on one machine: the app server's own runtime API client starts a sandbox
on Sandgate's `process` driver whose command is the real agent-server, and the agent-server
posts its conversation back to Sandgate with the sandbox's session key.

openhands-ai's RemoteSandboxService, unchanged and built as the app server builds it (see
runtime_client_drive.py), with `web_url` set to Sandgate: the client gives the sandbox
`OH_WEBHOOKS_0_BASE_URL={web_url}/api/v1/webhooks`, as in production. The sandbox's command
is this venv's python running `openhands.agent_server` (the agent-server openhands-ai
1.11.0 ships with) on the agent-server port the client expects (60000), which Sandgate
rewrites to the sandbox's own.

Steps: start, wait until running; create a conversation on the sandbox's agent-server URL
with its session key and run one turn (a fake LLM answers); wait until Sandgate has the
conversation; pause (the agent-server is gone), resume (the key rotates), run a second turn
on the same conversation with the new key; wait until Sandgate has its events; check the
old key is refused; delete.

Prints one JSON object per step on stdout: {"step": ..., ...}; the Rust test
(tests/e2e/process_sandboxes.rs) asserts them. Exits non-zero when a step raises.

The fake LLM listens on this machine's loopback, which a sandbox with a network of its
own does not reach: the agent-server calls it through Sandgate's gateway (the model
`fake`, added with the master key), with a virtual key, as a platform's sandboxes do.

Usage: process_sandbox_drive.py --url SANDGATE --api-key KEY --master-key KEY
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer

import httpx
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from openhands.app_server.sandbox.preset_sandbox_spec_service import PresetSandboxSpecService
from openhands.app_server.sandbox.sandbox_models import AGENT_SERVER, SandboxStatus
from openhands.app_server.sandbox.sandbox_spec_models import SandboxSpecInfo
from openhands.app_server.utils.sql_utils import Base

from agent_server_drive import FakeLlm, conversation_request
from app_server import remote_sandbox_service
from sandbox_env import OFFLINE_AGENT_SERVER

DEADLINE = 120.0
SPEC = "local/agent-server"


def emit(step: str, **fields) -> None:
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


async def until(what: str, check):
    """Polls `check` (async) until it returns something truthy; that value."""
    started = time.monotonic()
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() - started > DEADLINE:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--master-key", required=True)
    args = ap.parse_args()

    llm = ThreadingHTTPServer(("127.0.0.1", 0), FakeLlm)
    threading.Thread(target=llm.serve_forever, daemon=True).start()
    master = {"authorization": f"Bearer {args.master_key}"}
    added = httpx.post(f"{args.url}/model/new", headers=master, json={
        "model_name": "fake",
        "gateway_params": {
            "model": "openai/fake",
            "api_base": f"http://127.0.0.1:{llm.server_address[1]}/v1",
            "api_key": "sk-up",
        },
        # Priced, so that the conversation's ledger has a spend to show.
        "model_info": {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002},
    })
    added.raise_for_status()
    generated = httpx.post(f"{args.url}/key/generate", headers=master, json={"models": ["fake"]})
    generated.raise_for_status()
    llm_key = generated.json()["key"]
    llm_url = f"{args.url}/v1"
    work = tempfile.mkdtemp(prefix="process-sandbox-")
    # The conversation works there as the sandbox's own uid (the process driver gives each
    # sandbox one when Sandgate is root): mkdtemp's 0700 would shut it out.
    os.chmod(work, 0o1777)

    engine = create_async_engine("sqlite+aiosqlite:///:memory:")
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    command = [sys.executable, "-m", "openhands.agent_server", "--host", "127.0.0.1", "--port", "60000"]
    environment = {
        **OFFLINE_AGENT_SERVER,
        # The agent-server stores a conversation's LLM key redacted: the conversation it
        # loads again after the resume finds its key here, as a platform's sandbox does.
        "OPENAI_API_KEY": llm_key,
    }
    specs = PresetSandboxSpecService(
        specs=[SandboxSpecInfo(id=SPEC, command=command, initial_env=environment)]
    )
    async with httpx.AsyncClient(timeout=60) as client, sessions() as db:
        service = remote_sandbox_service(
            specs, url=args.url, key=args.api_key, client=client, db=db, web_url=args.url
        )

        async def running(sandbox_id: str):
            info = await service.get_sandbox(sandbox_id)
            if info is not None and info.status == SandboxStatus.ERROR:
                raise RuntimeError(f"the sandbox failed: {info}")
            return info if info is not None and info.status == SandboxStatus.RUNNING else None

        def agent_server(info):
            url = next(u.url for u in info.exposed_urls or [] if u.name == AGENT_SERVER)
            return url, {"x-session-api-key": info.session_api_key}

        async def turn(info, conversation: str, text: str) -> None:
            url, headers = agent_server(info)
            calls = FakeLlm.calls
            response = await client.post(
                f"{url}/api/conversations/{conversation}/events",
                headers=headers,
                json={"role": "user", "content": [{"type": "text", "text": text}], "run": True},
            )
            response.raise_for_status()

            async def finished():
                got = await client.get(f"{url}/api/conversations/{conversation}", headers=headers)
                got.raise_for_status()
                status = got.json()["execution_status"]
                if status == "error":
                    raise RuntimeError(f"the turn {text!r} failed: {got.json()}")
                return FakeLlm.calls > calls and status == "finished"

            await until(f"the turn {text!r} to finish", finished)

        async def recorded_events(conversation: str) -> int:
            response = await client.get(
                f"{args.url}/api/v1/conversations/{conversation}/events",
                headers={"x-api-key": args.api_key},
                params={"limit": 100},
            )
            return len(response.json().get("items", [])) if response.status_code == 200 else 0

        started = await service.start_sandbox(sandbox_spec_id=SPEC)
        info = await until("the sandbox to run", lambda: running(started.id))
        url, headers = agent_server(info)
        health = await client.get(f"{url}/health")
        emit("running", id=info.id, url=url, health=health.status_code)

        created = await client.post(
            f"{url}/api/conversations",
            headers=headers,
            json=conversation_request(llm_url, work, llm_key),
        )
        created.raise_for_status()
        conversation = created.json()["id"]
        await turn(info, conversation, "First turn: say done.")
        before = await until(
            "Sandgate to record the first turn", lambda: recorded_events(conversation)
        )
        emit("first_turn", conversation=conversation, recorded_events=before)

        emit("pause", ok=await service.pause_sandbox(info.id))
        paused = await service.get_sandbox(info.id)
        try:
            await client.get(f"{url}/health", timeout=5)
            gone = False
        except httpx.TransportError:
            gone = True
        emit("paused", status=paused.status.value, agent_server_gone=gone)

        emit("resume", ok=await service.resume_sandbox(info.id))
        resumed = await until("the sandbox to run again", lambda: running(info.id))
        emit(
            "resumed",
            key_rotated=resumed.session_api_key not in (None, info.session_api_key),
            same_url=agent_server(resumed)[0] == url,
        )

        await turn(resumed, conversation, "Second turn: say done.")
        after = await until(
            "Sandgate to record the second turn",
            lambda: _more(recorded_events(conversation), before),
        )
        emit("second_turn", recorded_events=after)

        # The key the sandbox had before the resume no longer posts.
        old = await client.post(
            f"{args.url}/api/v1/webhooks/conversations",
            headers={"x-session-api-key": info.session_api_key},
            json={},
        )
        emit("old_key", status=old.status_code)

        emit("delete", ok=await service.delete_sandbox(info.id))
        emit("deleted", found=await service.get_sandbox(info.id) is not None)
        await db.commit()


async def _more(count, than: int):
    value = await count
    return value if value > than else None


if __name__ == "__main__":
    asyncio.run(main())
