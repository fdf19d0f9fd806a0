"""nvPTXCompiler gives ptxas's code: every kernel of the gpu tier and of the bench, assembled by
ptxas and by NVIDIA's PTX compiler library of the same CUDA release (the test extra pins
nvidia-cuda-nvcc and nvidia-nvptxcompiler to one release), has the same cubin sections except the
tools' build note (.note.nv.tkinfo), and the same resources. No GPU needed: this is what lets
`assembler="auto"` pick the library (its cubins are keyed apart from ptxas's all the same)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native

REPO = Path(__file__).resolve().parents[2]


def _bench_kernels() -> ModuleType:
    # By path: bench/ is no package, and nothing else of it is needed here.
    spec = importlib.util.spec_from_file_location("_tilec_bench_kernels", REPO / "bench" / "tilec_kernels.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _cases(tilec: ModuleType, kernels: ModuleType) -> dict[str, tuple[Callable[[], Any], dict[str, Any]]]:
    """(IR maker, compile options) of every kernel the gpu tier and the bench compile."""
    K, T = _bench_kernels(), tilec.ir
    return {
        # tests/gpu
        "gpu:vector_add": (lambda: kernels.vector_add(T), {}),
        "gpu:vector_add n=1024": (lambda: kernels.vector_add(T), {"constants": {"n": 1024}}),
        "gpu:vector_add n%16": (lambda: kernels.vector_add(T), {"multiple_of": {"n": 16}}),
        "gpu:block_sum": (lambda: kernels.block_sum(T), {}),
        "gpu:exp_scale": (lambda: kernels.EXP_IR, {}),
        "gpu:exp_scale ftz": (lambda: kernels.EXP_IR, {"ftz": True}),
        "gpu:sin_scale": (lambda: kernels.SIN_IR, {}),
        # bench/ (tilec_kernels.py; sinf is SIN_IR's)
        "bench:vadd": (lambda: K.vadd_scalar(T), {}),
        "bench:vadd_v4": (lambda: K.vadd_vec(T, 1), {}),
        "bench:vadd_v8": (lambda: K.vadd_vec(T, 2), {}),
        "bench:vadd_v8_m4": (lambda: K.vadd_vec(T, 2, True), {}),
        "bench:vadd_v8_flat": (lambda: K.vadd_vec(T, 2, one_path=True), {}),
        "bench:expsin": (lambda: K.exp_sin_loop(T), {}),
        "bench:rowsum_u1": (lambda: K.row_sum(T, 1), {}),
        "bench:rowsum_u2": (lambda: K.row_sum(T, 2), {}),
    }


def _ptxas_candidates() -> list[Path]:
    """nvidia-cuda-nvcc's ptxas (the test extra pins it), then a CUDA toolkit's (a GPU runner's)."""
    found: list[Path] = []
    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations if spec and spec.submodule_search_locations else ():
        found.append(Path(root) / "cu13" / "bin" / "ptxas")
    for env in ("TILEC_PTXAS", "CUDA_HOME"):
        if os.environ.get(env):
            given = Path(os.environ[env])
            found.append(given if env == "TILEC_PTXAS" else given / "bin" / "ptxas")
    which = shutil.which("ptxas")
    found += [Path("/usr/local/cuda/bin/ptxas"), *([Path(which)] if which else [])]
    return [p for p in dict.fromkeys(found) if p.is_file()]


@pytest.fixture(scope="module")
def same_release(tilec: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Settings whose ptxas is of the release of the PTX compiler library tilec finds."""
    from tilec.backends.cuda import backend, toolchain

    cache = tmp_path_factory.mktemp("parity-cache")
    lib = backend.nvptxcompiler_library(tilec.Settings.from_env({"TILEC_CACHE_DIR": str(cache)}))
    versions = {p: toolchain.ptxas_info(p).version for p in _ptxas_candidates()}
    ptxas = next((p for p, v in versions.items() if v == lib.version), None)
    if ptxas is None:
        pytest.fail(
            f"no ptxas of nvPTXCompiler's release {lib.version} ({lib.archive}) among {versions}: "
            "pin nvidia-nvptxcompiler and nvidia-cuda-nvcc alike (pip install -e '.[test]')"
        )
    env = {"TILEC_CACHE_DIR": str(cache), "TILEC_PTXAS": str(ptxas), "PATH": "", "CUDA_HOME": str(cache / "none")}
    env["TILEC_NVPTXCOMPILER"] = str(lib.archive)
    return tilec.Settings.from_env(env)


def test_every_kernel_has_ptxas_s_sections(tilec: ModuleType, kernels: ModuleType, same_release: Any) -> None:
    from tilec.backends.cuda import cubin

    compared = []
    for name, (make, kw) in _cases(tilec, kernels).items():
        by = {
            a: tilec.compile(make(), target="sm_90", settings=same_release, assembler=a, **kw)
            for a in ("ptxas", "nvptxcompiler")
        }
        ptxas, lib = by["ptxas"], by["nvptxcompiler"]
        assert (ptxas.metadata.assembler, lib.metadata.assembler) == ("ptxas", "nvptxcompiler"), name
        assert ptxas.asm["ptx"] == lib.asm["ptx"], name
        assert ptxas.key != lib.key, name  # keyed apart: their build notes differ
        assert cubin.differing_sections(ptxas.asm["cubin"], lib.asm["cubin"]) == [], name
        # The code is all there is to compare: without the note's exception they would differ.
        assert cubin.BUILD_NOTE in cubin.sections(lib.asm["cubin"]), name
        assert any(s.startswith(".text.") for s in cubin.sections(lib.asm["cubin"])), name
        fields = ("registers", "shared_bytes", "spill_stores", "spill_loads", "stack_bytes")
        assert [getattr(lib.metadata, f) for f in fields] == [getattr(ptxas.metadata, f) for f in fields], name
        assert lib.metadata.registers, name  # the library's info log was read
        compared.append(name)
    assert len(compared) == 15


def test_auto_picks_the_library_of_ptxas_s_release(
    tilec: ModuleType, kernels: ModuleType, same_release: Any, tmp_path: Path
) -> None:
    import dataclasses

    fresh = dataclasses.replace(same_release, cache_dir=tmp_path)
    k = tilec.compile(kernels.SIN_IR, target="sm_90", settings=fresh)
    md = k.metadata
    from tilec.backends.cuda import backend

    release = backend.nvptxcompiler_library(fresh).version
    assert md.assembler == "nvptxcompiler" and md.nvptxcompiler_version == release
    assert md.assembler_note.startswith(f"auto: nvPTXCompiler {release} (the release of ptxas {fresh.ptxas})")
    assert md.ptxas_log.startswith("tilec: auto: nvPTXCompiler")  # the stage log says so
    by_name = tilec.compile(kernels.SIN_IR, target="sm_90", settings=fresh, assembler="nvptxcompiler")
    assert by_name.key == k.key and by_name.cache_status == "hit"  # auto and its pick share entries


def test_checked_auto_compares_with_ptxas(tilec: ModuleType, kernels: ModuleType, same_release: Any) -> None:
    import dataclasses

    checked = dataclasses.replace(same_release, assembler_check=True)
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=checked)
    assert k.metadata.assembler == "nvptxcompiler"
    assert k.metadata.assembler_note.endswith("checked: the same sections as ptxas's")
    plain = tilec.compile(kernels.EXP_IR, target="sm_90", settings=same_release)
    assert plain.key != k.key  # a checked compile is keyed with ptxas too


def test_checked_auto_falls_back_where_the_sections_differ(
    tilec: ModuleType, kernels: ModuleType, same_release: Any, monkeypatch: Any
) -> None:
    """A cubin of the library that differs from ptxas's gives way to ptxas's, and the stage log
    names the sections (a difference made here by changing one byte of the library's code)."""
    import dataclasses

    from tilec.backends.cuda import cubin, nvptxcompiler

    real = nvptxcompiler.assemble

    def changed(*args: Any, **kw: Any) -> tuple[bytes, str]:
        image, log = real(*args, **kw)
        text = cubin.sections(image)[".text.exp_scale"]
        at = image.index(text)
        return image[:at] + bytes([text[0] ^ 1]) + image[at + 1 :], log

    monkeypatch.setattr(nvptxcompiler, "assemble", changed)
    checked = dataclasses.replace(same_release, assembler_check=True, cache_enabled=False)
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=checked)
    assert k.metadata.assembler == "ptxas"
    assert "differed from ptxas's in .text.exp_scale: ptxas's is used" in k.metadata.assembler_note
    assert k.metadata.ptxas_log.startswith("tilec: auto: nvPTXCompiler")
    ptxas = tilec.compile(kernels.EXP_IR, target="sm_90", settings=checked, assembler="ptxas")
    assert k.asm["cubin"] == ptxas.asm["cubin"]
