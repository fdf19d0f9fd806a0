"""Pinned toolchains as data: load, fetch, verify, unpack, and the Conan profile per target.

The compiler is an input like the source. `toolchain/toolchains.yml` names each toolchain;
`zig` (the default) is PyPI's ziglang wheel, pinned by sha256 and admitted into the verified
cache at `<cache>/toolchains/sha256/<digest>/<file>` only after its digest was checked (a
wrong file leaves nothing behind). Its useful part (the zig binary and the lib/ entries the
pinned Linux targets need) is unpacked deterministically into the cache, and each build gets
generated wrapper scripts (`zig cc -target …`) and a Conan profile naming them. `host` is the
machine's compiler: today's detected profile, whose digests hold only on the same distribution.

The same tree can also arrive as the slim archive (`slim_archive`, pinned as `slim:` beside the
wheel): 46 MB instead of 101 MB, small enough to carry to a machine without network. It unpacks
into the same directory with the same digest, so the toolchain's identity does not say which
file it came from; only the unpacked tree's marker does.
"""

from __future__ import annotations

import errno
import hashlib
import json
import lzma
import os
import re
import shlex
import shutil
import stat
import string
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from hermetic.core.digests import file_sha256
from hermetic.core.errors import EnvironmentError_, SourceError, SubprocessFailed, UsageError, disk_full
from hermetic.core.log import null_log
from hermetic.core.platforms import ARCHES, PLATFORMS, machine_arch, oci_arch, zig_arch
from hermetic.core.staging import staged_dir, write_file
from hermetic.fetch.sources import admit_file, cached_file
from hermetic.model.record import scan_tree, tree_digest

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.core.platforms import Platform
    from hermetic.model.record import ToolchainRef

KINDS = ("zig", "host")
_GLIBC = re.compile(r"^2\.(\d+)$")
_TARGET = re.compile(r"^(?P<arch>[a-z0-9_]+)-linux-gnu(?:\.(?P<glibc>2\.\d+))?$")
UNPACK_LAYOUT = 1  # bump when the unpacked selection (keep_member) changes
WRAPPERS_VERSION = 3  # bump when the generated wrappers or profile change what a build compiles
WHEEL_ROOT = "ziglang/"


@dataclass(frozen=True)
class SlimPin:
    """The pinned slim archive derived from the wheel: another carrier of the same unpacked tree."""

    file: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Toolchain:
    name: str
    kind: str  # zig | host
    description: str = ""
    version: str = ""
    package: str = ""
    file: str = ""
    sha256: str = ""
    clang_version: str = ""
    target: str = ""  # e.g. x86_64-linux-gnu.2.28; empty for host
    arches: tuple[str, ...] = ()
    glibc_min: str = ""
    source_date_epoch: int = 0
    # Not in identity(): a build from the slim archive and one from the wheel have the same inputs.
    slim: SlimPin | None = None

    @property
    def arch(self) -> str:
        return self.target.split("-", 1)[0] if self.target else ""

    @property
    def glibc(self) -> str:
        m = _TARGET.match(self.target)
        return (m.group("glibc") or "") if m else ""

    @property
    def label(self) -> str:
        """How plans and logs name it: `zig 0.17.1 x86_64-linux-gnu.2.28`, `host`."""
        return f"{self.name} {self.version} {self.target}" if self.kind == "zig" else self.name

    def identity(self) -> dict[str, str]:
        """What makes two builds' compilers the same: goes into every inputs digest."""
        if self.kind == "host":
            return {"name": self.name, "kind": self.kind}
        return {
            "name": self.name,
            "kind": self.kind,
            "version": self.version,
            "file": self.file,
            "sha256": self.sha256,
            "target": self.target,
            "unpack_layout": str(UNPACK_LAYOUT),
            "wrappers": str(WRAPPERS_VERSION),
        }

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Catalog:
    path: Path
    default: str
    toolchains: tuple[Toolchain, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.toolchains)


def _fail(path: Path, why: str) -> UsageError:
    return UsageError(f"malformed toolchain data in {path}", why, "compare with git")


def _glibc_tuple(value: str) -> tuple[int, int]:
    m = _GLIBC.match(value)
    if not m:
        raise ValueError(value)
    return (2, int(m.group(1)))


