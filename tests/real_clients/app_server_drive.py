"""The real app server on Sandgate, driven only through its REST API as its web UI does.

openhands-ai 1.11.0's app server process, unchanged (`uvicorn openhands.app_server.app:app`),
with `RUNTIME=remote` on Sandgate's runtime API, its sandbox specs from Sandgate's warm
runtime configurations (`DynamicRemoteSandboxSpecServiceInjector`), and its users' LLM
behind Sandgate's model gateway with a virtual key. Sandgate runs each sandbox on its
`process` driver: a real agent-server (the app server's own release), which posts its
events to the app server (`OH_WEBHOOKS_0_BASE_URL`, set by the app server).

This script plays the operator (the gateway's model and a virtual key, with the master
key; the pool, defined and then filled by rewriting the warm runtimes file Sandgate
reloads, which starts empty) and the user:

1. a conversation while the pool is empty (count 0): a cold start;
2. the pool filled (count 1), a second conversation: a warm claim of a sandbox whose
   environment differs from the start's (the pool's own variables, no `WORKER_*`, no
   webhooks: the agent-server takes the start's at claim);
3. a second message on it; pause its sandbox; a message refused while paused; resume;
   a message answered after the resume (its secrets, the LLM key among them, decrypted
   with the same `OH_SECRET_KEY`);
4. what Sandgate joined: each conversation in its catalog (the sandboxes post to Sandgate
   too, as a second webhook), each sandbox's start timeline with its first webhook and
   first LLM call;
5. delete both conversations; stop the app server.

Prints one JSON object per step on stdout: {"step": ..., ...}; the Rust test
(tests/e2e/app_server.rs) asserts them. Exits non-zero when a step raises.

With `--bench N`, N rounds of a cold and a warm conversation instead, each to its first
answer, with the seconds Sandgate spent on their `/start` (benches/app_server.rs).

Usage: app_server_drive.py --url SANDGATE --api-key RUNTIME_KEY --master-key KEY
           --warm-runtimes-file FILE --pool NAME [--bench N]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer

import httpx

from agent_server_drive import FakeLlm
from sandbox_env import OFFLINE_AGENT_SERVER

DEADLINE = 180.0
# How long after the app server says a resumed sandbox runs its agent-server may take to
# accept a message, and after a conversation's delete Sandgate may take to stop its
# sandbox: past them the step reports what it saw (each attempt's answer, `false`) and the
# Rust test fails on it.
MESSAGE_AFTER_RESUME = DEADLINE
STOP_AFTER_DELETE = DEADLINE
MODEL = "app-server-model"
INJECTOR = (
    "openhands.app_server.sandbox.dynamic_remote_sandbox_spec_service."
    "DynamicRemoteSandboxSpecServiceInjector"
)


def emit(step: str, **fields) -> None:
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


def until(what: str, check, deadline: float = DEADLINE):
    """Polls `check` until it returns something truthy; that value."""
    value = within(check, deadline)
    if not value:
        raise RuntimeError(f"timed out waiting for {what}")
    return value


def within(check, deadline: float):
    """Polls `check` until it returns something truthy, for `deadline` seconds at most;
    that value, or the last (falsy) one: the caller reports it, the Rust test judges it."""
    started = time.monotonic()
    while True:
        value = check()
        if value or time.monotonic() - started > deadline:
            return value
        time.sleep(0.1)


class AppServer:
    """The app server process on a socket bound here (port 0), logging to `log`."""

    def __init__(self, sandgate: str, api_key: str, pool: str, state: str):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        self.log = open(os.path.join(state, "app-server.log"), "w")
        environment = {
            **os.environ,
            "RUNTIME": "remote",
            "SANDBOX_REMOTE_RUNTIME_API_URL": sandgate,
            "SANDBOX_API_KEY": api_key,
            "OH_SANDBOX_SPEC_KIND": INJECTOR,
            "OH_SANDBOX_SPEC_DEFAULT_SPEC_NAME": pool,
            "OH_PERSISTENCE_DIR": os.path.join(state, "persistence"),
            # Where its sandboxes post their events back: the app server itself.
            "OH_WEB_URL": self.url,
            "HOME": state,
            # Offline: LiteLLM's cost map from the package, not the network.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "openhands.app_server.app:app",
             "--fd", str(listener.fileno())],
            pass_fds=(listener.fileno(),),
            env=environment,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        listener.close()
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the app server exited ({self.process.returncode})")
        try:
            return self.client.get("/api/v1/settings").status_code < 500
        except httpx.TransportError:
            return False

    def stop(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def tail(self) -> str:
        self.log.flush()
        with open(self.log.name) as log:
            return log.read()[-6000:]


def text(message: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": message}]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--master-key", required=True)
    ap.add_argument("--warm-runtimes-file", required=True)
    ap.add_argument("--pool", required=True)
    ap.add_argument("--bench", type=int, default=0,
                    help="time this many rounds of a cold and a warm conversation instead")
    args = ap.parse_args()

    llm = ThreadingHTTPServer(("127.0.0.1", 0), FakeLlm)
    threading.Thread(target=llm.serve_forever, daemon=True).start()
    llm_url = f"http://127.0.0.1:{llm.server_address[1]}/v1"
    sandgate = httpx.Client(base_url=args.url, timeout=60)

    # The operator: the gateway's model, and a virtual key for the app server's users.
    master = {"authorization": f"Bearer {args.master_key}"}
    added = sandgate.post("/model/new", headers=master, json={
        "model_name": MODEL,
        "gateway_params": {"model": "openai/fake", "api_base": llm_url, "api_key": "sk-up"},
    })
    added.raise_for_status()
    generated = sandgate.post("/key/generate", headers=master, json={"models": [MODEL]})
    generated.raise_for_status()
    virtual_key = generated.json()["key"]

    operator = Session(None, sandgate, args)
    operator.define_pool(args.pool, args.url)
    with tempfile.TemporaryDirectory(prefix="app-server-") as state:
        app = AppServer(args.url, args.api_key, args.pool, state)
        try:
            until("the app server to answer", app.ready)
            emit("app_server", url=app.url)
            session = Session(app, sandgate, args)
            save_settings(session, args.url, virtual_key)
            if args.bench:
                bench(session, args.bench)
            else:
                scenario(session)
        except BaseException:
            print(app.tail(), file=sys.stderr)
            raise
        finally:
            emit("app_server_stopped", exit_code=app.stop())


class Session:
    """The app server's user, and the operator's view of Sandgate, over one run."""

    def __init__(self, app: AppServer | None, sandgate: httpx.Client, args):
        self.client = app.client if app else None
        self.sandgate = sandgate
        self.runtime = {"x-api-key": args.api_key}
        self.warm_runtimes_file = args.warm_runtimes_file

    def agent_messages(self, conversation: str) -> int:
        answer = self.client.get(
            f"/api/v1/conversation/{conversation}/events/search", params={"limit": 100}
        )
        if answer.status_code != 200:
            return 0
        return sum(
            1 for event in answer.json().get("items", [])
            if event.get("kind") == "MessageEvent" and event.get("source") == "agent"
        )

    def answered(self, conversation: str, count: int, what: str) -> None:
        until(what, lambda: self.agent_messages(conversation) >= count or None)

    def start(self, message: str) -> dict:
        """Starts a conversation with `message`: its ids, the seconds to its first answer
        as the user waits for it, and the seconds Sandgate spent on its `/start`."""
        spent = self.start_seconds()
        began = time.monotonic()
        task = self.client.post(
            "/api/v1/app-conversations", json={"initial_message": text(message)}
        )
        task.raise_for_status()
        task_id = task.json()["id"]

        def ready():
            found = self.client.get(
                "/api/v1/app-conversations/start-tasks", params={"ids": task_id}
            ).json()[0]
            if found["status"] == "ERROR":
                raise RuntimeError(f"the conversation failed to start: {found['detail']}")
            return found if found["status"] == "READY" else None

        found = until("the conversation to start", ready)
        conversation = found["app_conversation_id"]
        self.answered(conversation, 1, "the first answer")
        return {
            "conversation": conversation,
            "sandbox": found["sandbox_id"],
            "first_answer_s": time.monotonic() - began,
            "sandgate_start_s": self.start_seconds() - spent,
        }

    def start_seconds(self) -> float:
        """The seconds Sandgate's `/start` answers took so far (its metrics)."""
        metrics = self.sandgate.get("/metrics").text
        prefix = 'sandgate_http_request_duration_seconds_sum{route="/start",method="POST"} '
        return sum(float(line[len(prefix):]) for line in metrics.splitlines()
                   if line.startswith(prefix))

    def pools(self) -> dict:
        return self.sandgate.get("/api/warm-runtime-pools", headers=self.runtime).json()

    def session(self, sandbox: str) -> dict:
        found = self.sandgate.get(f"/sessions/{sandbox}", headers=self.runtime)
        return found.json() if found.status_code == 200 else {"status_code": found.status_code}

    def pool_size(self, count: int) -> None:
        """The operator sets the pool's size (Sandgate reloads the file), and waits until
        the pool is that size."""
        self.edit_pool(lambda warm_runtimes: warm_runtimes.update(count=count))

        def sized():
            pool = self.pools()["pools"][0]
            return pool["ready"] == count and pool["starting"] == 0

        until(f"the pool to hold {count}", sized)

    def define_pool(self, name: str, url: str) -> None:
        """The operator defines the pool the app server's specs come from (Sandgate reloads
        the file), empty for now, and waits until Sandgate serves it: dormant
        agent-servers of this app server's release, whose environment is not the start's
        (the app server adds `WORKER_*` and its own webhook; the pool has a variable of its
        own), matching the start on what shapes the process, as the chart's default pool
        does. Its sandboxes post their conversations to Sandgate too, beside the app
        server (`OH_WEBHOOKS_1_*`; the app server sets `_0_` to itself)."""
        receiver = f"{url}/api/v1/webhooks"
        pool = {
            "name": name,
            "image": "local/agent-server",
            "working_dir": "/workspace",
            "run_as_user": 10001,
            "run_as_group": 10001,
            "command": [sys.executable, "-m", "openhands.agent_server",
                        "--host", "127.0.0.1", "--port", "60000"],
            "environment": {
                **OFFLINE_AGENT_SERVER,
                "OH_DEFERRED_INIT": "true",
                "ONLY_IN_THE_POOL": "yes",
                "OH_WEBHOOKS_1_BASE_URL": receiver,
            },
        }
        self.edit_pool(lambda warm_runtimes: warm_runtimes.update(count=0, configs=[pool]))

        def served():
            configs = self.sandgate.get(
                "/api/warm-runtime-configs", headers=self.runtime
            ).json()["configs"]
            return [config["name"] for config in configs] == [name]

        until("Sandgate to serve the pool", served)

    def edit_pool(self, edit) -> None:
        try:
            with open(self.warm_runtimes_file) as file:
                warm_runtimes = json.load(file)
        except (FileNotFoundError, json.JSONDecodeError):
            warm_runtimes = {}
        edit(warm_runtimes)
        with open(self.warm_runtimes_file, "w") as file:
            json.dump(warm_runtimes, file)

    def joined(self, started: dict) -> dict:
        """What Sandgate holds of a conversation: its record in the catalog (from the
        sandbox's webhooks), and its sandbox's record, once the sandbox's timeline has its
        first webhook and first LLM call."""

        def timed():
            record = self.session(started["sandbox"])
            timeline = record.get("timeline") or {}
            if "first_webhook_at_ms" in timeline and "first_llm_call_at_ms" in timeline:
                return record
            return None

        record = until("the sandbox's timeline", timed)
        catalog = self.sandgate.get(
            f"/api/v1/conversations/{started['conversation']}", headers=self.runtime
        )
        return {"sandbox": record, "catalog_status": catalog.status_code,
                "catalog": catalog.json() if catalog.status_code == 200 else None}

    def delete(self, started: dict) -> tuple[int, bool]:
        """Deletes a conversation: the app server's answer, and whether Sandgate stopped
        its sandbox within STOP_AFTER_DELETE seconds."""
        status = self.client.delete(
            f"/api/v1/app-conversations/{started['conversation']}"
        ).status_code

        def stopped():
            record = self.session(started["sandbox"])
            return record.get("status_code") == 404 or record.get("status") == "stopped"

        return status, bool(within(stopped, STOP_AFTER_DELETE))


