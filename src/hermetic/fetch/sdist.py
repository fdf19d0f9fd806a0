"""Another project's release source distribution, pinned by a wheel recipe: fetched into the verified cache
and unpacked safely for `hermetic wheel`.

An sdist is treated as a source archive (sources.py): content-addressed under `CACHE/sdists/sha256/<digest>/`,
admitted only after its sha256 matched the pin, hashed again on every use. Origins, in order: `--mirror`
directories, then the recipe's URL (PyPI's file URL for that release). It is never fetched with
`pip download`: for an sdist, pip runs the project's build backend to read its metadata, and fetching must
not run the code being fetched.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.core.errors import SourceError
from hermetic.core.log import null_log
from hermetic.fetch.cache import admit_file, cached_file, download_verified, require_cached_file
from hermetic.model.wheels import SdistPin

if TYPE_CHECKING:
    from hermetic.core.log import Log


@dataclass(frozen=True)
class CachedSdist:
    pin: SdistPin
    path: Path
    origin: str  # mirror:PATH or url:URL, as it was admitted


def cache_path(cache_dir: Path, pin: SdistPin) -> Path:
    return cache_dir / "sdists" / "sha256" / pin.sha256 / pin.file


def _origin(path: Path) -> str:
    try:
        return path.with_name(path.name + ".origin").read_text().strip()
    except OSError:
        return "cache"


def cached(cache_dir: Path, pin: SdistPin, log: Log = null_log) -> CachedSdist | None:
    """The cached sdist, hashed now; None when absent or damaged (a damaged one is removed, saying so)."""
    path = cached_file(cache_path(cache_dir, pin), pin.sha256, log)
    return CachedSdist(pin, path, _origin(path)) if path else None


def fetch(cache_dir: Path, pin: SdistPin, mirrors: Iterable[Path], use_urls: bool, log: Log) -> CachedSdist:
    """The verified sdist: from the cache, else a mirror directory, else its URL."""
    hit = cached(cache_dir, pin, log)
    if hit is not None:
        log(f"fetch: {pin.file} already cached (sha256 {pin.sha256[:12]}…, verified)")
        return hit
    dest = cache_path(cache_dir, pin)
    what = f"sdist {pin.file}"
    tried: list[str] = []
    for mirror in mirrors:
        cand = mirror / pin.file
        tried.append(str(cand))
        if cand.is_file():
            log(f"fetch: verifying {cand}")
            return CachedSdist(pin, admit_file(dest, pin.sha256, cand, f"mirror:{cand}", what), f"mirror:{cand}")
    if pin.url and use_urls:
        tried.append(pin.url)
        path = download_verified(pin.url, dest, pin.sha256, what, log)
        if path is not None:
            return CachedSdist(pin, path, f"url:{pin.url}")
    raise SourceError(
        f"cannot fetch {pin.file} ({pin.name} {pin.version})",
        "tried " + (", ".join(tried) if tried else "nothing: no --mirror, and URLs are off (--no-urls)")
        + ("" if pin.url else "; the recipe names no URL"),
        f"put {pin.file} (sha256 {pin.sha256}) in a directory and pass --mirror DIR, or allow URLs",
    )


def unpack(sdist: CachedSdist, dest: Path) -> None:
    """The sdist's tree, without its top directory, into `dest` (which must not exist).

    Every member must lie under `strip_root` and be a plain file, directory or a link inside the tree
    (tarfile's `data` filter refuses absolute paths, `..`, devices and links leaving `dest`); modes are
    the data filter's (no setuid, group/other write dropped). The archive is hashed again first: what is
    unpacked is what the pin vouches for, however long ago it was fetched.
    """
    prefix = sdist.pin.strip_root.rstrip("/") + "/"
    path = require(sdist)
    dest.mkdir(parents=True)
    with tarfile.open(path) as tar:
        members = []
        for m in tar.getmembers():
            if m.name.rstrip("/") == prefix.rstrip("/"):
                continue
            if not m.name.startswith(prefix):
                raise SourceError(
                    f"{sdist.pin.file} has a member outside {prefix}",
                    f"member {m.name!r}", "check strip_root in the recipe (the sdist's top directory)",
                )
            m.name = m.name[len(prefix):]
            members.append(m)
        try:
            tar.extractall(dest, members=members, filter="data")
        except tarfile.FilterError as exc:
            raise SourceError(f"{sdist.pin.file} holds a member that cannot be unpacked safely", str(exc),
                              "this is not an sdist to build: check the pin") from exc


def require(sdist: CachedSdist) -> Path:
    """The cached sdist's path, hashed again now; a SourceError when it no longer matches its pin."""
    return require_cached_file(sdist.path, sdist.pin.sha256, f"sdist {sdist.pin.file}",
                               "run `hermetic fetch` (or `hermetic wheel`) again to fetch it anew")
