"""Pinned toolchains as data: loading, validation, the verified cache, unpacking, profiles, the slim archive.

The real wheel is 101 MB, so these tests use a small fake ziglang wheel with the same layout;
tests/integration/test_toolchain_zig.py uses the real one.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from hermetic.build import env, llvm
from hermetic.build import wrappers as zig_wrappers
from hermetic.core.errors import SourceError, UsageError
from hermetic.fetch import toolchain
from hermetic.model import recipe, toolchains
from hermetic.model.options import resolve

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.unit

# The fake wheel's entries: what unpacking keeps (True) and drops (False) for x86_64 + aarch64.
ENTRIES = {
    "ziglang/zig": True,
    "ziglang/LICENSE": True,
    "ziglang/README.md": False,
    "ziglang/__init__.py": False,
    "ziglang/lib/std/std.zig": True,
    "ziglang/lib/compiler_rt.zig": True,
    "ziglang/lib/include/stddef.h": True,
    "ziglang/lib/libcxx/include/vector": True,
    "ziglang/lib/libcxxabi/src/a.cpp": True,
    "ziglang/lib/libunwind/src/u.c": True,
    "ziglang/lib/docs/index.html": False,
    "ziglang/lib/libtsan/t.cpp": False,
    "ziglang/lib/libc/glibc/abilists": True,
    "ziglang/lib/libc/musl/src/m.c": False,
    "ziglang/lib/libc/mingw/w.c": False,
    "ziglang/lib/libc/wasi/w.c": False,
    "ziglang/lib/libc/include/generic-glibc/stdio.h": True,
    "ziglang/lib/libc/include/any-linux-any/linux/types.h": True,
    "ziglang/lib/libc/include/x86-linux-gnu/bits/a.h": True,
    "ziglang/lib/libc/include/aarch64-linux-gnu/bits/a.h": True,
    "ziglang/lib/libc/include/aarch64-linux-any/asm/a.h": True,
    "ziglang/lib/libc/include/x86_64-linux-musl/bits/a.h": False,
    "ziglang/lib/libc/include/any-windows-any/windows.h": False,
    "ziglang/lib/libc/include/any-darwin-any/d.h": False,
    "ziglang/lib/libc/include/generic-freebsd/f.h": False,
    "ziglang/lib/libc/include/riscv-linux-gnu/r.h": False,
    "ziglang-0.17.1.dist-info/RECORD": False,
}


def make_wheel(path: Path, order: int = 1) -> str:
    """A small ziglang lookalike (entries in `order`); returns its sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name in sorted(ENTRIES, reverse=order < 0):
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 2, 3, 4, 5))
            info.external_attr = (0o100755 if name.endswith("/zig") else 0o100644) << 16
            z.writestr(info, f"content of {name}\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fake(tmp_path: Path) -> tuple[toolchains.Toolchain, Path]:
    """The real zig entry of toolchains.yml, pinned to a fake wheel in a mirror directory."""
    wheel = tmp_path / "mirror" / "ziglang-0.17.1-py3-none-fake.whl"
    sha = make_wheel(wheel)
    real = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig")
    return replace(real, file=wheel.name, sha256=sha), wheel


def write_data(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "tc"
    d.mkdir(exist_ok=True)
    (d / "toolchains.yml").write_text(text)
    return d


# --- data --------------------------------------------------------------------


def test_real_data_loads_the_zig_default_and_host() -> None:
    cat = toolchains.load(ROOT / "toolchain")
    assert cat.default == "zig" and set(cat.names()) == {"zig", "host"}
    assert toolchains.select(cat).kind == "zig"
    zig = toolchains.select(cat, "zig")
    assert zig.kind == "zig" and zig.version == "0.17.1" and zig.target == "x86_64-linux-gnu.2.28"
    assert zig.glibc == "2.28" and zig.arch == "x86_64" and len(zig.sha256) == 64
    assert zig.file.startswith("ziglang-0.17.1-") and zig.file.endswith(".whl")
    assert zig.digest() == toolchains.select(toolchains.load(ROOT / "toolchain"), "zig").digest()
    assert toolchains.select(cat, "host").identity() == {"name": "host", "kind": "host"}


def test_unknown_toolchain_lists_the_valid_ones() -> None:
    with pytest.raises(UsageError) as err:
        toolchains.select(toolchains.load(ROOT / "toolchain"), "gcc-14")
    assert "unknown toolchain 'gcc-14'" in err.value.what and "zig, host" in err.value.fix


def test_glibc_floor_is_the_target_suffix_and_changes_the_identity() -> None:
    cat = toolchains.load(ROOT / "toolchain")
    old = toolchains.select(cat, "zig", "2.17")
    assert old.target == "x86_64-linux-gnu.2.17" and old.glibc == "2.17"
    assert old.digest() != toolchains.select(cat, "zig").digest()
    assert toolchains.select(cat, "zig", arch="aarch64").target == "aarch64-linux-gnu.2.28"


@pytest.mark.parametrize("floor", ["2.16", "2", "2.x", "3.1", "2.28.1", "latest"])
def test_bad_glibc_floor_is_a_usage_error(floor: str) -> None:
    with pytest.raises(UsageError) as err:
        toolchains.select(toolchains.load(ROOT / "toolchain"), "zig", floor)
    assert "glibc floor" in err.value.what and err.value.fix


def test_glibc_floor_does_not_apply_to_host() -> None:
    with pytest.raises(UsageError, match="host"):
        toolchains.select(toolchains.load(ROOT / "toolchain"), "host", "2.28")


def test_settings_take_toolchain_and_glibc_by_precedence(tmp_path: Path) -> None:
    s = resolve({"toolchain": "host"}, {"HERMETIC_TOOLCHAIN": "zig", "HERMETIC_GLIBC": "2.17"}, ROOT)
    assert s.toolchain == "host" and s.glibc == "2.17"
    s = resolve({}, {"HERMETIC_TOOLCHAIN": "zig"}, ROOT)
    assert s.toolchain == "zig" and s.glibc is None
    with pytest.raises(UsageError, match="glibc"):
        resolve({}, {"HERMETIC_GLIBC": "two"}, ROOT)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("toolchains: []\n", "at least one"),
        ("default: zig\ntoolchains:\n  zig: {kind: clang}\n", "kind 'clang'"),
        ("default: zig\ntoolchains:\n  zig: {kind: zig, version: '1'}\n", "lacks"),
        ("default: gcc\ntoolchains:\n  host: {kind: host}\n", "default 'gcc'"),
        ("toolchains: [\n", "cannot parse"),
    ],
)
def test_malformed_data_is_refused_with_the_reason(tmp_path: Path, text: str, why: str) -> None:
    with pytest.raises(UsageError) as err:
        toolchains.load(write_data(tmp_path, text))
    assert why in err.value.what + err.value.why


