"""`hermetic wheel` with the pinned zig toolchain, for real.

tests/functional/projects/llvmprobe (scikit-build-core + nanobind, like src/compiler, linking LLVMSupport
and LLVMDemangle) is built against a `support` LLVM built with zig (the session's `zig_support_install`),
with no --toolchain needed: the LLVM's record says zig. The first build (the session's `zig_probe_wheel`, which
test_wheel_arm64.py compares its arm64 wheel with) runs in that LLVM's work dir, whose zig cache it fills
with zig's runtime for the target (the LLVM build leaves none there); `hermetic verify` then rebuilds it in
another directory, under another umask, from another working directory and with a cold zig cache, and the two
wheels must be the same bytes. The wheel
must be what manylinux_2_28 promises: tagged so by auditwheel, its extension needing no C++ runtime,
exporting nothing but its module init, no glibc symbol above 2.28, no debug info and no build path.

Cost on the idle 2-core dev machine in a fresh-clone CI run: the zig `support` tree (shared fixture) about 2 min,
the first wheel and its verify rebuild about 12 s together (zig's runtimes, libc++ etc., are in the source
cache's zig-global since the first zig build of the session).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from helpers import ROOT, run_hermetic
from hermetic.model import record, toolchains

PROJECT = ROOT / "tests" / "functional" / "projects" / "llvmprobe"
PLATFORM = "manylinux_2_28_x86_64"
PY = f"cp{sys.version_info[0]}{sys.version_info[1]}"
# the project's wheel.py-api is cp312, as src/compiler's: the stable ABI from 3.12 on
PY_TAG = "cp312-abi3" if sys.version_info >= (3, 12) else f"{PY}-{PY}"



@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, zig_probe_wheel: dict[str, Any], source_cache: Path) -> dict[str, Any]:
    wheel, printed = zig_probe_wheel["wheel"], zig_probe_wheel["printed"]
    common = ["--root", str(ROOT), "--cache", str(source_cache), "--jobs", str(os.cpu_count() or 2), "--offline", "auto"]
    # the first build's directories are the session fixture's; the rebuild gets its own, elsewhere
    base = tmp_path_factory.mktemp("zigwheel-verify")
    (base / "cwd-b").mkdir()
    rebuild = base / "elsewhere" / "deeper" / "rebuild"
    v = run_hermetic("verify", str(wheel), "--rebuild-dir", str(rebuild), "--keep", "--json", *common,
                     cwd=base / "cwd-b", umask=0o077)
    return {
        "wheel": wheel, "printed": printed, "stderr": zig_probe_wheel["stderr"], "record": zig_probe_wheel["record"],
        "verify": json.loads(v.stdout), "rebuilt": rebuild / "dist" / printed["wheel"], "work": zig_probe_wheel["work"],
        "base": zig_probe_wheel["base"], "rebuild": rebuild, "llvm": zig_probe_wheel["llvm"], "cache": source_cache,
    }


def _extension(wheel: Path) -> tuple[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.startswith("llvmprobe/_probe") and n.endswith(".so")]
        return name, z.read(name)


def test_the_llvm_s_record_chose_zig_and_a_rebuild_elsewhere_is_identical(built: dict[str, Any]) -> None:
    rec = built["record"]
    zig = toolchains.for_root(ROOT, "zig")
    assert rec["toolchain_id"] == zig.identity() and built["llvm"].toolchain_ref.kind == "zig"
    assert built["printed"]["toolchain"] == record.ToolchainRef.from_mapping(zig.identity()).label
    report = built["verify"]
    assert report["match"] is True, report
    assert report["conditions"]["toolchain"] == zig.label and report["conditions"]["umask"] != "0022"
    a, b = built["wheel"].read_bytes(), built["rebuilt"].read_bytes()
    assert a == b, "the verify rebuild differs"
    digest = hashlib.sha256(a).hexdigest()
    assert rec["sha256"] == built["printed"]["sha256"] == digest
    print(f"\n{built['wheel'].name} sha256 {digest}; timings {rec['timings_s']}; verify {report['seconds']} s")


def test_the_tag_is_manylinux_2_28_as_auditwheel_accepts_it(built: dict[str, Any]) -> None:
    rec = built["record"]
    assert built["wheel"].name == f"llvmprobe-0.1.0-{PY_TAG}-{PLATFORM}.whl"
    assert rec["tag"] == f"{PY_TAG}-{PLATFORM}"
    assert rec["platform_tag"]["from"] == f"auditwheel repair --plat {PLATFORM}"
    # auditwheel's own verdict on the final wheel: consistent with a policy no newer than 2.28, nothing grafted
    tools = sorted((built["work"] / "wheel" / "venv").glob("*/bin/auditwheel"))
    assert tools, "the build venv has no auditwheel"
    proc = subprocess.run([str(tools[0]), "show", "--json", str(built["wheel"])], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    m = re.fullmatch(r"manylinux_2_(\d+)_x86_64", report["overall_tag"])
    assert m and int(m.group(1)) <= 28, report["overall_tag"]
    assert not report["external_libs"]


def test_the_extension_is_self_contained_and_names_no_build_path(built: dict[str, Any]) -> None:
    name, data = _extension(built["wheel"])
    elf = ELFFile(io.BytesIO(data))
    dynamic = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
    needed = [t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    assert not [n for n in needed if re.match(r"lib(stdc\+\+|c\+\+|c\+\+abi|unwind)\.", n)], needed
    exported = {
        s.name for s in elf.get_section_by_name(".dynsym").iter_symbols()
        if s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE") and s.name
    }
    assert exported == {"PyInit__probe"}, sorted(exported)[:20]
    verneed = next(s for s in elf.iter_sections() if isinstance(s, GNUVerNeedSection))
    glibc = [tuple(int(x) for x in a.name[len("GLIBC_"):].split("."))
             for _, aux in verneed.iter_versions() for a in aux if a.name.startswith("GLIBC_2.")]
    assert glibc and max(glibc) <= (2, 28), sorted(glibc)
    assert not [s.name for s in elf.iter_sections() if s.name.startswith(".debug")]
    # no path of this machine's build: work dirs, zig's cache, the hermetic cache
    with zipfile.ZipFile(built["wheel"]) as z:
        blobs = {n: z.read(n) for n in z.namelist()}
    for needle in (str(built["base"]), str(built["work"]), str(built["cache"]), "zig-cache"):
        assert not [n for n, b in blobs.items() if needle.encode() in b], (needle, name)


def test_the_wheel_installs_and_calls_llvm(built: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
                    str(built["wheel"])], check=True, capture_output=True, text=True)
    code = (
        "import json, llvmprobe as p; print(json.dumps([p.llvm_version(), "
        "p.demangle('_ZNK4llvm9StringRef5lowerEv'), p.xxh3(b'')]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(target), "PATH": os.environ.get("PATH", "")})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["19.1.7", "llvm::StringRef::lower() const", 0x2D06800538D394C2]


def test_the_sbom_and_provenance_name_the_pinned_toolchain(built: dict[str, Any]) -> None:
    zig = toolchains.for_root(ROOT, "zig")
    wheel = built["wheel"]
    bom = json.loads(wheel.with_name(wheel.name + ".cdx.json").read_text())
    tools = {c["bom-ref"]: c for c in bom["formulation"][0]["components"]}
    assert tools["wheel-toolchain:ziglang-0.17.1"]["hashes"] == [{"alg": "SHA-256", "content": zig.sha256}]
    st = json.loads(wheel.with_name(wheel.name + ".intoto.json").read_text())
    assert st["predicate"]["buildDefinition"]["externalParameters"]["toolchain"] == zig.identity()


def test_another_toolchain_than_the_llvm_s_is_refused_before_building(built: dict[str, Any], tmp_path: Path) -> None:
    proc = run_hermetic(
        "wheel", str(PROJECT), "--llvm", str(built["llvm"].install_dir), "--toolchain", "host",
        "--root", str(ROOT), "--cache", str(built["cache"]), "--work-dir", str(tmp_path / "w"), cwd=tmp_path, check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--toolchain host is not the toolchain" in proc.stderr and "zig 0.17.1" in proc.stderr
    assert not (tmp_path / "w" / "wheel").exists()
