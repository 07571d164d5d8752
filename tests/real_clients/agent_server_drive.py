"""Drives the real OpenHands agent-server through one conversation, with its webhooks
pointed at a receiver (Sandgate, or the answer-everything baseline), and reports what it
measured as one JSON object on stdout.

Run it with the python of a venv that has the agent-server installed
(scripts/install-real-clients):

    .tools/agent-server-1.58.2/bin/python tests/real_clients/agent_server_drive.py \
        --webhook-base http://127.0.0.1:8080/api/v1/webhooks --session-key KEY --log as.log

The agent-server runs unchanged, as a subprocess, configured the way the platform
configures it in a sandbox: `OH_SESSION_API_KEYS_0` (its own API key, which it also sends
as `X-Session-API-Key` to the webhooks) and `OH_WEBHOOKS_0_BASE_URL`. Its LLM is a fake
OpenAI-compatible server started here, which ends every turn with a short answer.

The conversation: create, TURNS user messages each run to the end, pause, resume
(run), delete; then SIGTERM. Each step is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version

DEADLINE = 120.0


class FakeLlm(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat completions endpoint: every call answers "Done."."""

    calls = 0
    lock = threading.Lock()

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self._json(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        with FakeLlm.lock:
            FakeLlm.calls += 1
            n = FakeLlm.calls
        created = int(time.time())
        if request.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            chunks = [
                {"role": "assistant", "content": "Done."},
                {},
            ]
            for i, delta in enumerate(chunks):
                chunk = {
                    "id": f"chatcmpl-{n}",
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": request.get("model", "fake"),
                    "choices": [
                        {
                            "index": 0,
                            "delta": delta,
                            "finish_reason": "stop" if i == len(chunks) - 1 else None,
                        }
                    ],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            usage = {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion.chunk",
                "created": created,
                "model": request.get("model", "fake"),
                "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
            }
            self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            return
        self._json(
            200,
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": created,
                "model": request.get("model", "fake"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Done."},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
            },
        )

    def _json(self, status: int, body: dict):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def conversation_request(llm_url: str, working_dir: str, api_key: str = "sk-fake-llm-key") -> dict:
    """The agent-server's `POST /api/conversations` body: an agent without tools on the
    fake LLM at `llm_url` (or a gateway in front of it, with `api_key`), working in
    `working_dir`."""
    return {
        "agent": {
            "kind": "Agent",
            "llm": {
                "model": "openai/fake",
                "base_url": llm_url,
                "api_key": api_key,
                "usage_id": "agent",
                "num_retries": 0,
            },
            "tools": [],
        },
        "workspace": {"kind": "LocalWorkspace", "working_dir": working_dir},
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AgentServer:
    def __init__(self, base: str, key: str, process: subprocess.Popen):
        self.base = base
        self.key = key
        self.process = process

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"content-type": "application/json", "x-session-api-key": self.key},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read()
        except urllib.error.HTTPError as err:
            raise RuntimeError(f"{method} {path}: {err.code} {err.read()[:500]!r}") from err
        return json.loads(text) if text else {}

    def wait_until(self, what: str, check) -> float:
        started = time.monotonic()
        while True:
            try:
                if check():
                    return time.monotonic() - started
            except (urllib.error.URLError, ConnectionError, RuntimeError):
                pass
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the agent-server exited ({self.process.returncode}) while waiting for {what}"
                )
            if time.monotonic() - started > DEADLINE:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.02)

    def status(self, conversation: str) -> str:
        return self.call("GET", f"/api/conversations/{conversation}")["execution_status"]


def lifecycle_kinds(url: str, key: str) -> list[str]:
    """The lifecycle steps Sandgate recorded for a conversation (none while it has no
    record)."""
    request = urllib.request.Request(url, headers={"x-api-key": key})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            record = json.loads(response.read())
    except urllib.error.HTTPError:
        return []
    return [step.get("kind") for step in record.get("sandgate", {}).get("lifecycle", [])]


