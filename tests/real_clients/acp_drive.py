"""Drives an Agent Client Protocol agent (claude-code-acp, codex-acp) as an ACP client
does (OpenHands' ACPAgent, Zed): JSON-RPC over the agent's stdio. Starts a session in
--cwd, sends one prompt, allows every permission the agent asks for, and prints one JSON
report: the prompt's stop reason, the agent's message text, and the permissions asked.

    python acp_drive.py --cwd DIR --prompt TEXT -- AGENT [ARGS...]
"""

import argparse
import asyncio
import json
import os
import signal
import sys


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cwd", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("agent", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.agent[1:] if args.agent[:1] == ["--"] else args.agent
    agent = await asyncio.create_subprocess_exec(
        *command,
        cwd=args.cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=sys.stderr,
        limit=16 * 1024 * 1024,
        # Its own process group: an adapter's wrapper (node) runs the agent as a child that
        # outlives the wrapper, holding the pipes; the whole group is ended at the end.
        start_new_session=True,
    )
    pending: dict[int, asyncio.Future] = {}
    text: list[str] = []
    permissions: list[str] = []
    next_id = 0

    async def send(message: dict) -> None:
        agent.stdin.write((json.dumps(message) + "\n").encode())
        await agent.stdin.drain()

    async def request(method: str, params: dict) -> dict:
        nonlocal next_id
        next_id += 1
        future = asyncio.get_running_loop().create_future()
        pending[next_id] = future
        await send({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params})
        return await future

    async def read() -> None:
        while line := await agent.stdout.readline():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "method" in message and "id" in message:
                # The agent asks the client: permissions are granted, nothing else is
                # offered (no fs or terminal capability was announced).
                if message["method"] == "session/request_permission":
                    options = message["params"].get("options", [])
                    permissions.append(
                        message["params"].get("toolCall", {}).get("title", "")
                    )
                    allow = next(
                        (o for o in options if o.get("kind") == "allow_always"),
                        next((o for o in options if o.get("kind", "").startswith("allow")), options[0] if options else None),
                    )
                    result = {"outcome": {"outcome": "selected", "optionId": allow["optionId"]}} if allow else {"outcome": {"outcome": "cancelled"}}
                    await send({"jsonrpc": "2.0", "id": message["id"], "result": result})
                else:
                    await send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "not offered"}})
            elif "method" in message:
                update = message.get("params", {}).get("update", {})
                if update.get("sessionUpdate") == "agent_message_chunk":
                    content = update.get("content", {})
                    if content.get("type") == "text":
                        text.append(content.get("text", ""))
            elif message.get("id") in pending:
                future = pending.pop(message["id"])
                if "error" in message:
                    future.set_exception(RuntimeError(json.dumps(message["error"])))
                else:
                    future.set_result(message.get("result"))
        for future in pending.values():
            if not future.done():
                future.set_exception(RuntimeError("the agent exited"))

    reader = asyncio.create_task(read())
    try:
        async with asyncio.timeout(args.timeout):
            await request(
                "initialize",
                {
                    "protocolVersion": 1,
                    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
                },
            )
            session = await request("session/new", {"cwd": args.cwd, "mcpServers": []})
            result = await request(
                "session/prompt",
                {"sessionId": session["sessionId"], "prompt": [{"type": "text", "text": args.prompt}]},
            )
    finally:
        agent.stdin.close()
        try:
            async with asyncio.timeout(5):
                await agent.wait()
        except TimeoutError:
            pass
        try:
            os.killpg(agent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await agent.wait()
        reader.cancel()
    print(json.dumps({"stop_reason": result.get("stopReason"), "text": "".join(text), "permissions": permissions}))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