def test_bad_sha256_and_target_in_data_are_refused(tmp_path: Path) -> None:
    base = (ROOT / "toolchain" / "toolchains.yml").read_text()
    sha = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig").sha256
    with pytest.raises(UsageError) as err:
        toolchains.load(write_data(tmp_path, base.replace(sha, "abc")))
    assert "64 hex" in err.value.why
    with pytest.raises(UsageError) as err:
        toolchains.load(write_data(tmp_path, base.replace("target: x86_64-linux-gnu.2.28", "target: x86_64-windows-gnu")))
    assert "target 'x86_64-windows-gnu'" in err.value.why


def test_build_inputs_digest_names_the_toolchain() -> None:
    rec = recipe.load(ROOT / "recipes")
    variant = rec.variant("support")
    src = llvm.source_identity("pruned")
    cat = toolchains.load(ROOT / "toolchain")
    digests = {
        llvm.inputs_digest(rec, variant, src, toolchains.select(cat, "zig")),
        llvm.inputs_digest(rec, variant, src, toolchains.select(cat, "zig", "2.17")),
        llvm.inputs_digest(rec, variant, src, toolchains.select(cat, "host")),
    }
    assert len(digests) == 3
    # no toolchain given: the checkout's default (host, until the wheel builds with zig)
    assert llvm.inputs_digest(rec, variant, src) == llvm.inputs_digest(rec, variant, src, toolchains.select(cat))


# --- fetch ---------------------------------------------------------------------


def test_fetch_from_a_mirror_verifies_and_caches(tmp_path: Path, fake: tuple[toolchains.Toolchain, Path]) -> None:
    tc, wheel = fake
    got = toolchain.fetch(tmp_path / "cache", tc, [wheel.parent], use_urls=False)
    assert got == tmp_path / "cache" / "toolchains" / "sha256" / tc.sha256 / tc.file
    assert got.read_bytes() == wheel.read_bytes()
    # a second fetch is a cache hit: the mirror is not needed any more
    wheel.unlink()
    assert toolchain.fetch(tmp_path / "cache", tc, [], use_urls=False) == got


def test_fetch_refuses_a_wrong_digest_and_leaves_nothing(tmp_path: Path, fake: tuple[toolchains.Toolchain, Path]) -> None:
    tc, wheel = fake
    wheel.write_bytes(wheel.read_bytes() + b"tampered")
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as err:
        toolchain.fetch(cache, tc, [wheel.parent], use_urls=False)
    assert "does not match its pinned digest" in err.value.what and tc.sha256 in err.value.why
    assert not (cache / "toolchains" / "sha256").exists() or not any((cache / "toolchains" / "sha256").iterdir())
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_no_urls_and_nothing_cached_says_what_to_do(tmp_path: Path, fake: tuple[toolchains.Toolchain, Path]) -> None:
    tc, _ = fake
    with pytest.raises(SourceError) as err:
        toolchain.fetch(tmp_path / "cache", tc, [tmp_path / "empty"], use_urls=False)
    assert "not in the cache" in err.value.what and "--mirror" in err.value.fix and tc.sha256 in err.value.fix
    assert f"pip download --no-deps {tc.package}=={tc.version}" in err.value.fix


def test_pypi_download_failure_is_a_source_error(tmp_path: Path, fake: tuple[toolchains.Toolchain, Path]) -> None:
    tc, _ = fake
    with pytest.raises(SourceError) as err:
        toolchain.fetch(tmp_path / "cache", tc, [], use_urls=True, pip=["false"])
    assert "cannot download" in err.value.what and "--mirror" in err.value.fix
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_pip_argv_pins_version_hash_and_platform(tmp_path: Path) -> None:
    tc = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig")
    argv = toolchain.pip_download_argv(tc, tmp_path / "out", tmp_path / "req.txt")
    assert argv[1:4] == ["-m", "pip", "download"]
    assert {"--no-deps", "--require-hashes", "--only-binary=:all:"} <= set(argv)
    # pip matches the wheel's Requires-Python against this version: a bare "3" means 3.0 and
    # finds nothing (ziglang says ~=3.5).
    assert Version(argv[argv.index("--python-version") + 1]) in SpecifierSet("~=3.5")


