"""A shared compile cache: the LLVM compiles run through ccache with its remote storage.

The cache is a speed-up, never an input. It does not enter the inputs digest (a build with it is
the build without it: substitution and `verify` match either way), and what it returns can only
be what the same compile would give, since ccache keys each object by the compiler's identity,
its arguments and the preprocessed source. A poisoned entry would change the tree, and the tree
digest (`hermetic verify`) exposes that.

Reachability: builds run in a fresh network namespace with no network at all. A Unix socket
(`redis+unix:/path/redis.sock`) or a directory (`file:///dir`, e.g. an NFS mount) is reached
through the file system, which the namespace does not cut off, so those are what a build can use;
nothing else becomes reachable for it. A TCP address (`redis://host:port`, `http://`) cannot be
reached from inside the namespace: it is refused unless the build runs without isolation
(`--offline=off`), where it is allowed and the record says so.

Hits from another directory or user: ccache's own settings keep paths out of the keys. `base_dir`
is the build's staging directory (the Conan home with the source and build folders below it), so
include paths are hashed relative; `hash_dir = false` leaves the working directory out (the
objects have no debug info: -g0, and the prefix maps are skipped by ccache's hashing); the
compiler is a script at a per-work-dir path (the zig wrappers), so `compiler_check` is a string
naming the pinned toolchain (its digest and the wrappers' text) rather than the script's mtime.
Each build has its own local ccache directory (`remote_only`): its statistics are this build's,
and nothing of a build is left behind on the machine but the shared cache.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar
from urllib.parse import urlsplit

from hermetic.core.errors import EnvironmentError_, UsageError

if TYPE_CHECKING:
    from hermetic.core.compiles import CompileCache

_T = TypeVar("_T")

CCACHE_MIN = (4, 7)  # redis+unix storage came with 4.7
_FEATURE = {"redis+unix": "redis+unix-storage", "file": "file-storage", "redis": "redis-storage", "http": "http-storage"}

def check_reachable(cache: CompileCache, offline: str) -> None:
    """Refuse a network cache for a build that runs in a network namespace, where it cannot be reached."""
    if cache.local or offline == "off":
        return
    raise UsageError(
        f"compile cache {cache.shown} cannot be reached by the build",
        f"builds run in a fresh network namespace (--offline={offline}) with no network, so the TCP address "
        f"{cache.address} is unreachable from inside it; a Unix socket or a directory is reachable",
        "serve Redis on a Unix socket (redis.conf: unixsocket /run/redis/redis.sock) and pass "
        "--compile-cache redis+unix:/run/redis/redis.sock, or use a directory (file:///DIR); "
        "or build without isolation (--offline=off), which the build record then says",
    )


def _mode(p: Path) -> str:
    """`srwxrwx--- root:redis`: a path's type, mode and owners, as `ls -l` shows them."""
    st = p.stat()
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{stat.filemode(st.st_mode)} {user}:{group}"


def _who() -> str:
    return f"uid {os.getuid()} (groups {', '.join(str(g) for g in sorted({os.getgid(), *os.getgroups()}))})"


def _exists(p: Path) -> bool:
    try:
        return p.exists()
    except PermissionError:  # a directory above may not be searched
        return False


def read_only(cache: CompileCache) -> bool:
    """Whether the URL carries ccache's `read-only` attribute: hits only, nothing written."""
    return "read-only" in cache.url.partition("|")[2].split("|")


