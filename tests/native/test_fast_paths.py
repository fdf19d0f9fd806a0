"""The cheap paths: lazy libdevice linking, and a cache hit in a fresh process that scans no
plugins, runs no ptxas and loads no native core."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

# expf and sinf: two libdevice functions, one of them (sinf) with a slow path and tables.
EXPSIN_IR = """\
target triple = "nvptx64-nvidia-cuda"

declare float @__nv_expf(float)
declare float @__nv_sinf(float)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

define void @expsin(ptr addrspace(1) %x, ptr addrspace(1) %y) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %i = zext i32 %tid to i64
  %px = getelementptr inbounds float, ptr addrspace(1) %x, i64 %i
  %v = load float, ptr addrspace(1) %px, align 4
  %e = call float @__nv_expf(float %v)
  %s = call float @__nv_sinf(float %e)
  %py = getelementptr inbounds float, ptr addrspace(1) %y, i64 %i
  store float %s, ptr addrspace(1) %py, align 4
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{ptr @expsin, !"kernel", i32 1}
"""


def test_lazy_libdevice_links_only_what_is_called(
    tilec: ModuleType, settings: Any, settings_env: dict[str, str]
) -> None:
    k = tilec.compile(EXPSIN_IR, target="sm_90", settings=settings)
    md = k.metadata
    assert md.libdevice_linked == ("__nv_expf", "__nv_sinf")
    # Nothing else of libdevice was materialised into the module, and ptxas took the PTX.
    assert "@__nv_" not in k.asm["llir_opt"]
    assert ".entry expsin" in k.asm["ptx"] and "sin.approx" not in k.asm["ptx"]
    assert k.asm["cubin"][:4] == b"\x7fELF"
    # Lowering twice in one process (the lazy module is re-read each time) gives the same PTX.
    again = tilec.compile(
        EXPSIN_IR,
        target="sm_90",
        settings=tilec.Settings.from_env({**settings_env, "TILEC_CACHE": "0"}),
    )
    assert again.cache_status == "disabled"
    assert again.asm["ptx"] == k.asm["ptx"]


def test_build_info_matches_the_core(tilec: ModuleType) -> None:
    assert (Path(tilec.__file__).parent / "_build_info.py").is_file()
    assert tilec.native.built_llvm_version() == tilec.native.llvm_version()



HIT = """
    import importlib.metadata, subprocess, sys, time
    import tilec
    def refuse(*a, **kw):
        raise AssertionError("called on the cache-hit path")
    importlib.metadata.entry_points = refuse
    subprocess.run = subprocess.Popen = refuse
    t0 = time.perf_counter()
    k = tilec.compile(sys.stdin.read(), target="sm_90")
    dt = time.perf_counter() - t0
    print(k.cache_status, "tilec._core" in sys.modules, k.key, f"{{dt * 1e3:.3f}}ms")
"""


def test_fresh_process_hit_needs_no_plugins_ptxas_or_core(
    tilec: ModuleType, kernels: ModuleType, settings: Any, settings_env: dict[str, str]
) -> None:
    first = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)
    assert first.cache_status == "miss"
    env = {**os.environ, **settings_env}
    env["PYTHONPATH"] = str(Path(tilec.__file__).resolve().parent.parent)
    for _ in range(2):  # the second finds the ptxas version and libdevice digest remembered
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(HIT.format())],
            input=kernels.EXP_IR,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        status, core_loaded, key, _ms = proc.stdout.split()
        assert (status, core_loaded, key) == ("hit", "False", first.key)
    # A target no built-in backend claims still scans plugins (and fails as before).
    proc = subprocess.run(
        [sys.executable, "-c", "import tilec; tilec.compile('', target='nosuch:1')"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert "no backend named 'nosuch'" in proc.stderr


def test_tool_identity_is_found_once_per_process_for_any_cache_dir(
    tilec: ModuleType, kernels: ModuleType, settings_env: dict[str, str], tmp_path: Path, monkeypatch: Any
) -> None:
    """Another cache directory (a new Settings) with the same tools does not run `ptxas --version`
    or hash libdevice again in the same process; other tools do."""
    from tilec.backends.cuda import toolchain

    monkeypatch.setattr(toolchain, "_IDENTITY", {})
    monkeypatch.setattr(toolchain, "_MEMO", {})
    found: list[str] = []
    versions: list[str] = []
    compute = toolchain._compute_identity
    version = toolchain._ptxas_version

    def counting(settings: Any, memo: Any) -> Any:
        found.append(str(settings.ptxas))
        return compute(settings, memo)

    def counting_version(path: Path) -> str:
        versions.append(str(path))
        return version(path)

    monkeypatch.setattr(toolchain, "_compute_identity", counting)
    monkeypatch.setattr(toolchain, "_ptxas_version", counting_version)
    for name in ("a", "b"):
        env = {**settings_env, "TILEC_CACHE_DIR": str(tmp_path / name)}
        settings = tilec.Settings.from_env(env)
        k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings, assembler="ptxas")
        assert k.cache_status == "miss"
        assert k.metadata.ptxas_version not in (None, "", "unknown")
    assert len(found) == 1
    # The PTX -> cubin stage asks for ptxas's version too: answered from the first directory's run.
    assert versions == [settings_env["TILEC_PTXAS"]]
    # What was found is still kept in the second cache, for the processes that use only it:
    # the tools' identity (a hit) and ptxas's version (a compile).
    for name in ("a", "b"):
        kept = {p.name.split("-")[0] for p in (tmp_path / name / "tools").glob("*.json")}
        assert {"cuda", "ptxas"} <= kept, (name, kept)
    other = tmp_path / "bin" / "ptxas"  # the same ptxas under another name: other inputs
    other.parent.mkdir()
    other.symlink_to(settings_env["TILEC_PTXAS"])
    env = {**settings_env, "TILEC_CACHE_DIR": str(tmp_path / "c"), "TILEC_PTXAS": str(other)}
    tilec.compile(kernels.EXP_IR, target="sm_90", settings=tilec.Settings.from_env(env))
    assert found == [settings_env["TILEC_PTXAS"], str(other)]
