"""`hermetic wheel --recipe NAME`: another project's release sdist built against a hermetic LLVM, for real.

llvmlite's own recipe (recipes/llvmlite) needs the `llvmlite` variant of LLVM 22 (about 90 minutes on 2 cores): it
is built and its test suite run on the GPU runner (python3 -m devtools.runner --llvmlite, README). What CI affords is the
same machinery on a project of llvmlite's shape, `ctypesprobe` (tests/functional/projects): a setuptools sdist
without pyproject.toml whose build runs CMake itself with options from CMAKE_ARGS, a shared library linking the
static LLVM with llvmlite's own link flags (zig refuses one of them) that Python loads with ctypes, and a stub C
extension. Its sdist is made here, deterministically, and pinned by a recipe in a copy of the checkout's recipes;
the build gets it only from a --mirror directory, verified by that pin.

Against the zig `support` tree of the session: one wheel build (with zig's runtime from that tree's work dir, where a
wheel built before leaves it) and `hermetic verify`'s rebuild in another directory with a cold zig cache (the two
builds whose sha256 must agree), on 2 cores about 3 minutes together.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ROOT
from hermetic.model import record
from schemas import cyclonedx

PROJECT = ROOT / "tests" / "functional" / "projects" / "ctypesprobe"
NAME, VERSION = "ctypesprobe", "0.2.0"
EPOCH = 1767225600  # 2026-01-01T00:00:00Z: the sdist's file times
PLATFORM = "manylinux_2_28_x86_64"


def make_sdist(dest_dir: Path) -> Path:
    """The project as a release sdist: sorted members under NAME-VERSION/, fixed times and owners, gzip without a time."""
    root = f"{NAME}-{VERSION}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        files = sorted(p for p in PROJECT.rglob("*") if p.is_file() and "__pycache__" not in p.parts and "build" not in p.parts)
        dirs = sorted({d for p in files for d in p.relative_to(PROJECT).parents if str(d) != "."})
        entries = [(root, None)] + [(f"{root}/{d}", None) for d in dirs] + [(f"{root}/{p.relative_to(PROJECT)}", p) for p in files]
        for name, path in sorted(entries):
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = EPOCH, 0, 0, "", ""
            if path is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                data = path.read_bytes()
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    dest = dest_dir / f"{root}.tar.gz"
    with open(dest, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(buf.getvalue())
    return dest


def run(*args: str, cwd: Path, check: bool = True, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "hermetic", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          umask=umask)
    if check and proc.returncode != 0:
        raise AssertionError(f"hermetic {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A copy of the checkout's recipes and toolchain with a `ctypesprobe` wheel recipe pinning the sdist made here."""
    base = tmp_path_factory.mktemp("sdist-checkout")
    root = base / "root"
    for d in ("recipes", "toolchain"):
        shutil.copytree(ROOT / d, root / d)
    mirror = base / "mirror"
    mirror.mkdir()
    sdist = make_sdist(mirror)
    recipe = {
        "sdist": {"name": NAME, "version": VERSION, "file": sdist.name,
                  "sha256": hashlib.sha256(sdist.read_bytes()).hexdigest(), "strip_root": f"{NAME}-{VERSION}"},
        "source_date_epoch": EPOCH,
        # llvmlite's requirement set: setuptools, wheel, cmake, auditwheel
        "requirements": "recipes/llvmlite/build-requirements.txt",
        "llvm_recipe": "llvm", "llvm_versions": ["19.1.7"], "variants": ["support"],
        "cmake_args": "CMAKE_ARGS", "cmake_defines": {"CMAKE_BUILD_TYPE": "Release"},
        "zig_link": {"drop": ["-Wl,--exclude-libs,ALL"], "exports": ["PROBE_*"]},
    }
    (root / "recipes" / NAME).mkdir()
    (root / "recipes" / NAME / "wheel.yml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return {"root": root, "mirror": mirror, "sdist": sdist}


@pytest.fixture(scope="module")
def built(checkout: dict[str, Path], zig_support_install: Path, wheel_cache: Path,
          tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("sdist-wheel")
    prefix = record.load_build_record(zig_support_install).install_dir
    jobs = os.environ.get("HERMETIC_TEST_JOBS", "2")
    # zig's runtime for x86_64-linux-gnu.2.28 (compiler-rt, libunwind, libc++, libc++abi: about a minute of the
    # build on 2 cores) is the same for every wheel against this tree, and zig files each under a hash of its
    # inputs: where the zig `support` work dir holds it (the session's zig_probe_wheel was built there, as it is
    # before this module in a full run), this build takes it from a copy. verify's rebuild below starts from a
    # cold zig cache, so the two builds whose sha256 must agree differ in that too.
    zig_cache = zig_support_install.parents[2] / "zig-cache"
    if zig_cache.is_dir():
        shutil.copytree(zig_cache, base / "w" / "zig-cache", symlinks=True)
    proc = run("wheel", "--recipe", NAME, "--llvm", str(prefix), "--root", str(checkout["root"]),
               "--cache", str(wheel_cache), "--mirror", str(checkout["mirror"]), "--work-dir", str(base / "w"),
               "--output", str(base / "dist"), "--jobs", jobs, "--offline", "auto", cwd=base)
    rec = json.loads((base / "dist" / "wheel-record.json").read_text())
    return {"printed": json.loads(proc.stdout), "record": rec, "wheel": base / "dist" / rec["wheel"], "base": base,
            "log": (base / "w" / "wheel" / "build.log").read_text(errors="replace"), "stderr": proc.stderr,
            "prefix": prefix}


def test_the_sdist_builds_into_a_manylinux_wheel_recording_its_source(built: dict[str, Any], checkout: dict[str, Path]) -> None:
    rec = built["record"]
    assert built["wheel"].is_file() and rec["wheel"].endswith(f"-{PLATFORM}.whl"), rec["wheel"]
    assert rec["platform_tag"]["from"] == f"auditwheel repair --plat {PLATFORM}"
    assert rec["source_date_epoch"] == EPOCH  # the recipe's, not the LLVM release's
    sd = rec["project"]["sdist"]
    assert rec["project"]["recipe"] == NAME and rec["project"]["name"] == NAME
    assert sd["sha256"] == hashlib.sha256(checkout["sdist"].read_bytes()).hexdigest()
    # a mirror directory's copy (the cache keeps the first one admitted: the same bytes from any run of this test)
    assert sd["origin"].startswith("mirror:") and sd["origin"].endswith(checkout["sdist"].name)
    assert rec["llvm"]["version"].startswith("19.") and rec["llvm"]["record"]["variant"] == "support"
    # the project's build got its options through CMAKE_ARGS, and zig never saw the flag it refuses
    assert "ctypesprobe: LLVM 19" in built["log"]
    assert "unsupported linker arg" not in built["log"]


def test_the_library_exports_its_c_api_alone_and_answers_from_llvm(built: dict[str, Any], tmp_path: Path) -> None:
    with zipfile.ZipFile(built["wheel"]) as z:
        z.extractall(tmp_path / "site")
    lib = tmp_path / "site" / NAME / "libctypesprobe.so"
    syms = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in syms.splitlines() if line.strip()]
    # the version script from the recipe's zig_link.exports: no LLVM, no libc++ in the export table
    assert names and all(n.startswith("PROBE_") for n in names), names[:20]
    probe = ("import json, ctypesprobe as p; print(json.dumps([p.llvm_major(), p.demangle('_Z3fooILi3EEvv'), "
             "p.xxh3(b''), p.xxh3(b'hermetic')]))")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r}); {probe}"],
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    major, demangled, empty, word = json.loads(out)
    assert (major, demangled) == (19, "void foo<3>()")
    assert empty == 0x2D06800538D394C2  # XXH3-64 of no bytes, seed 0: LLVM's xxh3 answered
    assert word != empty


