"""The SDK's own runtime API client, unchanged: openhands-workspace's `APIRemoteWorkspace`
against Sandgate on its `process` driver, so that the sandbox it starts is a real
agent-server on this machine whose `/health` it checks.

The client sends `command` as one string, `/agent-server/.venv/bin/python -m
openhands.agent_server --port 60000` (`target_type="source"`), and forwards the variables
named in `forward_env` from this environment; `PATH` among them, with this venv's `bin`
first, so that the image's python (absent here) is this venv's (docs/runtime-api-and-pools.md: the process
driver's programs).

Steps: create (start, wait for `pod_status` ready, `/health`), run a command in the
sandbox, attach a second workspace to the same session and run a command there, clean
both up (stop), and read the session afterwards.

Prints one JSON object per step on stdout: {"step": ..., ...}; the Rust test
(tests/e2e/process_sandboxes.rs) asserts them. Exits non-zero when a step raises.

Usage: remote_workspace_drive.py --url SANDGATE --api-key KEY
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid

import httpx

from openhands.workspace import APIRemoteWorkspace

from sandbox_env import OFFLINE_AGENT_SERVER as FORWARDED


def emit(step: str, **fields) -> None:
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--api-key", required=True)
    args = ap.parse_args()

    os.environ.update(FORWARDED)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    # The sandbox's own workspace, as its image has it: the process driver binds the
    # sandbox's directory there, in its own view of the filesystem (nothing of this
    # machine's /tmp is in that view).
    work = "/workspace"
    session = f"agent-server-{uuid.uuid4()}"

    def workspace() -> APIRemoteWorkspace:
        return APIRemoteWorkspace(
            runtime_api_url=args.url,
            runtime_api_key=args.api_key,
            server_image="ghcr.io/openhands/agent-server:1.58.2-python",
            session_id=session,
            target_type="source",
            working_dir=work,
            forward_env=["PATH", *FORWARDED],
            startup_wait_timeout=120,
        )

    first = workspace()
    created = first.execute_command("echo created-$((20 + 22))", cwd=work)
    emit(
        "create",
        host=first.host,
        exit_code=created.exit_code,
        stdout=created.stdout.strip(),
    )

    second = workspace()
    attached = second.execute_command("pwd", cwd=work)
    emit(
        "attach",
        same_host=second.host == first.host,
        exit_code=attached.exit_code,
        stdout=attached.stdout.strip(),
    )

    runtime_id = first._runtime_id
    second.cleanup()
    first.cleanup()
    session_after = httpx.get(
        f"{args.url}/sessions/{session}", headers={"x-api-key": args.api_key}, timeout=30
    )
    body = session_after.json() if session_after.status_code == 200 else {}
    emit(
        "cleanup",
        runtime_id=runtime_id,
        http_status=session_after.status_code,
        status=body.get("status"),
    )


if __name__ == "__main__":
    main()
