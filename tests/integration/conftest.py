"""Real parts for the integration tier: a docker-registry (distribution) on 127.0.0.1.

The registry is Debian's `docker-registry` package. The fixture writes its
config, serves it on a free port, waits until /v2/ answers and stops it; it can
also kill it hard and restart it on the same storage, for the mid-push tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = free_port()
        self.storage = base / "storage"
        self.config = base / "config.yml"
        self.log = base / "registry.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.storage.mkdir(parents=True, exist_ok=True)
        # a fixed http.secret keeps upload sessions valid across a restart
        self.config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.storage}\n  delete:\n    enabled: true\n"
            "  maintenance:\n    uploadpurging:\n      enabled: false\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n  secret: hermetic-test-secret\n"
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


def _need_registry() -> None:
    if not os.access(REGISTRY_BIN, os.X_OK):
        pytest.fail(f"{REGISTRY_BIN} is missing: install Debian's docker-registry package (.ci/run does)")


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """One registry for the session; tests use their own repositories."""
    _need_registry()
    reg = Registry(tmp_path_factory.mktemp("registry"))
    reg.start()
    yield reg
    reg.stop()


@pytest.fixture
def fresh_registry(tmp_path: Path) -> Iterator[Registry]:
    """A registry of the test's own, which the test may kill and restart."""
    _need_registry()
    reg = Registry(tmp_path / "registry")
    reg.start()
    yield reg
    reg.stop()
