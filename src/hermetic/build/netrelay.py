"""Relay TCP connections across the build's network namespace boundary, to declared addresses only.

A build runs in a fresh network namespace (sandbox.py): no interface, not even loopback, so it reaches
nothing. A distributed build must reach its compile hosts and nothing else. Two relays do that:

- outside, in hermetic's own process (`Outside`): one Unix socket per compile host, each connected to
  that one host:port and counted (connections, refused connects, bytes);
- inside, as the build step's first process (`python netrelay.py --listen PORT=SOCKET … -- COMMAND`):
  loopback brought up in the namespace, each 127.0.0.1:PORT relayed to its Unix socket, then COMMAND.

A Unix socket is reached through the file system, which the namespace does not cut off; the
namespace's loopback holds only the relay's ports. So the build reaches exactly the declared hosts.

Standard library only, and no imports from hermetic: inside the namespace this file runs as a script
(the build's environment has no PYTHONPATH).
"""

from __future__ import annotations

import fcntl
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

_BUF = 1 << 16
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


@dataclass
class Counts:
    """What went through one relayed address."""

    connections: int = 0  # connections relayed to the address
    refused: int = 0  # connections the address did not accept (down, refused, timed out)
    sent: int = 0  # bytes to the address
    received: int = 0  # bytes from it
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **n: int) -> None:
        with self.lock:
            for k, v in n.items():
                setattr(self, k, getattr(self, k) + v)


def _pump(src: socket.socket, dst: socket.socket, count: Callable[[int], None]) -> None:
    """Copy one direction until EOF, then pass the half-close on."""
    try:
        while True:
            data = src.recv(_BUF)
            if not data:
                break
            count(len(data))  # before passing it on: whoever reads the answer may read the counts next
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _join(a: socket.socket, b: socket.socket, counts: Counts) -> None:
    """Relay a <-> b (a: the accepted side) until both directions end."""
    back = threading.Thread(target=_pump, args=(b, a, lambda n: counts.add(received=n)), daemon=True)
    back.start()
    _pump(a, b, lambda n: counts.add(sent=n))
    back.join()
    a.close()
    b.close()


class _Listener:
    """Accept on `server`; connect each client with `connect()` and relay."""

    def __init__(self, server: socket.socket, connect: Callable[[], socket.socket], counts: Counts) -> None:
        self.server, self.connect, self.counts = server, connect, counts
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = self.connect()
        except OSError:
            # Closing at once makes the far side's compile fail to distribute: distcc then compiles locally.
            self.counts.add(refused=1)
            client.close()
            return
        self.counts.add(connections=1)
        _join(client, upstream, self.counts)

    def close(self) -> None:
        try:
            self.server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.server.close()


class Outside:
    """Unix socket -> TCP host:port, one listener per declared address; a context manager."""

    def __init__(self, routes: Sequence[tuple[str, str, int]], timeout: float = 5.0) -> None:
        self.routes = tuple(routes)  # (unix socket path, host, port)
        self.timeout = timeout
        self.counts = {path: Counts() for path, _, _ in self.routes}
        self._listeners: list[_Listener] = []

    def __enter__(self) -> Outside:
        for path, host, port in self.routes:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(path)
            server.listen(64)

            def connect(host: str = host, port: int = port) -> socket.socket:
                s = socket.create_connection((host, port), timeout=self.timeout)
                s.settimeout(None)  # distcc has its own I/O timeouts
                return s

            self._listeners.append(_Listener(server, connect, self.counts[path]))
        return self

    def __exit__(self, *exc: object) -> None:
        for listener in self._listeners:
            listener.close()


def loopback_up() -> None:
    """`ip link set lo up`, without needing iproute2 in the namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, _SIOCGIFFLAGS, req)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def inside(listen: Sequence[tuple[int, str]]) -> list[_Listener]:
    """127.0.0.1:PORT -> Unix socket, one listener each (in the build's namespace)."""
    loopback_up()
    out = []
    for port, path in listen:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen(64)

        def connect(path: str = path) -> socket.socket:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            return s

        out.append(_Listener(server, connect, Counts()))
    return out


def argv(python: str, listen: Sequence[tuple[int, str]]) -> list[str]:
    """The command prefix that runs a step behind the inside relay."""
    # -I: the script's own directory (hermetic's modules) stays off sys.path
    return [python, "-I", __file__, *(a for port, path in listen for a in ("--listen", f"{port}={path}")), "--"]


def main(args: Sequence[str]) -> int:
    listen: list[tuple[int, str]] = []
    rest = list(args)
    while rest and rest[0] == "--listen":
        port, _, path = rest[1].partition("=")
        listen.append((int(port), path))
        rest = rest[2:]
    if not rest or rest[0] != "--" or len(rest) < 2:
        print("usage: netrelay.py [--listen PORT=UNIX_SOCKET]... -- COMMAND [ARG]...", file=sys.stderr)
        return 2
    try:
        inside(listen)
    except OSError as exc:
        print(f"hermetic netrelay: cannot relay the compile hosts into the build's network namespace: {exc}",
              file=sys.stderr)
        return 1
    proc = subprocess.Popen(rest[1:])
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue  # the step got the signal too; its exit status is ours


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
