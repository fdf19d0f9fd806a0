"""The cache-hit path in a fresh process: the entry is checked by the sha256 of its bytes, the
tools' identity comes from one remembered file (no process spawned), a shortcut keyed by the
caller's source key skips printing the IR, and a changed tool is still noticed. Also: the
assembler is part of the cache key, and nvJitLink's absence is a clear error."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native

# The child refuses, on the hit path: processes, plugin scans, printing an llvmlite module,
# and (with a shortcut) any JSON serialisation, which re-deriving a key or re-checking an
# entry by its parsed payload would need. It counts the files it opens in the cache
# directory. Imports come before the refusals.
CHILD = """
import builtins, importlib.metadata, io, json, subprocess, sys, os
sys.path.insert(0, {kernels_dir!r})
import tilec, kernels
from tilec import compiler

opened = []
real_open = io.open
def counting_open(file, *a, **kw):
    if isinstance(file, (str, bytes, os.PathLike)):
        if os.fsdecode(file).startswith(os.environ["TILEC_CACHE_DIR"]):
            opened.append(os.fsdecode(file))
    return real_open(file, *a, **kw)
builtins.open = io.open = counting_open
from tilec.cache import format as tilec_cache
class CountingReader:  # the C reader opens the shortcut with open(2): counted here
    def __init__(self, real):
        self.real = real
    def read_shortcut(self, path):
        opened.append(os.fsdecode(path))
        return self.real.read_shortcut(path)
    def blake2b_hex(self, data):
        return self.real.blake2b_hex(data)
    def unchanged(self, watch):
        return self.real.unchanged(watch)
native_reader = tilec_cache._hit is not None
if native_reader:
    tilec_cache._hit = CountingReader(tilec_cache._hit)

module = kernels.vector_add(tilec.ir)
spawned = []
def refuse(what):
    def refused(*a, **kw):
        raise AssertionError(what + " called on the cache-hit path")
    return refused
def record(*a, **kw):
    spawned.append(a[0])
    return real_run(*a, **kw)
real_run = subprocess.run
importlib.metadata.entry_points = refuse("entry_points")
if os.environ.get("ALLOW_SPAWN") == "1":
    subprocess.run = record  # counted instead
else:
    subprocess.Popen = refuse("Popen")
    subprocess.run = refuse("subprocess.run")
if os.environ.get("SHORTCUT") == "1":
    from tilec.cache import key as cache_key
    cache_key.as_ir = refuse("printing the IR")
    json.dumps = refuse("json.dumps")
    real_json = tilec_cache._JSON
    class Parsed:  # the shortcut's head answers: the entry's JSON line waits for .metadata
        def raw_decode(self, *a, **kw):
            parsed.append(1)
            return real_json.raw_decode(*a, **kw)
    parsed = []
    tilec_cache._JSON = Parsed()
k = tilec.compile(module, target="sm_90", source_key="vadd-v1")
assert native_reader, "tilec._hit was not built"
if os.environ.get("SHORTCUT") == "1" and k.cache_status == "hit":
    assert not parsed, "JSON parsed on a hit through a shortcut"
    assert k.metadata.name == k.name == "vadd" and parsed  # read now, on first access
