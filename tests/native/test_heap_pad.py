"""TILEC_HEAP_PAD_MIB: glibc keeps the heap an in-process assembly frees, so the next compile does not
fault it in again; the user's own malloc settings are left alone, and a bad value is refused."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native

# Frees 8 MiB of small blocks at the heap's top and takes them again: glibc gives freed top memory
# back to the system past its trim threshold, and the second round then faults every page in anew.
FREE_AND_TAKE = """
import ctypes, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def round_():
    blocks = [libc.malloc(64 << 10) for _ in range(128)]
    for b in blocks:
        ctypes.memset(b, 1, 64 << 10)
    for b in reversed(blocks):
        libc.free(b)
def faults_of_a_second_round():
    round_()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    round_()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
"""

KEEP = FREE_AND_TAKE + """
import json
from tilec import Settings
from tilec.backends.cuda import heap
done = heap.keep(Settings.from_env())
print(json.dumps({"faults": faults_of_a_second_round(), "done": done}))
"""

# One compile (cache off) with the assembler named: only an in-process assembly sets the pad, at
# its first compile. (After a compile glibc may have raised its own trim threshold, so the rounds
# above would show nothing here: what was set is read instead.)
COMPILE_THEN = """
import json, sys, tilec
from tilec.backends.cuda import heap
k = tilec.compile(open(sys.argv[1]).read(), target="sm_90", settings=tilec.Settings.from_env(), assembler=sys.argv[2])
print(json.dumps({"set": list(heap._DONE), "assembler": k.metadata.assembler}))
"""


def _env(tilec: ModuleType, **env: str) -> dict[str, str]:
    """This environment less any malloc setting of the caller's, with this tilec importable."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES", "TILEC_HEAP"))}
    full.update(PYTHONPATH=str(Path(tilec.__file__).resolve().parent.parent), **env)
    return full


def _python(tilec: ModuleType, code: str, *args: str, **env: str) -> dict[str, Any]:
    full = _env(tilec, **env)
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=full, check=False)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_freed_heap_is_kept_with_the_default_and_given_back_without(tilec: ModuleType) -> None:
    kept = _python(tilec, KEEP)
    assert kept["done"] == "keeps 32 MiB of freed heap for the next in-process assembly (TILEC_HEAP_PAD_MIB)"
    assert kept["faults"] < 100, kept
    # the control: without the pad the same rounds fault the 8 MiB (2,048 pages) in again,
    # so the check above would fail if keep() did nothing
    plain = _python(tilec, KEEP, TILEC_HEAP_PAD_MIB="0")
    assert plain["done"] == "left alone (TILEC_HEAP_PAD_MIB=0)"
    assert plain["faults"] > 1500, plain


def test_the_user_s_own_malloc_settings_are_left_alone(tilec: ModuleType) -> None:
    for env in ({"MALLOC_TOP_PAD_": "1048576"}, {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}):
        got = _python(tilec, KEEP, **env)
        assert got["done"] == "left alone: the environment tunes glibc's malloc trimming itself", env


def test_an_in_process_assembly_sets_the_pad_and_ptxas_does_not(
    tilec: ModuleType, kernels: ModuleType, settings_env: dict[str, str], tmp_path: Path
) -> None:
    src = tmp_path / "exp.ll"
    src.write_text(kernels.EXP_IR)
    inproc = _python(tilec, COMPILE_THEN, str(src), "nvptxcompiler", **settings_env, TILEC_CACHE="0")
    assert inproc["assembler"] == "nvptxcompiler"
    assert inproc["set"] == ["keeps 32 MiB of freed heap for the next in-process assembly (TILEC_HEAP_PAD_MIB)"]
    # a ptxas compile runs in its own process: this one's malloc is left as it was
    apart = _python(tilec, COMPILE_THEN, str(src), "ptxas", **settings_env, TILEC_CACHE="0")
    assert apart["assembler"] == "ptxas" and apart["set"] == []


def test_bad_values_say_what_is_allowed(tilec: ModuleType, settings: Any) -> None:
    from tilec.backends.cuda import heap

    assert heap.pad_bytes(settings) == 32 << 20
    assert heap.pad_bytes(dataclasses.replace(settings, heap_pad_mib="8")) == 8 << 20
    for bad in ("x", "-1", "1.5", "99999"):
        with pytest.raises(tilec.TargetError, match=r"TILEC_HEAP_PAD_MIB must be a whole number of MiB from 0 to 4096"):
            heap.plan(dataclasses.replace(settings, heap_pad_mib=bad))


def test_the_cli_says_what_it_does_with_the_heap(tilec: ModuleType, settings_env: dict[str, str]) -> None:
    def cli(**env: str) -> subprocess.CompletedProcess[str]:
        full = _env(tilec, **settings_env, **env)
        return subprocess.run([sys.executable, "-m", "tilec", "assembler"], capture_output=True, text=True, env=full, check=False)

    ok = cli()
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[-1] == "heap: keeps 32 MiB of freed heap for the next in-process assembly (TILEC_HEAP_PAD_MIB)"
    off = cli(TILEC_HEAP_PAD_MIB="0")
    assert off.stdout.splitlines()[-1] == "heap: left alone (TILEC_HEAP_PAD_MIB=0)"
    bad = cli(TILEC_HEAP_PAD_MIB="lots")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "TILEC_HEAP_PAD_MIB must be a whole number of MiB from 0 to 4096, got 'lots'" in bad.stderr