def check_access(cache: CompileCache) -> None:
    """Refuse a local cache this user may not use, before anything runs.

    A cache that is down (no socket, Redis not running) is no error: the build runs without it and the
    record says so. A permission problem is a setting that stays wrong: every compile would run uncached and
    ccache would only count errors, so it is refused with what to change. Another user of a shared cache
    needs: for a Unix socket, search permission on its directories and write permission on the socket
    (redis.conf `unixsocketperm 770` and a group both users are in, or 777); for a directory, read and
    search permission (hits), and write permission unless the URL says `|read-only`.
    """
    if not cache.local:
        return
    p = Path(cache.path)
    what = f"compile cache {cache.shown}"
    exists = _exists(p)  # False also where a directory above may not be entered: found next
    # the nearest directory above that this user cannot search hides the cache from it
    for d in reversed(p.parents):
        if _exists(d) and not os.access(d, os.X_OK):
            raise EnvironmentError_(
                f"{what} cannot be reached by {_who()}",
                f"this user may not enter {d} ({_mode(d)}), which holds the cache",
                f"give the user search permission on {d} (chmod o+x, or a group both users are in with g+x), "
                "or build without it (--no-compile-cache)",
            )
    if cache.scheme == "redis+unix":
        if exists and stat.S_ISSOCK(p.stat().st_mode) and not os.access(p, os.W_OK):
            raise EnvironmentError_(
                f"{what} cannot be reached by {_who()}",
                f"connecting to a Unix socket needs write permission on it, and {p} is {_mode(p)}",
                "let the build's user write to the socket: redis.conf `unixsocketperm 770` with the socket in a "
                "directory of a group both users are in, with its setgid bit (chmod 2775: the socket takes its group), "
                "or `unixsocketperm 777` where every local user may share the cache; or --no-compile-cache",
            )
        return
    if not exists:
        parent = next((d for d in p.parents if _exists(d)), Path("/"))
        if not os.access(parent, os.W_OK | os.X_OK):
            raise EnvironmentError_(
                f"{what} does not exist and {_who()} cannot create it",
                f"ccache would create {p}, but {parent} is {_mode(parent)}",
                f"create {p} for the users who share it (e.g. mkdir -m 2775 with a shared group, and `|umask=002` on "
                "the URL), or build without it (--no-compile-cache)",
            )
        return
    if not p.is_dir():
        raise EnvironmentError_(f"{what} is not a directory", f"{p} is {_mode(p)}",
                                "name a directory (file:///DIR) or build without it (--no-compile-cache)")
    if not os.access(p, os.R_OK | os.X_OK):
        raise EnvironmentError_(
            f"{what} cannot be read by {_who()}",
            f"hits need read and search permission on {p}, which is {_mode(p)}",
            f"give the user read access (chmod -R o+rX {p}, or a group both users are in), or --no-compile-cache",
        )
    if not read_only(cache) and not os.access(p, os.W_OK):
        raise EnvironmentError_(
            f"{what} cannot be written by {_who()}",
            f"{p} is {_mode(p)}: ccache would take hits from it but fail to store every miss",
            f"add `|read-only` to the URL to take hits only (--compile-cache 'file://{p}|read-only'), or let the user "
            "write (a group both users are in, mode 2775, and `|umask=002` on every writer's URL)",
        )


def probe(cache: CompileCache, timeout: float = 2.0) -> tuple[bool, str]:
    """Whether the cache answers before the build starts, and how it looked; never raises.

    An unreachable cache does not stop the build (ccache falls back to compiling and counts the
    errors): this is what the record says it found.
    """
    if cache.scheme == "file":
        p = Path(cache.path)
        if not p.is_dir():
            return False, f"directory {p} does not exist (ccache creates it when it can)"
        return True, f"directory {p}"
    if cache.scheme == "redis+unix":
        p = Path(cache.path)
        try:
            if not stat.S_ISSOCK(p.stat().st_mode):
                return False, f"{p} is not a Unix socket"
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(str(p))
                s.sendall(b"PING\r\n")
                reply = s.recv(64)
        except OSError as exc:
            return False, f"Unix socket {p}: {exc.strerror or exc}"
        # An answer that is not +PONG (e.g. -NOAUTH) is still a Redis that answered.
        return True, f"Unix socket {p} (Redis answered {reply.decode(errors='replace').strip()[:40] or 'nothing'})"
    parts = urlsplit(cache.url.partition("|")[0])
    try:
        with socket.create_connection((parts.hostname, parts.port or {"redis": 6379, "http": 80}[cache.scheme]), timeout=timeout):
            pass
    except OSError as exc:
        return False, f"{cache.address}: {exc}"
    return True, f"TCP {cache.address} (no network isolation: --offline=off)"


@dataclass(frozen=True)
class Ccache:
    """The ccache on PATH that runs the compiles: an explicit, recorded tool."""

    path: str
    version: str
    features: tuple[str, ...]


_VERSION = re.compile(r"ccache version (\d+)\.(\d+)(?:\.(\d+))?")


def find_ccache(cache: CompileCache, path_env: str | None) -> Ccache:
    """The ccache found on the build's PATH, checked to have the storage the URL needs."""
    exe = shutil.which("ccache", path=path_env)
    if exe is None:
        raise EnvironmentError_(
            "ccache is not installed",
            f"--compile-cache {cache.shown} runs the compiles through ccache, and none is on PATH",
            "install it (Debian: apt-get install ccache, 4.7 or later) or build without --compile-cache",
        )
    try:
        text = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentError_(f"cannot run {exe} --version", str(exc), "check the ccache installation") from exc
    m = _VERSION.search(text)
    if not m or (int(m.group(1)), int(m.group(2))) < CCACHE_MIN:
        raise EnvironmentError_(
            f"{exe} is too old for --compile-cache",
            f"it says {text.strip().splitlines()[0] if text.strip() else 'nothing'}; "
            f"{'.'.join(map(str, CCACHE_MIN))} or later is needed (redis+unix storage, remote_only)",
            "install a newer ccache or build without --compile-cache",
        )
    features = tuple(text.partition("Features:")[2].split()) if "Features:" in text else ()
    want = _FEATURE[cache.scheme]
    if features and want not in features:
        raise EnvironmentError_(
            f"{exe} cannot use {cache.scheme} storage",
            f"its features are {' '.join(features)}, without {want}",
            "install a ccache built with it (Debian's has them all) or use another kind of cache",
        )
    version = ".".join(g for g in m.groups() if g is not None)
    return Ccache(exe, version, features)