print("RESULT", k.cache_status, k.key, "tilec._core" in sys.modules, len(spawned), len(opened))
"""


def _env(settings: Any, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        TILEC_CACHE_DIR=str(settings.cache_dir),
        TILEC_PTXAS=str(settings.ptxas),
        CUDA_HOME=str(settings.cuda_home),
        PATH="",
        **extra,
    )
    return env


def _hit(tilec: ModuleType, settings: Any, **extra: str) -> tuple[str, str, bool, int, int]:
    env = _env(settings, **extra)
    env["PYTHONPATH"] = str(Path(tilec.__file__).resolve().parent.parent)
    code = CHILD.format(kernels_dir=str(Path(__file__).resolve().parent))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    _, status, key, core, spawned, opened = line.split()
    return status, key, core == "True", int(spawned), int(opened)


@pytest.fixture
def own_ptxas(tmp_path: Path, ptxas_path: Path, settings: Any) -> Any:
    """Settings whose TILEC_PTXAS is a wrapper script in tmp_path that runs the real ptxas;
    rewriting it changes the tool the cache must notice."""
    wrapper = tmp_path / "bin" / "ptxas"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {ptxas_path} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return dataclasses.replace(settings, ptxas=wrapper)


def test_fresh_process_hit_through_the_shortcut(
    tilec: ModuleType, kernels: ModuleType, own_ptxas: Any
) -> None:
    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=own_ptxas, source_key="vadd-v1")
    assert first.cache_status == "miss"
    tools = list((own_ptxas.cache_dir / "tools").glob("cuda-*.json"))
    assert len(tools) == 1  # the tools' identity, one file
    record = json.loads(tools[0].read_text())
    assert record["ptxas"][0] == str(own_ptxas.ptxas) and record["libdevice"]
    shortcuts = list((own_ptxas.cache_dir / "shortcut").rglob("*"))
    assert [p for p in shortcuts if p.is_file()]

    # No process, no plugin scan, no native core, no IR printing, no JSON serialisation, and
    # one file read: the shortcut, which carries the entry (not the tools' file, not the entry's).
    status, key, core_loaded, spawned, opened = _hit(tilec, own_ptxas, SHORTCUT="1")
    assert (status, key, core_loaded, spawned, opened) == ("hit", first.key, False, 0, 1)
    # Without the shortcut the IR is printed and hashed, still without a process.
    for shortcut in [p for p in shortcuts if p.is_file()]:
        shortcut.unlink()
    status, key, core_loaded, spawned, opened = _hit(tilec, own_ptxas)
    assert (status, key, core_loaded, spawned) == ("hit", first.key, False, 0)
    assert opened >= 2  # the tools' identity and the entry
    # ...and that hit wrote the shortcut again.
    status, key, _, _, opened = _hit(tilec, own_ptxas, SHORTCUT="1")
    assert (status, key, opened) == ("hit", first.key, 1)


def test_a_changed_tool_is_noticed_through_the_shortcut(
    tilec: ModuleType, kernels: ModuleType, own_ptxas: Any, ptxas_path: Path
) -> None:
    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=own_ptxas, source_key="vadd-v1")
    wrapper = own_ptxas.ptxas
    # Same ptxas, file touched: its version is asked once more (one process) and the key stands.
    os.utime(wrapper, ns=(wrapper.stat().st_atime_ns, wrapper.stat().st_mtime_ns + 10**9))
    status, key, _, spawned, _ = _hit(tilec, own_ptxas, ALLOW_SPAWN="1")
    assert (status, key, spawned) == ("hit", first.key, 1)
    # Remembered again, and the shortcut now vouches for the new state: one file read.
    status, key, _, spawned, opened = _hit(tilec, own_ptxas, ALLOW_SPAWN="1")
    assert (status, key, spawned, opened) == ("hit", first.key, 0, 1)
    # Another version: the shortcut is not trusted, the key changes, it is a miss.
    wrapper.write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "Cuda compilation tools, release 99.9, V99.9.9"; exit 0; }}\n'
        f'exec {ptxas_path} "$@"\n'
    )
    again = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=own_ptxas, source_key="vadd-v1")
    assert again.cache_status == "miss" and again.key != first.key
    assert again.metadata.ptxas_version == "99.9.9"


def test_source_key_is_the_callers_promise(tilec: ModuleType, kernels: ModuleType, settings: Any) -> None:
    """Another source key for the same IR finds the same entry (keyed by the IR); the same key
    for other options is another shortcut."""
    a = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    b = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v2")
    assert (a.cache_status, b.cache_status, b.key) == ("miss", "hit", a.key)
    c = tilec.compile(kernels.vector_add(tilec.ir), target="sm_80", settings=settings, source_key="v1")
    assert c.cache_status == "miss" and c.key != a.key


def test_entry_is_checked_by_its_bytes(tilec: ModuleType, kernels: ModuleType, settings: Any) -> None:
    from tilec.cache import format as cache

    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)
    path = tilec.compiler.Cache(settings.cache_dir).path(k.key)
    raw = path.read_bytes()
    assert raw.startswith(cache.MAGIC) and k.asm["cubin"] in raw  # the cubin as it is, no base64
    entry = cache.decode(k.key, raw)
    assert entry is not None and entry.raw == raw
    assert entry.parts["cubin"] == k.asm["cubin"] and entry.payload["text"] == ["llir", "llir_opt", "ptx"]
    assert cache.decode("0" * 64, raw) is None  # another key's entry
    assert cache.decode(k.key, raw[:-1]) is None  # truncated
    assert cache.decode(k.key, raw + b"x") is None  # grown
    flipped = bytearray(raw)
    flipped[-10] ^= 1  # one bit of the cubin
    assert cache.decode(k.key, bytes(flipped)) is None


def test_cache_key_includes_the_assembler(
    tilec: ModuleType, kernels: ModuleType, settings: Any, monkeypatch: Any
) -> None:
    from tilec.backends.cuda import nvjitlink

    monkeypatch.setattr(nvjitlink, "version", lambda: "13.0")
    c = tilec.Compiler(settings)
    keys = {}
    for assembler in ("ptxas", "nvjitlink", "nvptxcompiler"):
        opts = tilec.CompileOptions(target="sm_90", backend_options={"assembler": assembler})
        keys[assembler] = c.cache_key(kernels.EXP_IR, opts, *c.resolve(opts))
    # The default (auto) keys as the assembler it picks: nvPTXCompiler here (the test extra
    # installs it, of ptxas's release).
    default = tilec.CompileOptions(target="sm_90")
    assert c.cache_key(kernels.EXP_IR, default, *c.resolve(default)) == keys["nvptxcompiler"]
    assert len(set(keys.values())) == 3
    monkeypatch.setattr(nvjitlink, "version", lambda: "13.1")
    opts = tilec.CompileOptions(target="sm_90", backend_options={"assembler": "nvjitlink"})
    assert c.cache_key(kernels.EXP_IR, opts, *c.resolve(opts)) != keys["nvjitlink"]


def test_unknown_assembler_and_missing_nvjitlink(
    tilec: ModuleType, kernels: ModuleType, settings: Any, monkeypatch: Any
) -> None:
    with pytest.raises(tilec.TargetError, match="assembler must be one of 'auto', 'ptxas', 'nvptxcompiler', 'nvjitlink', got 'nvcc'"):
        tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings, assembler="nvcc")
    from tilec.backends.cuda import nvjitlink

    monkeypatch.setitem(sys.modules, "cuda.bindings.nvjitlink", None)  # as if not installed
    # ... also where an earlier test imported it: `from cuda.bindings import nvjitlink` takes the
    # package's attribute before it looks in sys.modules.
    bindings = sys.modules.get("cuda.bindings")
    if bindings is not None:
        monkeypatch.delattr(bindings, "nvjitlink", raising=False)
    nvjitlink.module.cache_clear()
    nvjitlink.version.cache_clear()
    try:
        with pytest.raises(tilec.ToolNotFoundError, match=r'assembler="nvjitlink" needs cuda-bindings: pip install'):
            tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings, assembler="nvjitlink")
    finally:
        nvjitlink.module.cache_clear()
        nvjitlink.version.cache_clear()


def test_nvjitlink_options_mirror_ptxas(tilec: ModuleType) -> None:
    from tilec.backends.cuda import nvjitlink

    assert nvjitlink.options("sm_90a", ("-lineinfo",), 3) == [
        "-arch=sm_90a",
        "-O3",
        "-Xptxas=-v",
        "-no-cache",
        "-Xptxas=-lineinfo",
    ]


def test_tool_watch_names_what_was_found(tilec: ModuleType, settings: Any, own_ptxas: Any) -> None:
    from tilec.backends.cuda import CudaBackend

    opts = tilec.CompileOptions(target="sm_90")
    backend = CudaBackend()
    target = backend.quick_target("sm_90", opts)
    watch = backend.tool_watch(target, opts, own_ptxas)
    watched = [path for path, _ in watch]
    assert str(own_ptxas.ptxas) in watched and any(p.endswith("libdevice.10.bc") for p in watched)
    nvj = tilec.CompileOptions(target="sm_90", backend_options={"assembler": "nvjitlink"})
    assert backend.tool_watch(target, nvj, own_ptxas) is None


def _shortcut_file(settings: Any) -> Path:
    [path] = [p for p in (settings.cache_dir / "shortcut").rglob("*") if p.is_file()]
    return path


def _flip(raw: bytes, at: int) -> bytes:
    damaged = bytearray(raw)
    damaged[at] ^= 1
    return bytes(damaged)


def _in_cubin_copy(raw: bytes) -> int:
    """An offset inside the copy of the cubin (the entry's first part) in a shortcut's bytes."""
    from tilec.cache import format as cache

    record = cache.decode_shortcut(raw)
    assert record is not None
    return len(raw) - len(record.entry) + record.hot - 10


@pytest.mark.parametrize("where", ["cubin copy", "header"])
def test_a_damaged_shortcut_is_removed_and_the_entry_answers(
    tilec: ModuleType, kernels: ModuleType, settings: Any, where: str
) -> None:
    from tilec.cache import format as cache

    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    path = _shortcut_file(settings)
    raw = path.read_bytes()
    record = cache.decode_shortcut(raw)
    assert record is not None and record.key == first.key and cache.decode(first.key, record.entry)
    if where == "cubin copy":
        damaged = _flip(raw, _in_cubin_copy(raw))
    else:  # another key that is still 64 hex digits: only the digest tells
        at = raw.index(first.key.encode())
        damaged = bytearray(raw)
        damaged[at] = ord("0") if raw[at] != ord("0") else ord("1")
        damaged = bytes(damaged)
    path.write_bytes(damaged)
    assert cache.decode_shortcut(damaged) is None
    again = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    # The entry's own file was intact: a hit, keyed by the IR, and the shortcut written anew.
    assert (again.cache_status, again.key) == ("hit", first.key)
    assert again.asm["cubin"] == first.asm["cubin"]
    assert path.read_bytes() != damaged and cache.decode_shortcut(path.read_bytes()) is not None


def test_the_other_stages_are_checked_when_asked_for(
    tilec: ModuleType, kernels: ModuleType, settings: Any
) -> None:
    """A hit through a shortcut checks the cubin (what a launch needs); a damaged byte in the
    copy of an earlier stage is found when that stage is first asked for, and the entry's own
    file answers instead."""
    from tilec.cache import format as cache

    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    path = _shortcut_file(settings)
    damaged = _flip(path.read_bytes(), -10)  # the last part: the PTX's copy
    record = cache.decode_shortcut(damaged)
    assert record is not None and not cache.rest_checked(record)
    path.write_bytes(damaged)
    again = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert (again.cache_status, again.key) == ("hit", first.key)
    assert again.asm["cubin"] == first.asm["cubin"] and path.exists()  # nothing else read yet
    assert again.asm["ptx"] == first.asm["ptx"] and again.asm == first.asm
    assert list(again.asm) == list(first.asm) == ["llir", "llir_opt", "ptx", "cubin"]
    assert not path.exists()  # the damaged shortcut is gone; the next hit writes it anew
    tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    record = cache.decode_shortcut(path.read_bytes())
    assert record is not None and cache.rest_checked(record)


def test_a_damaged_shortcut_and_entry_are_rebuilt(tilec: ModuleType, kernels: ModuleType, settings: Any) -> None:
    from tilec.cache import format as cache

    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    shortcut = _shortcut_file(settings)
    entry = tilec.compiler.Cache(settings.cache_dir).path(first.key)
    shortcut.write_bytes(_flip(shortcut.read_bytes(), _in_cubin_copy(shortcut.read_bytes())))
    entry.write_bytes(_flip(entry.read_bytes(), cache.hot_length(entry.read_bytes()) - 10))
    rebuilt = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert (rebuilt.cache_status, rebuilt.key) == ("corrupt", first.key)
    assert rebuilt.asm["ptx"] == first.asm["ptx"]
    again = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert again.cache_status == "hit"


def test_damaged_stages_in_both_copies_are_a_clear_error(
    tilec: ModuleType, kernels: ModuleType, settings: Any
) -> None:
    """The PTX damaged in the shortcut's copy and in the entry's file: the hit still launches
    what it checked, asking for the PTX is a CacheError that says what to do, and the next
    compile builds the kernel again."""
    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    shortcut = _shortcut_file(settings)
    entry = tilec.compiler.Cache(settings.cache_dir).path(first.key)
    for path in (shortcut, entry):
        path.write_bytes(_flip(path.read_bytes(), -10))
    hit = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert hit.cache_status == "hit" and hit.asm["cubin"] == first.asm["cubin"]
    with pytest.raises(tilec.CacheError, match=r"damaged .* compile the kernel again"):
        hit.asm["ptx"]
    assert not shortcut.exists() and not entry.exists()
    rebuilt = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert rebuilt.cache_status == "miss" and rebuilt.asm == first.asm


def test_a_touched_tool_is_watched_anew(tilec: ModuleType, kernels: ModuleType, own_ptxas: Any) -> None:
    """Same ptxas, new mtime: the key is made again (and stands), and the shortcut is written
    with the new state, so the next hit through it trusts it again."""
    from tilec.cache import format as cache

    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=own_ptxas, source_key="v1")
    wrapper = own_ptxas.ptxas
    mtime = wrapper.stat().st_mtime_ns + 10**9
    os.utime(wrapper, ns=(mtime, mtime))
    again = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=own_ptxas, source_key="v1")
    assert (again.cache_status, again.key) == ("hit", first.key)
    record = cache.decode_shortcut(_shortcut_file(own_ptxas).read_bytes())
    assert record is not None and record.watch is not None
    assert (os.fsencode(wrapper), mtime, wrapper.stat().st_size) in record.watch
    assert cache.same_state(record.watch)


def test_a_changed_libdevice_is_noticed_through_the_shortcut(
    tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path
) -> None:
    """libdevice's sha256 is in the key: a libdevice of other bytes at the same path (same size
    and mtime even) is another key. The vector add links nothing from it, so it still compiles."""
    real = Path(tilec.backends.cuda.toolchain.find_libdevice(settings))
    copy = tmp_path / "libdevice.10.bc"
    copy.write_bytes(real.read_bytes())
    own = dataclasses.replace(settings, libdevice=copy)
    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=own, source_key="v1")
    st = copy.stat()
    data = bytearray(copy.read_bytes())
    data[-1] ^= 1
    copy.write_bytes(bytes(data))
    # Same size, a later mtime (set, so a coarse clock cannot hide the write): the shortcut
    # watches the state, the key holds the sha256 of the bytes.
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert copy.stat().st_size == st.st_size
    again = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=own, source_key="v1")
    assert again.cache_status == "miss" and again.key != first.key


def test_shortcut_format(tilec: ModuleType, tmp_path: Path) -> None:
    from tilec.cache import format as cache

    key, base = "ab" * 32, "cd" * 32
    entry = cache.encode(key, {"x": 1}, {"bin": b"\x00\n\xff"})
    present = tmp_path / "a file"
    present.write_text("x")
    absent = tmp_path / "none"
    watch = [[str(present), cache.file_state(str(present))], [str(absent), cache.file_state(str(absent))]]
    raw = cache.encode_shortcut(key, base, watch, entry)
    assert raw is not None
    record = cache.decode_shortcut(raw)
    assert record is not None and (record.key, record.base, record.entry) == (key, base, entry)
    assert record.watch == [(os.fsencode(present), *cache.file_state(str(present))), (os.fsencode(absent), -1, -1)]
    assert cache.same_state(record.watch)  # a path that did not exist and still does not counts
    absent.write_text("now it does")
    assert not cache.same_state(record.watch)
    entry_back = cache.decode(key, record.entry)
    assert entry_back is not None and entry_back.parts == {"bin": b"\x00\n\xff"}
    # A path that a line cannot hold: no watch at all, so nothing is vouched for.
    assert cache.encode_shortcut(key, base, [[str(tmp_path / "a\nb"), [1, 2]]], entry) is None
    c = cache.Cache(tmp_path / "cache")
    c.put_shortcut("ef" * 32, key, base, [[str(tmp_path / "a\nb"), [1, 2]]], entry)
    stored = c.get_shortcut("ef" * 32)
    assert stored is not None and stored.watch is None and stored.key == key
    # Damage before the end of the entry's first part, a cut or growth is refused (and the
    # file removed by get_shortcut); after it, it is found by rest_checked.
    assert cache.rest_checked(record)
    hot_end = len(raw) - len(entry) + record.hot
    for bad in (raw[:-1], raw + b"x", raw.replace(b"\n", b" ", 2), _flip(raw, hot_end - 1)):
        assert cache.decode_shortcut(bad) is None
    assert record.hot == len(entry)  # one part: all of the entry is checked at once
    two = cache.encode(key, {"x": 1}, {"bin": b"\x00\n\xff", "text": b"later"})
    raw2 = cache.encode_shortcut(key, base, None, two)
    assert raw2 is not None
    cold = cache.decode_shortcut(_flip(raw2, -1))
    assert cold is not None and not cache.rest_checked(cold)
    assert cache.decode(key, cold.entry, verify=False, checked=cold.hot).parts == {"bin": b"\x00\n\xff"}
    path = c.shortcut_path("ef" * 32)
    path.write_bytes(raw[:-1])
    assert c.get_shortcut("ef" * 32) is None and not path.exists()


def test_shortcut_heads(tilec: ModuleType) -> None:
    """A head line holds the names a kernel object needs; names a line cannot hold give "-"."""
    from tilec.cache import format as cache

    head = ("cubin", ("llir", "ptx", "cubin"), ("llir", "ptx"), "vadd__n_1024", ("ptr addrspace(1)", "i32"), ("a", "n"))
    line = cache.encode_head(head)
    assert line == b"cubin\tllir,ptx,cubin\tllir,ptx\tvadd__n_1024\tptr addrspace(1),i32\ta,n"
    assert cache.decode_head(line) == head
    # Trailing unnamed parameters are left out (Signature.from_llvm pads with them).
    assert cache.decode_head(cache.encode_head((*head[:5], ("", "n", "", "")))) == (*head[:5], ("", "n"))
    assert cache.decode_head(cache.encode_head((*head[:5], ("",)))) == (*head[:5], ())
    for bad in (
        None,
        (*head[:3], "tab\tname", *head[4:]),
        (*head[:3], "new\nline", *head[4:]),
        (*head[:4], ("{i32, i32}",), head[5]),
        (*head[:5], ("a,b",)),
        ("", *head[1:]),
        (head[0], ("llir", ""), *head[2:]),
    ):
        assert cache.encode_head(bad) == b"-"
    assert cache.decode_head(b"-") is None
    for bad_line in (b"", b"a\tb", b"\xff\tb\tc\td\te\tf"):
        with pytest.raises(ValueError):
            cache.decode_head(bad_line)


def test_a_hit_through_the_head_reads_metadata_on_first_access(
    tilec: ModuleType, kernels: ModuleType, settings: Any
) -> None:
    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    hit = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert hit.cache_status == "hit" and hit._metadata is None  # nothing parsed yet
    assert (hit.name, hit.signature) == (first.name, first.signature)
    assert hit.asm["cubin"] == first.asm["cubin"] and hit._metadata is None
    assert hit.metadata == first.metadata and hit._metadata is not None
    assert hit.asm == first.asm


def test_a_shortcut_without_a_head_hits_through_the_json_line(
    tilec: ModuleType, kernels: ModuleType, settings: Any
) -> None:
    from tilec.cache import format as cache

    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    path = _shortcut_file(settings)
    record = cache.decode_shortcut(path.read_bytes())
    assert record is not None and record.head is not None
    headless = cache.encode_shortcut(record.key, record.base, None, record.entry, None)
    assert headless is not None
    path.write_bytes(headless)
    hit = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert hit.cache_status == "hit" and hit._metadata is not None and hit.metadata == first.metadata
    assert hit.asm == first.asm


def test_metadata_behind_a_head_that_cannot_be_read_is_a_clear_error(
    tilec: ModuleType, kernels: ModuleType, settings: Any
) -> None:
    """Bytes the digest vouches for, with metadata this tilec cannot make (a key that is no
    field): the hit still launches what it checked; asking for the metadata says what to do."""
    from tilec.cache import format as cache

    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    path = _shortcut_file(settings)
    record = cache.decode_shortcut(path.read_bytes())
    assert record is not None
    entry = cache.decode(record.key, record.entry)
    assert entry is not None
    payload = {**entry.payload, "metadata": {**entry.payload["metadata"], "nope": 1}}
    odd = cache.encode(record.key, payload, entry.parts)
    data = cache.encode_shortcut(record.key, record.base, None, odd, record.head)
    assert data is not None
    path.write_bytes(data)
    hit = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert hit.cache_status == "hit" and hit.asm["cubin"] == first.asm["cubin"]
    with pytest.raises(tilec.CacheError, match=r"metadata of kernel .* cannot be read .* removed: compile"):
        _ = hit.metadata
    # The shortcut is gone; the entry's own file (intact here) answers and writes it anew.
    assert not path.exists()
    again = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert again.cache_status == "hit" and again.metadata == first.metadata and path.exists()


def test_the_c_reader_agrees_with_the_python_one(
    tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path
) -> None:
    """tilec._hit.read_shortcut (csrc/hit.c) and decode_shortcut + same_state give the same
    answer on a real shortcut, on every kind of damage, and on a changed watched tool."""
    from tilec.cache import format as cache

    assert cache._hit is not None, "tilec._hit was not built"
    tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    raw = _shortcut_file(settings).read_bytes()
    record = cache.decode_shortcut(raw)
    assert record is not None and record.watch
    head = len(raw) - len(record.entry)
    variants = {
        "whole": raw,
        "cut": raw[:-1],
        "grown": raw + b"x",
        "no file": None,
        "magic": b"tilec-shortcut 2 " + raw[17:],
        "key": _flip(raw, raw.index(record.key.encode())),
        "cubin": _flip(raw, head + record.hot - 1),
        "after the cubin": _flip(raw, head + record.hot),
        "empty": b"",
        "header only": raw[:82],
    }
    # A watched path that changed: the same bytes, told apart by the stat only.
    watched = tmp_path / "watched"
    watched.write_text("x")
    state = cache.file_state(str(watched))
    entry = record.entry
    for name, watch in {
        "watch kept": [[str(watched), state]],
        "watch changed": [[str(watched), [state[0] + 1, state[1]]]],
        "watch absent, still": [[str(tmp_path / "none"), [-1, -1]]],
        "no watch": None,
    }.items():
        variants[name] = cache.encode_shortcut(record.key, record.base, watch, entry, record.head)
    # Heads: none, empty lists and unnamed parameters, text beyond ASCII, and lines that are not
    # heads (their digest made anew, so that only the head's own check can refuse them).
    assert record.head is not None and record.head[3] == "vadd"
    heads = {
        "no head": None,
        "empty lists": ("cubin", ("cubin",), (), "k", (), ()),
        "unnamed": ("ptx", ("ptx",), ("ptx",), "k", ("i32", "ptr", "float"), ("", "b")),
        "not ascii": ("cubin", ("cubin",), (), "kérnel_λ", ("i32",), ("n",)),
    }
    for name, head in heads.items():
        variants[name] = cache.encode_shortcut(record.key, record.base, None, entry, head)
    good = variants["no head"]
    assert good is not None
    for name, line in {
        "head, five fields": b"a\tb\tc\td\te",
        "head, seven fields": b"a\tb\tc\td\te\tf\tg",
        "head, not text": b"a\tb\tc\t\xff\te\tf",
        "head, empty": b"",
    }.items():
        lines = good.split(b"\n")
        lines[4] = line
        body = b"\n".join(lines[1:])
        covered = len(body) - len(entry) + record.hot
        variants[name] = lines[0][:17] + cache.digest_bytes(memoryview(body)[:covered]) + b"\n" + body
    for name, data in variants.items():
        path = tmp_path / f"shortcut-{len(name)}-{abs(hash(name))}"
        if data is not None:
            path.write_bytes(data)
        native = cache._hit.read_shortcut(str(path))
        python = cache.decode_shortcut(data) if data is not None else None
        if data is None:
            assert native is None, name
        elif python is None:
            assert native is False, name
        else:
            trusted = python.watch is not None and cache.same_state(python.watch)
            want = (python.key, python.base, trusted, python.entry, python.hot, python.rest, python.head)
            assert native == want, name
    assert cache._hit.read_shortcut(str(tmp_path / "variants" / "missing")) is None


def test_the_c_digest_is_blake2b(tilec: ModuleType) -> None:
    import hashlib

    from tilec.cache import format as cache

    assert cache._hit is not None
    data = bytes(range(256)) * 40
    for n in (*range(0, 300), 1023, 1024, 1025, 4096, len(data)):
        want = hashlib.blake2b(data[:n], digest_size=32).hexdigest().encode()
        assert cache._hit.blake2b_hex(data[:n]) == want, n
        assert cache._hit.blake2b_hex(memoryview(data)[:n]) == want, n


def test_a_hit_without_the_c_reader(
    tilec: ModuleType, kernels: ModuleType, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source tree without the extension reads the same shortcuts in Python."""
    from tilec.cache import format as cache

    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    monkeypatch.setattr(cache, "_hit", None)
    again = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert (again.cache_status, again.key) == ("hit", first.key) and again.asm == first.asm
    path = _shortcut_file(settings)
    path.write_bytes(_flip(path.read_bytes(), _in_cubin_copy(path.read_bytes())))
    third = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=settings, source_key="v1")
    assert third.cache_status == "hit" and third.asm["cubin"] == first.asm["cubin"]


