"""The shared compile cache with the real ccache, a real redis-server on a Unix socket and real `support` builds.

One cold build fills the cache and a second one in another work directory reads it; both are
compared with the build made without a cache (`support_install`), so the cache is shown to change
no digest, and the warm one's record must say it hit. The pinned zig toolchain (wrapper scripts
at per-work-dir paths) gets one cold/warm pair of its own through a plain directory (file://).
What ccache does when Redis dies is shown on small compiles through the same generated config,
which costs seconds rather than another LLVM build.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import hermetic
from hermetic import compile_cache

pytestmark = pytest.mark.integration

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


class Redis:
    """redis-server on a Unix socket only (port 0: no TCP), no persistence; started and stopped by the test."""

    def __init__(self, base: Path) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.socket = base / "redis.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+unix:{self.socket}"

    def start(self) -> None:
        with open(self.base / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(
                [REDIS, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700", "--save", "",
                 "--appendonly", "no", "--dir", str(self.base)], stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if compile_cache.probe(compile_cache.parse(self.url))[0]:
                return
            time.sleep(0.1)
        raise AssertionError(f"redis-server did not answer on {self.socket}: {(self.base / 'redis.log').read_text()}")

    def kill(self) -> None:
        """SIGKILL: gone at once, as a crashed cache would be."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def keys(self) -> int:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.socket))
            s.sendall(b"DBSIZE\r\n")
            return int(s.recv(64).decode().strip().lstrip(":"))


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[Redis]:
    r = Redis(tmp_path / "redis")
    r.start()
    yield r
    r.kill()


# -- small compiles through hermetic's ccache.conf: seconds -----------------------------------------------


def _compile(base: Path, url: str) -> tuple[bytes, compile_cache.CacheStats]:
    """One C file with a local header and the prefix maps a build uses, compiled through ccache from `base`."""
    src, out = base / "src", base / "build"
    (src / "include").mkdir(parents=True)
    out.mkdir()
    (src / "include" / "x.h").write_text("#define X 42\n")
    (src / "f.c").write_text('#include "x.h"\nint f(void) { return X; }\nconst char *g(void) { return __FILE__; }\n')
    conf = compile_cache.write_config(base / "ccache", compile_cache.parse(url), base, "string:test-compiler", None)
    env = {"PATH": os.environ["PATH"], "CCACHE_CONFIGPATH": str(conf)}
    cmd = ["ccache", "cc", f"-I{src / 'include'}", f"-ffile-prefix-map={src}=/usr/src/x", f"-ffile-prefix-map={out}=/usr/src/b",
           "-O2", "-g0", "-c", str(src / "f.c"), "-o", "f.o"]
    subprocess.run(cmd, cwd=out, env=env, check=True)
    stats = subprocess.run(["ccache", "--print-stats"], env=env, check=True, capture_output=True, text=True).stdout
    return (out / "f.o").read_bytes(), compile_cache.parse_stats(stats)


@pytest.mark.parametrize("kind", ["redis", "file"])
def test_another_directory_hits_and_gets_the_same_object(tmp_path: Path, redis: Redis, kind: str) -> None:
    url = redis.url if kind == "redis" else f"file://{tmp_path / 'shared'}"
    first, cold = _compile(tmp_path / "a", url)
    again, warm = _compile(tmp_path / "elsewhere" / "b", url)
    assert (cold.misses, cold.hits) == (1, 0) and (warm.hits, warm.remote_hits, warm.misses) == (1, 1, 0)
    assert again == first


def test_a_cache_that_dies_is_compiled_around_and_counted(tmp_path: Path, redis: Redis) -> None:
    first, _ = _compile(tmp_path / "a", redis.url)
    redis.kill()
    again, stats = _compile(tmp_path / "b", redis.url)
    assert again == first  # compiled, not failed
    assert (stats.hits, stats.misses) == (0, 1) and stats.remote_errors >= 1


# -- real builds ------------------------------------------------------------------------------------------


def _build(work: Path, source_cache: Path, url: str, toolchain: str) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    hermetic(
        "build", "llvm", "--variant", "support", "--toolchain", toolchain, "--work-dir", str(work), "--cache", str(source_cache),
        "--jobs", str(os.cpu_count() or 2), "--offline", "auto", "--quiet", "--compile-cache", url,
    )
    return json.loads((work / "llvm" / "support" / "record.json").read_text()), time.monotonic() - started


@pytest.fixture(scope="module")
def host_pair(tmp_path_factory: pytest.TempPathFactory, source_cache: Path) -> Iterator[tuple[dict[str, Any], dict[str, Any], Redis]]:
    """A cold host build through a fresh Redis, then a warm one in another work directory; Redis still up."""
    base = tmp_path_factory.mktemp("ccache-host")
    r = Redis(base / "redis")
    r.start()
    try:
        cold, _ = _build(base / "one" / "work", source_cache, r.url, "host")
        warm, _ = _build(base / "other" / "place" / "work", source_cache, r.url, "host")
        yield cold, warm, r
    finally:
        r.kill()


def test_a_build_through_the_cache_has_the_tree_of_one_without(host_pair: Any, support_install: Path) -> None:
    cold, warm, _ = host_pair
    plain = json.loads(support_install.read_text())
    assert "compile_cache" not in plain
    for rec in (cold, warm):
        assert rec["tree"]["digest"] == plain["tree"]["digest"]
        assert rec["inputs_digest"] == plain["inputs_digest"]  # so substitution and verify match either way


def test_the_warm_build_in_another_directory_hits_and_says_so(host_pair: Any) -> None:
    cold, warm, redis = host_pair
    c, w = cold["compile_cache"], warm["compile_cache"]
    assert c["url"] == w["url"] == redis.url and w["answered"] is True
    assert f"Unix socket {redis.socket}" in w["reachable"] and "no network besides" in w["reachable"]
    assert w["ccache"] == shutil.which("ccache") and w["ccache_version"].startswith("4.")
    assert c["stats"]["misses"] >= 150 and c["stats"]["hit_rate"] < 0.1
    assert w["stats"]["hit_rate"] >= 0.95 and w["stats"]["remote_hits"] == w["stats"]["hits"]
    assert w["stats"]["hits"] >= c["stats"]["misses"] * 0.95 and w["stats"]["remote_errors"] == 0
    assert redis.keys() > 0


def test_the_pinned_toolchain_hits_from_another_directory_through_a_directory_cache(
    tmp_path: Path, source_cache: Path, zig_support_install: Path
) -> None:
    """The zig wrappers are scripts at per-work-dir paths: the key names the toolchain, not them."""
    url = f"file://{tmp_path / 'shared-cache'}"
    cold, _ = _build(tmp_path / "one", source_cache, url, "zig")
    warm, _ = _build(tmp_path / "two" / "elsewhere", source_cache, url, "zig")
    plain = json.loads(zig_support_install.read_text())
    assert cold["tree"]["digest"] == warm["tree"]["digest"] == plain["tree"]["digest"]
    assert cold["compile_cache"]["stats"]["misses"] >= 150
    assert warm["compile_cache"]["stats"]["hit_rate"] >= 0.95, warm["compile_cache"]