def load(toolchain_dir: Path) -> Catalog:
    """toolchain/toolchains.yml as frozen dataclasses, validated."""
    path = toolchain_dir / "toolchains.yml"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise UsageError(f"toolchain data missing: {path}", "", "restore it from the repository") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"cannot parse {path}", str(exc), "fix the YAML syntax") from exc
    if not isinstance(data, dict) or not isinstance(data.get("toolchains"), dict) or not data["toolchains"]:
        raise _fail(path, "expected a mapping `toolchains:` with at least one entry")
    out: list[Toolchain] = []
    for name, t in data["toolchains"].items():
        if not isinstance(t, dict):
            raise _fail(path, f"toolchain {name!r} is not a mapping")
        kind = str(t.get("kind", ""))
        if kind not in KINDS:
            raise _fail(path, f"toolchain {name!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
        if kind == "host":
            out.append(Toolchain(name=str(name), kind=kind, description=str(t.get("description", ""))))
            continue
        missing = [k for k in ("package", "version", "file", "sha256", "clang_version", "target", "arches", "glibc_min")
                   if not t.get(k)]
        if missing:
            raise _fail(path, f"toolchain {name!r} lacks {', '.join(missing)}")
        sha = str(t["sha256"]).lower()
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise _fail(path, f"toolchain {name!r}: sha256 {t['sha256']!r} is not 64 hex digits")
        arches = tuple(str(a) for a in t["arches"])
        bad = [a for a in arches if a not in ARCHES]
        if bad:
            raise _fail(path, f"toolchain {name!r}: unknown arches {', '.join(bad)}; known: {', '.join(ARCHES)}")
        tc = Toolchain(
            name=str(name),
            kind=kind,
            description=str(t.get("description", "")),
            version=str(t["version"]),
            package=str(t["package"]),
            file=str(t["file"]),
            sha256=sha,
            clang_version=str(t["clang_version"]),
            target=str(t["target"]),
            arches=arches,
            glibc_min=str(t["glibc_min"]),
            source_date_epoch=int(t.get("source_date_epoch", 0)),
        )
        m = _TARGET.match(tc.target)
        if not m or m.group("arch") not in arches or not m.group("glibc"):
            raise _fail(path, f"toolchain {name!r}: target {tc.target!r} is not <arch>-linux-gnu.2.NN of {arches}")
        if "slim" in t:
            tc = replace(tc, slim=_slim_pin(path, tc, t["slim"]))
        out.append(tc)
    default = str(data.get("default", ""))
    if default not in [t.name for t in out]:
        raise _fail(path, f"default {default!r} names no toolchain")
    return Catalog(path, default, tuple(out))


def _slim_pin(path: Path, tc: Toolchain, data: object) -> SlimPin:
    where = f"toolchain {tc.name!r}: slim"
    if not isinstance(data, dict) or set(data) != {"file", "sha256", "size"}:
        raise _fail(path, f"{where} must be a mapping of exactly file, sha256 and size")
    sha = str(data["sha256"]).lower()
    if not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise _fail(path, f"{where} sha256 {data['sha256']!r} is not 64 hex digits")
    size = data["size"]
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise _fail(path, f"{where} size {size!r} is not a positive number of bytes")
    # `hermetic toolchain slim` writes this name; another one would never be found in a mirror.
    if data["file"] != slim_name(tc):
        raise _fail(path, f"{where} file {data['file']!r} is not {slim_name(tc)!r}, the name derived from "
                          "name, version and arches")
    return SlimPin(slim_name(tc), sha, size)


def select(catalog: Catalog, name: str | None = None, glibc: str | None = None, arch: str | None = None) -> Toolchain:
    """The named toolchain (the default when None), with its target's glibc floor or arch changed."""
    name = name or catalog.default
    tc = next((t for t in catalog.toolchains if t.name == name), None)
    if tc is None:
        raise UsageError(
            f"unknown toolchain {name!r}",
            f"{catalog.path} defines no such toolchain",
            f"valid toolchains: {', '.join(catalog.names())}",
        )
    if tc.kind == "host":
        if glibc:
            raise UsageError(
                f"--glibc {glibc} does not apply to the host toolchain",
                "the machine's compiler links against the machine's own glibc",
                "drop --glibc / HERMETIC_GLIBC, or use --toolchain zig",
            )
        here = machine_arch()
        if arch and arch != zig_arch(here):
            raise UsageError(
                f"--arch {oci_arch(arch)} needs a cross compiler; the host toolchain builds for this {here} machine only",
                "the machine's compiler, headers and libraries are its own architecture's",
                f"use --toolchain zig --arch {oci_arch(arch)}, or drop --arch / HERMETIC_ARCH",
            )
        return tc
    new_arch = arch or tc.arch
    if new_arch not in tc.arches:
        raise UsageError(f"toolchain {tc.name} does not target {new_arch}", "", f"valid: {', '.join(tc.arches)}")
    floor = glibc or tc.glibc
    try:
        if _glibc_tuple(floor) < _glibc_tuple(tc.glibc_min):
            raise UsageError(
                f"glibc floor {floor} is below what {tc.name} {tc.version} supports",
                f"zig links against glibc stubs from {tc.glibc_min} on",
                f"use --glibc {tc.glibc_min} or higher",
            )
    except ValueError as exc:
        raise UsageError(f"invalid glibc floor {floor!r}", "expected 2.NN, e.g. 2.28", "use e.g. --glibc 2.28") from exc
    return _replace_target(tc, f"{new_arch}-linux-gnu.{floor}")


def select_recorded(catalog: Catalog, ref: ToolchainRef) -> Toolchain:
    """This checkout's toolchain of the name, glibc floor and arch a record names (its identity may differ:
    callers compare)."""
    arch = ref.target.split("-", 1)[0] if ref.target else None
    return select(catalog, ref.name, ref.glibc or None, arch)


def _replace_target(tc: Toolchain, target: str) -> Toolchain:
    return replace(tc, target=target)


def target_arch(tc: Toolchain) -> str:
    """The OCI architecture a toolchain builds for: its target's, or this machine's for host."""
    return oci_arch(tc.arch) if tc.kind == "zig" else machine_arch()


def for_build_machine(tc: Toolchain) -> Toolchain | None:
    """For a cross build, the same pinned toolchain targeting this machine; None when `tc` targets it.

    A cross build runs programs it compiles (LLVM's tablegen): those must be built for the build
    machine, by the same pinned compiler, so the host's compiler takes no part there either.
    """
    if tc.kind == "host":
        return None
    here = machine_arch()
    if zig_arch(here) == tc.arch:
        return None
    if zig_arch(here) not in tc.arches:
        raise EnvironmentError_(
            f"toolchain {tc.name} cannot build on this {here} machine",
            f"it targets {', '.join(tc.arches)} only, and a cross build needs programs for the build machine",
            "build on an amd64 or arm64 machine",
        )
    return _replace_target(tc, f"{zig_arch(here)}-linux-gnu.{tc.glibc}")


def emulator(arch: str, root: Path | None = None) -> tuple[str, ...]:
    """The command line that runs a program of `arch` on this machine: qemu-user and the cross loader/libc,
    or (with `root`) the loader and libraries of that root, such as an arm64 Python's.

    Checked before a cross build starts, so a missing package fails in seconds, not after the compile.
    """
    plat = PLATFORMS[arch]
    fix = f"install Debian's {' and '.join(plat.packages)}: apt-get install -y {' '.join(plat.packages)}"
    qemu = shutil.which(plat.emulator[0])
    if qemu is None:
        raise EnvironmentError_(
            f"cannot run {arch} programs on this {machine_arch()} machine: {plat.emulator[0]} is not on PATH",
            "a cross build's test_package and a foreign Python run under qemu-user", fix,
        )
    sysroot = root if root is not None else Path(plat.emulator[-1])
    if not (os.path.lexists(sysroot / plat.loader) or any(sysroot.glob("lib/ld-linux*.so*"))):
        raise EnvironmentError_(
            f"cannot run {arch} programs on this {machine_arch()} machine: {sysroot} holds no {arch} loader",
            f"{plat.emulator[0]} -L {sysroot} takes the dynamic loader ({plat.loader}) and glibc from there",
            fix if root is None else f"make {sysroot} a complete {arch} root (README, \"The arm64 wheel\")",
        )
    return (qemu, *plat.emulator[1:-1], str(sysroot))


def elf_machine(header: bytes) -> int | None:
    """e_machine of an ELF header (its first 20 bytes), or None when it is no ELF file."""
    if len(header) < 20 or header[:4] != b"\x7fELF" or header[5] not in (1, 2):
        return None
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def binary_platform(path: Path) -> Platform | None:
    """The platform whose programs `path` is (after symlinks), or None: no ELF file, or one of no known platform."""
    try:
        with open(path, "rb") as f:
            machine = elf_machine(f.read(20))
    except OSError:
        return None
    return next((p for p in PLATFORMS.values() if p.elf_machine == machine), None)


def program_root(path: Path, plat: Platform) -> Path | None:
    """The nearest directory above `path` holding `plat`'s loader: the root qemu-user runs it with (-L)."""
    for d in Path(os.path.realpath(path)).parents:
        if os.path.lexists(d / plat.loader):
            return d
    return None


def for_root(root: Path, name: str | None = None, glibc: str | None = None) -> Toolchain:
    """The toolchain of a checkout (`root/toolchain`)."""
    return select(load(root / "toolchain"), name, glibc)


# --- fetch: the verified cache ------------------------------------------------


def cache_path(cache_dir: Path, tc: Toolchain) -> Path:
    return cache_dir / "toolchains" / "sha256" / tc.sha256 / tc.file


def cached(cache_dir: Path, tc: Toolchain, log: Log = null_log) -> Path | None:
    """The cached wheel, hashed now: a file that differs is removed (and fetched again by the caller)."""
    if tc.kind != "zig":
        return None
    return cached_file(cache_path(cache_dir, tc), tc.sha256, log)


def admit(cache_dir: Path, tc: Toolchain, candidate: Path, origin: str, move: bool = False) -> Path:
    """Verify `candidate` and place it in the cache; refuse it (and leave nothing) if it differs."""
    return admit_file(cache_path(cache_dir, tc), tc.sha256, candidate, origin, f"toolchain {tc.file}", move)


def pip_download_argv(tc: Toolchain, dest: Path, requirements: Path) -> list[str]:
    """`pip download` of exactly the pinned wheel; pip checks the hash too (--require-hashes)."""
    return [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
        "--disable-pip-version-check", "--no-input", "--platform", "manylinux2010_x86_64",
        # The wheel is py3-none; a bare "3" reads as Python 3.0, which its Requires-Python (~=3.5)
        # excludes, so name the running interpreter's version.
        "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}", "--implementation", "py",
        "--dest", str(dest), "-r", str(requirements),
    ]


def slim_cache_path(cache_dir: Path, tc: Toolchain) -> Path:
    if tc.slim is None:
        raise UsageError(f"toolchain {tc.name} pins no slim archive", "", "add `slim:` to toolchains.yml")
    return cache_dir / "toolchains" / "sha256" / tc.slim.sha256 / tc.slim.file


def _wheel_nearby(cache_dir: Path, tc: Toolchain, mirrors: Iterable[Path], log: Log) -> Path | None:
    """The verified wheel from the cache or a mirror directory (admitted into the cache), else None."""
    hit = cached(cache_dir, tc, log)
    if hit is not None:
        log(f"toolchain: {tc.file} already cached (sha256 {tc.sha256[:12]}…, verified)")
        return hit
    for mirror in mirrors:
        cand = mirror / tc.file
        if cand.is_file():
            log(f"toolchain: verifying {cand}")
            return admit(cache_dir, tc, cand, f"mirror:{cand}")
    return None


def slim_nearby(cache_dir: Path, tc: Toolchain, mirrors: Iterable[Path] = (), log: Log = null_log) -> Path | None:
    """The verified slim archive from the cache or a mirror directory (admitted into the cache), else None."""
    if tc.slim is None:
        return None
    dest = slim_cache_path(cache_dir, tc)
    hit = cached_file(dest, tc.slim.sha256, log)
    if hit is not None:
        log(f"toolchain: {tc.slim.file} already cached (sha256 {tc.slim.sha256[:12]}…, verified)")
        return hit
    for mirror in mirrors:
        cand = mirror / tc.slim.file
        if cand.is_file():
            log(f"toolchain: verifying {cand}")
            return admit_file(dest, tc.slim.sha256, cand, f"mirror:{cand}", f"slim toolchain {tc.slim.file}")
    return None


def _carry_hint(tc: Toolchain, with_slim: bool) -> str:
    """What to put in a --mirror directory: the wheel, or (when it serves) the smaller slim archive."""
    wheel = f"{tc.file} (sha256 {tc.sha256})"
    if not (with_slim and tc.slim):
        return f"put {wheel} in a directory and pass --mirror DIR"
    return (
        f"put {wheel} or its slim archive {tc.slim.file} (sha256 {tc.slim.sha256}; "
        "`hermetic toolchain slim --output DIR` makes it where the wheel can be fetched) "
        "in a directory and pass --mirror DIR"
    )


def _download(cache_dir: Path, tc: Toolchain, use_urls: bool, log: Log, pip: Sequence[str] | None,
              with_slim: bool) -> Path:
    if not use_urls:
        files = f"neither {tc.file} nor {tc.slim.file} is" if with_slim and tc.slim else f"{tc.file} is not"
        raise SourceError(
            f"the pinned toolchain {tc.package} {tc.version} is not in the cache",
            f"{files} in a mirror directory and downloads are off (--no-urls / HERMETIC_USE_URLS=0)",
            f"{_carry_hint(tc, with_slim)}, or allow downloads so that "
            f"`pip download --no-deps {tc.package}=={tc.version}` can fetch it",
        )
    tmp_root = cache_dir / "toolchains"
    tmp_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tmp_root, prefix=".pip-") as tmp:
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text(f"{tc.package}=={tc.version} --hash=sha256:{tc.sha256}\n")
        out = Path(tmp) / "out"
        argv = list(pip) if pip is not None else pip_download_argv(tc, out, reqs)
        log(f"toolchain: pip download --no-deps {tc.package}=={tc.version}")
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        got = out / tc.file
        if proc.returncode != 0 or not got.is_file():
            raise SourceError(
                f"cannot download the pinned toolchain {tc.package} {tc.version} from PyPI",
                f"`{shlex.join(argv[:8])} …` exited with {proc.returncode}: "
                + " ".join(proc.stdout.strip().splitlines()[-3:]),
                f"{_carry_hint(tc, with_slim)} (fetch it where PyPI is reachable)",
            )
        return admit(cache_dir, tc, got, f"pypi:{tc.package}=={tc.version}", move=True)


