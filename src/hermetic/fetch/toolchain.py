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
import shlex
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.core.digests import file_sha256
from hermetic.core.errors import SourceError, UsageError, disk_full
from hermetic.core.log import null_log
from hermetic.core.platforms import ARCHES
from hermetic.core.staging import fill_lock, staged_dir, write_file
from hermetic.fetch.cache import admit_file, cached_file
from hermetic.model.record import scan_tree, tree_digest
from hermetic.model.toolchains import UNPACK_LAYOUT, slim_name

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.toolchains import Toolchain

WHEEL_ROOT = "ziglang/"


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


def _install(cache_dir: Path, tc: Toolchain, origin: dict[str, str], fill: Callable[[Path], int], log: Log) -> Path:
    """Fill a temp dir beside the unpacked tree's place, mark it, and rename it there atomically.

    Wheel and slim archive both come through here, so their trees and markers are alike; the
    marker's `from` says which file it was. One process at a time fills it (`fill_lock`).
    """
    dest = unpacked_dir(cache_dir, tc)
    with fill_lock(dest, log):
        if unpacked(cache_dir, tc):  # another process unpacked it while this one waited
            return dest
        _fill_marked(dest, tc, origin, fill)
    return dest


def _fill_marked(dest: Path, tc: Toolchain, origin: dict[str, str], fill: Callable[[Path], int]) -> None:
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

    return _install(cache_dir, tc, {"file": tc.file, "sha256": tc.sha256}, fill, log)


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
                    lambda tmp: _fill_from_slim(archive, root, tmp), log)


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


# --- the slim archive: what the GPU runner receives ------------------------------------


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


