"""Source archives: fetch, verify, cache, prune.

The cache is content-addressed: an archive lives at
`<cache>/sources/sha256/<digest>/<file name>` and only ever gets there after its
digest has been checked, through a temporary path and `os.replace`, so a
tampered, truncated or partial download never becomes a cache entry.

Being in the cache is not trusted either: every read hashes the file again
(`cached_file`, `open_verified`), an entry that no longer matches its digest is
removed and fetched again, and nothing is reported as coming from a digest it
was not just checked against. We always hash rather than memoise size and
mtime: a 19.1.7 archive (150 MB) hashes in about 0.1 s with SHA-NI, and a memo
that a same-size rewrite with a restored mtime cannot fool would have to trust
inode and ctime semantics that copies, restores and some file systems break.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from hermetic.core.digests import file_sha256, stream_sha256
from hermetic.core.errors import SourceError, SubprocessFailed, disk_full
from hermetic.core.log import null_log

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.recipe import Archive, PruneRules, Recipe, Variant


@dataclass(frozen=True)
class CachedArchive:
    archive: Archive
    path: Path
    origin: str  # where this copy came from: mirror path, URL or apt

    def as_json(self) -> dict[str, str]:
        return {"file": self.archive.file, "sha256": self.archive.sha256, "origin": self.origin}


def cache_path(cache_dir: Path, archive: Archive) -> Path:
    return cache_dir / "sources" / "sha256" / archive.sha256 / archive.file


def _origin_file(path: Path) -> Path:
    return path.with_name(path.name + ".origin")


@dataclass(frozen=True)
class Mismatch:
    """A file whose content is not what its name or record promises."""

    path: Path
    expected: str
    actual: str
    size: int

    def describe(self) -> str:
        return f"{self.path}: expected sha256 {self.expected}, got {self.actual} ({self.size} bytes)"


def _quiet(msg: str) -> None:
    pass


def _remove_entry(path: Path) -> None:
    path.unlink(missing_ok=True)
    _origin_file(path).unlink(missing_ok=True)
    try:
        path.parent.rmdir()  # the digest directory, once it holds nothing
    except OSError:
        pass


def check_cached_file(path: Path, sha256: str, remove: bool = True) -> Mismatch | None:
    """Hash `path` now; None if it matches `sha256`, else the mismatch (the file removed unless `remove` is False).

    Raises FileNotFoundError when there is no file: callers tell "absent" from "damaged".
    """
    with open(path, "rb") as f:
        actual, size = stream_sha256(f)
    if actual == sha256:
        return None
    if remove:
        _remove_entry(path)
    return Mismatch(path, sha256, actual, size)


def cached_file(path: Path, sha256: str, log: Log = _quiet) -> Path | None:
    """`path` if it exists and its content hashes to `sha256` right now, else None.

    The one check for "a cached file whose sha256 must be X" (source archives,
    pruned archives, the pinned toolchain): a file that differs is removed, with
    a log line naming it and both digests, so the caller fetches or rebuilds it.
    """
    try:
        bad = check_cached_file(path, sha256)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if bad is not None:
        log(f"cache: removed damaged {bad.describe()}")
        return None
    return path


def require_cached_file(path: Path, sha256: str, what: str, fix: str, remove: bool = True) -> Path:
    """`path`, verified against `sha256`; a SourceError naming path and both digests otherwise."""
    try:
        bad = check_cached_file(path, sha256, remove)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise SourceError(f"{what} {path} is missing", str(exc), fix) from exc
    if bad is not None:
        raise SourceError(
            f"{what} {path} does not match its digest",
            f"expected sha256 {bad.expected}, got {bad.actual} ({bad.size} bytes)"
            + ("; the damaged file was removed" if remove else ""),
            fix,
        )
    return path


@contextmanager
def open_verified(path: Path, sha256: str, what: str, fix: str, remove: bool = True) -> Iterator[BinaryIO]:
    """An open file positioned at 0 whose content, read through this very descriptor, hashes to `sha256`.

    Reading the same descriptor that was hashed means a file swapped in at `path`
    after the check is never what gets used.
    """
    try:
        f = open(path, "rb")
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise SourceError(f"{what} {path} is missing", str(exc), fix) from exc
    with f:
        actual, size = stream_sha256(f)
        if actual != sha256:
            if remove:
                _remove_entry(path)
            raise SourceError(
                f"{what} {path} does not match its digest",
                f"expected sha256 {sha256}, got {actual} ({size} bytes)"
                + ("; the damaged file was removed" if remove else ""),
                fix,
            )
        f.seek(0)
        yield f


def _lookup(cache_dir: Path, recipe: Recipe) -> tuple[CachedArchive | None, list[Mismatch]]:
    damaged: list[Mismatch] = []
    for a in recipe.archives:
        p = cache_path(cache_dir, a)
        origin_file = _origin_file(p)
        try:
            origin = origin_file.read_text().strip() if origin_file.is_file() else "cache"
            bad = check_cached_file(p, a.sha256)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if bad is not None:
            damaged.append(bad)
            continue
        return CachedArchive(a, p, origin), damaged
    return None, damaged


def cached(cache_dir: Path, recipe: Recipe, log: Log = _quiet) -> CachedArchive | None:
    """A cached archive of the recipe, hashed again now; damaged entries are removed (and logged)."""
    hit, damaged = _lookup(cache_dir, recipe)
    for bad in damaged:
        log(f"fetch: removed damaged cache entry {bad.describe()}")
    return hit


def admit_file(dest: Path, sha256: str, candidate: Path, origin: str, what: str, move: bool = False) -> Path:
    """Verify `candidate` against `sha256` and place it at `dest` in a content-addressed cache, with a
    note of its origin beside it; refuse it (and leave nothing) if it differs. Sources and toolchains."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    tmp_origin = dest.with_name(f".{dest.name}.{os.getpid()}.origin.partial")
    try:
        if move:
            shutil.move(str(candidate), tmp)
        else:
            shutil.copyfile(candidate, tmp)
        actual = file_sha256(tmp)
        if actual != sha256:
            size = tmp.stat().st_size
            raise SourceError(
                f"{what} from {origin} does not match its pinned digest",
                f"expected sha256 {sha256}, got {actual} ({size} bytes)",
                "the file is tampered, truncated or another release; remove it from that origin "
                "and fetch again (nothing was cached)",
            )
        # the origin note first: a file never sits in the cache without saying where it came from
        tmp_origin.write_text(origin + "\n")
        os.replace(tmp_origin, _origin_file(dest))
        os.replace(tmp, dest)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(dest), exc) from exc
        raise
    finally:
        tmp.unlink(missing_ok=True)
        tmp_origin.unlink(missing_ok=True)
        for d in (dest.parent, dest.parent.parent):
            try:
                d.rmdir()  # only succeeds when nothing was admitted
            except OSError:
                pass
    return dest