# --- unpack and the slim archive ------------------------------------------------------


@pytest.mark.parametrize(("name", "kept"), sorted(ENTRIES.items()))
def test_keep_member_selects_what_linux_gnu_targets_need(name: str, kept: bool) -> None:
    rel = name.removeprefix("ziglang/")
    assert (name.startswith("ziglang/") and toolchain.keep_member(rel, ("x86_64", "aarch64"))) is kept


def test_keep_member_follows_the_arches() -> None:
    assert not toolchain.keep_member("lib/libc/include/aarch64-linux-gnu/bits/a.h", ("x86_64",))
    assert toolchain.keep_member("lib/libc/include/x86-linux-any/asm/a.h", ("x86_64",))


def test_unpack_keeps_the_selection_and_the_exec_bit(tmp_path: Path, fake: tuple[toolchains.Toolchain, Path]) -> None:
    tc, wheel = fake
    cache = tmp_path / "cache"
    assert toolchain.unpacked(cache, tc) is None
    root = toolchain.ensure(cache, tc, [wheel.parent], use_urls=False)
    assert root is not None and toolchain.unpacked(cache, tc) == root
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    want = sorted(n.removeprefix("ziglang/") for n, k in ENTRIES.items() if k)
    assert files == sorted([*want, ".hermetic-unpacked.json"])
    assert (root / "zig").stat().st_mode & 0o777 == 0o755 and (root / "LICENSE").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in root.parent.iterdir()] == [root.name]  # no temp dir left


def test_a_changed_cache_is_never_used(tmp_path: Path, fake: tuple[toolchains.Toolchain, Path]) -> None:
    """The unpacked compiler and the cached wheel are checked on every use, not only when they arrive."""
    tc, wheel = fake
    cache = tmp_path / "cache"
    root = toolchain.ensure(cache, tc, [wheel.parent], use_urls=False)
    assert root is not None
    planted = b"#!/bin/sh\necho not the pinned compiler\n"
    (root / "zig").write_bytes(planted)
    assert toolchain.unpacked(cache, tc) is None
    cached = toolchain.cache_path(cache, tc)
    data = bytearray(cached.read_bytes())
    data[-1] ^= 1
    cached.write_bytes(bytes(data))
    assert toolchain.cached(cache, tc) is None and not cached.exists()  # removed, to be fetched again
    again = toolchain.ensure(cache, tc, [wheel.parent], use_urls=False)
    assert again == root and toolchain.unpacked(cache, tc) == root and (root / "zig").read_bytes() != planted


def test_unpack_refuses_a_wheel_with_an_unsafe_path(tmp_path: Path, fake: tuple[toolchains.Toolchain, Path]) -> None:
    tc, wheel = fake
    with zipfile.ZipFile(wheel, "a") as z:
        z.writestr("ziglang/lib/../../evil", "x")
    tc = replace(tc, sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())
    with pytest.raises(SourceError, match="unsafe path"):
        toolchain.unpack(tmp_path / "cache", tc, wheel)
    assert not any((tmp_path / "cache" / "toolchains" / "unpacked").iterdir())


def test_slim_archive_is_deterministic(tmp_path: Path, fake: tuple[toolchains.Toolchain, Path]) -> None:
    tc, wheel = fake
    a = toolchain.slim_archive(wheel, tc, tmp_path / "a")
    # the same wheel written in another entry order, from another directory: same bytes
    other = tmp_path / "elsewhere" / wheel.name
    tc_other = replace(tc, sha256=make_wheel(other, order=-1))
    b = toolchain.slim_archive(other, tc_other, tmp_path / "b")
    assert a["sha256"] == b["sha256"] and a["size"] == b["size"]
    assert json.loads((tmp_path / "a" / "slim.json").read_text()) == a
    assert a["from"]["sha256"] == tc.sha256 and a["arches"] == ["aarch64", "x86_64"]
    with tarfile.open(tmp_path / "a" / a["file"]) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and names[0] == "zig-0.17.1"
    assert all(m.uid == 0 and m.gid == 0 and m.uname == "" and m.mtime == tc.source_date_epoch for m in members)
    assert "zig-0.17.1/zig" in names and not any("musl" in n or "windows" in n or "docs" in n for n in names)
    assert next(m for m in members if m.name == "zig-0.17.1/zig").mode == 0o755


