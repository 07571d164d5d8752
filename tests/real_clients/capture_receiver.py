"""A webhook receiver that answers every POST `{"success": true}` at once: the baseline
the agent-server's timings against Sandgate are compared with, and, with `--save DIR`, a
recorder of what the agent-server posts (one numbered JSON file per body, named after
its path: `0003-events.json`, `0004-conversations.json`).

Prints `listening on http://127.0.0.1:PORT` on its first line, then serves until killed.
"""

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SAVE_DIR = None
COUNTER = [0]
LOCK = threading.Lock()


class Receiver(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        if SAVE_DIR:
            with LOCK:
                COUNTER[0] += 1
                number = COUNTER[0]
            kind = "events" if "/events/" in self.path else self.path.rstrip("/").rsplit("/", 1)[-1]
            with open(os.path.join(SAVE_DIR, f"{number:04d}-{kind}.json"), "wb") as out:
                out.write(body)
        data = json.dumps({"success": True}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main():
    global SAVE_DIR
    parser = argparse.ArgumentParser()
    parser.add_argument("--save", default=None)
    args = parser.parse_args()
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        SAVE_DIR = args.save
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