def webhook_failures(log_path: str) -> list[str]:
    with open(log_path, encoding="utf-8", errors="replace") as log:
        return [
            line.strip()[:300]
            for line in log
            if "webhook" in line.lower()
            and any(word in line.lower() for word in ("fail", "error", "retry", "exception"))
        ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--webhook-base", required=True)
    parser.add_argument("--session-key", required=True)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--log", default=None, help="the agent-server's log file")
    parser.add_argument(
        "--record-url",
        default=None,
        help="the receiver's record of a conversation, `{id}` for its id (Sandgate's "
        "GET /api/v1/conversations/{id}): the delete waits until it shows the resume",
    )
    parser.add_argument("--record-key", default="", help="x-api-key for --record-url")
    args = parser.parse_args()

    llm = ThreadingHTTPServer(("127.0.0.1", 0), FakeLlm)
    threading.Thread(target=llm.serve_forever, daemon=True).start()
    llm_url = f"http://127.0.0.1:{llm.server_address[1]}/v1"

    work = tempfile.mkdtemp(prefix="agent-server-")
    log_path = args.log or os.path.join(work, "agent-server.log")
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OH_", "OPENHANDS_", "LLM_"))
    }
    env.update(
        {
            "OH_SESSION_API_KEYS_0": args.session_key,
            "OH_WEBHOOKS_0_BASE_URL": args.webhook_base,
            "OH_ENABLE_VSCODE": "false",
            "OH_ENABLE_VNC": "false",
            "OPENHANDS_SUPPRESS_BANNER": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
    )
    with open(log_path, "w", encoding="utf-8") as log:
        server_process = subprocess.Popen(
            [sys.executable, "-m", "openhands.agent_server", "--host", "127.0.0.1", "--port", str(port)],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    report: dict = {"agent_server_version": version("openhands-agent-server")}
    try:
        server = AgentServer(f"http://127.0.0.1:{port}", args.session_key, server_process)
        report["startup_seconds"] = server.wait_until(
            "the agent-server to start", lambda: server.call("GET", "/health") is not None
        )
        started = time.monotonic()
        created = server.call("POST", "/api/conversations", conversation_request(llm_url, work))
        conversation = created["id"]
        report["conversation_id"] = conversation
        report["create_seconds"] = time.monotonic() - started

        turns = []
        for turn in range(1, args.turns + 1):
            started = time.monotonic()
            calls_before = FakeLlm.calls
            server.call(
                "POST",
                f"/api/conversations/{conversation}/events",
                {
                    "role": "user",
                    "content": [{"type": "text", "text": f"Turn {turn}: say done."}],
                    "run": True,
                },
            )
            server.wait_until(
                f"turn {turn} to finish",
                lambda: FakeLlm.calls > calls_before
                and server.status(conversation) not in ("running", "idle"),
            )
            turns.append(time.monotonic() - started)
        report["turn_seconds"] = turns
        report["total_turns_seconds"] = sum(turns)
        report["status_after_turns"] = server.status(conversation)

        # A finished conversation does not pause: a message waiting to run makes it idle,
        # and an idle one pauses; running it again resumes it.
        server.call(
            "POST",
            f"/api/conversations/{conversation}/events",
            {"role": "user", "content": [{"type": "text", "text": "One more."}], "run": False},
        )
        started = time.monotonic()
        server.call("POST", f"/api/conversations/{conversation}/pause")
        server.wait_until("the pause", lambda: server.status(conversation) == "paused")
        report["pause_seconds"] = time.monotonic() - started

        started = time.monotonic()
        calls_before = FakeLlm.calls
        server.call("POST", f"/api/conversations/{conversation}/run")
        server.wait_until(
            "the resumed run to finish",
            lambda: FakeLlm.calls > calls_before
            and server.status(conversation) not in ("paused", "running", "idle"),
        )
        report["resume_seconds"] = time.monotonic() - started

        # The agent-server posts the resumed run's update in the background: under load it
        # can leave after the delete's. The platform deletes a conversation long after its
        # last run; so does this driver, once the receiver has the resume.
        if args.record_url:
            url = args.record_url.replace("{id}", conversation)
            server.wait_until(
                "the receiver to record the resume",
                lambda: "resume" in lifecycle_kinds(url, args.record_key),
            )

        started = time.monotonic()
        server.call("DELETE", f"/api/conversations/{conversation}")
        report["delete_seconds"] = time.monotonic() - started
    finally:
        started = time.monotonic()
        server_process.send_signal(signal.SIGTERM)
        try:
            server_process.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            server_process.kill()
            server_process.wait()
        report["shutdown_seconds"] = time.monotonic() - started
        report["llm_calls"] = FakeLlm.calls
        report["webhook_failures"] = webhook_failures(log_path)
        llm.shutdown()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