def test_declared_tuple_fields_are_the_dataclasses(tilec: ModuleType) -> None:
    """Metadata.from_json restores tuples from the declared TUPLE_FIELDS: they must be every
    tuple field of the class, and a class that declares none gets them found."""
    import dataclasses as dc

    from tilec import kernel
    from tilec.backends.cuda.options import CudaMetadata

    for cls in (kernel.Metadata, CudaMetadata):
        found = tuple(f.name for f in dc.fields(cls) if "tuple" in str(f.type))
        assert cls.__dict__["TUPLE_FIELDS"] == found == kernel._tuple_fields(cls)

    @dc.dataclass
    class Own(CudaMetadata):  # a plugin's metadata that declares nothing
        more: tuple[str, ...] = ()

    md = Own(name="k", target="sm_90", signature=("i32",), llvm_version="19", more=("a",))
    back = Own.from_json(json.loads(json.dumps(md.to_json())))
    assert back == md and type(back.more) is tuple and type(back.libdevice_linked) is tuple
    with pytest.raises(TypeError):  # a key that is no field: the cache rebuilds such an entry
        Own.from_json({**md.to_json(), "nope": 1})


def test_a_touched_tool_does_not_bless_a_damaged_copy(
    tilec: ModuleType, kernels: ModuleType, own_ptxas: Any
) -> None:
    """The shortcut is written anew when a watched tool was only touched; where the copy of the
    earlier stages is damaged it is not, so the damage is never digested afresh."""
    from tilec.cache import format as cache

    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=own_ptxas, source_key="v1")
    path = _shortcut_file(own_ptxas)
    damaged = _flip(path.read_bytes(), -10)  # the PTX's copy
    path.write_bytes(damaged)
    mtime = own_ptxas.ptxas.stat().st_mtime_ns + 10**9
    os.utime(own_ptxas.ptxas, ns=(mtime, mtime))
    again = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=own_ptxas, source_key="v1")
    assert (again.cache_status, again.key) == ("hit", first.key)
    assert path.read_bytes() == damaged  # not rewritten from the damaged copy
    record = cache.decode_shortcut(path.read_bytes())
    assert record is not None and not cache.rest_checked(record)
    assert again.asm["ptx"] == first.asm["ptx"]  # from the entry's own file