def admit(cache_dir: Path, archive: Archive, candidate: Path, origin: str, move: bool = False) -> CachedArchive:
    """Verify `candidate` and place it in the cache; refuse it (and leave nothing) if it differs."""
    path = admit_file(cache_path(cache_dir, archive), archive.sha256, candidate, origin, f"source archive {archive.file}", move)
    return CachedArchive(archive, path, origin)


def _from_mirrors(cache_dir: Path, recipe: Recipe, mirrors: Iterable[Path], log: Log) -> CachedArchive | None:
    for mirror in mirrors:
        if not mirror.is_dir():
            raise SourceError(
                f"mirror directory {mirror} does not exist",
                "it was given with --mirror or HERMETIC_MIRRORS",
                "create it or drop it from the mirror list",
            )
        for a in recipe.archives:
            cand = mirror / a.file
            if cand.is_file():
                log(f"fetch: verifying {cand}")
                return admit(cache_dir, a, cand, f"mirror:{cand}")
    return None


def download(url: str, part: Path, log: Log, dest: Path) -> bool:
    """`url` into `part` (on its way to `dest`); False (and nothing left) when it cannot be had. A full
    disk is raised, naming `dest`: the next origin would fail the same way."""
    try:
        with urllib.request.urlopen(url, timeout=30) as resp, open(part, "wb") as out:
            shutil.copyfileobj(resp, out, 1 << 20)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        part.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise disk_full(str(dest), exc) from exc
        log(f"fetch: {url} unreachable ({exc})")
        return False
    return True