def fetch(
    cache_dir: Path,
    tc: Toolchain,
    mirrors: Iterable[Path] = (),
    use_urls: bool = True,
    log: Log = null_log,
    pip: Sequence[str] | None = None,
) -> Path:
    """The verified wheel of `tc`: from the cache, else a mirror directory, else PyPI (pip download)."""
    if tc.kind != "zig":
        raise UsageError(f"toolchain {tc.name} is not fetched", "it is the machine's compiler", "")
    hit = _wheel_nearby(cache_dir, tc, mirrors, log)
    return hit if hit is not None else _download(cache_dir, tc, use_urls, log, pip, with_slim=False)


# --- unpack: only what building for the pinned Linux targets needs -----------------------

# lib/ entries zig reads to compile and link C/C++ for <arch>-linux-gnu (libc++, libc++abi, libunwind,
# compiler_rt and zig's std, from which it builds compiler_rt; clang's own headers in lib/include).
_LIB_KEEP = (
    "c", "c.zig", "compiler", "compiler_rt", "compiler_rt.zig", "include", "libcxx", "libcxxabi",
    "libunwind", "std", "ubsan_rt.zig", "zig.h",
)


def keep_member(rel: str, arches: Iterable[str]) -> bool:
    """Whether a path of the wheel's `ziglang/` tree belongs to the unpacked / slim toolchain."""
    parts = rel.split("/")
    if parts[0] in ("zig", "LICENSE"):
        return len(parts) == 1
    if parts[0] != "lib" or len(parts) < 2:
        return False  # README, the Python shim
    if parts[1] in _LIB_KEEP:
        return True
    if parts[1] != "libc" or len(parts) < 3:
        return False  # docs, build-web, init, lldb, libtsan, fuzzer.zig
    if parts[2] == "glibc":
        return True  # abilists (the stubs' symbols), csu and the few sources zig builds
    if parts[2] != "include" or len(parts) < 4:
        return False  # musl, mingw, wasi, darwin, the BSDs
    dirs = {"generic-glibc", "any-linux-any"}
    for a in arches:
        inc = ARCHES[a][1]
        dirs |= {f"{inc}-linux-gnu", f"{inc}-linux-any"}
    return parts[3] in dirs