def test_slim_archive_refuses_an_unverified_wheel(tmp_path: Path, fake: tuple[toolchains.Toolchain, Path]) -> None:
    tc, wheel = fake
    with pytest.raises(SourceError):
        toolchain.slim_archive(wheel, replace(tc, sha256="0" * 64), tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- the slim archive as a pinned input -----------------------------------------------------


@pytest.fixture
def slim(tmp_path: Path, fake: tuple[toolchains.Toolchain, Path]) -> tuple[toolchains.Toolchain, Path, Path]:
    """The fake toolchain pinning the slim archive derived from its wheel; (tc, wheel, slim archive)."""
    tc, wheel = fake
    meta = toolchain.slim_archive(wheel, tc, tmp_path / "slim")
    pin = toolchains.SlimPin(meta["file"], meta["sha256"], meta["size"])
    return replace(tc, slim=pin), wheel, tmp_path / "slim" / meta["file"]


def files_in(d: Path) -> list[Path]:
    return [p for p in d.rglob("*") if p.is_file()] if d.exists() else []


def test_real_data_pins_the_slim_archive_outside_the_identity() -> None:
    zig = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig")
    assert zig.slim is not None and zig.slim.file == toolchains.slim_name(zig) == "zig-0.17.1-linux-aarch64-x86_64-slim.tar.xz"
    assert len(zig.slim.sha256) == 64 and zig.slim.size > 0
    # how the tree arrives is not what the builds are: the identity (inputs digests) ignores the pin
    assert replace(zig, slim=None).identity() == zig.identity() and replace(zig, slim=None).digest() == zig.digest()
    assert not any(zig.slim.sha256 in v for v in zig.identity().values())
    assert toolchains.select(toolchains.load(ROOT / "toolchain"), "zig", "2.17").slim == zig.slim


@pytest.mark.parametrize(
    ("slim_yaml", "why"),
    [
        ("slim: zig.tar.xz", "exactly file, sha256 and size"),
        ("slim: {file: F, sha256: S}", "exactly file, sha256 and size"),
        ("slim: {file: F, sha256: S, size: 1, url: x}", "exactly file, sha256 and size"),
        ("slim: {file: F, sha256: abc, size: 1}", "64 hex"),
        ("slim: {file: F, sha256: S, size: -4}", "positive"),
        ("slim: {file: F, sha256: S, size: '12'}", "positive"),
        ("slim: {file: F, sha256: S, size: true}", "positive"),
        ("slim: {file: zig-0.17.1-slim.tar.xz, sha256: S, size: 1}", "derived from name, version and arches"),
    ],
)
def test_malformed_slim_pin_is_refused(tmp_path: Path, slim_yaml: str, why: str) -> None:
    real = (ROOT / "toolchain" / "toolchains.yml").read_text()
    start, end = real.index("    slim:\n"), real.index("  host:\n")
    good = "zig-0.17.1-linux-aarch64-x86_64-slim.tar.xz"
    text = real[:start] + "    " + slim_yaml.replace("file: F", f"file: {good}").replace("S", "a" * 64) + "\n" + real[end:]
    with pytest.raises(UsageError) as err:
        toolchains.load(write_data(tmp_path, text))
    assert "malformed toolchain data" in err.value.what and why in err.value.why


def test_wheel_and_slim_archive_unpack_to_the_same_tree(
    tmp_path: Path, slim: tuple[toolchains.Toolchain, Path, Path]
) -> None:
    tc, wheel, archive = slim
    from_wheel = toolchain.ensure(tmp_path / "a", tc, [wheel.parent], use_urls=False)
    from_slim = toolchain.ensure(tmp_path / "b", tc, [archive.parent], use_urls=False)
    assert from_wheel is not None and from_slim is not None
    assert from_wheel.relative_to(tmp_path / "a") == from_slim.relative_to(tmp_path / "b")
    assert toolchain._unpacked_digest(from_wheel) == toolchain._unpacked_digest(from_slim)
    assert toolchain.unpacked(tmp_path / "b", tc) == from_slim
    marks = [json.loads((d / ".hermetic-unpacked.json").read_text()) for d in (from_wheel, from_slim)]
    assert marks[0]["tree"] == marks[1]["tree"] and marks[0]["entries"] == marks[1]["entries"]
    assert marks[0]["from"] == {"file": tc.file, "sha256": tc.sha256}
    assert marks[1]["from"] == {"file": archive.name, "sha256": tc.slim.sha256 if tc.slim else ""}
    # the slim archive was admitted into the cache; the wheel never reached that one
    assert toolchain.slim_cache_path(tmp_path / "b", tc).read_bytes() == archive.read_bytes()
    assert not toolchain.cache_path(tmp_path / "b", tc).exists()
    assert [p.name for p in from_slim.parent.iterdir()] == [from_slim.name]  # no temp dir left


def test_the_tree_does_not_depend_on_the_umask(tmp_path: Path, slim: tuple[toolchains.Toolchain, Path, Path]) -> None:
    import os

    tc, wheel, archive = slim
    old = os.umask(0o077)
    try:
        a = toolchain.ensure(tmp_path / "a", tc, [wheel.parent], use_urls=False)
    finally:
        os.umask(old)
    b = toolchain.ensure(tmp_path / "b", tc, [archive.parent], use_urls=False)
    assert a is not None and b is not None
    assert (a / "lib").stat().st_mode & 0o777 == 0o755
    assert toolchain._unpacked_digest(a) == toolchain._unpacked_digest(b)


def test_unpack_slim_checks_the_digest_itself(tmp_path: Path, slim: tuple[toolchains.Toolchain, Path, Path]) -> None:
    tc, _, archive = slim
    archive.write_bytes(archive.read_bytes() + b"\0")
    with pytest.raises(SourceError, match="does not match its pinned digest"):
        toolchain.unpack_slim(tmp_path / "cache", tc, archive)
    assert files_in(tmp_path / "cache") == []


def test_a_cached_slim_archive_serves_without_a_mirror(tmp_path: Path, slim: tuple[toolchains.Toolchain, Path, Path]) -> None:
    tc, _, archive = slim
    cache = tmp_path / "cache"
    root = toolchain.ensure(cache, tc, [archive.parent], use_urls=False)
    assert root is not None
    (root / "zig").write_text("changed\n")  # the tree is checked on use, so this unpacks again
    log: list[str] = []
    assert toolchain.ensure(cache, tc, [], use_urls=False, log=log.append) == root
    assert toolchain.unpacked(cache, tc) == root and "changed" not in (root / "zig").read_text()
    assert any("already cached" in m and archive.name in m for m in log)


def test_the_wheel_comes_first_when_both_are_there(tmp_path: Path, slim: tuple[toolchains.Toolchain, Path, Path]) -> None:
    tc, wheel, archive = slim
    root = toolchain.ensure(tmp_path / "cache", tc, [archive.parent, wheel.parent], use_urls=False)
    assert root is not None
    assert json.loads((root / ".hermetic-unpacked.json").read_text())["from"]["file"] == tc.file


def test_a_tampered_slim_archive_is_refused_and_leaves_nothing(
    tmp_path: Path, slim: tuple[toolchains.Toolchain, Path, Path]
) -> None:
    tc, _, archive = slim
    assert tc.slim is not None
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 1
    archive.write_bytes(bytes(data))
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as err:
        toolchain.ensure(cache, tc, [archive.parent], use_urls=False)
    assert "does not match its pinned digest" in err.value.what and archive.name in err.value.what
    assert tc.slim.sha256 in err.value.why
    assert files_in(cache) == []
    assert not (cache / "toolchains" / "unpacked").exists() or not any((cache / "toolchains" / "unpacked").iterdir())
    # a damaged copy already in the cache is removed, never unpacked
    dest = toolchain.slim_cache_path(cache, tc)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(bytes(data))
    with pytest.raises(SourceError, match="not in the cache"):
        toolchain.ensure(cache, tc, [], use_urls=False)
    assert files_in(cache) == []


def test_nothing_found_names_both_files(tmp_path: Path, slim: tuple[toolchains.Toolchain, Path, Path]) -> None:
    tc, _, _ = slim
    assert tc.slim is not None
    with pytest.raises(SourceError) as err:
        toolchain.ensure(tmp_path / "cache", tc, [tmp_path / "empty"], use_urls=False)
    text = err.value.why + err.value.fix
    for needle in (tc.file, tc.sha256, tc.slim.file, tc.slim.sha256, "--mirror", "hermetic toolchain slim --output"):
        assert needle in text, needle
    # fetch is the wheel alone (what `toolchain slim` needs): the slim archive is no way out there
    with pytest.raises(SourceError) as err:
        toolchain.fetch(tmp_path / "cache", tc, [], use_urls=False)
    assert tc.slim.file not in err.value.why + err.value.fix


def _tar_entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **attrs: object) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode = kind, len(data), 0o644
    for k, v in attrs.items():
        setattr(info, k, v)
    return info, data


