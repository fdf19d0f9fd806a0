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
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermetic import record

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


# --- the compiler core's wheel against LLVM 19 (Debian's llvm-19-dev in CI), built twice ------------

ROOT = Path(__file__).resolve().parents[2]
PREFIX = Path(os.environ.get("HERMETIC_TEST_LLVM_PREFIX", "/usr/lib/llvm-19"))


def run_hermetic(*args: str, cwd: Path, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "hermetic", *args], cwd=cwd, env=env, capture_output=True, text=True, umask=umask
    )
    if proc.returncode != 0:
        raise AssertionError(f"hermetic {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def wheel_cache(source_cache: Path) -> Path:
    """The cache holding the filled wheelhouse (downloaded once, verified every time)."""
    if not (PREFIX / "lib" / "cmake" / "llvm" / "LLVMConfig.cmake").is_file():
        pytest.fail(f"no LLVM 19 at {PREFIX}: apt-get install llvm-19-dev or set HERMETIC_TEST_LLVM_PREFIX")
    run_hermetic("wheelhouse", "--root", str(ROOT), "--cache", str(source_cache), cwd=ROOT)
    return source_cache


@pytest.fixture(scope="session")
def two_builds(tmp_path_factory: pytest.TempPathFactory, wheel_cache: Path) -> Iterator[list[dict[str, Any]]]:
    # One snapshot of the project, copied to two places: the builds also differ in the project's location,
    # and an edit to src/compiler between the two builds cannot make them differ.
    snap = tmp_path_factory.mktemp("project")
    first = snap / "a" / "compiler"
    shutil.copytree(ROOT / "src" / "compiler", first, ignore=shutil.ignore_patterns("build", "__pycache__", "*.so"))
    shutil.copytree(first, snap / "b" / "elsewhere" / "compiler")
    out: list[dict[str, Any]] = []
    for label, umask, depth, project in (
        ("a", 0o022, "w", first),
        ("b", 0o077, "deeper/nested/w", snap / "b" / "elsewhere" / "compiler"),
    ):
        base = tmp_path_factory.mktemp(f"wheel-{label}")
        work = base / depth
        cwd = base / "cwd"
        cwd.mkdir()
        proc = run_hermetic(
            "wheel", str(project), "--llvm", str(PREFIX),
            "--root", str(ROOT), "--cache", str(wheel_cache), "--work-dir", str(work),
            "--output", str(base / "dist"), "--jobs", os.environ.get("HERMETIC_TEST_JOBS", "2"), "--offline", "auto",
            cwd=cwd, umask=umask,
        )
        printed = json.loads(proc.stdout)
        rec = json.loads((base / "dist" / "wheel-record.json").read_text())
        out.append({"printed": printed, "record": rec, "wheel": base / "dist" / rec["wheel"], "work": work})
    yield out


# --- llvmprobe's wheel against the zig `support` tree, built once -----------------------------------------

PROBE_PROJECT = ROOT / "tests" / "integration" / "projects" / "llvmprobe"


@pytest.fixture(scope="session")
def zig_probe_wheel(tmp_path_factory: pytest.TempPathFactory, zig_support_install: Path, source_cache: Path) -> dict[str, Any]:
    """llvmprobe's amd64 wheel against `zig_support_install`, built with no --toolchain (the LLVM's record says
    zig) in that LLVM's work dir, from a working directory of its own.

    test_wheel_zig.py checks this wheel and has `hermetic verify` rebuild it elsewhere; test_wheel_arm64.py
    compares the arm64 wheel's answers under qemu with this one's. Their builds had the same project, tree,
    toolchain, Python and jobs, and gave the same sha256 (a fresh work dir changes none of it): one build of
    about 90 s on 2 cores serves both.
    """
    if os.uname().machine != "x86_64":
        pytest.skip("the pinned ziglang wheel is the x86_64 one")
    llvm = record.load_build_record(zig_support_install)
    work = zig_support_install.parents[2]  # <work>/llvm/support/record.json: zig's cache of that work dir
    base = tmp_path_factory.mktemp("zigwheel")
    run_hermetic("wheelhouse", "--root", str(ROOT), "--cache", str(source_cache), cwd=ROOT)
    (base / "cwd-a").mkdir()
    proc = run_hermetic(
        "wheel", str(PROBE_PROJECT), "--llvm", str(llvm.install_dir), "--work-dir", str(work), "--output",
        str(base / "dist"), "--root", str(ROOT), "--cache", str(source_cache), "--jobs", str(os.cpu_count() or 2),
        "--offline", "auto", cwd=base / "cwd-a",
    )
    printed = json.loads(proc.stdout)
    return {
        "printed": printed, "wheel": base / "dist" / printed["wheel"], "stderr": proc.stderr,
        "record": json.loads((base / "dist" / "wheel-record.json").read_text()), "work": work, "base": base, "llvm": llvm,
    }