@dataclass(frozen=True)
class _Member:
    rel: str
    info: zipfile.ZipInfo

    @property
    def executable(self) -> bool:
        return bool((self.info.external_attr >> 16) & 0o111)


def _members(wheel: Path, arches: Sequence[str]) -> list[_Member]:
    out: list[_Member] = []
    try:
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                name = info.filename
                if info.is_dir() or not name.startswith(WHEEL_ROOT):
                    continue
                rel = name[len(WHEEL_ROOT):]
                if rel.startswith("/") or ".." in rel.split("/") or not rel:
                    raise SourceError(f"{wheel.name} holds an unsafe path {name!r}", "", "remove it from the cache")
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise SourceError(f"{wheel.name} holds a symbolic link {name!r}", "", "remove it from the cache")
                if keep_member(rel, arches):
                    out.append(_Member(rel, info))
    except (zipfile.BadZipFile, OSError) as exc:
        raise SourceError(f"cannot read {wheel}", str(exc), f"remove {wheel.parent} and fetch again") from exc
    if not any(m.rel == "zig" for m in out):
        raise SourceError(f"{wheel.name} holds no ziglang/zig", "not a ziglang wheel", "check toolchains.yml")
    return sorted(out, key=lambda m: m.rel)


def unpacked_dir(cache_dir: Path, tc: Toolchain) -> Path:
    key = hashlib.sha256(json.dumps([tc.sha256, UNPACK_LAYOUT, sorted(tc.arches)]).encode()).hexdigest()[:32]
    return cache_dir / "toolchains" / "unpacked" / f"{tc.name}-{tc.version}-{key}"