def test_a_first_load_fills_what_no_ptxas_reported_when_the_metadata_is_made(
    tilec: ModuleType, kernels: ModuleType, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ptxas the registers come from the loaded function. A hit through a head loads
    the module without making its metadata (no JSON on a first launch); the registers are
    filled in when the metadata is made. A kernel whose metadata exists is filled at load."""
    from tilec.backends.cuda import driver

    src = kernels.vector_add(tilec.ir)
    first = tilec.compile(src, target="sm_90", use_ptxas=False, settings=settings, source_key="v1")
    hit = tilec.compile(src, target="sm_90", use_ptxas=False, settings=settings, source_key="v1")
    assert hit.cache_status == "hit" and hit._metadata is None
    attrs = {"CU_FUNC_ATTRIBUTE_NUM_REGS": 17, "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES": 5, "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES": 3}
    asked: list[tuple[Any, str]] = []

    def attribute(function: Any, name: str) -> int:
        asked.append((function, name))
        return attrs[name]

    monkeypatch.setattr(driver, "current_context", lambda: 7)
    monkeypatch.setattr(driver, "load_module", lambda data, is_ptx: ("module", is_ptx))
    monkeypatch.setattr(driver, "get_function", lambda module, name: f"fn:{name}")
    monkeypatch.setattr(driver, "function_attribute", attribute)
    assert hit._function() == "fn:vadd" and hit._metadata is None and not asked
    md = hit.metadata
    assert (md.registers, md.shared_bytes, md.stack_bytes) == (17, 5, 3)
    assert {f for f, _ in asked} == {"fn:vadd"} and len(asked) == 3
    assert first.metadata.registers is None  # made at compile: filled at its load
    assert first._function() == "fn:vadd" and first.metadata.registers == 17 and len(asked) == 6


def test_the_c_and_python_watch_checks_agree(tilec: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tilec._hit.unchanged (csrc/hit.c) answers the tools' identity's watch list as the Python
    loop does; None (Python answers) where an item is not [path, [mtime_ns, size]]."""
    from tilec.cache import format as cache

    assert cache._hit is not None, "tilec._hit was not built"
    native_reader = cache._hit
    here = tmp_path / "tool"
    here.write_bytes(b"x")
    gone = str(tmp_path / "gone")
    state = cache.file_state(str(here))
    cases: list[tuple[Any, bool | None, bool]] = [  # (watch, C's answer, the answer)
        ([[str(here), state], [gone, [-1, -1]], [str(tmp_path), cache.file_state(str(tmp_path))]], True, True),
        ([[str(here), [state[0] + 1, state[1]]]], False, False),
        ([[str(here), [state[0], state[1] + 1]]], False, False),
        ([[gone, state]], False, False),  # was there, is gone
        ([[str(here), [-1, -1]]], False, False),  # was absent, is there
        ([], True, True),
        ([[str(here)]], None, False),
        ([[str(here), [1, 2, 3]]], None, False),
        ([[str(here), ["1", 2]]], None, False),
        (((str(here), state),), None, True),  # a tuple, not the JSON's list: Python reads it
    ]
    for watch, native, answer in cases:
        assert native_reader.unchanged(watch) == native, watch
        assert cache.unchanged(watch) == answer, watch
        monkeypatch.setattr(cache, "_hit", None)
        assert cache.unchanged(watch) == answer, watch
        monkeypatch.setattr(cache, "_hit", native_reader)
