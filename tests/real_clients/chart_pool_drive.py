"""One start as the app server makes it, against a Sandgate whose warm pools are the chart's
defaults: openhands-ai 1.11.0's RemoteSandboxService, built as the app server builds it
(app_server.py), its specs read from the warm runtime configurations through its
DynamicRemoteSandboxSpecService, with a public `web_url` so that the start carries the
webhook and CORS variables it carries in production. The Rust test
(tests/e2e/personalised_pools.rs) asks Sandgate whether the start claimed the pool.

Prints one JSON object per step on stdout: {"step": ..., ...}. Exits non-zero when a step
raises.

Usage: chart_pool_drive.py --url URL --api-key KEY
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
from openhands.app_server.utils.sql_utils import Base

from app_server import remote_sandbox_service


def emit(step: str, **fields) -> None:
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--api-key", required=True)
    args = ap.parse_args()

    engine = create_async_engine("sqlite+aiosqlite:///:memory:")
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    specs = DynamicRemoteSandboxSpecService(
        api_url=args.url, api_key=args.api_key, default_spec_name="v1_current"
    )
    async with httpx.AsyncClient(timeout=30) as client, sessions() as db:
        service = remote_sandbox_service(
            specs,
            url=args.url,
            key=args.api_key,
            client=client,
            db=db,
            web_url="https://app.example.com",
        )
        started = await service.start_sandbox()
        emit("start", id=started.id, status=started.status.value)
        await db.commit()


if __name__ == "__main__":
    asyncio.run(main())
