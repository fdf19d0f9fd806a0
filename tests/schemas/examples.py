"""Small, real-shaped artifacts for the unit tests of SBOMs, provenance and referrers.

A fake install tree with a record.json written the way hermetic.llvm writes
one (same keys, real digests over the fake files), its OCI image written by
hermetic's own layout code, and a wheel with a wheel-record.json written the
way hermetic.wheel writes one. No compiler runs.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

from hermetic.model import record, toolchains
from hermetic.model.options import resolve
from hermetic.model.settings import Settings
from hermetic.oci.image import spec_from_record, write_image

ROOT = Path(__file__).resolve().parents[2]
EPOCH = 1736812800
PREFIX = "usr/lib64/llvm-support-19.1.7"
DEBIAN_ORIG = "ae498f3bc58ae2d9f64ef5f0c035c4240152bf015a5b7738b15c22e93bdc97ce"
TOOLCHAIN = {
    "cc": "cc (Debian 12.2.0-14) 12.2.0",
    "cxx": "c++ (Debian 12.2.0-14) 12.2.0",
    "cmake": "cmake version 4.4.4",
    "ninja": "1.13.2",
    "conan": "Conan version 2.34.0",
    "python": "3.11.7",
    "machine": "linux-x86_64",
}


def settings(tmp: Path) -> Settings:
    return resolve({"root": str(ROOT), "work_dir": str(tmp / "work"), "cache_dir": str(tmp / "cache")}, {}, tmp)


# The pinned zig toolchain's identity (Toolchain.identity() of toolchain/toolchains.yml's `zig`).
ZIG_ID = {
    "name": "zig",
    "kind": "zig",
    "version": "0.17.1",
    "file": "ziglang-0.17.1-py3-none-manylinux_2_12_x86_64.manylinux2010_x86_64.musllinux_1_1_x86_64.whl",
    "sha256": "ea6cc5d87b033cf0aedfbc8f9549a908cae6c50ac31f1698188fa48a74524b54",
    "target": "x86_64-linux-gnu.2.28",
    "unpack_layout": "1",
    "wrappers": str(toolchains.WRAPPERS_VERSION),
}


def fake_llvm_build(
    base: Path, seed: str = "", toolchain_id: dict[str, str] | None = None, recipe_digest: str = "ab" * 32
) -> Path:
    """An install tree and its record.json under base/llvm/support; returns the record path.

    toolchain_id: the pinned toolchain's identity (`toolchain_id`); None writes a record of the shape
    written before it existed (a host build).
    """
    out = base / "llvm" / "support"
    install = out / "install"
    (install / PREFIX / "include" / "llvm" / "Config").mkdir(parents=True)
    (install / PREFIX / "lib" / "cmake" / "llvm").mkdir(parents=True)
    (install / PREFIX / "include" / "llvm" / "Config" / "llvm-config.h").write_text(f"#define LLVM_VERSION 19{seed}\n")
    (install / PREFIX / "lib" / "libLLVMSupport.a").write_bytes(b"!<arch>\n" + b"\0" * 64)
    (install / PREFIX / "lib" / "cmake" / "llvm" / "LLVMConfig.cmake").write_text('set(LLVM_PACKAGE_VERSION "19.1.7")\n')
    record.normalize_tree(install, EPOCH)
    entries = record.scan_tree(install)
    rec: dict[str, Any] = {
        "schema": record.RECORD_SCHEMA,
        "recipe": {"name": "llvm", "version": "19.1.7", "digest": recipe_digest},
        "variant": "support",
        "options": {"targets": "X86", "projects": "llvm",
                    "components": "LLVMDemangle;LLVMSupport;llvm-headers;cmake-exports", "tools": ""},
        "inputs_digest": "cd" * 32,
        "sources": [{"file": "llvm-toolchain-19_19.1.7.orig.tar.xz", "sha256": DEBIAN_ORIG,
                     "origin": "apt:llvm-toolchain-19=1:19.1.7-3~deb12u1"}],
        "source_archive": {"file": "llvm-project-19.1.7.src-support.tar.xz", "sha256": "79" * 32},
        "pruned": {"file": "llvm-project-19.1.7.src-support.tar.xz", "sha256": "79" * 32, "size": 15817504,
                   "path": str(base / "llvm-project-19.1.7.src-support.tar.xz"),
                   "key": "9a" * 32, "variant": "support",
                   "from": {"file": "llvm-toolchain-19_19.1.7.orig.tar.xz", "sha256": DEBIAN_ORIG,
                            "origin": "apt:llvm-toolchain-19=1:19.1.7-3~deb12u1"}},
        "prefix": "/" + PREFIX,
        "source_date_epoch": EPOCH,
        "offline": {"enforced": True, "method": "netns", "reason": "each step ran in a fresh network namespace"},
        "toolchain": TOOLCHAIN,
        "jobs": 2,
        "wall_time_s": 181.5,
        "build_commands": 312,
        "test_package": {"ran": True, "ptx": []},
        "install_root": str(install),
        "tree": {"digest": record.tree_digest(entries), "size": record.tree_size(entries),
                 "files": [e.as_json() for e in entries]},
    }
    if toolchain_id is not None:
        rec["toolchain_id"] = toolchain_id
    record.write_json(out / "record.json", rec)
    return out / "record.json"


def fake_image(record_path: Path, dest: Path) -> Path:
    return write_image(spec_from_record(record_path, arch="amd64"), dest).layout


PINNED = [
    {"name": "cmake", "version": "4.4.4", "sha256": ["11" * 32]},
    {"name": "nanobind", "version": "3.1.0", "sha256": ["22" * 32]},
    {"name": "ninja", "version": "1.13.2", "sha256": ["33" * 32]},
    {"name": "pip", "version": "26.3", "sha256": ["44" * 32]},
    {"name": "scikit-build-core", "version": "1.1.2", "sha256": ["55" * 32]},
]


def fake_wheel(
    dest: Path, llvm_prefix: str = "/usr/lib/llvm-19", llvm_record: dict[str, Any] | None = None,
    toolchain_id: dict[str, str] | None = None,
) -> Path:
    """A small wheel and its wheel-record.json in dest; returns the wheel.

    toolchain_id: the pinned toolchain it was compiled with; None writes the shape of a record written
    before wheel records carried it (a host build).
    """
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / "tilec-0.1.0-cp312-abi3-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("tilec/__init__.py", "")
        z.writestr("tilec-0.1.0.dist-info/METADATA", "Metadata-Version: 2.4\nName: tilec\nVersion: 0.1.0\nLicense: Apache-2.0\n")
        z.writestr("tilec-0.1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    rec = {
        "schema": "hermetic.wheel-record/1",
        "wheel": wheel.name,
        "sha256": digest,
        "size": wheel.stat().st_size,
        "tag": "cp312-abi3-manylinux_2_34_x86_64",
        "platform_tag": {"tag": "manylinux_2_34_x86_64", "from": "auditwheel", "built_as": "linux_x86_64",
                         "auditwheel": {"overall_tag": "manylinux_2_34_x86_64", "sym_tag": "manylinux_2_34_x86_64",
                                        "external_libs": {}}},
        "glibc_required": "2.34",
        "symbol_versions": {"GLIBC": "2.34"},
        "python": {"version": "3.11.7", "implementation": "CPython", "tag": "cp312-abi3"},
        "project": {"name": "tilec", "path": str(ROOT / "src" / "compiler")},
        "llvm": {"prefix": llvm_prefix, "cmake_dir": llvm_prefix + "/lib/cmake/llvm", "version": "19.1.7",
                 "record": llvm_record},
        "source_date_epoch": EPOCH,
        "build_requirements": {"file": "toolchain/build-requirements.txt", "digest": "ee" * 32, "pinned": PINNED},
        "wheelhouse": str(dest / "wheelhouse"),
        "recipe_digest": "ff" * 32,
        "offline": {"enforced": True, "method": "netns", "reason": "netns"},
        "toolchain": {k: TOOLCHAIN[k] for k in ("cc", "cxx", "cmake", "ninja", "python")},
        "machine": "linux-x86_64",
        "timings_s": {"total": 95.0},
    }
    if toolchain_id is not None:
        rec["toolchain_id"] = toolchain_id
    (dest / "wheel-record.json").write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")
    return wheel