def test_sbom_and_provenance_name_the_sdist_and_the_tree(built: dict[str, Any], checkout: dict[str, Path]) -> None:
    sha = hashlib.sha256(checkout["sdist"].read_bytes()).hexdigest()
    bom = json.loads(Path(str(built["wheel"]) + ".cdx.json").read_text())
    assert cyclonedx.errors(bom) == []  # the sdist's component and reference are valid CycloneDX 1.6
    formula = bom["formulation"][0]
    sdist = next(c for c in formula["components"] if c["bom-ref"] == "sdist")
    assert sdist["name"] == checkout["sdist"].name and sdist["hashes"] == [{"alg": "SHA-256", "content": sha}]
    assert {"resource": {"ref": "sdist"}} in formula["workflows"][-1]["inputs"]
    statement = json.loads(Path(str(built["wheel"]) + ".intoto.json").read_text())
    definition = statement["predicate"]["buildDefinition"]
    deps = definition["resolvedDependencies"]
    assert any(d["digest"] == {"sha256": sha} and d["annotations"]["role"] == "source" for d in deps)
    tree = built["record"]["llvm"]["record"]["tree_digest"]
    assert any(d["name"] == "llvm" and tree.split(":")[-1] in json.dumps(d["digest"]) for d in deps)
    assert definition["externalParameters"]["recipe"]["name"] == NAME


def test_verify_rebuilds_it_elsewhere_to_the_same_sha256(built: dict[str, Any], checkout: dict[str, Path],
                                                          wheel_cache: Path) -> None:
    proc = run("verify", str(built["base"] / "dist" / "wheel-record.json"), "--root", str(checkout["root"]),
               "--cache", str(wheel_cache), "--mirror", str(checkout["mirror"]),
               "--work-dir", str(built["base"] / "verify"), "--jobs", os.environ.get("HERMETIC_TEST_JOBS", "2"),
               cwd=built["base"], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert built["record"]["sha256"] in proc.stdout + proc.stderr
