"""Drives the app server's own runtime API client against Sandgate, unchanged.

openhands-ai's RemoteSandboxService is built as the app server's injector builds it, from
the app server's own parts: its DynamicRemoteSandboxSpecService (the specs read from
runtime-api's warm runtime configurations; the warm start takes its default) and a preset
sandbox spec service, the user context it uses for a
user, an httpx client, and a SQLAlchemy session on its own tables (SQLite in memory here,
where the app server uses its database). Then the scenario of issue 19: a warm start and a
cold one (a spec without a command: the client sends `"command": null`), get, batch and
search, pause, resume (the key rotates), delete, and the sandbox limit with a paused
sandbox among the user's.

Prints one JSON object per step on stdout: {"step": ..., ...}; the Rust test
(tests/e2e/runtime_clients.rs) asserts them. Exits non-zero when a step raises.

Usage: runtime_client_drive.py --url URL --api-key KEY --warm-image IMAGE --cold-image IMAGE
"""

from __future__ import annotations

import argparse
import asyncio
import json

import httpx
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from openhands.app_server.sandbox.dynamic_remote_sandbox_spec_service import (
    DynamicRemoteSandboxSpecService,
)
from openhands.app_server.sandbox.preset_sandbox_spec_service import PresetSandboxSpecService
from openhands.app_server.sandbox.sandbox_spec_models import SandboxSpecInfo
from openhands.app_server.utils.sql_utils import Base

from app_server import remote_sandbox_service

# The command the warm pool of the Rust test is configured with.
WARM_COMMAND = ["/usr/local/bin/agent-server", "--port", "60000"]


def emit(step: str, **fields) -> None:
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


def status(info) -> str | None:
    return None if info is None else info.status.value


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--warm-image", required=True)
    ap.add_argument("--cold-image", required=True)
    args = ap.parse_args()

    engine = create_async_engine("sqlite+aiosqlite:///:memory:")
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    specs = PresetSandboxSpecService(
        specs=[
            SandboxSpecInfo(id=args.warm_image, command=WARM_COMMAND, initial_env={}),
            # No command: the image's own entrypoint (the client sends null).
            SandboxSpecInfo(id=args.cold_image, command=None, initial_env={}),
        ]
    )
    # The spec service the app server builds from runtime-api's warm runtime configurations.
    dynamic = DynamicRemoteSandboxSpecService(
        api_url=args.url, api_key=args.api_key, default_spec_name="v1_current"
    )
    async with httpx.AsyncClient(timeout=30) as client, sessions() as db:

        def remote(spec_service):
            return remote_sandbox_service(
                spec_service, url=args.url, key=args.api_key, client=client, db=db
            )

        page = await dynamic.search_sandbox_specs()
        default = await dynamic.get_default_sandbox_spec()
        emit(
            "specs",
            ids=[spec.id for spec in page.items],
            default=default.id,
            command=default.command,
            working_dir=default.working_dir,
            found=(await dynamic.get_sandbox_spec(default.id)) is not None,
        )
        # The warm start as the app server makes it: no spec named, the default one.
        warm = await remote(dynamic).start_sandbox()
        emit("start_warm", id=warm.id, status=status(warm), has_key=warm.session_api_key is not None)
        service = remote(specs)
        cold = await service.start_sandbox(sandbox_spec_id=args.cold_image)
        emit("start_cold", id=cold.id, status=status(cold), has_key=cold.session_api_key is not None)

        got = await service.get_sandbox(warm.id)
        emit("get", id=got.id, status=status(got), same_key=got.session_api_key == warm.session_api_key)
        batch = await service.batch_get_sandboxes([warm.id, cold.id, "no-such-sandbox"])
        emit("batch", statuses=[status(info) for info in batch])
        page = await service.search_sandboxes()
        emit("search", ids=sorted(info.id for info in page.items))

        emit("pause", ok=await service.pause_sandbox(cold.id))
        paused = await service.get_sandbox(cold.id)
        emit("paused", status=status(paused))
        emit("resume", ok=await service.resume_sandbox(cold.id))
        resumed = await service.get_sandbox(cold.id)
        emit(
            "resumed",
            status=status(resumed),
            key_rotated=resumed.session_api_key not in (None, cold.session_api_key),
        )

        # The limit is 3: with the warm and the cold sandbox running and a third one
        # paused, a fourth start must pause nothing (the paused one does not count).
        third = await service.start_sandbox(sandbox_spec_id=args.cold_image)
        await service.pause_sandbox(third.id)
        fourth = await service.start_sandbox(sandbox_spec_id=args.cold_image)
        after = {
            name: status(await service.get_sandbox(info.id))
            for name, info in (("warm", warm), ("cold", cold), ("third", third), ("fourth", fourth))
        }
        emit("limit", statuses=after)

        emit("delete", ok=await service.delete_sandbox(fourth.id))
        emit("deleted", found=await service.get_sandbox(fourth.id) is not None)
        await db.commit()


if __name__ == "__main__":
    asyncio.run(main())
