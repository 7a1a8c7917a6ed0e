"""A loopback proxy in front of the suite's PostgreSQL server that cuts a connection at
COMMIT, to put a write unit's COMMIT exactly where a restart or a network fault would:

* ``proxy.cut("after")``: the next COMMIT is handed to the server, which commits; its
  answer is swallowed and the client's connection closed (the client cannot know);
* ``proxy.cut("before")``: the next COMMIT is dropped and the connection closed (the
  server sees its client go and rolls the transaction back).

``proxy.refuse(seconds)`` turns new connections away for a while (the server is
unreachable). ``url`` is the database's URL through the proxy (TCP on 127.0.0.1, to the
server's Unix socket). The frontend protocol is framed just enough to find COMMIT:
psycopg sends it as an extended-protocol Parse message (``P``) whose text is COMMIT.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import sqlalchemy as sa


class CuttingProxy:
    def __init__(self, server_socket: str, url: str) -> None:
        self.server_socket = server_socket
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        target = sa.engine.make_url(url)
        query = {k: v for k, v in target.query.items() if k not in ("host", "port")}
        query.update(sslmode="disable", gssencmode="disable")
        self.url = target.set(host="127.0.0.1", port=port, query=query) \
            .render_as_string(hide_password=False)
        self._armed: str | None = None
        self._refuse_until = 0.0
        self._lock = threading.Lock()
        self.cuts: list[str] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    # ------------------------------------------------------------------ controls

    def cut(self, where: str) -> None:
        assert where in ("before", "after")
        with self._lock:
            self._armed = where

    def refuse(self, seconds: float) -> None:
        self._refuse_until = time.monotonic() + seconds

    def close(self) -> None:
        self._closed = True
        self.listener.close()

    # ------------------------------------------------------------------ pumping

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if time.monotonic() < self._refuse_until:
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX)
            server.connect(self.server_socket)
            link = _Link(self, client, server)
            threading.Thread(target=link.upstream, daemon=True).start()
            threading.Thread(target=link.downstream, daemon=True).start()

    def _take_cut(self) -> str | None:
        with self._lock:
            where, self._armed = self._armed, None
        if where is not None:
            self.cuts.append(where)
        return where


class _Link:
    """One client connection: client -> server parsed into messages, server -> client
    copied (or swallowed once a COMMIT was cut after it reached the server)."""

    def __init__(self, proxy: CuttingProxy, client: socket.socket, server: socket.socket):
        self.proxy, self.client, self.server = proxy, client, server
        self.swallow = threading.Event()
        self.done = threading.Event()

    def _close(self) -> None:
        self.done.set()
        for s in (self.client, self.server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def upstream(self) -> None:
        buffer, started = b"", False
        try:
            while not self.done.is_set():
                data = self.client.recv(65536)
                if not data:
                    break
                buffer += data
                out = b""
                while True:
                    if not started:  # the startup message: length, no type byte
                        if len(buffer) < 4:
                            break
                        (n,) = struct.unpack("!I", buffer[:4])
                        if len(buffer) < n:
                            break
                        out, buffer, started = out + buffer[:n], buffer[n:], True
                        continue
                    if len(buffer) < 5:
                        break
                    (n,) = struct.unpack("!I", buffer[1:5])
                    if len(buffer) < n + 1:
                        break
                    message, buffer = buffer[:n + 1], buffer[n + 1:]
                    if message[:1] in (b"P", b"Q") and b"\x00COMMIT\x00" in message \
                            or message[:1] == b"Q" and message[5:].startswith(b"COMMIT\x00"):
                        where = self.proxy._take_cut()
                        if where == "before":
                            self.server.sendall(out)
                            self._close()
                            return
                        if where == "after":
                            self.swallow.set()
                            self.server.sendall(out + message + buffer)
                            self._forward_rest()  # Bind, Execute, Sync
                            return
                    out += message
                if out:
                    self.server.sendall(out)
        except OSError:
            pass
        self._close()

    def _forward_rest(self) -> None:
        try:
            while not self.done.is_set():
                data = self.client.recv(65536)
                if not data:
                    return
                self.server.sendall(data)
        except OSError:
            pass

    def downstream(self) -> None:
        answer = b""
        try:
            while not self.done.is_set():
                data = self.server.recv(65536)
                if not data:
                    break
                if self.swallow.is_set():
                    # the answer to the cut COMMIT, swallowed; once the server is ready
                    # for the next query (ReadyForQuery) it has committed: cut the link
                    answer += data
                    if b"Z\x00\x00\x00\x05" in answer:
                        break
                    continue
                self.client.sendall(data)
        except OSError:
            pass
        self._close()
