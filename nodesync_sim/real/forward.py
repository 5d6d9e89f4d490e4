"""Relays TCP connections from an address in one network namespace to one in another.

A cluster whose nodes have network namespaces of their own still runs its control plane, its
Prometheus and the tests on the machine's loopback. One relay process per cluster joins the two
sides without giving the machine's own network an address:

    python -m nodesync_sim.real.forward \\
        --relay /proc/<node-holder>/ns/net,127.0.0.1:6443=/proc/self/ns/net,127.0.0.1:38211 ...

Each ``--relay`` is ``LISTEN_NS,HOST:PORT=CONNECT_NS,HOST:PORT``: a listening socket made in the
first namespace, and for every connection it accepts, a connection made in the second one; bytes
are copied both ways until either side closes. A socket belongs to the namespace its creator was
in when it was made, so the relay enters a namespace (``setns``) only around ``socket()``.

The relay prints ``listening`` once every socket listens, and ends on SIGTERM or when its stdin
closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nodesync_sim.real.process import ChildProcess

CLONE_NEWNET = 0x40000000
_CHUNK = 65536


@dataclass(frozen=True)
class Relay:
    listen_ns: str
    listen: tuple[str, int]
    connect_ns: str
    connect: tuple[str, int]

    @classmethod
    def parse(cls, text: str) -> Relay:
        try:
            left, right = text.split("=")
            listen_ns, listen = left.rsplit(",", 1)
            connect_ns, connect = right.rsplit(",", 1)
            return cls(listen_ns, _address(listen), connect_ns, _address(connect))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"--relay {text!r}: want LISTEN_NS,HOST:PORT=CONNECT_NS,HOST:PORT"
            ) from exc


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


class Namespaces:
    """Open network namespaces, entered by file descriptor; the relay's own is kept to return."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fds: dict[str, int] = {}
        self._own = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

    def _fd(self, path: str) -> int:
        if path not in self._fds:
            self._fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return self._fds[path]

    def _enter(self, fd: int) -> None:
        if self._libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns: {os.strerror(errno)}")

    def socket(self, path: str) -> socket.socket:
        """A non-blocking TCP socket made in the namespace at ``path``."""
        self._enter(self._fd(path))
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            self._enter(self._own)
        sock.setblocking(False)
        return sock


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        if writer.can_write_eof():
            writer.write_eof()


async def _serve(relay: Relay, namespaces: Namespaces) -> asyncio.Server:
    loop = asyncio.get_running_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = namespaces.socket(relay.connect_ns)
        try:
            await loop.sock_connect(upstream, relay.connect)
            up_reader, up_writer = await asyncio.open_connection(sock=upstream)
        except OSError:
            upstream.close()
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    listener = namespaces.socket(relay.listen_ns)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(relay.listen)
    return await asyncio.start_server(handle, sock=listener)


async def run(relays: list[Relay]) -> None:
    namespaces = Namespaces()
    servers = [await _serve(relay, namespaces) for relay in relays]
    print("listening", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not os.read(0, 1) else None)
    await stop.wait()
    for server in servers:
        server.close()


def start_relay(relays: Sequence[str], log_path: Path, *, name: str = "relay") -> ChildProcess:
    """This program as a child process with ``relays``; returns once it listens."""
    argv = [sys.executable, "-m", __name__]
    for relay in relays:
        argv += ["--relay", relay]
    proc = ChildProcess(argv, log_path=log_path, name=name, stdin_pipe=True)
    proc.start()
    try:
        proc.wait_until(lambda: "listening" in log_path.read_text(), timeout=10.0, what="listening")
    except BaseException:
        proc.stop()  # its stdin pipe closed too, not left to the garbage collector
        raise
    return proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodesync_sim.real.forward")
    parser.add_argument("--relay", type=Relay.parse, action="append", required=True)
    args = parser.parse_args(argv)
    try:
        asyncio.run(run(args.relay))
    except OSError as exc:
        print(f"forward: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