_MARK = ".hermetic-unpacked.json"


def _unpacked_digest(d: Path) -> str:
    return tree_digest(e for e in scan_tree(d) if e.path != _MARK)


def unpacked(cache_dir: Path, tc: Toolchain) -> Path | None:
    """The unpacked tree when complete and unchanged, else None.

    Its marker names the wheel's digest and the digest of the tree as unpacked; the tree is scanned
    again on every use (about a second), so a compiler changed in the cache is never run.
    """
    d = unpacked_dir(cache_dir, tc)
    try:
        mark = json.loads((d / _MARK).read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(mark, dict) and mark.get("sha256") == tc.sha256 and (d / "zig").is_file()):
        return None
    return d if mark.get("tree") == _unpacked_digest(d) else None


def _install(cache_dir: Path, tc: Toolchain, origin: dict[str, str], fill: Callable[[Path], int]) -> Path:
    """Fill a temp dir beside the unpacked tree's place, mark it, and rename it there atomically.

    Wheel and slim archive both come through here, so their trees and markers are alike; the
    marker's `from` says which file it was.
    """
    dest = unpacked_dir(cache_dir, tc)
    with staged_dir(dest) as tmp:
        entries = fill(tmp)
        if not (tmp / "zig").is_file():
            raise SourceError(f"{origin['file']} holds no zig binary at its root", "not a zig toolchain",
                              "check toolchains.yml")
        # Directories 0755 whatever the umask: the tree digest holds their modes.
        for dirpath, _, _ in os.walk(tmp):
            if dirpath != str(tmp):
                os.chmod(dirpath, 0o755)
        mark = {"sha256": tc.sha256, "file": tc.file, "entries": entries, "tree": _unpacked_digest(tmp),
                "from": origin}
        (tmp / _MARK).write_text(json.dumps(mark) + "\n")
    return dest


def unpack(cache_dir: Path, tc: Toolchain, wheel: Path, log: Log = null_log) -> Path:
    """Unpack the wheel's selected entries into the cache (temp dir, then an atomic rename)."""
    dest = unpacked_dir(cache_dir, tc)
    if unpacked(cache_dir, tc):
        return dest
    if file_sha256(wheel) != tc.sha256:
        raise SourceError(f"{wheel} does not match its pinned digest", "", f"remove {wheel.parent} and fetch again")

    def fill(tmp: Path) -> int:
        members = _members(wheel, tc.arches)
        log(f"toolchain: unpacking {len(members)} entries of {tc.file}")
        with zipfile.ZipFile(wheel) as z:
            for m in members:
                with z.open(m.info) as src:
                    write_file(tmp, m.rel, src, m.executable)
        return len(members)

    return _install(cache_dir, tc, {"file": tc.file, "sha256": tc.sha256}, fill)


def _tar_kind(info: tarfile.TarInfo) -> str:
    if info.issym():
        return "a symbolic link"
    if info.islnk():
        return "a hard link"
    if info.ischr() or info.isblk():
        return "a device node"
    if info.isfifo():
        return "a FIFO"
    return f"an entry of tar type {info.type!r}"


