"""Drives the app server's own runtime API client, unchanged, into Sandgate's quotas on the
runtime API key (issue 40): openhands-ai's RemoteSandboxService against one Sandgate with
MAX_RUNTIMES=2 and one with SANDBOX_START_RATE=2.

Against --url (MAX_RUNTIMES=2): two starts, a third refused, a pause that makes room for
it, a resume refused while the key holds two, and accepted once one is deleted. Against
--rate-url (SANDBOX_START_RATE=2 a minute): two starts, a third refused. The client's own
limit is set above Sandgate's, so that it is Sandgate that refuses, not the client that
pauses its oldest sandbox first.

Prints one JSON object per step on stdout: {"step": ..., ...}; the Rust test
(tests/e2e/quotas.rs) asserts them. Exits non-zero when a step raises unexpectedly.

Usage: runtime_client_quota_drive.py --url URL --rate-url URL --api-key KEY --image IMAGE
"""

from __future__ import annotations

import argparse
import asyncio
import json

import httpx
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from openhands.app_server.errors import SandboxError
from openhands.app_server.sandbox.preset_sandbox_spec_service import PresetSandboxSpecService
from openhands.app_server.sandbox.sandbox_spec_models import SandboxSpecInfo
from openhands.app_server.utils.sql_utils import Base

from app_server import remote_sandbox_service

# Above MAX_RUNTIMES: the client pauses nothing before Sandgate's quota is reached.
CLIENT_LIMIT = 10


def emit(step: str, **fields) -> None:
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


async def refused(start) -> str | None:
    """The client's error when `start` fails as it reports a runtime API failure."""
    try:
        await start()
    except SandboxError as err:
        return str(err)
    return None


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--rate-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--image", required=True)
    args = ap.parse_args()

    engine = create_async_engine("sqlite+aiosqlite:///:memory:")
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    specs = PresetSandboxSpecService(
        specs=[SandboxSpecInfo(id=args.image, command=["/usr/local/bin/agent"], initial_env={})]
    )
    async with httpx.AsyncClient(timeout=30) as client, sessions() as db:

        def service_on(url: str):
            service = remote_sandbox_service(specs, url=url, key=args.api_key, client=client, db=db)
            service.max_num_sandboxes = CLIENT_LIMIT
            return service

        held = service_on(args.url)
        first = await held.start_sandbox(sandbox_spec_id=args.image)
        second = await held.start_sandbox(sandbox_spec_id=args.image)
        emit("two_started", statuses=[first.status.value, second.status.value])
        emit("third_refused", error=await refused(lambda: held.start_sandbox(sandbox_spec_id=args.image)))

        emit("pause_first", ok=await held.pause_sandbox(first.id))
        third = await held.start_sandbox(sandbox_spec_id=args.image)
        emit("third_after_pause", status=third.status.value)
        emit("resume_refused", ok=await held.resume_sandbox(first.id))
        paused = await held.get_sandbox(first.id)
        emit("still_paused", status=paused.status.value if paused else None)
        emit("delete_third", ok=await held.delete_sandbox(third.id))
        emit("resume_after_delete", ok=await held.resume_sandbox(first.id))
        resumed = await held.get_sandbox(first.id)
        emit("resumed", status=resumed.status.value if resumed else None)

        rated = service_on(args.rate_url)
        for _ in range(2):
            await rated.start_sandbox(sandbox_spec_id=args.image)
        emit("rate_refused", error=await refused(lambda: rated.start_sandbox(sandbox_spec_id=args.image)))
        await db.commit()


if __name__ == "__main__":
    asyncio.run(main())