def download_verified(url: str, dest: Path, sha256: str, what: str, log: Log) -> Path | None:
    """`url` admitted at the content-addressed `dest` when it hashes to `sha256` (a SourceError when it does not);
    None, leaving nothing, when it cannot be had. Source archives and sdists."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f".{dest.name}.{os.getpid()}.download")
    log(f"fetch: downloading {url}")
    try:
        ok = download(url, part, log, dest)
    finally:
        if not part.exists():
            with contextlib.suppress(OSError):
                dest.parent.rmdir()  # only when empty: nothing of this attempt stays
    return admit_file(dest, sha256, part, f"url:{url}", what, move=True) if ok else None


def _from_urls(cache_dir: Path, recipe: Recipe, log: Log) -> CachedArchive | None:
    for a in recipe.archives:
        if not a.url:
            continue
        path = download_verified(a.url, cache_path(cache_dir, a), a.sha256, f"source archive {a.file}", log)
        if path is not None:
            return CachedArchive(a, path, f"url:{a.url}")
    return None


def _deb_src_entries(etc_apt: Path) -> str:
    """deb-src entries (deb822) mirroring the machine's own Debian `deb` entries."""
    paragraphs: list[dict[str, str]] = []
    parts = etc_apt / "sources.list.d"
    for f in sorted(parts.glob("*.sources")) if parts.is_dir() else []:
        for block in f.read_text().split("\n\n"):
            fields: dict[str, str] = {}
            for line in block.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
            if fields:
                paragraphs.append(fields)
    one_line = [etc_apt / "sources.list", *(sorted(parts.glob("*.list")) if parts.is_dir() else [])]
    for f in one_line:
        if not f.is_file():
            continue
        for line in f.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if not words or words[0] != "deb":
                continue
            words = words[1:]
            signed = ""
            if words and words[0].startswith("["):
                opts = []
                while words:
                    w = words.pop(0)
                    opts.append(w.strip("[]"))
                    if w.endswith("]"):
                        break
                for o in opts:
                    if o.startswith("signed-by="):
                        signed = o.split("=", 1)[1]
            if len(words) >= 2:
                p = {"Types": "deb", "URIs": words[0], "Suites": words[1], "Components": " ".join(words[2:])}
                if signed:
                    p["Signed-By"] = signed
                paragraphs.append(p)
    out = []
    for p in paragraphs:
        if "deb" not in p.get("Types", "").split() or p.get("Enabled", "yes").lower() == "no":
            continue
        # Debian's own archives carry source packages; third-party repositories usually do not.
        if "debian" not in (p.get("URIs", "") + p.get("Signed-By", "")):
            continue
        lines = ["Types: deb-src"] + [f"{k}: {v}" for k, v in p.items() if k != "Types"]
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def _run(argv: list[str], what: str, cwd: Path | None = None) -> None:
    proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise SubprocessFailed(what, argv, proc.returncode, proc.stdout, str(cwd) if cwd else None)