def _write_slim(path: Path, entries: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    import io
    import lzma

    with lzma.open(path, "wb", format=lzma.FORMAT_XZ) as xz, tarfile.open(fileobj=xz, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return hashlib.sha256(path.read_bytes()).hexdigest()


GOOD = [
    _tar_entry("zig-0.17.1", tarfile.DIRTYPE, mode=0o755),
    _tar_entry("zig-0.17.1/LICENSE", data=b"license\n"),
    _tar_entry("zig-0.17.1/lib", tarfile.DIRTYPE, mode=0o755),
    _tar_entry("zig-0.17.1/lib/a.h", data=b"a\n"),
    _tar_entry("zig-0.17.1/zig", data=b"#!/bin/sh\n", mode=0o755),
]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (_tar_entry("zig-0.17.1/lib/evil", tarfile.SYMTYPE, linkname="/etc"), "symbolic link"),
        (_tar_entry("zig-0.17.1/lib/zig2", tarfile.LNKTYPE, linkname="zig-0.17.1/zig"), "hard link"),
        (_tar_entry("zig-0.17.1/lib/null", tarfile.CHRTYPE, devmajor=1, devminor=3), "device node"),
        (_tar_entry("zig-0.17.1/lib/pipe", tarfile.FIFOTYPE), "FIFO"),
        (_tar_entry("zig-0.17.1/../evil", data=b"x"), "`..`"),
        (_tar_entry("zig-0.17.1/lib/../../evil", data=b"x"), "`..`"),
        (_tar_entry("/tmp/evil", data=b"x"), "absolute"),
        (_tar_entry("evil", data=b"x"), "root directory zig-0.17.1/"),
        (_tar_entry("zig-0.17.2/evil", data=b"x"), "root directory zig-0.17.1/"),
        (_tar_entry("zig-0.17.1/.hermetic-unpacked.json", data=b"{}"), "marker"),
    ],
)
def test_a_slim_archive_with_an_unsafe_member_is_refused(
    tmp_path: Path, fake: tuple[toolchains.Toolchain, Path], bad: tuple[tarfile.TarInfo, bytes], why: str
) -> None:
    tc, _ = fake
    mirror = tmp_path / "mirror-slim"
    mirror.mkdir()
    archive = mirror / toolchains.slim_name(tc)
    # the bad member last: what was written before it must go too
    sha = _write_slim(archive, [*GOOD, bad])
    tc = replace(tc, slim=toolchains.SlimPin(archive.name, sha, archive.stat().st_size))  # pinned, yet refused
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as err:
        toolchain.ensure(cache, tc, [mirror], use_urls=False)
    assert "unsafe entry" in err.value.what and why in err.value.why, err.value.render()
    assert "hermetic toolchain slim" in err.value.fix
    assert not any((cache / "toolchains" / "unpacked").iterdir())
    assert not (tmp_path / "evil").exists() and not (cache / "toolchains" / "evil").exists()
    # the same archive without the bad member unpacks: the refusal is about that member alone
    sha = _write_slim(archive, GOOD)
    tc = replace(tc, slim=toolchains.SlimPin(archive.name, sha, archive.stat().st_size))
    root = toolchain.ensure(cache, tc, [mirror], use_urls=False)
    assert root is not None and (root / "lib" / "a.h").read_text() == "a\n"
    assert (root / "zig").stat().st_mode & 0o777 == 0o755 and (root / "LICENSE").stat().st_mode & 0o777 == 0o644


