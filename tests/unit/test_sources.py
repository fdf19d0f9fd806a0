from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from hermetic.core.errors import SourceError
from hermetic.fetch import cache, prune, sources
from hermetic.model import recipe

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.unit

EPOCH = 1736812800


def make_source_tar(path: Path, top: str, mtime: int = 1_800_000_000) -> None:
    """A tiny llvm-project lookalike with the parts pruning keeps and drops."""
    files = {
        "README.md": b"top\n",
        "cmake/Modules/X.cmake": b"# shared\n",
        "third-party/siphash/SipHash.h": b"// siphash\n",
        "third-party/benchmark/b.cc": b"// bench\n",
        "llvm/CMakeLists.txt": b"project(LLVM)\n",
        "llvm/lib/Support/A.cpp": b"int a;\n",
        "llvm/lib/Target/TargetMachine.cpp": b"// tm\n",
        "llvm/lib/Target/CMakeLists.txt": b"# targets\n",
        "llvm/lib/Target/NVPTX/NVPTX.td": b"// nvptx\n",
        "llvm/lib/Target/NVPTX/NVPTXISel.cpp": b"// isel\n",
        "llvm/lib/Target/AMDGPU/AMDGPU.td": b"// amdgpu\n",
        "llvm/lib/Target/ARM/ARM.td": b"// arm\n",
        "llvm/lib/Target/ARM/ARMISel.cpp": b"// arm isel\n",
        "llvm/lib/Target/RISCV/RISCVFeatures.td": b"// rv\n",
        "llvm/test/CodeGen/x.ll": b"; test\n",
        "llvm/unittests/U.cpp": b"// unit\n",
        "llvm/docs/index.rst": b"docs\n",
        "llvm/utils/TableGen/T.cpp": b"// tblgen\n",
        "mlir/lib/IR/Op.cpp": b"// mlir\n",
        "clang/lib/Sema.cpp": b"// clang\n",
    }
    with tarfile.open(path, "w:xz") as tar:
        for name, data in sorted(files.items(), reverse=True):  # unsorted order on purpose
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mtime = mtime
            info.uid, info.uname = 1000, "dev"
            info.mode = 0o664
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def fake(tmp_path: Path) -> tuple[recipe.Recipe, Path]:
    """The real recipe, with its pinned archive swapped for a small synthetic one."""
    real = recipe.load(ROOT / "recipes")
    archive_path = tmp_path / "mirror" / "llvm-project-19.1.7.src.tar.xz"
    archive_path.parent.mkdir()
    make_source_tar(archive_path, "llvm-project-19.1.7.src")
    digest = hashlib.sha256(archive_path.read_bytes()).hexdigest()
    upstream = replace(real.archives[0], sha256=digest, url="")
    return replace(real, archives=(upstream,)), archive_path


def no_log(msg: str) -> None:
    pass


def assert_nothing_cached(cache: Path) -> None:
    left = [p for p in (cache / "sources").rglob("*") if p.is_file()] if (cache / "sources").exists() else []
    assert left == [], f"refused archive left files in the cache: {left}"


def test_mirror_archive_is_verified_and_cached(fake: tuple[recipe.Recipe, Path], tmp_path: Path) -> None:
    rec, path = fake
    cache = tmp_path / "cache"
    got = sources.fetch(cache, rec, [path.parent], use_urls=False, use_apt=False, log=no_log)
    assert got.path == cache / "sources" / "sha256" / rec.archives[0].sha256 / path.name
    assert got.path.read_bytes() == path.read_bytes()
    again = sources.fetch(cache, rec, [], use_urls=False, use_apt=False, log=no_log)
    assert again.path == got.path and again.origin.startswith("mirror:")


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:], id="tampered"),
        pytest.param(lambda b: b[: len(b) // 2], id="truncated"),
        pytest.param(lambda b: b + b"\0" * 512, id="wrong-size"),
    ],
)
def test_damaged_archive_is_refused_and_not_cached(fake: tuple[recipe.Recipe, Path], tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    rec, path = fake
    path.write_bytes(damage(path.read_bytes()))
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as exc:
        sources.fetch(cache, rec, [path.parent], use_urls=False, use_apt=False, log=no_log)
    msg = exc.value.render()
    assert rec.archives[0].sha256 in msg
    assert hashlib.sha256(path.read_bytes()).hexdigest() in msg
    assert str(path) in msg
    assert_nothing_cached(cache)
    assert sources.cached(cache, rec) is None


def test_missing_everywhere_says_what_to_do(fake: tuple[recipe.Recipe, Path], tmp_path: Path) -> None:
    rec, _ = fake
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SourceError) as exc:
        sources.fetch(tmp_path / "cache", rec, [empty], use_urls=False, use_apt=False, log=no_log)
    assert "--mirror" in exc.value.fix