def _from_apt(cache_dir: Path, recipe: Recipe, log: Log, etc_apt: Path = Path("/etc/apt")) -> CachedArchive | None:
    debian = [a for a in recipe.archives if a.apt_source_package]
    if not debian or shutil.which("apt-get") is None:
        return None
    apt_dir = cache_dir / "apt"
    lists = apt_dir / "lists"
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    parts = apt_dir / "sources.list.d"
    parts.mkdir(exist_ok=True)
    entries = _deb_src_entries(etc_apt)
    if not entries.strip():
        log("fetch: no Debian apt sources found on this machine; skipping apt")
        return None
    (parts / "hermetic-deb-src.sources").write_text(entries)
    # A private apt configuration: the machine's own sources turned into deb-src,
    # with lists kept in hermetic's cache so the system's apt state is not touched.
    opts = [
        "-o", "Dir::Etc::SourceList=/dev/null",
        "-o", f"Dir::Etc::SourceParts={parts}",
        "-o", f"Dir::State::Lists={lists}",
        "-o", "APT::Sandbox::User=root",
    ]
    log("fetch: apt-get update (deb-src entries derived from the machine's apt sources)")
    _run(["apt-get", "-q", *opts, "update"], "apt-get update for source packages failed")
    for a in debian:
        with tempfile.TemporaryDirectory(dir=apt_dir) as tmp:
            spec = f"{a.apt_source_package}={a.apt_source_version}" if a.apt_source_version else a.apt_source_package
            log(f"fetch: apt-get source --download-only {spec}")
            proc = subprocess.run(
                ["apt-get", "-q", *opts, "source", "--download-only", spec],
                cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            got = Path(tmp) / a.file
            if proc.returncode != 0 and "No space left on device" in proc.stdout:
                # the temporary directory (and apt's partial file in it) goes with the with-block
                raise disk_full(str(got), OSError(errno.ENOSPC, "No space left on device (apt-get source)"))
            if proc.returncode == 0 and got.is_file():
                return admit(cache_dir, a, got, f"apt:{spec}", move=True)
            log(f"fetch: apt could not provide {spec}: {proc.stdout.strip().splitlines()[-1:]}")
            uris = subprocess.run(
                ["apt-get", "-q", *opts, "--print-uris", "source", "--download-only", spec],
                cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            ).stdout
            for url in other_pools(uris, a.file, _entry_uris(entries)):
                log(f"fetch: trying the same file in another Debian pool: {url}")
                if download(url, got, log, cache_path(cache_dir, a)):
                    # the path in the pool, not the mirror: records name no host (apt's own origin is the spec)
                    return admit(cache_dir, a, got, f"apt:{spec} (pool/{url.partition('/pool/')[2]})", move=True)
    return None


def _entry_uris(entries: str) -> list[str]:
    """The archive URIs of deb822 entries, in order, each once."""
    uris = [u for line in entries.splitlines() if line.startswith("URIs:") for u in line.split()[1:]]
    return list(dict.fromkeys(uris))


def other_pools(print_uris: str, file: str, bases: list[str]) -> list[str]:
    """Where else one of a source package's files may be, from `apt-get --print-uris source` output.

    Debian's security archive keeps an upload's files under pool/updates/<component>/; once the same
    upload is also in the stable suite (a point release), the main archive has the very same files
    under pool/<component>/, and a mirror may carry only that copy. So for the URI apt printed, the
    same path relative to pool/ under each archive the machine uses. The archive is pinned by sha256
    (admit checks it), so which copy is taken does not matter.
    """
    found = [line.split()[0].strip("'") for line in print_uris.splitlines()
             if len(line.split()) >= 2 and line.split()[1] == file]
    out: list[str] = []
    for uri in found:
        _, sep, rel = uri.partition("/pool/")
        if not sep:
            continue
        rel = rel.removeprefix("updates/")
        out += [f"{base.rstrip('/')}/pool/{rel}" for base in bases]
    return [u for u in dict.fromkeys(out) if u not in found]


def fetch(
    cache_dir: Path,
    recipe: Recipe,
    mirrors: Iterable[Path] = (),
    use_urls: bool = True,
    use_apt: bool = True,
    log: Log = null_log,
) -> CachedArchive:
    """A verified archive of the recipe's release, from the cache or, in order, mirrors, URLs, apt."""
    hit, damaged = _lookup(cache_dir, recipe)
    for bad in damaged:
        log(f"fetch: removed damaged cache entry {bad.describe()}; fetching it again")
    if hit is not None:
        log(f"fetch: {hit.archive.file} already cached (sha256 {hit.archive.sha256[:12]}…, verified)")
        return hit
    found = _from_mirrors(cache_dir, recipe, mirrors, log)
    if found is None and use_urls:
        found = _from_urls(cache_dir, recipe, log)
    if found is None and use_apt:
        found = _from_apt(cache_dir, recipe, log)
    if found is None:
        names = ", ".join(a.file for a in recipe.archives)
        tried = ["the cache", "a mirror"] + (["reachable by URL"] if use_urls else []) + (
            ["available through apt"] if use_apt else []
        )
        why = f"none of {names} is in " + ", ".join(tried[:-1]) + " or " + tried[-1]
        if damaged:
            why += "; the damaged cache entries were removed: " + "; ".join(b.describe() for b in damaged)
        skipped = [o for o, on in (("--no-urls", use_urls), ("--no-apt", use_apt)) if not on]
        fix = "put one of them in a directory and pass --mirror DIR (or set HERMETIC_MIRRORS)"
        if skipped:
            fix += f", or rerun without {' and '.join(skipped)}"
        raise SourceError(f"no source archive of {recipe.name} {recipe.version} could be fetched", why, fix)
    log(f"fetch: cached {found.archive.file} (sha256 {found.archive.sha256}) from {found.origin}")
    return found


# --- pruning ---------------------------------------------------------------

# The pruning code's version; what is kept is the recipe's data (conandata.yml `prune:`).
PRUNE_RULES_VERSION = 1


def prune_key(archive: Archive, variant: Variant, rules: PruneRules) -> str:
    data = {
        "rules": PRUNE_RULES_VERSION,
        "keep": rules.as_json(),
        "source": archive.sha256,
        "targets": sorted(variant.values("targets")),
        "projects": sorted(variant.values("projects")),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def keep_path(rel: str, targets: set[str], projects: set[str], rules: PruneRules) -> bool:
    """Whether a path (relative to the source root, '/'-separated) belongs to the pruned tree."""
    parts = rel.split("/")
    top = parts[0]
    if len(parts) == 1:
        return False  # loose files at the top (README, .clang-format) are not read by the build
    if any(rel == d or rel.startswith(d + "/") for d in rules.drop_top):
        return False
    if top in rules.keep_top:
        return True
    if top not in projects:
        return False
    if parts[1] in rules.drop_in_project:
        return False
    if top == "llvm" and len(parts) >= 4 and parts[1] == "lib" and parts[2] == "Target":
        target = parts[3]
        if len(parts) == 4 and "." in target:
            return True  # files directly in lib/Target (TargetMachine.cpp, CMakeLists.txt, …)
        if target in targets:
            return True
        return target in rules.td_always and rel.endswith(".td")
    return True


def _normalized(info: tarfile.TarInfo, name: str, epoch: int) -> tarfile.TarInfo:
    out = tarfile.TarInfo(name)
    out.mtime = min(int(info.mtime), epoch)
    out.uid = out.gid = 0
    out.uname = out.gname = ""
    if info.isdir():
        out.type = tarfile.DIRTYPE
        out.mode = 0o755
    elif info.issym():
        out.type = tarfile.SYMTYPE
        out.linkname = info.linkname
        out.mode = 0o777
    else:
        out.type = tarfile.REGTYPE
        out.mode = 0o755 if info.mode & 0o111 else 0o644
    return out


def prune(
    source: CachedArchive,
    recipe: Recipe,
    variant: Variant,
    dest: Path,
    log: Log = null_log,
) -> Path:
    """Write a deterministic .tar.xz holding only what `variant` builds (the recipe's prune rules); returns its path."""
    epoch = recipe.source_date_epoch
    targets = set(variant.values("targets"))
    projects = set(variant.values("projects"))
    root = recipe.pruned_root
    strip = source.archive.strip_root.rstrip("/") + "/"
    members: dict[str, tuple[tarfile.TarInfo, bytes]] = {}
    log(f"prune: reading {source.path.name} (this takes a minute)")
    # checked again here, on the descriptor tar then reads: the archive was verified at fetch, but a
    # cache entry can change between steps. Only a content-addressed cache entry is removed on mismatch.
    in_cache = source.path.parent.name == source.archive.sha256
    try:
        with (
            open_verified(
                source.path, source.archive.sha256, "source archive",
                "run `hermetic fetch` again (it fetches a verified copy)", remove=in_cache,
            ) as raw_src,
            tarfile.open(fileobj=raw_src, mode="r:*") as tar,
        ):
            for info in tar:
                name = info.name.rstrip("/")
                if not (name + "/").startswith(strip) or name + "/" == strip:
                    continue
                rel = name[len(strip):]
                if info.isdir() or not keep_path(rel, targets, projects, recipe.prune):
                    continue
                if not (info.isfile() or info.issym() or info.islnk()):
                    continue
                data = b""
                if info.isfile() or info.islnk():
                    f = tar.extractfile(info)
                    data = f.read() if f is not None else b""
                    if info.islnk():
                        info = tarfile.TarInfo(info.name)  # hard links become plain copies
                        info.mode = 0o644
                members[rel] = (info, data)
    except (tarfile.TarError, lzma.LZMAError, EOFError) as exc:
        raise SourceError(
            f"cannot read source archive {source.path}",
            str(exc),
            f"delete {source.path.parent} and run `hermetic fetch` again",
        ) from exc
    return write_archive(dest, root, members, epoch, log)


def write_archive(
    dest: Path, root: str, members: Mapping[str, tuple[tarfile.TarInfo, bytes]], epoch: int, log: Log = null_log
) -> Path:
    """Write `members` (paths relative to `root`) as a deterministic .tar.xz: sorted, normalized owners and modes,
    times clamped to `epoch`, every parent directory listed, one fixed xz preset. Written beside `dest`, then moved."""
    dirs: set[str] = set()
    for rel in members:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    log(f"prune: writing {len(members)} files to {dest.name}")
    try:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as out:
            top = tarfile.TarInfo(root)
            top.type, top.mode, top.mtime = tarfile.DIRTYPE, 0o755, epoch
            out.addfile(top)
            for rel in sorted(dirs | set(members)):
                if rel in members:
                    info, data = members[rel]
                    norm = _normalized(info, f"{root}/{rel}", epoch)
                    norm.size = len(data) if norm.type == tarfile.REGTYPE else 0
                    out.addfile(norm, io.BytesIO(data) if norm.type == tarfile.REGTYPE else None)
                else:
                    d = tarfile.TarInfo(f"{root}/{rel}")
                    d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, epoch
                    out.addfile(d)
        # Single-threaded xz at a fixed preset: the same tar gives the same bytes.
        with open(tmp, "wb") as f:
            f.write(lzma.compress(raw.getvalue(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=6))
        os.replace(tmp, dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(dest), exc) from exc
        raise
    return dest
