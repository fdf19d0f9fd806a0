"""Real servers the tests and the benches start and stop: Debian's docker-registry, redis-server and distccd.

The registry's config is written here, it is served on a free port of 127.0.0.1, waited for until /v2/
answers and stopped; it can also be killed hard and restarted on the same storage, for the mid-push tests.
Redis listens on a Unix socket only (a build's network namespace reaches no TCP address); each distccd on a
loopback address of its own (127.0.0.2, .3, ...), with its statistics page on.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"


def free_port(addr: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def registry_config(storage: Path, port: int, storage_extra: str = "", http_extra: str = "") -> str:
    """docker-registry's config.yml: filesystem storage with deletes, quiet logs, 127.0.0.1:PORT; a fixed
    http.secret keeps upload sessions valid across a restart."""
    return (
        "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n{storage_extra}"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: hermetic-test-secret\n{http_extra}"
    )


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[Any]:
    """An in-process server answering on a thread for the duration of the block."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class Registry:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = free_port()
        self.storage = base / "storage"
        self.config = base / "config.yml"
        self.log = base / "registry.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.storage.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            registry_config(self.storage, self.port, storage_extra="  maintenance:\n    uploadpurging:\n      enabled: false\n")
        )

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [REGISTRY_BIN, "serve", str(self.config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"docker-registry exited with {self.proc.returncode}:\n{self.log.read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise RuntimeError(f"docker-registry did not answer on {self.host}:\n{self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, in-flight uploads are cut."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    # -- what the registry holds, read over the API -----------------------------
    def get(self, path: str, accept: str = "") -> tuple[int, bytes, dict[str, str]]:
        req = urllib.request.Request(f"http://{self.host}{path}", headers={"Accept": accept} if accept else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    def tags(self, repo: str) -> list[str]:
        status, body, _ = self.get(f"/v2/{repo}/tags/list")
        if status == 404:
            return []
        return list(json.loads(body).get("tags") or [])


REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


class Redis:
    """redis-server on a Unix socket only (port 0: no TCP), no persistence; started and stopped by the test.
    `perm` is the socket's unixsocketperm: 777 where another user's build must reach it (the scale bench)."""

    def __init__(self, base: Path, perm: str = "700") -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.base, self.perm = base, perm
        self.socket = base / "redis.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+unix:{self.socket}"

    def start(self) -> None:
        with open(self.base / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(
                [REDIS, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", self.perm, "--save", "",
                 "--appendonly", "no", "--dir", str(self.base)], stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if self.command("PING").startswith(b"+PONG"):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"redis-server did not answer on {self.socket}: {(self.base / 'redis.log').read_text()}")

    def kill(self) -> None:
        """SIGKILL: gone at once, as a crashed cache would be."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def command(self, *words: str) -> bytes:
        """One Redis command, its raw answer (inline protocol: enough for DBSIZE, SAVE, INFO)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.socket))
            s.sendall(" ".join(words).encode() + b"\r\n")
            data = s.recv(65536)
            if data.startswith(b"$"):  # a bulk string: read to its announced length
                size = int(data[1:data.index(b"\r\n")])
                while len(data) < data.index(b"\r\n") + 2 + size:
                    data += s.recv(65536)
            return data

    def keys(self) -> int:
        return int(self.command("DBSIZE").decode().strip().lstrip(":"))

    def stat(self, name: str) -> int:
        for line in self.command("INFO", "stats").decode().splitlines():
            if line.startswith(name + ":"):
                return int(line.split(":", 1)[1])
        raise AssertionError(f"no {name} in Redis's INFO stats")


def _unprivileged(log: Path) -> tuple[list[str], list[str]]:
    """What goes before and after distccd's arguments when root starts it. distccd will not run as root (it
    switches to user distcc, which cannot read root's cache): in a user namespace of its own it is uid 65534
    there and keeps the file access of the user who started it. Where no user namespace can be made, it is told
    to switch to nobody, who reads the compile host's files (mode 0755 directories) and nothing of root's."""
    if os.geteuid() != 0:
        return [], []
    if subprocess.run(["unshare", "--user", "true"], capture_output=True).returncode == 0:
        return ["unshare", "--user"], []
    log.touch()
    log.chmod(0o666)
    return [], ["--user", "nobody"]


class Distccd:
    """One distccd on a loopback address, statistics on; started by the constructor, stopped or killed by the caller."""

    def __init__(self, addr: str, base: Path, bin_dir: Path | None, slots: int = 2) -> None:
        self.addr, self.slots = addr, slots
        self.port, self.stats_port = free_port(addr), free_port(addr)
        self.log = base / f"distccd-{addr}.log"
        path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}" if bin_dir else os.environ["PATH"]
        before, after = _unprivileged(self.log)
        self.proc = subprocess.Popen(
            [*before, "distccd", "--daemon", "--no-detach", "--listen", addr, "--port", str(self.port),
             "--allow", "127.0.0.0/8", "--jobs", str(slots), "--log-file", str(self.log), "--log-level", "info",
             "--enable-tcp-insecure", "--stats", "--stats-port", str(self.stats_port), *after],
            env={**os.environ, "PATH": path}, start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection((addr, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.kill()
        raise AssertionError(f"distccd on {addr}:{self.port} did not start: {self.log.read_text() if self.log.exists() else ''}")

    @property
    def spec(self) -> str:
        """HOST:PORT/SLOTS, as --distribute takes it."""
        return f"{self.addr}:{self.port}/{self.slots}"

    def stats(self) -> dict[str, str]:
        """distccd's statistics page: its dcc_* counters (dcc_compile_ok, ...)."""
        with socket.create_connection((self.addr, self.stats_port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        out = {}
        for line in data.decode(errors="replace").splitlines():
            k, _, v = line.partition(" ")
            if k.startswith("dcc_"):
                out[k] = v.strip()
        return out

    def compiled(self) -> int:
        """distccd's own count of finished compiles (its statistics page)."""
        got = self.stats()
        if "dcc_compile_ok" not in got:
            raise AssertionError(f"no dcc_compile_ok in distccd's statistics: {got}")
        return int(got["dcc_compile_ok"])

    def stop(self) -> None:
        """SIGTERM to the daemon and its preforked children, waited for."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(20)

    def kill(self) -> None:
        """SIGKILL to the daemon and its preforked children: gone at once, as a crashed host would be."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(20)