def test_missing_mirror_directory_is_an_error(fake: tuple[recipe.Recipe, Path], tmp_path: Path) -> None:
    rec, _ = fake
    with pytest.raises(SourceError, match="does not exist"):
        sources.fetch(tmp_path / "c", rec, [tmp_path / "nope"], use_urls=False, use_apt=False, log=no_log)


def test_prune_is_deterministic_and_keeps_only_what_the_variant_builds(
    fake: tuple[recipe.Recipe, Path], tmp_path: Path
) -> None:
    rec, path = fake
    src = sources.fetch(tmp_path / "cache", rec, [path.parent], use_urls=False, use_apt=False, log=no_log)
    nvptx = rec.variant("nvptx")
    a = prune.prune(src, rec, nvptx, tmp_path / "a" / "p.tar.xz", no_log)
    b = prune.prune(src, rec, nvptx, tmp_path / "b" / "p.tar.xz", no_log)
    assert a.read_bytes() == b.read_bytes()
    with tarfile.open(a) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    files = {n.removeprefix("llvm-project-19.1.7.src/") for m, n in zip(members, names, strict=True) if m.isfile()}
    assert files == {
        "cmake/Modules/X.cmake",
        "third-party/siphash/SipHash.h",
        "llvm/CMakeLists.txt",
        "llvm/lib/Support/A.cpp",
        "llvm/lib/Target/TargetMachine.cpp",
        "llvm/lib/Target/CMakeLists.txt",
        "llvm/lib/Target/NVPTX/NVPTX.td",
        "llvm/lib/Target/NVPTX/NVPTXISel.cpp",
        "llvm/lib/Target/ARM/ARM.td",
        "llvm/lib/Target/RISCV/RISCVFeatures.td",
        "llvm/utils/TableGen/T.cpp",
    }
    for m in members:
        assert (m.uid, m.gid, m.uname, m.gname) == (0, 0, "", "")
        assert m.mtime <= EPOCH
        assert m.mode in (0o644, 0o755)


def test_prune_follows_the_variant(fake: tuple[recipe.Recipe, Path], tmp_path: Path) -> None:
    rec, path = fake
    src = sources.fetch(tmp_path / "cache", rec, [path.parent], use_urls=False, use_apt=False, log=no_log)
    out = prune.prune(src, rec, rec.variant("triton"), tmp_path / "t.tar.xz", no_log)
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
    top = "llvm-project-19.1.7.src/"
    assert top + "mlir/lib/IR/Op.cpp" in names
    assert top + "llvm/lib/Target/AMDGPU/AMDGPU.td" in names
    assert top + "clang/lib/Sema.cpp" not in names
    key_nvptx = prune.prune_key(src.archive, rec.variant("nvptx"), rec.prune)
    assert key_nvptx != prune.prune_key(src.archive, rec.variant("triton"), rec.prune)


def test_corrupt_archive_gives_source_error(fake: tuple[recipe.Recipe, Path], tmp_path: Path) -> None:
    rec, _ = fake
    bad = tmp_path / "bad.tar.xz"
    bad.write_bytes(b"\xfd7zXZ\0garbage" * 10)
    # the digest matches, so the archive's format is what fails, not the digest check
    archive = replace(rec.archives[0], sha256=hashlib.sha256(bad.read_bytes()).hexdigest())
    src = sources.CachedArchive(archive, bad, "test")
    with pytest.raises(SourceError, match="cannot read source archive"):
        prune.prune(src, rec, rec.variant("nvptx"), tmp_path / "o.tar.xz", no_log)
    assert not (tmp_path / "o.tar.xz").exists()


def test_deb_src_entries_are_derived_from_the_machines_sources(tmp_path: Path) -> None:
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: https://vendor.invalid/apt\nSuites: stable\nComponents: main\n"
    )
    (etc / "sources.list").write_text("deb [signed-by=/k.gpg] http://other.invalid/debian-security bookworm-security main\n")
    text = sources._deb_src_entries(etc)
    blocks = text.strip().split("\n\n")
    assert len(blocks) == 2
    assert all(b.startswith("Types: deb-src") for b in blocks)
    assert "URIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates" in blocks[0]
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in blocks[0]
    assert "vendor.invalid" not in text
    assert "URIs: http://other.invalid/debian-security" in blocks[1] and "Signed-By: /k.gpg" in blocks[1]


# -- the cache is re-verified on every read ---------------------------------------------------


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit
    path.write_bytes(bytes(data))


