"""A loopback TCP proxy that adds a fixed delay each way: a network between client and
server without any traffic leaving the machine.

    python benchmarks/_delay_proxy.py --target 127.0.0.1:5432 --delay-ms 0.5
    # prints "listening 127.0.0.1 PORT" once it accepts connections

Every chunk read from one side is written to the other ``--delay-ms`` after it was
read, in order, so a request and its answer each take the delay on top of the
server's time (0.5 ms each way: ~1 ms round trip, a client and a server in one data
centre), and a multi-chunk answer streams as it would over a link with that latency
(the chunks are not delayed one after the other). Nothing is parsed: any TCP protocol
passes.

asyncio's default selector (epoll) rounds every timeout up to a whole millisecond,
which would make a 0.5 ms delay ~1 ms; the proxy runs on ``select()``, whose timeout
has microsecond resolution (fine for the few dozen sockets a benchmark opens).
It runs in a process of its own (``start()``), so its CPU is not taken from the
benchmark's processes' share of the GIL, and stops when its parent's pipe closes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

CHUNK = 256 * 1024


class _Lateness:
    """How late the loop's timers fire (an average over the last ~50), so that a chunk
    is written when it is due rather than that much later: on this machine a timer
    fired ~0.13 ms after its time, which would add a quarter to a 0.5 ms delay."""

    value = 0.0

    @classmethod
    def observe(cls, late: float) -> None:
        cls.value += (min(late, 0.002) - cls.value) / 50


class _Pump:
    """One direction of one connection: read, hold each chunk for ``delay``, write."""

    def __init__(self, loop, reader, writer, delay: float) -> None:
        self.loop, self.reader, self.writer, self.delay = loop, reader, writer, delay
        self.queue: collections.deque = collections.deque()
        self.timer = None
        self.eof = False

    async def run(self) -> None:
        try:
            while True:
                data = await self.reader.read(CHUNK)
                if not data:
                    break
                # the loop's clock (loop.time()) is time.monotonic()
                self.queue.append((time.monotonic() + self.delay, data))
                if self.timer is None:
                    self._schedule()
                # keep memory bounded if the other side stops reading
                if self.writer.transport.get_write_buffer_size() > 8 * CHUNK:
                    await self.writer.drain()
        except (ConnectionError, OSError):
            pass
        self.eof = True
        if self.timer is None:
            self._close()

    def _schedule(self) -> None:
        due = self.queue[0][0]
        self.timer = self.loop.call_at(due - _Lateness.value, self._flush, due)

    def _flush(self, due: float) -> None:
        self.timer = None
        now = time.monotonic()
        _Lateness.observe(now - (due - _Lateness.value))
        try:
            # a chunk due within the timers' lateness goes now: waiting for it would
            # make it later than that
            while self.queue and self.queue[0][0] <= now + _Lateness.value:
                self.writer.write(self.queue.popleft()[1])
        except (ConnectionError, OSError, RuntimeError):
            self.queue.clear()
        if self.queue:
            self._schedule()
        elif self.eof:
            self._close()

    def _close(self) -> None:
        with contextlib.suppress(Exception):
            if self.writer.can_write_eof():
                self.writer.write_eof()
            else:
                self.writer.close()


async def _serve(listen_host: str, listen_port: int, target: tuple[str, int], delay: float,
                 ready) -> None:
    loop = asyncio.get_running_loop()

    async def handle(client_reader, client_writer) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*target)
        except OSError:
            client_writer.close()
            return
        for w in (client_writer, server_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        up = _Pump(loop, client_reader, server_writer, delay)
        down = _Pump(loop, server_reader, client_writer, delay)
        await asyncio.gather(up.run(), down.run(), return_exceptions=True)
        for w in (client_writer, server_writer):
            with contextlib.suppress(Exception):
                w.close()

    server = await asyncio.start_server(handle, listen_host, listen_port, backlog=256)
    port = server.sockets[0].getsockname()[1]
    ready(port)
    async with server:
        await server.serve_forever()


def serve(listen: str, target: str, delay_ms: float) -> None:
    """Run the proxy in this process until it is killed (``--target HOST:PORT``)."""
    host, _, port = listen.rpartition(":")
    thost, _, tport = target.rpartition(":")
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    asyncio.set_event_loop(loop)

    def ready(bound: int) -> None:
        print(f"listening {host} {bound}", flush=True)

    loop.run_until_complete(_serve(host, int(port or 0), (thost, int(tport)),
                                   delay_ms / 1e3, ready))


@contextlib.contextmanager
def start(target_host: str, target_port: int, delay_ms: float) -> Iterator[int]:
    """Run the proxy in a child process for the block; yields the port it listens on
    (127.0.0.1). ``delay_ms`` is per direction."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--listen", "127.0.0.1:0",
         "--target", f"{target_host}:{target_port}", "--delay-ms", str(delay_ms)],
        stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline().split()
        if len(line) != 3 or line[0] != "listening":
            raise RuntimeError(f"the delay proxy did not start (exit {proc.poll()})")
        yield int(line[2])
    finally:
        proc.kill()
        proc.wait()


def measure_rtt(port: int, target_url_for_port, samples: int = 200) -> float:
    """Median seconds of ``SELECT 1`` through the proxy (a round trip, with the server's
    own time): what the benchmark reports as the latency it added."""
    import statistics

    import psycopg

    with psycopg.connect(target_url_for_port(port), autocommit=True) as conn:
        for _ in range(20):
            conn.execute("SELECT 1")
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            conn.execute("SELECT 1")
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--target", required=True, help="HOST:PORT of the server")
    p.add_argument("--delay-ms", type=float, default=0.5, help="added each way")
    args = p.parse_args(argv)
    # stop with the parent: its end closes our stdin
    import threading

    def watch() -> None:
        with contextlib.suppress(Exception):
            sys.stdin.read()
        import os

        os._exit(0)

    if not sys.stdin.isatty():
        threading.Thread(target=watch, daemon=True).start()
    serve(args.listen, args.target, args.delay_ms)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