# 12 bytes: only xz's footer is gone, every tar member still reads
@pytest.mark.parametrize("cut", [12, 80])
def test_a_slim_archive_without_zig_or_truncated_is_refused(
    tmp_path: Path, fake: tuple[toolchains.Toolchain, Path], cut: int
) -> None:
    tc, _ = fake
    mirror = tmp_path / "m"
    mirror.mkdir()
    archive = mirror / toolchains.slim_name(tc)
    sha = _write_slim(archive, GOOD[:-1])
    cache = tmp_path / "cache"
    with pytest.raises(SourceError, match="holds no zig"):
        toolchain.ensure(cache, replace(tc, slim=toolchains.SlimPin(archive.name, sha, 1)), [mirror], use_urls=False)
    _write_slim(archive, GOOD)
    archive.write_bytes(archive.read_bytes()[:-cut])
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    with pytest.raises(SourceError, match="cannot unpack"):
        toolchain.ensure(cache, replace(tc, slim=toolchains.SlimPin(archive.name, sha, 1)), [mirror], use_urls=False)
    assert not any((cache / "toolchains" / "unpacked").iterdir())


# --- `hermetic toolchain`: list and slim --------------------------------------------------


def fake_root(tmp_path: Path, tc: toolchains.Toolchain, slim_sha: str, slim_size: int) -> Path:
    """A checkout whose toolchains.yml pins the fake wheel and the given slim archive."""
    real = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig")
    assert real.slim is not None
    text = (ROOT / "toolchain" / "toolchains.yml").read_text()
    text = text.replace(real.file, tc.file).replace(real.sha256, tc.sha256)
    text = text.replace(real.slim.sha256, slim_sha).replace(f"size: {real.slim.size}", f"size: {slim_size}")
    root = tmp_path / "root"
    (root / "toolchain").mkdir(parents=True)
    (root / "toolchain" / "toolchains.yml").write_text(text)
    return root


