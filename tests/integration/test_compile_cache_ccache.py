"""The shared compile cache with the real ccache, a real redis-server on a Unix socket and real builds of the
tiny recipe (tests/functional/test_compile_cache_llvm.py shows the same on a real LLVM build).

One cold build fills the cache and a second one in another work directory reads it; both are
compared with the build made without a cache (`tiny_install`), so the cache is shown to change
no digest, and the warm one's record must say it hit. The same cache then serves another user (uid
64123, no account: setpriv), once refused with what to change while it may not reach the socket; and
a warm build whose Redis is killed midway must finish with the same tree and a record that says how
many compiles ran without it. The pinned zig toolchain (wrapper scripts at per-work-dir paths) gets one
cold/warm pair of its own through a plain directory (file://), whose cache is then poisoned with an
entry ccache cannot tell from a good one: the next build's tree differs and `hermetic verify` says
why. What ccache does when Redis dies, with a damaged entry and with a directory it cannot use is
shown on small compiles through the same generated config.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.servers import Redis
from devtools.users import OTHER_UID, as_user, user_cache, user_dir
from helpers import TINY, hermetic
from hermetic.build import compile_cache
from hermetic.model import record
from hermetic.model import settings as settings_values

ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture
def redis(tmp_path: Path) -> Iterator[Redis]:
    r = Redis(tmp_path / "redis")
    r.start()
    yield r
    r.kill()


# -- small compiles through hermetic's ccache.conf: seconds -----------------------------------------------


def _compile(base: Path, url: str) -> tuple[bytes, record.CacheStats]:
    """One C file with a local header and the prefix maps a build uses, compiled through ccache from `base`."""
    src, out = base / "src", base / "build"
    (src / "include").mkdir(parents=True)
    out.mkdir()
    (src / "include" / "x.h").write_text("#define X 42\n")
    (src / "f.c").write_text('#include "x.h"\nint f(void) { return X; }\nconst char *g(void) { return __FILE__; }\n')
    conf = compile_cache.write_config(base / "ccache", settings_values.parse_compile_cache(url), base, "string:test-compiler", None)
    env = {"PATH": os.environ["PATH"], "CCACHE_CONFIGPATH": str(conf)}
    cmd = ["ccache", "cc", f"-I{src / 'include'}", f"-ffile-prefix-map={src}=/usr/src/x", f"-ffile-prefix-map={out}=/usr/src/b",
           "-O2", "-g0", "-c", str(src / "f.c"), "-o", "f.o"]
    subprocess.run(cmd, cwd=out, env=env, check=True)
    stats = subprocess.run(["ccache", "--print-stats"], env=env, check=True, capture_output=True, text=True).stdout
    return (out / "f.o").read_bytes(), compile_cache.parse_stats(stats, record.CacheStats)


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


def _entries(store: Path, kind: str) -> list[Path]:
    """The result (or manifest) entries of a file:// cache, as `ccache --inspect` names them."""
    want = {"result": "Entry type: 0 (result)", "manifest": "Entry type: 1 (manifest)"}[kind]
    out = []
    for p in sorted(store.glob("*/*")):
        text = subprocess.run(["ccache", "--inspect", str(p)], capture_output=True, text=True).stdout
        if want in text:
            out.append(p)
    return out


def test_a_damaged_entry_is_caught_by_ccache_and_compiled_again(tmp_path: Path) -> None:
    """A flipped byte fails the entry's own checksum (XXH3-128 over the entry): a miss, compiled, stored anew."""
    url = f"file://{tmp_path / 'shared'}"
    first, _ = _compile(tmp_path / "a", url)
    (entry,) = _entries(tmp_path / "shared", "result")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    again, stats = _compile(tmp_path / "b", url)
    assert again == first
    # ccache read the entry (a storage hit), found it damaged, compiled and wrote it again
    assert (stats.hits, stats.misses) == (0, 1) and stats.remote_hits >= 1
    third, stats = _compile(tmp_path / "c", url)
    assert third == first and stats.hits == 1