def _slim_rel(archive: Path, info: tarfile.TarInfo, root: str) -> str | None:
    """The path below `root/` where a member of the slim archive goes; None for `root/` itself.

    Refuses what could land outside the unpacked directory or be anything but plain data:
    the archive is pinned, but a wrong pin must not be able to write elsewhere.
    """
    name = info.name.rstrip("/") if info.isdir() else info.name
    parts = name.split("/")

    def refuse(why: str) -> SourceError:
        return SourceError(
            f"{archive.name} holds an unsafe entry {info.name!r}", why,
            f"remove {archive} and derive the slim archive again from the wheel (`hermetic toolchain slim`)",
        )

    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise refuse("an absolute path or an empty, `.` or `..` component")
    if parts[0] != root:
        raise refuse(f"not under the archive's root directory {root}/")
    if not (info.isreg() or info.isdir()):
        raise refuse(f"{_tar_kind(info)}: a toolchain archive holds only regular files and directories")
    if len(parts) == 1:
        if info.isdir():
            return None
        raise refuse(f"{root} must be a directory")
    rel = "/".join(parts[1:])
    if rel == _MARK:
        raise refuse("the name of hermetic's own marker file")
    return rel


def _fill_from_slim(archive: Path, root: str, tmp: Path) -> int:
    files = 0
    seen: set[str] = set()
    try:
        # A stream: each member is checked before anything of it is written, and no link is ever made.
        with lzma.open(archive, "rb") as xz, tarfile.open(fileobj=xz, mode="r|") as tar:
            for info in tar:
                rel = _slim_rel(archive, info, root)
                if rel is None:
                    continue
                if rel in seen:
                    raise SourceError(f"{archive.name} holds {info.name!r} twice", "", "derive it again")
                seen.add(rel)
                if info.isdir():
                    (tmp / rel).mkdir(parents=True, exist_ok=True)
                    continue
                src = tar.extractfile(info)
                if src is None:  # isreg() members always have data; kept for the type checker
                    raise SourceError(f"cannot read {info.name!r} in {archive.name}", "", "derive it again")
                write_file(tmp, rel, src, bool(info.mode & 0o111))
                files += 1
            # tar stops at its end marker; reading xz to its end checks its index and checksums too
            while xz.read(1 << 20):
                pass
    except (tarfile.TarError, EOFError, lzma.LZMAError, FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
        raise SourceError(f"cannot unpack {archive.name}", f"truncated, corrupt or inconsistent: {exc}",
                          f"remove {archive} and derive it again (`hermetic toolchain slim`)") from exc
    return files


def unpack_slim(cache_dir: Path, tc: Toolchain, archive: Path, log: Log = null_log) -> Path:
    """Unpack the verified slim archive: the same directory, tree and digest as `unpack` of the wheel."""
    if tc.slim is None:
        raise UsageError(f"toolchain {tc.name} pins no slim archive", "", "add `slim:` to toolchains.yml")
    slim = tc.slim
    dest = unpacked_dir(cache_dir, tc)
    if unpacked(cache_dir, tc):
        return dest
    if file_sha256(archive) != slim.sha256:
        raise SourceError(f"{archive} does not match its pinned digest", f"expected sha256 {slim.sha256}",
                          f"remove {archive} and fetch it again")
    log(f"toolchain: unpacking {slim.file}")
    root = f"{tc.name}-{tc.version}"
    return _install(cache_dir, tc, {"file": slim.file, "sha256": slim.sha256},
                    lambda tmp: _fill_from_slim(archive, root, tmp))


def ensure(
    cache_dir: Path, tc: Toolchain, mirrors: Iterable[Path] = (), use_urls: bool = True, log: Log = null_log
) -> Path | None:
    """The unpacked zig tree, fetched and unpacked as needed; None for the host toolchain.

    Sources in order: the unpacked tree, the wheel (cache, mirrors), the slim archive (cache,
    mirrors), then PyPI. The wheel comes first because it is what the identity names; the slim
    archive is for machines that cannot download it.
    """
    if tc.kind == "host":
        return None
    done = unpacked(cache_dir, tc)
    if done is not None:
        return done
    mirrors = tuple(mirrors)
    wheel = _wheel_nearby(cache_dir, tc, mirrors, log)
    if wheel is None:
        slim = slim_nearby(cache_dir, tc, mirrors, log)
        if slim is not None:
            return unpack_slim(cache_dir, tc, slim, log)
        wheel = _download(cache_dir, tc, use_urls, log, None, with_slim=True)
    return unpack(cache_dir, tc, wheel, log)


# --- per build: wrapper scripts and the Conan profile -----------------------------------


@dataclass(frozen=True)
class Prepared:
    """What a build uses: the Conan profile, whether Conan must detect the host compiler, env additions."""

    profile: Path
    detect: bool
    env: dict[str, str] = field(default_factory=dict)
    build_profile: Path | None = None  # a cross build's profile of the build machine (Conan's -pr:b)


def zig_env(cache_root: Path, global_cache: Path | None = None) -> dict[str, str]:
    """zig's caches under the build's work directory, never ~/.cache/zig. `global_cache`: zig's global cache
    (its runtimes: libc++, libc++abi, libunwind, compiler-rt, the glibc stubs) somewhere shared instead."""
    return {"ZIG_GLOBAL_CACHE_DIR": str(global_cache or cache_root / "global"),
            "ZIG_LOCAL_CACHE_DIR": str(cache_root / "local")}


def wrapper_scripts(
    tc: Toolchain, zig_root: Path, cache_root: Path, drop_flags: tuple[str, ...] = (), lib_dir: Path | None = None,
    global_cache: Path | None = None,
) -> dict[str, str]:
    """The wrappers CMake runs as compiler, archiver and ranlib (CMake wants one executable each).

    `drop_flags`: more arguments the compiler wrappers remove (a project's link flags zig refuses: wheel recipes'
    zig_link.drop). `lib_dir`: zig's lib directory (its libc and libc++ headers) as the build should name it, a
    link to the toolchain's (see prepare); None: where the toolchain is unpacked. `global_cache`: see zig_env.
    """
    zig = shlex.quote(str(zig_root / "zig"))
    env = zig_env(cache_root, global_cache) | ({"ZIG_LIB_DIR": str(lib_dir)} if lib_dir is not None else {})
    head = [
        "#!/bin/sh",
        f"# Generated by hermetic for toolchain {tc.name} ({tc.label}): do not edit.",
        *(f"{k}={shlex.quote(v)}; export {k}" for k, v in sorted(env.items())),
    ]
    # Conan adds -stdlib=libc++ for compiler.libcxx=libc++; zig always uses its own libc++ and
    # warns that the flag is unused, which fails every check_cxx_compiler_flag (they add -Werror):
    # LLVM then silently builds without -fPIC. So the wrappers drop it.
    drop = ['for a do shift; [ "$a" = -stdlib=libc++ ] || set -- "$@" "$a"; done']
    if drop_flags:
        words = "|".join(shlex.quote(f) for f in ("-stdlib=libc++", *drop_flags))
        drop = [f'for a do shift; case $a in {words}) ;; *) set -- "$@" "$a";; esac; done']
    # zig links its cached runtime objects (libc++, crt, compiler_rt), built with debug info that
    # names zig's cache and the directory of whichever compile first filled it: a command that
    # links strips that debug info. Only a linking command: on a compile-only one the flag would
    # be an unused-argument warning, which fails LLVM's flag checks like -stdlib=libc++ did.
    link = ['strip=-Wl,--strip-debug',
            'for a do case $a in -c|-S|-E|-M|-MM|-fsyntax-only) strip=;; esac; done']
    # -g0 after the caller's flags: no debug info, whatever a project asks for; the prefix map
    # keeps zig's own path (libc++ headers' __FILE__) out of the objects.
    cflags = f"-target {tc.target} -ffile-prefix-map={shlex.quote(str(zig_root))}=/usr/lib/zig"
    if lib_dir is not None:
        # the headers' paths through the link map to what they were through the toolchain's own path
        cflags += f" -ffile-prefix-map={shlex.quote(str(lib_dir))}=/usr/lib/zig/lib"
    return {
        "cc": "\n".join([*head, *drop, *link, f'exec {zig} cc {cflags} "$@" -g0 $strip', ""]),
        "c++": "\n".join([*head, *drop, *link, f'exec {zig} c++ {cflags} "$@" -g0 $strip', ""]),
        "ar": "\n".join([*head, f'exec {zig} ar "$@"', ""]),
        "ranlib": "\n".join([*head, f'exec {zig} ranlib "$@"', ""]),
    }


def tools_cmake(bin_dir: Path) -> str:
    """CMake's archiver and ranlib: Conan's compiler_executables names only the compilers."""
    return "\n".join([
        "# Generated by hermetic: zig's llvm-ar and llvm-ranlib, not the host's binutils.",
        f'set(CMAKE_AR "{bin_dir / "ar"}" CACHE FILEPATH "" FORCE)',
        f'set(CMAKE_RANLIB "{bin_dir / "ranlib"}" CACHE FILEPATH "" FORCE)',
        "",
    ])


def render_profile(tc: Toolchain, toolchain_dir: Path, bin_dir: Path, tools: Path) -> str:
    template = string.Template((toolchain_dir / "profiles" / "zig.template").read_text())
    return template.substitute(
        name=tc.name,
        version=tc.version,
        clang_version=tc.clang_version,
        target=tc.target,
        conan_arch=ARCHES[tc.arch][0],
        llvm_triple=PLATFORMS[oci_arch(tc.arch)].llvm_triple,
        cc=bin_dir / "cc",
        cxx=bin_dir / "c++",
        reproducible=toolchain_dir / "reproducible.cmake",
        tools_cmake=tools,
    )


def prepare(
    tc: Toolchain, zig_root: Path | None, out: Path, toolchain_dir: Path, cache_root: Path,
    build: Toolchain | None = None, drop_flags: tuple[str, ...] = (), lib_link: bool = False,
    global_cache: Path | None = None,
) -> Prepared:
    """Generate the build's profile (and, for zig, its wrappers) under `out`.

    `build` (for_build_machine) makes it a cross build: the build machine's profile and wrappers go
    under `out/build-machine`, and the environment's CC/CXX stay the target's.

    `lib_link`: zig reads its headers through `out/zig-lib`, a link to the toolchain's lib directory
    (ZIG_LIB_DIR). A compile cache wants it: the headers' paths are in its keys, and a toolchain
    unpacked in each user's own cache has its own path, while `out` is under the build's staging
    directory, which ccache's base_dir makes relative. The objects are the same either way (the
    prefix maps name both /usr/lib/zig).

    `global_cache`: zig's global cache (see zig_env), for the build machine's wrappers too.
    """
    if tc.kind == "host":
        return Prepared(toolchain_dir / "profiles" / "hermetic", detect=True)
    if zig_root is None:
        raise EnvironmentError_(f"toolchain {tc.name} is not unpacked", "", "run `hermetic fetch`")
    build_profile = (prepare(build, zig_root, out / "build-machine", toolchain_dir, cache_root, lib_link=lib_link,
                             global_cache=global_cache).profile if build else None)
    bin_dir = out / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    lib_dir = None
    if lib_link:
        lib_dir = out / "zig-lib"
        lib_dir.unlink(missing_ok=True)
        lib_dir.symlink_to(zig_root / "lib", target_is_directory=True)
    for name, text in wrapper_scripts(tc, zig_root, cache_root, drop_flags, lib_dir, global_cache).items():
        p = bin_dir / name
        p.write_text(text)
        p.chmod(0o755)
    tools = out / "zig-tools.cmake"
    tools.write_text(tools_cmake(bin_dir))
    profile = out / "profile"
    profile.write_text(render_profile(tc, toolchain_dir, bin_dir, tools))
    env = zig_env(cache_root, global_cache) | {"CC": str(bin_dir / "cc"), "CXX": str(bin_dir / "c++")}
    return Prepared(profile, detect=False, env=env, build_profile=build_profile)


# --- the slim archive: what the GPU runner receives ------------------------------------


def slim_name(tc: Toolchain) -> str:
    return f"{tc.name}-{tc.version}-linux-{'-'.join(sorted(tc.arches))}-slim.tar.xz"


def slim_archive(wheel: Path, tc: Toolchain, dest_dir: Path, log: Log = null_log) -> dict[str, Any]:
    """Derive from the verified wheel a deterministic tar.xz of the unpacked selection.

    Sorted entries under `<name>-<version>/`, mtime clamped to the pinned epoch, uid/gid 0 and no
    owner names, modes 0755/0644, single-threaded xz at a fixed preset; `slim.json` beside it
    records its sha256, size and the wheel it came from. Returns that description.
    """
    if file_sha256(wheel) != tc.sha256:
        raise SourceError(f"{wheel} does not match the pinned digest of {tc.name}", "", "fetch it again")
    members = _members(wheel, tc.arches)
    root = f"{tc.name}-{tc.version}"
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / slim_name(tc)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    epoch = tc.source_date_epoch

    def entry(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.size, info.mtime = kind, mode, size, epoch
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    dirs: set[str] = set()
    for m in members:
        parts = m.rel.split("/")[:-1]
        dirs |= {"/".join(parts[: i + 1]) for i in range(len(parts))}
    names: list[tuple[str, _Member | None]] = [(d, None) for d in dirs]
    names = sorted(names + [(m.rel, m) for m in members], key=lambda x: x[0])
    total = sum(m.info.file_size for m in members)
    log(f"toolchain: writing {len(members)} files ({total / 1e6:.0f} MB) to {dest.name}, single-threaded xz")
    done, shown = 0, 0
    try:
        with zipfile.ZipFile(wheel) as z, lzma.open(tmp, "wb", format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=6) as xz:
            with tarfile.open(fileobj=xz, mode="w", format=tarfile.GNU_FORMAT) as tar:
                tar.addfile(entry(root, tarfile.DIRTYPE, 0o755))
                for rel, member in names:
                    if member is None:
                        tar.addfile(entry(f"{root}/{rel}", tarfile.DIRTYPE, 0o755))
                        continue
                    mode = 0o755 if member.executable else 0o644
                    info = entry(f"{root}/{rel}", tarfile.REGTYPE, mode, member.info.file_size)
                    with z.open(member.info) as src:
                        tar.addfile(info, src)
                    done += member.info.file_size
                    # the real wheel takes about 15 minutes: say where it is every tenth
                    if total and done * 10 // total > shown:
                        shown = done * 10 // total
                        log(f"toolchain: {shown * 10}% of {dest.name} written")
        os.replace(tmp, dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(dest), exc) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    meta: dict[str, Any] = {
        "file": dest.name,
        "sha256": file_sha256(dest),
        "size": dest.stat().st_size,
        "unpacked_size": sum(m.info.file_size for m in members),
        "entries": len(members),
        "root": root,
        "arches": sorted(tc.arches),
        "unpack_layout": UNPACK_LAYOUT,
        "from": {"file": tc.file, "sha256": tc.sha256, "package": tc.package, "version": tc.version},
    }
    meta_path = dest_dir / "slim.json"
    meta_tmp = meta_path.with_name(meta_path.name + ".tmp")
    meta_tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    os.replace(meta_tmp, meta_path)
    return meta


def run_checked(argv: Sequence[str], what: str, env: dict[str, str], cwd: Path) -> str:
    """A short toolchain command (a smoke compile); failure carries the repro line."""
    proc = subprocess.run(list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise SubprocessFailed(what, argv, proc.returncode, proc.stdout, str(cwd))
    return proc.stdout
