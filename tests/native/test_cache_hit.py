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
# entry by its parsed payload would need. Imports come before the refusals.
CHILD = """
import importlib.metadata, json, subprocess, sys, os
sys.path.insert(0, {kernels_dir!r})
import tilec, kernels
from tilec import compiler

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
    compiler._as_ir = refuse("printing the IR")
    json.dumps = refuse("json.dumps")
k = tilec.compile(module, target="sm_90", source_key="vadd-v1")
print("RESULT", k.cache_status, k.key, "tilec._core" in sys.modules, len(spawned))
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


def _hit(tilec: ModuleType, settings: Any, **extra: str) -> tuple[str, str, bool, int]:
    env = _env(settings, **extra)
    env["PYTHONPATH"] = str(Path(tilec.__file__).resolve().parent.parent)
    code = CHILD.format(kernels_dir=str(Path(__file__).resolve().parent))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    _, status, key, core, spawned = line.split()
    return status, key, core == "True", int(spawned)


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

    # No process, no plugin scan, no native core, no IR printing, no JSON serialisation.
    status, key, core_loaded, spawned = _hit(tilec, own_ptxas, SHORTCUT="1")
    assert (status, key, core_loaded, spawned) == ("hit", first.key, False, 0)
    # Without the shortcut the IR is printed and hashed, still without a process.
    for shortcut in [p for p in shortcuts if p.is_file()]:
        shortcut.unlink()
    status, key, core_loaded, spawned = _hit(tilec, own_ptxas)
    assert (status, key, core_loaded, spawned) == ("hit", first.key, False, 0)
    # ...and that hit wrote the shortcut again.
    status, key, _, _ = _hit(tilec, own_ptxas, SHORTCUT="1")
    assert (status, key) == ("hit", first.key)


def test_a_changed_tool_is_noticed_through_the_shortcut(
    tilec: ModuleType, kernels: ModuleType, own_ptxas: Any, ptxas_path: Path
) -> None:
    first = tilec.compile(kernels.vector_add(tilec.ir), target="sm_90", settings=own_ptxas, source_key="vadd-v1")
    wrapper = own_ptxas.ptxas
    # Same ptxas, file touched: its version is asked once more (one process) and the key stands.
    os.utime(wrapper, ns=(wrapper.stat().st_atime_ns, wrapper.stat().st_mtime_ns + 10**9))
    status, key, _, spawned = _hit(tilec, own_ptxas, ALLOW_SPAWN="1")
    assert (status, key, spawned) == ("hit", first.key, 1)
    status, key, _, spawned = _hit(tilec, own_ptxas, ALLOW_SPAWN="1")
    assert (status, key, spawned) == ("hit", first.key, 0)  # remembered again
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
    from tilec import cache

    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)
    path = tilec.compiler.Cache(settings.cache_dir).path(k.key)
    raw = path.read_bytes()
    assert raw.startswith(cache.MAGIC) and k.asm["cubin"] in raw  # the cubin as it is, no base64
    payload, parts = cache.decode(k.key, raw)
    assert parts["cubin"] == k.asm["cubin"] and payload["text"] == ["llir", "llir_opt", "ptx"]
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
    for assembler in ("ptxas", "nvjitlink"):
        opts = tilec.CompileOptions(target="sm_90", backend_options={"assembler": assembler})
        keys[assembler] = c.cache_key(kernels.EXP_IR, opts, *c.resolve(opts))
    default = tilec.CompileOptions(target="sm_90")
    assert c.cache_key(kernels.EXP_IR, default, *c.resolve(default)) == keys["ptxas"]
    assert keys["ptxas"] != keys["nvjitlink"]
    monkeypatch.setattr(nvjitlink, "version", lambda: "13.1")
    opts = tilec.CompileOptions(target="sm_90", backend_options={"assembler": "nvjitlink"})
    assert c.cache_key(kernels.EXP_IR, opts, *c.resolve(opts)) != keys["nvjitlink"]


def test_unknown_assembler_and_missing_nvjitlink(
    tilec: ModuleType, kernels: ModuleType, settings: Any, monkeypatch: Any
) -> None:
    with pytest.raises(tilec.TargetError, match="assembler must be one of 'ptxas', 'nvjitlink', got 'nvcc'"):
        tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings, assembler="nvcc")
    from tilec.backends.cuda import nvjitlink

    monkeypatch.setitem(sys.modules, "cuda.bindings.nvjitlink", None)  # as if not installed
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

    assert nvjitlink.options("sm_90a", ("-lineinfo",), 3) == ["-arch=sm_90a", "-O3", "-Xptxas=-v", "-Xptxas=-lineinfo"]


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