def test_damaged_cache_entry_is_removed_and_fetched_again(fake: tuple[recipe.Recipe, Path], tmp_path: Path) -> None:
    rec, path = fake
    cache = tmp_path / "cache"
    got = sources.fetch(cache, rec, [path.parent], use_urls=False, use_apt=False, log=no_log)
    _flip_byte(got.path)
    logged: list[str] = []
    again = sources.fetch(cache, rec, [path.parent], use_urls=False, use_apt=False, log=logged.append)
    assert again.path.read_bytes() == path.read_bytes()
    assert again.origin.startswith("mirror:")
    assert not any("already cached" in m for m in logged)
    assert any("damaged" in m and str(got.path) in m and rec.archives[0].sha256 in m for m in logged)


def test_damaged_cache_entry_with_no_origin_left_fails_naming_path_and_digests(
    fake: tuple[recipe.Recipe, Path], tmp_path: Path
) -> None:
    rec, path = fake
    cache = tmp_path / "cache"
    got = sources.fetch(cache, rec, [path.parent], use_urls=False, use_apt=False, log=no_log)
    _flip_byte(got.path)
    damaged_digest = hashlib.sha256(got.path.read_bytes()).hexdigest()
    with pytest.raises(SourceError) as exc:
        sources.fetch(cache, rec, [], use_urls=False, use_apt=False, log=no_log)
    msg = exc.value.render()
    assert str(got.path) in msg and rec.archives[0].sha256 in msg and damaged_digest in msg
    assert "--no-urls" in exc.value.fix and "--no-apt" in exc.value.fix
    assert exc.value.exit_code == 4
    assert_nothing_cached(cache)


def test_archive_planted_in_the_cache_is_not_trusted(fake: tuple[recipe.Recipe, Path], tmp_path: Path) -> None:
    rec, _ = fake
    cache = tmp_path / "cache"
    planted = sources.cache_path(cache, rec.archives[0])
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"not the release")
    planted.with_name(planted.name + ".origin").write_text("url:https://example.invalid/x\n")
    assert sources.cached(cache, rec) is None
    assert_nothing_cached(cache)


def test_prune_verifies_the_archive_it_reads(fake: tuple[recipe.Recipe, Path], tmp_path: Path) -> None:
    rec, path = fake
    cache = tmp_path / "cache"
    src = sources.fetch(cache, rec, [path.parent], use_urls=False, use_apt=False, log=no_log)
    _flip_byte(src.path)
    with pytest.raises(SourceError) as exc:
        prune.prune(src, rec, rec.variant("nvptx"), tmp_path / "p.tar.xz", no_log)
    assert rec.archives[0].sha256 in exc.value.why and str(src.path) in exc.value.what
    assert not (tmp_path / "p.tar.xz").exists()
    assert_nothing_cached(cache)


def test_cached_file_helpers(tmp_path: Path) -> None:
    f = tmp_path / "sha256" / "x" / "file"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"content")
    good = hashlib.sha256(b"content").hexdigest()
    assert cache.cached_file(f, good) == f
    assert cache.require_cached_file(f, good, "toolchain", "refetch") == f
    with cache.open_verified(f, good, "toolchain", "refetch") as opened:
        assert opened.read() == b"content"
    assert cache.cached_file(tmp_path / "absent", good) is None
    with pytest.raises(SourceError, match="missing"):
        cache.require_cached_file(tmp_path / "absent", good, "toolchain", "refetch")
    f.write_bytes(b"contenT")  # same size, same mtime second: a memo of size+mtime would be fooled
    with pytest.raises(SourceError) as exc:
        cache.require_cached_file(f, good, "toolchain", "refetch", remove=False)
    assert str(f) in exc.value.what and good in exc.value.why
    assert hashlib.sha256(b"contenT").hexdigest() in exc.value.why
    assert f.exists()  # remove=False leaves it
    logged: list[str] = []
    assert cache.cached_file(f, good, logged.append) is None
    assert not f.exists() and logged and str(f) in logged[0]


# -- disk full -----------------------------------------------------------------------------------


