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

import errno
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.core.errors import SourceError, SubprocessFailed, disk_full
from hermetic.core.log import null_log
from hermetic.core.staging import fill_lock
from hermetic.fetch.cache import _origin_file, _quiet, admit_file, check_cached_file, download, download_verified

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.fetch.cache import Mismatch
    from hermetic.model.recipe import Archive, Recipe
    from hermetic.model.settings import Settings


@dataclass(frozen=True)
class CachedArchive:
    archive: Archive
    path: Path
    origin: str  # where this copy came from: mirror path, URL or apt

    def as_json(self) -> dict[str, str]:
        return {"file": self.archive.file, "sha256": self.archive.sha256, "origin": self.origin}


def cache_path(cache_dir: Path, archive: Archive) -> Path:
    return cache_dir / "sources" / "sha256" / archive.sha256 / archive.file


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
    # apt-get takes a lock of its own on the lists and fails at once when another holds it: hermetic
    # processes sharing this cache take turns instead, and one that waited may find the archive fetched.
    with fill_lock(lists, log):
        return cached(cache_dir, recipe) or _apt_fetch(cache_dir, debian, entries, apt_dir, log)


def _apt_fetch(cache_dir: Path, debian: list[Archive], entries: str, apt_dir: Path, log: Log) -> CachedArchive | None:
    lists, parts = apt_dir / "lists", apt_dir / "sources.list.d"
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


def fetch_with(settings: Settings, recipe: Recipe, log: Log = null_log) -> CachedArchive:
    """fetch() from the origins the settings allow."""
    return fetch(settings.cache_dir, recipe, settings.mirrors, settings.use_urls, settings.use_apt, log)