def test_a_directory_cache_that_goes_away_is_compiled_around(tmp_path: Path) -> None:
    """Removed mid-build, ccache makes the directory again; replaced by something it cannot use, it counts errors."""
    shared = tmp_path / "shared"
    url = f"file://{shared}"
    first, _ = _compile(tmp_path / "a", url)
    shutil.rmtree(shared)
    again, stats = _compile(tmp_path / "b", url)
    assert again == first and (stats.misses, stats.remote_errors) == (1, 0) and shared.is_dir()
    shutil.rmtree(shared)
    shared.write_text("not a directory\n")  # an NFS mount gone stale, a volume swapped: unusable
    third, stats = _compile(tmp_path / "c", url)
    assert third == first and stats.misses == 1 and stats.remote_errors >= 1
    assert compile_cache.failure_note(True, stats).startswith("the cache failed during the build")


# -- another user: what it needs, and what hermetic says when it lacks it -----------------------------------

PYTHON_PARTS = (Path(sys.prefix), Path(sys.base_prefix), ROOT)


def _as_other(work: Path, url: str, cache: Path, reach: tuple[Path, ...], mirror: Path, *more: str) -> subprocess.CompletedProcess[str]:
    """`hermetic build llvm` of tiny's `support` with the host compiler, as OTHER_UID, from `work`'s parent."""
    argv = [os.path.realpath(sys.executable), "-m", "hermetic", "build", "llvm", "--llvm-recipe", str(TINY),
            "--mirror", str(mirror), "--variant", "support", "--toolchain",
            "host", "--work-dir", str(work), "--cache", str(cache), "--jobs", str(os.cpu_count() or 2), "--offline",
            "auto", "--quiet", "--compile-cache", url, *more]
    env = {"PATH": os.environ["PATH"], "HOME": str(work.parent), "USER": "hermetic-other", "LOGNAME": "hermetic-other",
           "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(as_user(argv, reach=(*PYTHON_PARTS, mirror, *reach)), cwd=work.parent, env=env, capture_output=True,
                          text=True)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory the other user may enter (pytest's own temp root is 0700): what it reaches below is up to
    the permissions the test sets."""
    base = Path(tempfile.mkdtemp(prefix="hermetic-other-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_a_cache_another_user_may_not_use_is_refused_with_what_to_change(
    open_tmp: Path, redis: Redis, tiny_mirror: Path
) -> None:
    """Refused before anything runs (exit 9, no traceback): a directory above the cache it may not enter, a socket
    it may not write, a directory it may not read or (without |read-only) write."""
    home = user_dir(open_tmp / "other")
    locked = open_tmp / "locked"
    locked.mkdir(mode=0o700)
    shared = open_tmp / "shared"
    shared.mkdir(mode=0o700)
    cases = [
        (f"redis+unix:{locked}/redis.sock", (), f"may not enter {locked}"),
        # the socket's directory shown to it (the test's tmp is 0700), the socket as Redis made it: 700
        (redis.url, (redis.base,), "needs write permission on it"),
        (f"file://{shared}", (), f"cannot be read by uid {OTHER_UID}"),
        (f"file://{shared}|read-only", (), f"cannot be read by uid {OTHER_UID}"),
    ]
    for url, reach, says in cases:
        proc = _as_other(home / "work", url, home / "cache", reach, tiny_mirror)
        assert proc.returncode == 9, (url, proc.returncode, proc.stdout, proc.stderr)
        assert says in proc.stderr and "Traceback" not in proc.stderr and "fix:" in proc.stderr, proc.stderr
        assert not (home / "work").exists()  # refused before anything ran
    shared.chmod(0o755)  # readable now, still root's: hits only, which the URL must say
    proc = _as_other(home / "work", f"file://{shared}", home / "cache", (), tiny_mirror)
    assert proc.returncode == 9 and "cannot be written" in proc.stderr and "|read-only" in proc.stderr, proc.stderr


# -- real builds ------------------------------------------------------------------------------------------


def _build(work: Path, source_cache: Path, url: str, toolchain: str, tiny: tuple[str, ...]) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    hermetic(
        "build", "llvm", *tiny, "--variant", "support", "--toolchain", toolchain, "--work-dir", str(work),
        "--cache", str(source_cache),
        "--jobs", str(os.cpu_count() or 2), "--offline", "auto", "--quiet", "--compile-cache", url,
    )
    return json.loads((work / "tiny" / "support" / "record.json").read_text()), time.monotonic() - started


@pytest.fixture(scope="module")
def host_pair(
    tmp_path_factory: pytest.TempPathFactory, source_cache: Path, tiny: tuple[str, ...]
) -> Iterator[tuple[dict[str, Any], dict[str, Any], Redis]]:
    """A cold host build through a fresh Redis, then a warm one in another work directory; Redis still up."""
    base = tmp_path_factory.mktemp("ccache-host")
    r = Redis(base / "redis")
    r.start()
    try:
        cold, _ = _build(base / "one" / "work", source_cache, r.url, "host", tiny)
        warm, _ = _build(base / "other" / "place" / "work", source_cache, r.url, "host", tiny)
        yield cold, warm, r
    finally:
        r.kill()


def test_a_build_through_the_cache_has_the_tree_of_one_without(host_pair: Any, tiny_install: Path) -> None:
    cold, warm, _ = host_pair
    plain = json.loads(tiny_install.read_text())
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
    assert c["stats"]["misses"] >= 30 and c["stats"]["hit_rate"] < 0.1
    assert w["stats"]["hit_rate"] >= 0.95 and w["stats"]["remote_hits"] == w["stats"]["hits"]
    assert w["stats"]["hits"] >= c["stats"]["misses"] * 0.95 and w["stats"]["remote_errors"] == 0
    assert redis.keys() > 0


def test_another_user_hits_from_another_directory_once_it_may_write_the_socket(
    host_pair: Any, tiny_install: Path, source_cache: Path, open_tmp: Path, tiny_mirror: Path
) -> None:
    """uid 64123 with its own source cache (hard links: root's files, read-only to it), HOME and work dir."""
    _, _, redis = host_pair
    home = user_dir(open_tmp / "other")
    cache = user_cache(source_cache, home / "cache")
    sock = redis.socket
    sock.chmod(0o666)  # what `unixsocketperm 666` would have made: any local user may use this cache
    try:
        proc = _as_other(home / "work", redis.url, cache, (redis.base,), tiny_mirror)
    finally:
        sock.chmod(0o700)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    rec = json.loads((home / "work" / "tiny" / "support" / "record.json").read_text())
    assert rec["tree"]["digest"] == json.loads(tiny_install.read_text())["tree"]["digest"]
    stats = rec["compile_cache"]["stats"]
    # every compile of the library hit; the misses are the compiles that name this user's own copies of things:
    # CMake's compiler checks (ccache sees its copy of CMake's sources, outside the build) of the build and of
    # the test_package, and the test_package's program (which misses for any user: its dependency file names
    # the package's headers by paths ccache does not make relative)
    assert stats["hits"] >= 34 and stats["misses"] <= 4 and stats["remote_errors"] == 0, stats
    assert (home / "work" / "tiny" / "support" / "install").stat().st_uid == OTHER_UID


@pytest.fixture(scope="module")
def zig_pair(
    tmp_path_factory: pytest.TempPathFactory, source_cache: Path, tiny: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """A cold zig build through an empty directory cache, a warm one in another work directory; the cache."""
    base = tmp_path_factory.mktemp("ccache-zig")
    url = f"file://{base / 'shared-cache'}"
    cold, _ = _build(base / "one", source_cache, url, "zig", tiny)
    warm, _ = _build(base / "two" / "elsewhere", source_cache, url, "zig", tiny)
    return cold, warm, base / "shared-cache"


def test_the_pinned_toolchain_hits_from_another_directory_through_a_directory_cache(
    zig_pair: Any, tiny_zig_install: Path
) -> None:
    """The zig wrappers are scripts at per-work-dir paths: the key names the toolchain, not them."""
    cold, warm, _ = zig_pair
    plain = json.loads(tiny_zig_install.read_text())
    assert cold["tree"]["digest"] == warm["tree"]["digest"] == plain["tree"]["digest"]
    assert cold["compile_cache"]["stats"]["misses"] >= 30
    assert warm["compile_cache"]["stats"]["hit_rate"] >= 0.95, warm["compile_cache"]


# -- a poisoned entry: ccache cannot tell it, the tree can ----------------------------------------------

GOOD, BAD = b"TINY ERROR: ", b"PWNED ERROR:"  # the same length: the object stays a valid one


def forge_entry(entry: Path, work: Path) -> bytes:
    """A consistent cache entry holding `entry`'s object with GOOD changed to BAD, as another client would
    write it: made by ccache itself, from a compile whose "compiler" answers with the changed object.

    ccache keys an entry by the compiler's declared identity (compiler_check), the arguments and the
    source, and never checks the object against them: a client with another compiler under the same
    identity, or anyone who may write the cache, can store any object under a real key.
    """
    work.mkdir(parents=True)
    subprocess.run(["ccache", "--extract-result", str(entry)], cwd=work, check=True, capture_output=True)
    obj = (work / "ccache-result.o").read_bytes()
    assert GOOD in obj
    (work / "bad.o").write_bytes(obj.replace(GOOD, BAD))
    fake = work / "fake-cc"
    fake.write_text(
        "#!/bin/sh\n"
        "# a compiler that answers every compile with the prepared object (and the victim's dependency file)\n"
        "out= dep= prev=\n"
        'for a do case $prev in -o) out=$a ;; -MF) dep=$a ;; esac; case $a in -E) echo "int x;"; exit 0 ;; esac; prev=$a; done\n'
        f'cp {work / "bad.o"} "$out" && cp {work / "ccache-result.d"} "$dep"\n'
    )
    fake.chmod(0o755)
    (work / "t.c").write_text("int x;\n")
    store = work / "store"
    conf = work / "ccache.conf"
    conf.write_text(f"cache_dir = {work / 'local'}\nremote_storage = file://{store}\nremote_only = true\n"
                    "compiler_check = string:anything\n")
    subprocess.run(["ccache", str(fake), "-c", "t.c", "-MD", "-MF", "t.d", "-o", "t.o"], cwd=work, check=True,
                   env={"PATH": os.environ["PATH"], "CCACHE_CONFIGPATH": str(conf)})
    (forged,) = _entries(store, "result")
    return forged.read_bytes()


def test_a_poisoned_entry_changes_the_tree_and_verify_says_why(
    zig_pair: Any, tiny_zig_install: Path, source_cache: Path, tmp_path: Path, tiny: tuple[str, ...]
) -> None:
    cold, _, store = zig_pair
    plain = json.loads(tiny_zig_install.read_text())
    victims = []
    for entry in _entries(store, "result"):
        out = tmp_path / "look" / entry.name
        out.mkdir(parents=True)
        subprocess.run(["ccache", "--extract-result", str(entry)], cwd=out, check=True, capture_output=True)
        if GOOD in (out / "ccache-result.o").read_bytes():
            victims.append(entry)
    assert len(victims) == 1, f"expected one object saying {GOOD!r}: {victims}"
    forged = forge_entry(victims[0], tmp_path / "forge")
    tmp = victims[0].with_name(victims[0].name + ".tmp")
    tmp.write_bytes(forged)
    os.replace(tmp, victims[0])  # as a writer of the cache would store it
    try:
        work = tmp_path / "three" / "work"
        # zig's own runtime (libc++, crt) as the cold build made it: only the compile cache is asked
        shutil.copytree(Path(cold["install_root"]).parents[2] / "zig-cache", work / "zig-cache", symlinks=True)
        poisoned, _ = _build(work, source_cache, f"file://{store}", "zig", tiny)
    finally:
        victims[0].unlink()  # ccache never reads the entry again: the cache is shared by the module
    # ccache served it as a hit, like every other: nothing in its counters tells
    stats = poisoned["compile_cache"]["stats"]
    assert stats["hit_rate"] >= 0.95 and stats["remote_errors"] == 0 and "note" not in poisoned["compile_cache"]
    assert poisoned["tree"]["digest"] != plain["tree"]["digest"]
    assert poisoned["inputs_digest"] == plain["inputs_digest"]  # the same build, by every input
    lib = Path(poisoned["install_root"]) / "usr" / "lib64" / "tiny-support-1.0.0" / "lib" / "libTinySupport.a"
    assert BAD in lib.read_bytes()
    rebuild = tmp_path / "rebuild"
    proc = hermetic("verify", str(work / "tiny" / "support" / "record.json"), *tiny, "--cache", str(source_cache),
                    "--rebuild-dir", str(rebuild), "--reuse-pruned", "--jobs", str(os.cpu_count() or 2), check=False)
    err = proc.stderr
    assert proc.returncode == 8, (proc.returncode, proc.stdout[-3000:], err[-3000:])
    assert "Traceback" not in err and "error: the rebuild of" in err and "differs: install tree" in err
    assert f"took {stats['hits']} of its {stats['hits'] + stats['misses']} compiles from the compile cache file://{store}" in err
    assert "a wrong entry in that cache" in err and "--no-compile-cache --force" in err, err
    assert "lib/libTinySupport.a" in proc.stdout  # the differing file is named
    rebuilt = json.loads((rebuild / "work" / "tiny" / "support" / "record.json").read_text())
    assert rebuilt["tree"]["digest"] == plain["tree"]["digest"]  # without the cache: the clean tree


# -- the cache killed mid-build ------------------------------------------------------------------------------


def test_a_cache_killed_mid_build_changes_nothing_and_the_record_counts_what_ran_without_it(
    host_pair: Any, tiny_install: Path, source_cache: Path, tmp_path: Path, tiny: tuple[str, ...]
) -> None:
    """A warm build whose Redis is SIGKILLed once it has served about two thirds of the build's reads (the rest
    compile here)."""
    _, warm, redis = host_pair
    redis.command("SAVE")  # the module's Redis comes back with its entries afterwards (dump.rdb in its --dir)
    reads = warm["compile_cache"]["stats"]["hits"] * 2  # a direct hit reads a manifest and a result
    start = redis.stat("keyspace_hits")
    killed: list[int] = []
    done = threading.Event()

    def kill_midway() -> None:
        while not done.wait(0.01):  # a warm tiny build's compiles take about a second
            try:
                if redis.stat("keyspace_hits") - start >= reads * 2 // 3:
                    redis.kill()
                    killed.append(1)
                    return
            except OSError:
                continue

    watcher = threading.Thread(target=kill_midway, daemon=True)
    watcher.start()
    try:
        rec, _ = _build(tmp_path / "dies" / "work", source_cache, redis.url, "host", tiny)
    finally:
        done.set()
        watcher.join()
        if not redis.proc or redis.proc.poll() is not None:
            redis.start()
    assert killed, "the build finished before Redis was killed"
    assert rec["tree"]["digest"] == json.loads(tiny_install.read_text())["tree"]["digest"]
    use = rec["compile_cache"]
    stats = use["stats"]
    # ccache's own count: one remote storage error per compile that found Redis gone, each compiled here
    assert use["answered"] is True and stats["hits"] >= 10 and stats["remote_errors"] >= 5, use
    assert stats["misses"] >= stats["remote_errors"] - 2, use  # give or take compiles in flight at the kill
    assert use["note"].startswith(f"the cache failed during the build: ccache counted {stats['remote_errors']} remote storage errors")
    assert redis.keys() > 0  # back, with what the cold build stored
