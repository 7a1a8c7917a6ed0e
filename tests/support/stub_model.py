"""A loopback stub of an OpenAI-compatible model server, for agent turns without a model.

It listens on 127.0.0.1 (an ephemeral port), answers ``/v1/models`` and
``/v1/chat/completions`` (plain JSON, or server-sent events when the request streams)
with a fixed reply, and records every completion request it got, so a test can read what
the agent offered the model: the tool names and the system prompt. Requests are kept per
path prefix (``http://127.0.0.1:PORT/<lane>/v1``), so several agents (ours, upstream, ours
on PostgreSQL) can talk to one stub side by side and be told apart.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLY = "Stub reply: noted."
MODEL = "stub-model"


class StubModel:
    def __init__(self, reply: str = REPLY):
        self.reply = reply
        self.requests: dict[str, list[dict]] = {}
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _lane(self) -> tuple[str, str]:
                parts = self.path.split("?", 1)[0].strip("/").split("/")
                if len(parts) >= 2 and parts[1] == "v1":
                    return parts[0], "/".join(parts[2:])
                return "", "/".join(parts[1:]) if parts and parts[0] == "v1" else "/".join(parts)

            def _send(self, status: int, body: bytes, ctype: str = "application/json"):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                lane, rest = self._lane()
                if rest == "models":
                    body = {"object": "list", "data": [{"id": MODEL, "object": "model",
                                                        "created": 0, "owned_by": "stub"}]}
                    return self._send(200, json.dumps(body).encode())
                self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self):
                lane, rest = self._lane()
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    payload = json.loads(raw or b"{}")
                except ValueError:
                    payload = {}
                if rest != "chat/completions":
                    return self._send(404, b'{"error": {"message": "not found"}}')
                with stub._lock:
                    stub.requests.setdefault(lane, []).append(payload)
                created = int(time.time())
                usage = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
                if payload.get("stream"):
                    chunks = [
                        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": stub.reply},
                                      "finish_reason": None}]},
                        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage},
                    ]
                    body = b"".join(
                        b"data: " + json.dumps({"id": "chatcmpl-stub", "object": "chat.completion.chunk",
                                                "created": created, "model": MODEL, **c}).encode() + b"\n\n"
                        for c in chunks) + b"data: [DONE]\n\n"
                    return self._send(200, body, "text/event-stream")
                body = {"id": "chatcmpl-stub", "object": "chat.completion", "created": created,
                        "model": MODEL, "usage": usage,
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": stub.reply}}]}
                self._send(200, json.dumps(body).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def base_url(self, lane: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{lane}/v1"

    def lane(self, lane: str) -> list[dict]:
        with self._lock:
            return list(self.requests.get(lane, []))

    def __enter__(self) -> "StubModel":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def tool_names(request: dict) -> list[str]:
    return sorted(t.get("function", {}).get("name", "") for t in request.get("tools") or [])


def system_prompt(request: dict) -> str:
    return "\n".join(m.get("content") or "" for m in request.get("messages", [])
                     if m.get("role") == "system" and isinstance(m.get("content"), str))


if __name__ == "__main__":  # run one by hand: prints its URL, serves until Ctrl-C
    with StubModel() as stub:
        print(stub.base_url("manual"), flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