def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[int, str, str]:
    import os

    from hermetic.__main__ import main

    for key in [k for k in os.environ if k.startswith("HERMETIC_")]:
        monkeypatch.delenv(key)
    rc = main(list(argv))
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_cli_toolchain_list(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out, _ = run_cli(capsys, monkeypatch, "toolchain", "list", "--root", str(ROOT))
    zig = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig")
    assert rc == 0 and zig.slim is not None
    assert out.startswith("zig (default): ziglang 0.17.1 (clang 22), target x86_64-linux-gnu.2.28, arches x86_64 aarch64")
    assert f"wheel {zig.file}  sha256 {zig.sha256}" in out and f"slim  {zig.slim.file}  sha256 {zig.slim.sha256}" in out
    assert "\nhost: " in out


def test_cli_toolchain_slim_checks_the_pin(
    tmp_path: Path, slim: tuple[toolchains.Toolchain, Path, Path], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tc, wheel, archive = slim
    assert tc.slim is not None
    common = ["--mirror", str(wheel.parent), "--no-urls", "--cache", str(tmp_path / "cache"), "--output", str(tmp_path / "o")]
    root = fake_root(tmp_path, tc, tc.slim.sha256, tc.slim.size)
    # no --toolchain: the zig toolchain that pins a slim archive, although host is the default
    rc, out, err = run_cli(capsys, monkeypatch, "toolchain", "slim", "--root", str(root), *common)
    made = tmp_path / "o" / archive.name
    assert rc == 0 and out.strip() == str(made) and made.read_bytes() == archive.read_bytes()
    assert "matches its pin" in err and "100% of" in err
    # a second run finds it there and derives nothing (no wheel needed)
    rc, out, err = run_cli(capsys, monkeypatch, "toolchain", "slim", "--root", str(root), *common[2:])
    assert rc == 0 and "already there" in err and out.strip() == str(made)
    # a pin that differs: an integrity failure naming both digests; the archive is kept
    other = "b" * 64
    root = fake_root(tmp_path / "x", tc, other, tc.slim.size)
    rc, out, err = run_cli(capsys, monkeypatch, "toolchain", "slim", "--root", str(root), *common)
    assert rc == 8 and out == "" and "does not match its pin" in err
    assert other in err and tc.slim.sha256 in err and made.is_file() and (tmp_path / "o" / "slim.json").is_file()


def test_cli_toolchain_slim_without_a_pin_says_what_to_add(
    tmp_path: Path, slim: tuple[toolchains.Toolchain, Path, Path], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tc, wheel, archive = slim
    assert tc.slim is not None
    root = fake_root(tmp_path, tc, tc.slim.sha256, tc.slim.size)
    yml = root / "toolchain" / "toolchains.yml"
    text = yml.read_text()
    yml.write_text(text[: text.index("    slim:\n")] + text[text.index("  host:\n"):])
    rc, out, err = run_cli(capsys, monkeypatch, "toolchain", "slim", "--root", str(root), "--toolchain", "zig",
                           "--mirror", str(wheel.parent), "--no-urls", "--cache", str(tmp_path / "c"),
                           "--work-dir", str(tmp_path / "w"))
    assert rc == 0 and out.strip() == str(tmp_path / "w" / "toolchains" / archive.name)
    assert "pins no slim archive" in err and f"sha256: {tc.slim.sha256}" in err and f"size: {tc.slim.size}" in err


def test_cli_toolchain_slim_of_host_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, _, err = run_cli(capsys, monkeypatch, "toolchain", "slim", "--root", str(ROOT), "--toolchain", "host",
                         "--work-dir", str(tmp_path / "w"))
    assert rc == 2 and "host has no slim archive" in err and "--toolchain zig" in err
    assert not (tmp_path / "w").exists()


# --- per build: profile and wrappers --------------------------------------------------


def test_zig_profile_and_wrappers(tmp_path: Path) -> None:
    tc = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig", "2.17")
    zig_root = tmp_path / "cache" / "zig"
    prep = zig_wrappers.prepare(tc, zig_root, tmp_path / "build" / "toolchain", ROOT / "toolchain", tmp_path / "work" / "zig")
    assert not prep.detect and prep.profile == tmp_path / "build" / "toolchain" / "profile"
    text = prep.profile.read_text()
    bin_dir = tmp_path / "build" / "toolchain" / "bin"
    for line in (
        "os=Linux", "arch=x86_64", "build_type=Release", "compiler=clang", "compiler.version=22",
        "compiler.libcxx=libc++", "compiler.cppstd=17", "tools.build:skip_test=True",
        f'tools.build:compiler_executables={{"c": "{bin_dir}/cc", "cpp": "{bin_dir}/c++"}}',
        f'tools.cmake.cmaketoolchain:user_toolchain=["{ROOT}/toolchain/reproducible.cmake", '
        f'"{tmp_path}/build/toolchain/zig-tools.cmake"]',
    ):
        assert line in text.splitlines(), line
    assert "include(default)" not in text  # nothing of the host's detected compiler
    cc = (bin_dir / "cc").read_text()
    assert f"exec {zig_root}/zig cc -target x86_64-linux-gnu.2.17 " in cc and cc.rstrip().endswith('"$@" -g0 $strip')
    assert f"-ffile-prefix-map={zig_root}=/usr/lib/zig" in cc
    assert f"ZIG_GLOBAL_CACHE_DIR={tmp_path}/work/zig/global; export ZIG_GLOBAL_CACHE_DIR" in cc
    assert f"ZIG_LOCAL_CACHE_DIR={tmp_path}/work/zig/local" in cc
    assert " c++ -target x86_64-linux-gnu.2.17 " in (bin_dir / "c++").read_text()
    # Conan's -stdlib=libc++ is dropped: zig warns it is unused, which fails CMake's flag checks
    assert '[ "$a" = -stdlib=libc++ ] || set -- "$@" "$a"' in cc
    assert f'exec {zig_root}/zig ar "$@"' in (bin_dir / "ar").read_text()
    assert f'exec {zig_root}/zig ranlib "$@"' in (bin_dir / "ranlib").read_text()
    assert all((bin_dir / n).stat().st_mode & 0o111 for n in ("cc", "c++", "ar", "ranlib"))
    tools = (tmp_path / "build" / "toolchain" / "zig-tools.cmake").read_text()
    assert f'set(CMAKE_AR "{bin_dir}/ar" CACHE FILEPATH "" FORCE)' in tools
    assert prep.env["CC"] == str(bin_dir / "cc") and prep.env["ZIG_GLOBAL_CACHE_DIR"] == f"{tmp_path}/work/zig/global"


def test_a_shared_global_cache_goes_to_every_wrapper_and_the_local_one_stays(tmp_path: Path) -> None:
    """zig's global cache (its runtimes) shared by a user's builds; its local one (every compile's output)
    stays in the work dir, and the build machine's wrappers of a cross build get the same."""
    tc = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig", "2.17")
    build_tc = toolchains.for_build_machine(replace(tc, target="aarch64-linux-gnu.2.17"))
    shared = tmp_path / "cache" / "zig-global"
    prep = zig_wrappers.prepare(tc, tmp_path / "zig", tmp_path / "tc", ROOT / "toolchain", tmp_path / "work" / "zig",
                             build=build_tc, global_cache=shared)
    assert prep.env["ZIG_GLOBAL_CACHE_DIR"] == str(shared)
    assert prep.env["ZIG_LOCAL_CACHE_DIR"] == f"{tmp_path}/work/zig/local"
    wrappers = [tmp_path / "tc" / "bin" / "cc", tmp_path / "tc" / "build-machine" / "bin" / "c++"]
    for w in wrappers:
        text = w.read_text()
        assert f"ZIG_GLOBAL_CACHE_DIR={shared}; export" in text and f"ZIG_LOCAL_CACHE_DIR={tmp_path}/work/zig/local" in text


def test_zig_global_cache_is_in_the_source_cache_or_none(tmp_path: Path) -> None:

    assert env.zig_global_cache(tmp_path / "cache") == tmp_path / "cache" / "zig-global"
    assert (tmp_path / "cache" / "zig-global").is_dir()
    (tmp_path / "file").write_text("")
    assert env.zig_global_cache(tmp_path / "file") is None  # a source cache that cannot hold it: the work dir's


def test_llvm_and_wheel_builds_share_zig_s_runtimes_in_the_source_cache(tmp_path: Path) -> None:
    """compiler_for, which both the LLVM and the wheel build use: zig's global cache in the source cache, its
    local cache in the work dir; none for the host's compiler."""
    from hermetic.model.settings import Settings

    tc = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig")
    s = Settings(root=ROOT, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work")
    c = env.compiler_for(s, tc, tmp_path / "zig", tmp_path / "out", drop_flags=("-x",))
    assert c.global_cache == tmp_path / "cache" / "zig-global" and c.zig_cache == tmp_path / "work" / "zig-cache"
    assert c.drop_flags == ("-x",) and c.toolchain_dir == ROOT / "toolchain"
    assert env.compiler_for(s, tc, None, tmp_path / "out").global_cache is None


def test_wrapper_drops_stdlib_and_keeps_other_arguments(tmp_path: Path) -> None:
    """Run the generated wrapper with `echo` standing in for zig: the arguments zig would get."""
    tc = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig")
    fake_zig = tmp_path / "zig"
    fake_zig.mkdir()
    (fake_zig / "zig").write_text('#!/bin/sh\nprintf "%s|" "$@"\n')
    (fake_zig / "zig").chmod(0o755)
    prep = zig_wrappers.prepare(tc, fake_zig, tmp_path / "out", ROOT / "toolchain", tmp_path / "zc")
    out = subprocess.run(
        [prep.env["CXX"], "-m64", "-stdlib=libc++", "-c", "a b.cpp", "-o", "x.o"], capture_output=True, text=True, check=True
    ).stdout
    assert out.split("|")[:3] == ["c++", "-target", "x86_64-linux-gnu.2.28"]
    assert out.endswith("|-m64|-c|a b.cpp|-o|x.o|-g0|") and "-stdlib" not in out


@pytest.mark.parametrize(
    ("args", "strips"),
    [
        (["a.o", "b.o", "-shared", "-o", "lib.so"], True),  # links: zig's runtime objects' debug info goes
        (["main.cpp", "-o", "main"], True),  # compiles and links
        (["-c", "a.cpp", "-o", "a.o"], False),  # compile only: the flag would be an unused-argument warning
        (["-S", "a.cpp"], False),
        (["-E", "a.cpp"], False),
        (["-fsyntax-only", "a.cpp"], False),
    ],
)
def test_wrapper_strips_debug_info_only_when_linking(tmp_path: Path, args: list[str], strips: bool) -> None:
    tc = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig")
    fake_zig = tmp_path / "zig"
    fake_zig.mkdir()
    (fake_zig / "zig").write_text('#!/bin/sh\nprintf "%s|" "$@"\n')
    (fake_zig / "zig").chmod(0o755)
    prep = zig_wrappers.prepare(tc, fake_zig, tmp_path / "out", ROOT / "toolchain", tmp_path / "zc")
    for exe in (prep.env["CC"], prep.env["CXX"]):
        out = subprocess.run([exe, *args], capture_output=True, text=True, check=True).stdout
        assert out.endswith("|".join([*args, "-g0", *(["-Wl,--strip-debug"] if strips else [])]) + "|")


def test_aarch64_profile_is_conans_armv8(tmp_path: Path) -> None:
    tc = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig", arch="aarch64")
    prep = zig_wrappers.prepare(tc, tmp_path / "zig", tmp_path / "out", ROOT / "toolchain", tmp_path / "zc")
    assert "arch=armv8" in prep.profile.read_text().splitlines()
    assert "-target aarch64-linux-gnu.2.28" in (tmp_path / "out" / "bin" / "cc").read_text()


def test_host_keeps_todays_detected_profile(tmp_path: Path) -> None:
    tc = toolchains.select(toolchains.load(ROOT / "toolchain"), "host")
    prep = zig_wrappers.prepare(tc, None, tmp_path / "out", ROOT / "toolchain", tmp_path / "zc")
    assert prep.detect and prep.profile == ROOT / "toolchain" / "profiles" / "hermetic" and prep.env == {}
    assert not (tmp_path / "out").exists()
    assert toolchain.ensure(tmp_path / "cache", tc) is None and not (tmp_path / "cache").exists()


def test_cli_toolchain_and_glibc_reach_the_plan(tmp_path: Path) -> None:
    from helpers import hermetic

    common = ["build", "llvm", "--variant", "support", "--work-dir", str(tmp_path / "w"), "--cache", str(tmp_path / "c")]
    proc = hermetic(*common, "--toolchain", "nope", check=False)
    assert proc.returncode == 2 and "valid toolchains: zig, host" in proc.stderr and "Traceback" not in proc.stderr
    proc = hermetic(*common, "--toolchain", "zig", "--glibc", "2.17", "--no-urls", "--no-apt", check=False)
    assert "[run ] toolchain zig" in proc.stderr and "x86_64-linux-gnu.2.17" in proc.stderr
    assert proc.returncode == 4 and "--mirror" in proc.stderr  # nothing cached, downloads off
    proc = hermetic(*common, "--no-urls", "--no-apt", check=False, env={"HERMETIC_TOOLCHAIN": "host"})
    assert "[skip] toolchain host" in proc.stderr