def compiler_check(toolchain_identity: Mapping[str, str], wrappers: str) -> str:
    """ccache's compiler_check: the pinned toolchain's identity and its wrappers' text, not a path or an mtime.

    The host toolchain has no pinned identity: ccache asks the compiler itself (`-v` names gcc's version and
    configuration), which holds on machines with the same compiler package.
    """
    if toolchain_identity.get("kind") == "host":
        return "%compiler% -v"
    h = hashlib.sha256()
    for k, v in sorted(toolchain_identity.items()):
        h.update(f"{k}={v}\0".encode())
    h.update(wrappers.encode())
    return f"string:{h.hexdigest()}"


def write_config(
    conf_dir: Path, cache: CompileCache, base_dir: Path, check: str, compiler_type: str | None,
    prefix_command: Path | None = None,
) -> Path:
    """The build's own ccache.conf (CCACHE_CONFIGPATH): a fresh local directory, the shared remote storage only."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "local").mkdir(exist_ok=True)
    lines = [
        "# Generated by hermetic for one build: do not edit.",
        f"cache_dir = {conf_dir / 'local'}",
        f"remote_storage = {cache.url}",
        "remote_only = true",
        f"base_dir = {base_dir}",
        "hash_dir = false",
        f"compiler_check = {check}",
        "stats = true",
    ]
    if compiler_type:
        lines.append(f"compiler_type = {compiler_type}")
    if prefix_command is not None:
        # the compile of a miss (never the preprocessing of the key) runs through it: distcc, to the hosts
        lines.append(f"prefix_command = {prefix_command}")
    path = conf_dir / "ccache.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


_COUNTED = {
    "direct_cache_hit", "preprocessed_cache_hit", "cache_miss", "direct_cache_miss", "preprocessed_cache_miss",
    "remote_storage_hit", "remote_storage_miss", "remote_storage_error", "remote_storage_timeout",
    "remote_storage_read_hit", "remote_storage_read_miss", "remote_storage_write",
    "local_storage_hit", "local_storage_miss", "local_storage_read_hit", "local_storage_read_miss",
    "local_storage_write", "stats_updated_timestamp", "stats_zeroed_timestamp", "files_in_cache",
    "cache_size_kibibyte", "cleanups_performed",
}


def parse_stats(text: str, make: Callable[..., _T]) -> _T:
    """`ccache --print-stats` (one `name<TAB>count` a line) as this build's counters, made by `make` (the
    record's CacheStats: the record is the caller's)."""
    c: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().isdigit():
            c[name.strip()] = int(value)
    hits, misses = c.get("direct_cache_hit", 0) + c.get("preprocessed_cache_hit", 0), c.get("cache_miss", 0)
    return make(
        hits=hits,
        misses=misses,
        hit_rate=round(hits / (hits + misses), 4) if hits + misses else 0.0,
        remote_hits=c.get("remote_storage_hit", 0),
        remote_misses=c.get("remote_storage_miss", 0),
        remote_errors=c.get("remote_storage_error", 0) + c.get("remote_storage_timeout", 0),
        # everything else ccache counts is a call it did not serve from or store in the cache
        uncacheable=sum(v for k, v in c.items() if k not in _COUNTED),
    )


class Counts(Protocol):
    """What failure_note reads of the record's CacheStats (the record is the caller's, as for parse_stats)."""

    @property
    def hits(self) -> int: ...

    @property
    def misses(self) -> int: ...

    @property
    def remote_errors(self) -> int: ...


def failure_note(answered: bool, stats: Counts | None) -> str:
    """What the record says when the cache failed the build: from ccache's own counters, how many compiles
    could not use it and so ran here. "" when it served the whole build."""
    if stats is None:
        return "" if answered else "the cache did not answer when the build started (ccache's statistics are missing)"
    if not stats.remote_errors:
        # e.g. a file:// directory that did not exist yet: ccache made it and used it
        return ""
    # ccache gives up on the storage for the rest of a compile at its first error: one error a compile
    when = "during the build" if answered else "from the start"
    return (f"the cache failed {when}: ccache counted {stats.remote_errors} remote storage errors or timeouts, "
            f"compiles that could not use it and ran here uncached ({stats.misses} compiles ran in all, "
            f"{stats.hits} were cache hits); the tree does not depend on it")