def test_disk_full_during_download_names_the_path_and_leaves_nothing(
    fake: tuple[recipe.Recipe, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import threading

    from fake_http import FakeHandler, FakeServer
    from hermetic.core.errors import EnvironmentError_

    rec, path = fake
    data = path.read_bytes()

    class Handler(FakeHandler):
        def do_GET(self) -> None:
            self.reply(200, data)

    server = FakeServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        rec = replace(rec, archives=(replace(rec.archives[0], url=f"http://{server.host}/{path.name}"),))

        def full_disk(src, dst, length=0):  # type: ignore[no-untyped-def]
            dst.write(src.read(100))
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(sources.shutil, "copyfileobj", full_disk)
        cache = tmp_path / "cache"
        with pytest.raises(EnvironmentError_) as exc:
            sources.fetch(cache, rec, [], use_urls=True, use_apt=False, log=no_log)
        assert str(sources.cache_path(cache, rec.archives[0])) in exc.value.what
        assert exc.value.exit_code == 9
        assert_nothing_cached(cache)
    finally:
        server.shutdown()
        server.server_close()


def test_disk_full_while_admitting_from_a_mirror(
    fake: tuple[recipe.Recipe, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from hermetic.core.errors import EnvironmentError_

    rec, path = fake

    def full_disk(src, dst):  # type: ignore[no-untyped-def]
        Path(dst).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(sources.shutil, "copyfile", full_disk)
    cache = tmp_path / "cache"
    with pytest.raises(EnvironmentError_) as exc:
        sources.fetch(cache, rec, [path.parent], use_urls=False, use_apt=False, log=no_log)
    assert str(sources.cache_path(cache, rec.archives[0])) in exc.value.what
    assert_nothing_cached(cache)


def test_disk_full_in_apt_source_names_the_path(
    fake: tuple[recipe.Recipe, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    from hermetic.core.errors import EnvironmentError_

    rec, _ = fake
    rec = replace(rec, archives=(replace(rec.archives[0], apt_source_package="llvm-toolchain-19"),))
    monkeypatch.setattr(sources.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(sources, "_deb_src_entries", lambda etc: "Types: deb-src\nURIs: http://x.invalid/debian\n")
    monkeypatch.setattr(sources, "_run", lambda argv, what, cwd=None: None)

    def apt_source(argv, cwd, **kw):  # type: ignore[no-untyped-def]
        (Path(cwd) / (rec.archives[0].file + ".partial")).write_bytes(b"half")
        return subprocess.CompletedProcess(argv, 100, "E: Write error - write (28: No space left on device)\n")

    monkeypatch.setattr(sources.subprocess, "run", apt_source)
    cache = tmp_path / "cache"
    with pytest.raises(EnvironmentError_) as exc:
        sources.fetch(cache, rec, [], use_urls=False, use_apt=True, log=no_log)
    assert rec.archives[0].file in exc.value.what
    assert [p for p in (cache / "apt").iterdir() if p.name.startswith("tmp")] == []
    assert_nothing_cached(cache)


def _fetch_with_apt(cache: Path, rec: recipe.Recipe, out: Path) -> None:
    said: list[str] = []
    got = sources.fetch(cache, rec, [], use_urls=False, use_apt=True, log=said.append)
    out.write_text("\n".join([*said, str(got.path)]) + "\n")


def test_two_processes_fetching_through_apt_take_turns(
    fake: tuple[recipe.Recipe, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """apt-get fails at once on its own lock when another apt-get holds the cache's lists: the second hermetic
    process waits for the first (real processes, apt faked) and takes the archive the first cached."""
    import multiprocessing
    import os
    import subprocess
    import time

    rec, path = fake
    rec = replace(rec, archives=(replace(rec.archives[0], apt_source_package="llvm-toolchain-19"),))
    calls, go = tmp_path / "apt-calls", tmp_path / "go"
    monkeypatch.setattr(sources.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(sources, "_deb_src_entries", lambda etc: "Types: deb-src\nURIs: http://x.invalid/debian\n")

    def apt_update(argv, what, cwd=None):  # type: ignore[no-untyped-def]
        with open(calls, "a") as f:
            f.write(f"{os.getpid()} update\n")
        while not go.exists():  # the first fetch holds the lists until the test says so
            time.sleep(0.02)

    def apt_source(argv, cwd, **kw):  # type: ignore[no-untyped-def]
        with open(calls, "a") as f:
            f.write(f"{os.getpid()} source\n")
        (Path(cwd) / rec.archives[0].file).write_bytes(path.read_bytes())
        return subprocess.CompletedProcess(argv, 0, "")

    monkeypatch.setattr(sources, "_run", apt_update)
    monkeypatch.setattr(sources.subprocess, "run", apt_source)
    cache = tmp_path / "cache"
    ctx = multiprocessing.get_context("fork")
    first = ctx.Process(target=_fetch_with_apt, args=(cache, rec, tmp_path / "first"))
    first.start()
    deadline = time.monotonic() + 30
    while not calls.exists():
        assert time.monotonic() < deadline and first.is_alive(), "the first fetch never reached apt"
        time.sleep(0.02)
    second = ctx.Process(target=_fetch_with_apt, args=(cache, rec, tmp_path / "second"))
    second.start()
    time.sleep(1.0)
    try:
        assert second.is_alive(), "the second fetch did not wait"
    finally:
        go.touch()
        first.join(30)
        second.join(30)
    assert (first.exitcode, second.exitcode) == (0, 0)
    assert [line.split()[1] for line in calls.read_text().splitlines()] == ["update", "source"], "apt ran twice"
    said = (tmp_path / "second").read_text()
    assert f"waiting for another hermetic process that is filling {cache / 'apt' / 'lists'}" in said
    assert said.splitlines()[-1] == str(sources.cache_path(cache, rec.archives[0]))
    assert sorted(p.name for p in (cache / "apt").iterdir()) == ["lists", "sources.list.d"]