def save_settings(session: Session, url: str, virtual_key: str) -> None:
    """The user's settings, as the web UI saves them: the LLM behind Sandgate's gateway."""
    saved = session.client.post("/api/v1/settings", json={"agent_settings_diff": {"llm": {
        "model": f"openai/{MODEL}",
        "base_url": f"{url}/v1",
        "api_key": virtual_key,
    }}})
    saved.raise_for_status()


def scenario(session: Session) -> None:
    """Cold, warm, a second message, pause, refused, resume, answered, delete."""
    cold = session.start("First conversation: say done.")
    emit("cold", **cold, record=session.session(cold["sandbox"]), pools=session.pools())

    session.pool_size(1)
    warm = session.start("Second conversation: say done.")
    emit("warm", **warm, record=session.session(warm["sandbox"]), pools=session.pools())
    conversation, sandbox = warm["conversation"], warm["sandbox"]
    client = session.client

    def send(message: str) -> httpx.Response:
        return client.post(
            f"/api/v1/app-conversations/{conversation}/send-message", json=text(message)
        )

    def sandbox_status() -> str:
        found = client.get("/api/v1/sandboxes", params={"id": sandbox}).json()[0]
        return found["status"] if found else "MISSING"

    second = send("A second message: say done.")
    second.raise_for_status()
    session.answered(conversation, 2, "the second answer")
    emit("second_message", status=second.status_code,
         answers=session.agent_messages(conversation))

    paused = client.post(f"/api/v1/sandboxes/{sandbox}/pause")
    until("the sandbox to pause", lambda: sandbox_status() == "PAUSED")
    refused = send("While paused: say done.")
    emit("paused", status=paused.status_code, refused=refused.status_code,
         record=session.session(sandbox))

    resumed = client.post(f"/api/v1/sandboxes/{sandbox}/resume")
    until("the sandbox to run again", lambda: sandbox_status() == "RUNNING")
    before = session.agent_messages(conversation)

    # Once the app server says the sandbox runs, its agent-server takes a message within
    # MESSAGE_AFTER_RESUME seconds; each attempt's answer is reported, the test judges.
    attempts = []

    def taken():
        attempts.append(send("After the resume: say done.").status_code)
        return attempts[-1] == 200

    if within(taken, MESSAGE_AFTER_RESUME):
        session.answered(conversation, before + 1, "the answer after the resume")
    info = client.get("/api/v1/app-conversations", params={"ids": conversation}).json()[0]
    emit("resumed", status=resumed.status_code, message=attempts[-1], attempts=attempts,
         answers=session.agent_messages(conversation),
         execution_status=info.get("execution_status"), record=session.session(sandbox))

    emit("joined", cold=session.joined(cold), warm=session.joined(warm))

    deleted = {}
    stopped = {}
    for started in (cold, warm):
        deleted[started["conversation"]], stopped[started["sandbox"]] = session.delete(started)
    emit("deleted", conversations=deleted, sandboxes_stopped=stopped)


def bench(session: Session, rounds: int) -> None:
    """`rounds` pairs of conversations, each to its first answer: one cold (the pool
    empty), one warm (the pool full); each round's figures as a step."""
    for index in range(rounds):
        session.pool_size(0)
        cold = session.start("A cold conversation: say done.")
        session.pool_size(1)
        warm = session.start("A warm conversation: say done.")
        for started in (cold, warm):
            session.delete(started)
        emit("round", index=index, cold=cold, warm=warm,
             warm_pool=session.session(warm["sandbox"]).get("pool"))


if __name__ == "__main__":
    main()
