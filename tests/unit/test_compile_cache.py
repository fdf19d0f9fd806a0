"""The shared compile cache: its URL, the refusals, the settings, the plan, the record entry, ccache's counters.

Real ccache and real Redis with real builds: tests/integration/test_compile_cache_ccache.py.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, hermetic, resolve_in_project
from hermetic.build import compile_cache, wrappers
from hermetic.core.errors import EnvironmentError_, UsageError, VerifyError
from hermetic.model import record, toolchains
from hermetic.model import settings as settings_values
from hermetic.model.settings import CompileCache, Settings
from hermetic.model.settings import parse_compile_cache as parse
from hermetic.plan import pipeline as plan
from schemas.examples import ZIG_ID, fake_llvm_build

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "scheme", "path"), [
    ("redis+unix:/run/redis/redis.sock", "redis+unix", "/run/redis/redis.sock"),
    ("redis+unix:///run/redis/redis.sock", "redis+unix", "/run/redis/redis.sock"),
    ("file:///srv/ccache", "file", "/srv/ccache"),
    ("file:///srv/ccache|umask=002", "file", "/srv/ccache"),  # ccache's attributes pass through
])
def test_a_local_cache_names_a_socket_or_a_directory(text: str, scheme: str, path: str) -> None:
    got = parse(text)
    assert (got.url, got.scheme, got.path, got.local) == (text, scheme, path, True)


@pytest.mark.parametrize("text", ["ccache", "/srv/ccache", "s3://bucket/x", "redis+unix:run/redis.sock",
                                  "file://host/srv/ccache", "file:srv", "file:///srv?x=1", "redis://", "redis://h:port"])
def test_a_bad_url_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="invalid compile cache"):
        parse(text)


def test_a_network_cache_is_refused_inside_the_network_namespace_only() -> None:
    cache = parse("redis://:secret@cache.example.com:6379")
    assert not cache.local and cache.address == "cache.example.com:6379"
    assert cache.shown == "redis://:***@cache.example.com:6379"  # plans and records never show the password
    for mode in ("auto", "require"):
        with pytest.raises(UsageError) as err:
            compile_cache.check_reachable(cache, mode)
        assert "cannot be reached by the build" in err.value.what and "secret" not in str(err.value)
        assert "network namespace" in err.value.why and "redis+unix:" in err.value.fix and "--offline=off" in err.value.fix
    compile_cache.check_reachable(cache, "off")  # no isolation: the record says the build had the network
    for local in ("redis+unix:/r.sock", "file:///d"):
        compile_cache.check_reachable(parse(local), "require")


def test_the_setting_from_each_layer_in_order_of_precedence(tmp_path: Path) -> None:
    table = 'compile_cache = "file:///srv/ccache"'
    assert resolve_in_project(tmp_path / "t", table=table).compile_cache == parse("file:///srv/ccache")
    env = {"HERMETIC_COMPILE_CACHE": "redis+unix:/run/r.sock"}
    assert resolve_in_project(tmp_path / "e", env=env, table=table).compile_cache == parse("redis+unix:/run/r.sock")
    cli = {"compile_cache": "file:///x"}
    assert resolve_in_project(tmp_path / "c", cli=cli, env=env, table=table).compile_cache == parse("file:///x")
    # --no-compile-cache wins over every layer; an empty variable is no cache
    assert resolve_in_project(tmp_path / "n", cli={"no_compile_cache": True}, env=env, table=table).compile_cache is None
    assert resolve_in_project(tmp_path / "z", env={"HERMETIC_COMPILE_CACHE": ""}).compile_cache is None
    assert resolve_in_project(tmp_path / "d").compile_cache is None


def test_refusals_on_the_command_line_are_usage_errors_without_traceback(tmp_path: Path) -> None:
    work = tmp_path / "w"
    proc = hermetic("build", "llvm", "--variant", "support", "--toolchain", "host", "--work-dir", str(work),
                    "--compile-cache", "redis://127.0.0.1:6379", check=False)
    assert proc.returncode == 2 and "cannot be reached by the build" in proc.stderr and "Traceback" not in proc.stderr
    assert "redis+unix:" in proc.stderr and not work.exists()  # refused before anything ran
    proc = hermetic("all", "--compile-cache", "s3://x", check=False)
    assert proc.returncode == 2 and "invalid compile cache" in proc.stderr and "Traceback" not in proc.stderr
    proc = hermetic("build", "llvm", "--compile-cache", "file:///x", "--no-compile-cache", check=False)
    assert proc.returncode == 2 and "not allowed with" in proc.stderr
    proc = hermetic("fetch", "--compile-cache", "file:///x", check=False)
    assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr


def _settings(tmp_path: Path, **kw: Any) -> Settings:
    return Settings(root=ROOT, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work", quiet=True,
                    variant="support", **kw)


@pytest.mark.parametrize("tc", ["host", "zig"])
def test_the_cache_is_no_input_of_any_step(tmp_path: Path, tc: str) -> None:
    plain = plan.plan_all(_settings(tmp_path, toolchain=tc), lambda m: None)
    cached = plan.plan_all(_settings(tmp_path, toolchain=tc, compile_cache=parse("redis+unix:/run/r.sock")), lambda m: None)
    assert [(s.key, s.inputs_digest) for s in cached.steps] == [(s.key, s.inputs_digest) for s in plain.steps]
    assert "compile cache redis+unix:/run/r.sock (ccache)" in cached.step("build").detail
    assert "compile cache" not in plain.step("build").detail


def _cache_use(**stats: Any) -> record.CompileCacheUse:
    counts = {"hits": 200, "misses": 2, "hit_rate": 0.9901, "remote_hits": 200, "remote_misses": 2,
              "remote_errors": 0, "uncacheable": 30} | stats
    return record.CompileCacheUse("redis+unix:/run/r.sock", "Unix socket /run/r.sock (Redis answered +PONG)", True,
                                  "/usr/bin/ccache", "4.7.5", record.CacheStats(**counts))


def test_the_record_entry_round_trips_and_older_records_load(tmp_path: Path) -> None:
    path = fake_llvm_build(tmp_path)
    plain = record.load_build_record(path)
    assert plain.compile_cache is None and "compile_cache" not in json.loads(path.read_text())
    rec = record.BuildRecord.from_json(plain.as_json() | {"compile_cache": _cache_use().as_json()})
    assert rec.compile_cache == _cache_use()
    assert record.BuildRecord.from_json(rec.as_json()) == rec
    # the tree and the inputs are what they were: the entry says how the compiles ran, not what was built
    assert (rec.tree, rec.inputs_digest) == (plain.tree, plain.inputs_digest)
    data = rec.as_json()
    data["compile_cache"]["stats"]["hits"] = "200"
    with pytest.raises(VerifyError) as err:
        record.BuildRecord.from_json(data, "r.json")
    assert "compile_cache.stats.hits" in err.value.why


PRINT_STATS = """\
autoconf_test\t1
called_for_link\t12
cache_miss\t3
compile_failed\t2
direct_cache_hit\t180
direct_cache_miss\t23
preprocessed_cache_hit\t20
preprocessed_cache_miss\t3
preprocessor_error\t11
remote_storage_error\t4
remote_storage_hit\t200
remote_storage_miss\t3
remote_storage_read_hit\t400
remote_storage_timeout\t1
stats_updated_timestamp\t1795641903
"""


def test_cache_statistics_come_from_print_stats() -> None:
    got = compile_cache.parse_stats(PRINT_STATS, record.CacheStats)
    assert (got.hits, got.misses, got.hit_rate) == (200, 3, round(200 / 203, 4))
    assert (got.remote_hits, got.remote_misses, got.remote_errors) == (200, 3, 5)
    assert got.uncacheable == 1 + 12 + 2 + 11  # links, configure checks and failures ccache passed through
    assert compile_cache.parse_stats("", record.CacheStats).hit_rate == 0.0


def test_the_compiler_is_known_by_the_pinned_toolchain_not_its_path() -> None:
    zig = toolchains.Toolchain(name="zig", kind="zig", version="0.17.1", sha256="ea" * 32, target="x86_64-linux-gnu.2.28")
    scripts = wrappers.wrapper_scripts(zig, Path("/zig"), Path("/zig-cache"))
    check = compile_cache.compiler_check(ZIG_ID, "\n".join(scripts.values()))
    assert check.startswith("string:") and "/" not in check
    assert check == compile_cache.compiler_check(dict(ZIG_ID), "\n".join(scripts.values()))
    assert check != compile_cache.compiler_check(ZIG_ID | {"sha256": "00" * 32}, "\n".join(scripts.values()))
    assert check != compile_cache.compiler_check(ZIG_ID, "\n".join(scripts.values()) + " -O3")
    assert compile_cache.compiler_check({"name": "host", "kind": "host"}, "") == "%compiler% -v"


def test_the_config_keeps_paths_out_of_the_keys(tmp_path: Path) -> None:
    conf = compile_cache.write_config(tmp_path / "cc", parse("file:///srv/ccache|umask=002"), tmp_path, "string:ab", "clang")
    lines = dict(line.split(" = ", 1) for line in conf.read_text().splitlines() if " = " in line)
    assert lines == {"cache_dir": str(tmp_path / "cc" / "local"), "remote_storage": "file:///srv/ccache|umask=002",
                     "remote_only": "true", "base_dir": str(tmp_path), "hash_dir": "false",
                     "compiler_check": "string:ab", "stats": "true", "compiler_type": "clang"}


def test_a_missing_or_old_ccache_is_a_clear_error(tmp_path: Path) -> None:
    cache = parse("redis+unix:/run/r.sock")
    with pytest.raises(EnvironmentError_) as err:
        compile_cache.find_ccache(cache, str(tmp_path))
    assert err.value.what == "ccache is not installed" and "apt-get install ccache" in err.value.fix
    old = tmp_path / "ccache"
    old.write_text("#!/bin/sh\necho 'ccache version 4.2.1'\necho 'Features: file-storage redis-storage'\n")
    old.chmod(0o755)
    with pytest.raises(EnvironmentError_, match="too old"):
        compile_cache.find_ccache(cache, str(tmp_path))
    old.write_text("#!/bin/sh\necho 'ccache version 4.8.3'\necho 'Features: file-storage http-storage'\n")
    with pytest.raises(EnvironmentError_, match="cannot use redis\\+unix storage"):
        compile_cache.find_ccache(cache, str(tmp_path))
    got = compile_cache.find_ccache(parse("file:///d"), str(tmp_path))
    assert (got.path, got.version) == (str(old), "4.8.3")


def test_the_probe_says_what_answered(tmp_path: Path) -> None:
    assert compile_cache.probe(CompileCache("file:///nope", "file", str(tmp_path / "nope")))[0] is False
    assert compile_cache.probe(CompileCache(f"file://{tmp_path}", "file", str(tmp_path))) == (True, f"directory {tmp_path}")
    sock_path = tmp_path / "r.sock"
    ok, seen = compile_cache.probe(parse(f"redis+unix:{sock_path}"))
    assert not ok and str(sock_path) in seen
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(64)
            conn.sendall(b"+PONG\r\n")

    t = threading.Thread(target=answer)
    t.start()
    try:
        assert compile_cache.probe(parse(f"redis+unix:{sock_path}")) == (
            True, f"Unix socket {sock_path} (Redis answered +PONG)")
    finally:
        t.join(5)
        server.close()


def test_the_record_says_when_the_cache_failed_and_how_many_compiles_ran_without_it() -> None:
    def stats(**kw: int) -> record.CacheStats:
        base = {"hits": 150, "misses": 103, "hit_rate": 0.5929, "remote_hits": 150, "remote_misses": 0,
                "remote_errors": 103, "uncacheable": 0}
        return record.CacheStats(**(base | kw))  # type: ignore[arg-type]

    assert compile_cache.failure_note(True, stats(remote_errors=0, misses=0)) == ""
    note = compile_cache.failure_note(True, stats())
    assert note.startswith("the cache failed during the build: ccache counted 103 remote storage errors or timeouts")
    assert "103 compiles ran in all, 150 were cache hits" in note
    assert compile_cache.failure_note(False, stats(hits=0, remote_errors=253, misses=253)).startswith(
        "the cache failed from the start")
    assert compile_cache.failure_note(False, None).startswith("the cache did not answer when the build started")
    assert compile_cache.failure_note(False, stats(remote_errors=0)) == ""  # a new directory: ccache made and used it
    rec = dataclasses.replace(_cache_use(), note=note, misses_to="the compile hosts (--distribute), through distcc")
    assert record.CompileCacheUse.from_json(rec.as_json(), "r.json", "compile_cache") == rec
    assert "note" not in _cache_use().as_json() and "misses_to" not in _cache_use().as_json()


def test_behind_the_cache_the_misses_go_to_the_compile_hosts(tmp_path: Path) -> None:
    conf = compile_cache.write_config(tmp_path / "cc", parse("file:///srv/ccache"), tmp_path, "string:ab", "clang",
                                      prefix_command=tmp_path / "launch")
    assert f"prefix_command = {tmp_path / 'launch'}" in conf.read_text().splitlines()
    both = plan.plan_all(_settings(tmp_path, compile_cache=parse(f"file://{tmp_path}/shared"),
                                   distribute=settings_values.parse_distribute_setting("127.0.0.2:9/2")), lambda m: None)
    detail = both.step("build").detail
    assert f"compile cache file://{tmp_path}/shared (ccache)" in detail and "127.0.0.2:9/2 (distcc)" in detail


def test_read_only_is_ccache_s_attribute() -> None:
    assert compile_cache.read_only(parse("file:///srv/c|read-only"))
    assert compile_cache.read_only(parse("file:///srv/c|umask=002|read-only"))
    assert not compile_cache.read_only(parse("file:///srv/read-only"))


def test_with_a_cache_zig_reads_its_headers_through_a_link_in_the_build(tmp_path: Path) -> None:
    """The headers' paths are in ccache's keys: a toolchain in each user's own cache must not put its path there."""
    tc = toolchains.for_root(ROOT)
    zig_root = tmp_path / "users-own-cache" / "zig"
    (zig_root / "lib").mkdir(parents=True)
    plain = wrappers.prepare(tc, zig_root, tmp_path / "a", ROOT / "toolchain", tmp_path / "zc")
    linked = wrappers.prepare(tc, zig_root, tmp_path / "b", ROOT / "toolchain", tmp_path / "zc", lib_link=True)
    assert "ZIG_LIB_DIR" not in Path(plain.env["CXX"]).read_text() and not (tmp_path / "a" / "zig-lib").exists()
    script = Path(linked.env["CXX"]).read_text()
    link = tmp_path / "b" / "zig-lib"
    assert link.is_symlink() and link.resolve() == (zig_root / "lib").resolve()
    assert f"ZIG_LIB_DIR={link}; export ZIG_LIB_DIR" in script
    # and its path maps to what the toolchain's own did: the same objects
    assert f"-ffile-prefix-map={link}=/usr/lib/zig/lib" in script and f"-ffile-prefix-map={zig_root}=/usr/lib/zig" in script
