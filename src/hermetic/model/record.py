"""Build records: what was built, from what, how, and every file it produced.

A record is plain JSON so that other tools (and later `hermetic verify`) can
read it without hermetic. The install-tree digest covers paths, types, modes,
link targets and contents, not timestamps, so the same build gives the same
digest wherever and whenever it ran.

Inside hermetic a record is typed: BuildRecord (record.json of an LLVM build),
WheelRecord (wheel-record.json) and PrunedSource (pruned.json), frozen
dataclasses read by load_build_record / load_wheel_record / load_pruned, which
refuse a missing or mistyped field by name, and written by write_record as the
same JSON as ever. This module is the one place that knows their keys.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from hermetic.core.digests import file_sha256
from hermetic.core.errors import UsageError, VerifyError

RECORD_SCHEMA = "hermetic.build-record/1"
# A build record as an OCI artifact (a referrer of the image holding its tree), for substituting machines.
RECORD_MEDIA_TYPE = "application/vnd.hermetic.build-record.v1+json"


@dataclass(frozen=True)
class TreeEntry:
    path: str  # relative, '/'-separated
    kind: str  # "file" | "dir" | "symlink"
    mode: int  # permission bits only
    size: int = 0
    sha256: str = ""
    target: str = ""  # symlink target

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "type": self.kind, "mode": f"{self.mode:04o}"}
        if self.kind == "file":
            out["size"] = self.size
            out["sha256"] = self.sha256
        if self.kind == "symlink":
            out["target"] = self.target
        return out

    @classmethod
    def from_json(cls, data: object, file: str = "<tree entry>", where: str = "entry") -> TreeEntry:
        f = _Fields(data, file, where, "")
        kind = f.string("type")
        if kind not in ("file", "dir", "symlink"):
            f.fail("type", f"is {kind!r}, expected file, dir or symlink")
        mode_text = f.string("mode")
        try:
            mode = int(mode_text, 8)
        except ValueError:
            f.fail("mode", f"is {mode_text!r}, expected octal permission bits like '0644'")
        return cls(
            path=f.string("path"),
            kind=kind,
            mode=mode,
            size=f.integer("size") if kind == "file" else 0,
            sha256=f.string("sha256") if kind == "file" else "",
            target=f.string("target") if kind == "symlink" else "",
        )


def scan_tree(root: Path) -> list[TreeEntry]:
    """Every entry below root, sorted by path; root itself is not listed."""
    entries: list[TreeEntry] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(dirnames + filenames):
            p = base / name
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                entries.append(TreeEntry(rel, "symlink", 0o777, target=os.readlink(p)))
            elif stat.S_ISDIR(st.st_mode):
                entries.append(TreeEntry(rel, "dir", mode))
            elif stat.S_ISREG(st.st_mode):
                entries.append(TreeEntry(rel, "file", mode, st.st_size, file_sha256(p)))
            else:
                raise VerifyError(
                    f"unsupported file type in tree: {p}",
                    "install trees hold only files, directories and symlinks",
                    "remove the special file",
                )
    entries.sort(key=lambda e: e.path)
    return entries


def tree_digest(entries: Iterable[TreeEntry]) -> str:
    h = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e.path):
        h.update(json.dumps(e.as_json(), sort_keys=True).encode() + b"\n")
    return "sha256:" + h.hexdigest()


def tree_size(entries: Iterable[TreeEntry]) -> int:
    return sum(e.size for e in entries if e.kind == "file")


def normalize_tree(root: Path, epoch: int) -> None:
    """Clamp mtimes to the epoch and drop group/other write bits (umask 022 semantics)."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if not stat.S_ISLNK(st.st_mode):
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o022)
            if st.st_mtime > epoch:
                os.utime(p, (epoch, epoch), follow_symlinks=False)
    st = root.lstat()
    if st.st_mtime > epoch:
        os.utime(root, (epoch, epoch))


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Atomic write: a reader never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def compare_trees(expected: list[TreeEntry], actual: list[TreeEntry]) -> list[str]:
    """Human-readable differences, empty when the trees are identical."""
    exp = {e.path: e for e in expected}
    act = {e.path: e for e in actual}
    diffs: list[str] = []
    for path in sorted(exp.keys() | act.keys()):
        a, b = exp.get(path), act.get(path)
        if a is None:
            diffs.append(f"unexpected: {path}")
        elif b is None:
            diffs.append(f"missing: {path}")
        elif a != b:
            what = [f for f in ("kind", "mode", "size", "sha256", "target") if getattr(a, f) != getattr(b, f)]
            diffs.append(f"differs ({', '.join(what)}): {path}")
    return diffs


# -- typed records ---------------------------------------------------------------------------------------
#
# Each type parses one part of a record at the edge (from_json, which names the file and the field
# that is wrong) and writes back exactly the JSON hermetic has always written (as_json). Fields that
# records written before they existed lack (started, finished, toolchain) are None and then left out.

WHEEL_RECORD_SCHEMA = "hermetic.wheel-record/1"
_REBUILD = "rebuild to regenerate it (`hermetic build llvm --force`, `hermetic wheel`), or restore the file"


class _Fields:
    """Checked access to one JSON object of a record: a missing or mistyped field raises VerifyError."""

    def __init__(self, data: object, file: str, where: str, fix: str = _REBUILD) -> None:
        self.file, self.where, self.fix = file, where, fix or _REBUILD
        if not isinstance(data, dict):
            raise VerifyError(
                f"{file} is malformed", f"{where or 'the record'} is {_kind(data)}, expected an object", self.fix
            )
        self.data: dict[str, Any] = data

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, why: str) -> NoReturn:
        raise VerifyError(f"{self.file} is malformed", f"field {self._name(key)} {why}", self.fix)

    def has(self, key: str) -> bool:
        return key in self.data

    def _get(self, key: str) -> Any:
        if key not in self.data:
            self.fail(key, "is missing")
        return self.data[key]

    def _typed(self, key: str, want: type | tuple[type, ...], what: str) -> Any:
        value = self._get(key)
        wants_bool = want is bool or (isinstance(want, tuple) and bool in want)
        if not isinstance(value, want) or (isinstance(value, bool) and not wants_bool):  # JSON true is no integer
            self.fail(key, f"is {_kind(value)}, expected {what}")
        return value

    def string(self, key: str) -> str:
        return str(self._typed(key, str, "a string"))

    def opt_string(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.string(key)

    def integer(self, key: str) -> int:
        return int(self._typed(key, int, "an integer"))

    def opt_integer(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.integer(key)

    def number(self, key: str) -> float:
        value: float = self._typed(key, (int, float), "a number")
        return value  # kept as read (an int stays an int), so as_json writes it back unchanged

    def boolean(self, key: str) -> bool:
        return bool(self._typed(key, bool, "true or false"))

    def obj(self, key: str) -> _Fields:
        return _Fields(self._typed(key, dict, "an object"), self.file, self._name(key), self.fix)

    def opt_obj(self, key: str) -> _Fields | None:
        return None if self.data.get(key) is None else self.obj(key)

    def objs(self, key: str) -> list[_Fields]:
        items: list[Any] = self._typed(key, list, "a list")
        return [_Fields(x, self.file, f"{self._name(key)}[{i}]", self.fix) for i, x in enumerate(items)]

    def strs(self, key: str) -> tuple[str, ...]:
        items: list[Any] = self._typed(key, list, "a list")
        for i, x in enumerate(items):
            if not isinstance(x, str):
                self.fail(f"{key}[{i}]", f"is {_kind(x)}, expected a string")
        return tuple(items)

    def str_map(self, key: str, *, nullable: bool = False) -> tuple[tuple[str, str], ...]:
        """A JSON object of strings as sorted (key, value) pairs."""
        data: dict[str, Any] = self._typed(key, dict, "an object")
        for k, v in data.items():
            if not isinstance(v, str) and not (nullable and v is None):
                self.fail(f"{key}.{k}", f"is {_kind(v)}, expected a string")
        return tuple(sorted(data.items()))


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class SourceOrigin:
    """A release archive and where it came from (sources.CachedArchive.as_json)."""

    file: str
    sha256: str
    origin: str

    @classmethod
    def from_json(cls, data: object, file: str = "<source>", where: str = "") -> SourceOrigin:
        f = data if isinstance(data, _Fields) else _Fields(data, file, where)
        return cls(f.string("file"), f.string("sha256"), f.string("origin"))

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256, "origin": self.origin}


@dataclass(frozen=True)
class SourceArchive:
    """The archive a build consumed (release or pruned)."""

    file: str
    sha256: str

    @classmethod
    def from_json(cls, f: _Fields) -> SourceArchive:
        return cls(f.string("file"), f.string("sha256"))

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256}


@dataclass(frozen=True)
class PrunedSource:
    """A pruned source archive: its pruned.json, and the `pruned` part of a build record."""

    file: str
    path: str
    sha256: str
    size: int
    key: str
    source: SourceOrigin  # JSON "from": the release archive it was pruned from
    variant: str

    @classmethod
    def from_json(cls, data: object, file: str = "pruned.json", where: str = "") -> PrunedSource:
        f = data if isinstance(data, _Fields) else _Fields(data, file, where, "prune again (`hermetic source prune`)")
        return cls(
            file=f.string("file"), path=f.string("path"), sha256=f.string("sha256"), size=f.integer("size"), key=f.string("key"),
            source=SourceOrigin.from_json(f.obj("from")), variant=f.string("variant"),
        )

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "path": self.path, "sha256": self.sha256, "size": self.size, "key": self.key,
                "from": self.source.as_json(), "variant": self.variant}

    def digest(self) -> str:
        return _digest(self.as_json())


def load_pruned(path: Path) -> PrunedSource:
    return PrunedSource.from_json(_read(path, "pruned source description", "prune again (`hermetic source prune`)"), str(path))


@dataclass(frozen=True)
class RecipeRef:
    name: str
    version: str
    digest: str

    @classmethod
    def from_json(cls, f: _Fields) -> RecipeRef:
        return cls(f.string("name"), f.string("version"), f.string("digest"))

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "digest": self.digest}


@dataclass(frozen=True)
class Offline:
    """How the build was kept offline (sandbox.OfflineStatus.as_json)."""

    enforced: bool
    method: str
    reason: str

    @classmethod
    def from_json(cls, f: _Fields) -> Offline:
        return cls(f.boolean("enforced"), f.string("method"), f.string("reason"))

    def as_json(self) -> dict[str, Any]:
        return {"enforced": self.enforced, "method": self.method, "reason": self.reason}


_TOOLS = ("cc", "cxx", "cmake", "ninja", "conan", "python", "machine")


@dataclass(frozen=True)
class ToolchainVersions:
    """The first `--version` line of each build tool, the Python version and the machine.

    conan and machine are absent from wheel records of hand-made or pre-release shape; detected_at is
    set only when the versions were detected later (at attestation), not recorded by the build.
    """

    cc: str
    cxx: str
    cmake: str
    ninja: str
    python: str
    conan: str | None = None
    machine: str | None = None
    detected_at: str | None = None

    @classmethod
    def from_json(cls, f: _Fields) -> ToolchainVersions:
        return cls(
            cc=f.string("cc"), cxx=f.string("cxx"), cmake=f.string("cmake"), ninja=f.string("ninja"), python=f.string("python"),
            conan=f.opt_string("conan"), machine=f.opt_string("machine"), detected_at=f.opt_string("detected_at"),
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, str]) -> ToolchainVersions:
        return cls.from_json(_Fields(dict(data), "<toolchain versions>", "toolchain"))

    def as_json(self) -> dict[str, str]:
        out = {k: getattr(self, k) for k in (*_TOOLS, "detected_at")}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class ToolchainRef:
    """The pinned toolchain a build used: `Toolchain.identity()` as a typed value (JSON `toolchain_id`).

    Records written before it existed lack the key; every such build used the host compiler, so they
    read as `HOST_TOOLCHAIN` (BuildRecord.toolchain_ref) while as_json still leaves the key out.
    """

    name: str
    kind: str  # zig | host
    version: str = ""
    file: str = ""
    sha256: str = ""
    target: str = ""  # e.g. x86_64-linux-gnu.2.28; empty for host
    unpack_layout: str = ""
    wrappers: str = ""

    @property
    def glibc(self) -> str:
        """The glibc floor of the target (`2.28`), empty for host."""
        head, _, floor = self.target.rpartition(".")
        return f"{head.rsplit('.', 1)[-1]}.{floor}" if self.target.count(".") >= 2 else ""

    @property
    def label(self) -> str:
        """`zig 0.17.1 (sha256 ea6c…, x86_64-linux-gnu.2.28)`, or `host`."""
        if self.kind == "host":
            return self.name if self.name == "host" else f"{self.name} (host compiler)"
        return f"{self.name} {self.version} (sha256 {self.sha256}, {self.target})"

    @classmethod
    def from_mapping(cls, data: Mapping[str, str]) -> ToolchainRef:
        return cls.from_json(_Fields(dict(data), "<toolchain identity>", "toolchain_id"))

    @classmethod
    def from_json(cls, f: _Fields) -> ToolchainRef:
        def opt(key: str) -> str:
            return f.opt_string(key) or ""

        return cls(
            name=f.string("name"), kind=f.string("kind"), version=opt("version"), file=opt("file"),
            sha256=opt("sha256"), target=opt("target"), unpack_layout=opt("unpack_layout"), wrappers=opt("wrappers"),
        )

    def as_json(self) -> dict[str, str]:
        """The same mapping as Toolchain.identity(): empty fields left out."""
        out = {k: getattr(self, k) for k in ("name", "kind", "version", "file", "sha256", "target", "unpack_layout", "wrappers")}
        return {k: v for k, v in out.items() if v}


HOST_TOOLCHAIN = ToolchainRef(name="host", kind="host")


@dataclass(frozen=True)
class PtxFile:
    file: str
    sha256: str

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256}


@dataclass(frozen=True)
class TestPackage:
    """The recipe's test_package run: find_package(LLVM) and a .ll lowered to PTX.

    `output` is what its program printed (records written before it existed lack it); `emulator` is
    how a cross build ran it (`qemu-aarch64-static -L /usr/aarch64-linux-gnu`), absent for a native run.
    """

    __test__ = False  # not a pytest class

    ran: bool
    ptx: tuple[PtxFile, ...]
    output: str | None = None
    emulator: str | None = None

    @classmethod
    def from_json(cls, f: _Fields) -> TestPackage:
        return cls(
            f.boolean("ran"), tuple(PtxFile(p.string("file"), p.string("sha256")) for p in f.objs("ptx")),
            output=f.opt_string("output"), emulator=f.opt_string("emulator"),
        )

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ran": self.ran, "ptx": [p.as_json() for p in self.ptx]}
        out |= {k: v for k, v in (("output", self.output), ("emulator", self.emulator)) if v is not None}
        return out


@dataclass(frozen=True)
class Tree:
    """An install tree: its digest (tree_digest), total file size and every entry."""

    digest: str
    size: int
    files: tuple[TreeEntry, ...]

    @classmethod
    def from_entries(cls, entries: Iterable[TreeEntry]) -> Tree:
        files = tuple(entries)
        return cls(tree_digest(files), tree_size(files), files)

    @classmethod
    def from_json(cls, f: _Fields) -> Tree:
        files = tuple(
            TreeEntry.from_json(e.data, f.file, e.where) for e in f.objs("files")
        )
        return cls(f.string("digest"), f.integer("size"), files)

    def as_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "size": self.size, "files": [e.as_json() for e in self.files]}


@dataclass(frozen=True)
class CacheStats:
    """ccache's counters for one build (compile_cache.Stats as recorded)."""

    hits: int
    misses: int
    hit_rate: float
    remote_hits: int
    remote_misses: int
    remote_errors: int
    uncacheable: int

    @classmethod
    def from_json(cls, f: _Fields) -> CacheStats:
        return cls(f.integer("hits"), f.integer("misses"), f.number("hit_rate"), f.integer("remote_hits"),
                   f.integer("remote_misses"), f.integer("remote_errors"), f.integer("uncacheable"))

    def as_json(self) -> dict[str, Any]:
        return {"hits": self.hits, "misses": self.misses, "hit_rate": self.hit_rate, "remote_hits": self.remote_hits,
                "remote_misses": self.remote_misses, "remote_errors": self.remote_errors, "uncacheable": self.uncacheable}


@dataclass(frozen=True)
class CompileCacheUse:
    """The shared compile cache a build ran its compiles through (--compile-cache): never an input of the tree."""

    url: str  # without a password
    reachable: str  # what the build could reach of it: a Unix socket, a directory, or a TCP address without isolation
    answered: bool  # whether it answered before the build started (else every compile ran, counted as remote errors)
    ccache: str  # the ccache that ran the compiles: path and version
    ccache_version: str
    stats: CacheStats | None  # None when ccache's statistics could not be read
    # Where the cache failed the build (down at the start, or gone during it): how many compiles ran here
    # without it, from ccache's counters. Absent from records where it served every compile.
    note: str = ""
    # The compile hosts behind the cache (--distribute too): its misses were compiled there, through distcc.
    misses_to: str = ""

    @classmethod
    def from_json(cls, f: _Fields) -> CompileCacheUse:
        stats = f.opt_obj("stats")
        return cls(f.string("url"), f.string("reachable"), f.boolean("answered"), f.string("ccache"),
                   f.string("ccache_version"), CacheStats.from_json(stats) if stats else None,
                   f.opt_string("note") or "", f.opt_string("misses_to") or "")

    def as_json(self) -> dict[str, Any]:
        out = {"url": self.url, "reachable": self.reachable, "answered": self.answered, "ccache": self.ccache,
               "ccache_version": self.ccache_version, "stats": self.stats.as_json() if self.stats else None}
        return out | ({"note": self.note} if self.note else {}) | ({"misses_to": self.misses_to} if self.misses_to else {})


@dataclass(frozen=True)
class CompileHostUse:
    """One compile host of a distributed build: what it was asked, what it compiled."""

    address: str  # host:port as declared
    slots: int  # jobs it was given at once
    answered: bool  # whether it accepted a connection before the build started
    seen: str  # how that probe went
    compiles: int  # compiles it completed (distcc's client log)
    refused: int  # connections it did not accept during the build (the relay's count; 0 without one)
    failed: int  # jobs it was sent that did not come back from it (distcc's log): compiled elsewhere or here

    @classmethod
    def from_json(cls, f: _Fields) -> CompileHostUse:
        return cls(f.string("address"), f.integer("slots"), f.boolean("answered"), f.string("seen"),
                   f.integer("compiles"), f.integer("refused"), f.integer("failed"))

    def as_json(self) -> dict[str, Any]:
        return {"address": self.address, "slots": self.slots, "answered": self.answered, "seen": self.seen,
                "compiles": self.compiles, "refused": self.refused, "failed": self.failed}


@dataclass(frozen=True)
class DistributedCompiles:
    """The compile hosts a build spread its compiles over (--distribute, distcc): never an input of the tree."""

    hosts: tuple[CompileHostUse, ...]
    reachable: str  # exactly what the build could reach: the relayed hosts, or the network without isolation
    distcc: str
    distcc_version: str
    compilers: tuple[str, ...]  # the identity-named compilers the hosts were asked to run
    jobs: int  # ninja's parallel jobs: this machine's plus the hosts' slots
    remote: int  # compiles completed on a host
    local: int  # compiles run here (fallbacks included)
    fallbacks: int  # compiles meant for a host that ran here instead (a host was unreachable or went away)
    retried: int  # compiles that failed on a host and were compiled again here
    rerouted: int  # compiles whose host failed them (went away, refused) that another host compiled
    note: str  # what the record reader should know: fallbacks, or that nothing went remote; else ""

    @classmethod
    def from_json(cls, f: _Fields) -> DistributedCompiles:
        return cls(
            tuple(CompileHostUse.from_json(h) for h in f.objs("hosts")), f.string("reachable"), f.string("distcc"),
            f.string("distcc_version"), tuple(str(c) for c in f._typed("compilers", list, "a list")),
            f.integer("jobs"), f.integer("remote"), f.integer("local"), f.integer("fallbacks"), f.integer("retried"),
            f.integer("rerouted"), f.string("note"),
        )

    def as_json(self) -> dict[str, Any]:
        return {"hosts": [h.as_json() for h in self.hosts], "reachable": self.reachable, "distcc": self.distcc,
                "distcc_version": self.distcc_version, "compilers": list(self.compilers), "jobs": self.jobs,
                "remote": self.remote, "local": self.local, "fallbacks": self.fallbacks, "retried": self.retried, "rerouted": self.rerouted,
                "note": self.note}


@dataclass(frozen=True)
class BuildRecord:
    """What `hermetic build llvm` built, from what, how: WORK_DIR/llvm/<variant>/record.json."""

    recipe: RecipeRef
    variant: str
    options: tuple[tuple[str, str], ...]  # the resolved recipe options, sorted
    inputs_digest: str
    sources: tuple[SourceOrigin, ...]  # the release archives the source came from
    source_archive: SourceArchive  # what the build consumed
    pruned: PrunedSource | None  # when that was a pruned archive
    prefix: str  # install prefix, e.g. /usr/lib64/llvm-nvptx-19.1.7
    source_date_epoch: int
    offline: Offline
    toolchain: ToolchainVersions | None
    jobs: int
    wall_time_s: float
    started: str | None
    finished: str | None
    build_commands: int | None
    test_package: TestPackage
    install_root: str  # the directory holding the tree (prefix below it)
    tree: Tree
    schema: str = RECORD_SCHEMA
    toolchain_id: ToolchainRef | None = None  # None: a record written before it existed (host)
    arch: str | None = None  # the tree's OCI architecture (amd64, arm64); None: a record written before it existed
    # "REGISTRY/REPO@sha256:…" when the tree was pulled from a substitute rather than built here: the rest of
    # the record is then the building machine's (its wall time, jobs, toolchain versions, test_package run).
    substituted: str | None = None
    # Why a substitute found for these inputs was not used (this record is then of a build made here).
    substitute_refused: str | None = None
    # The shared compile cache the compiles ran through (--compile-cache), with its statistics for this build.
    compile_cache: CompileCacheUse | None = None
    # The compile hosts the compiles were spread over (--distribute), with what each compiled.
    distributed: DistributedCompiles | None = None

    @property
    def toolchain_ref(self) -> ToolchainRef:
        """The pinned toolchain the build used; a record without `toolchain_id` was built by the host's."""
        return self.toolchain_id or HOST_TOOLCHAIN

    @classmethod
    def from_json(cls, data: object, file: str = "<build record>") -> BuildRecord:
        f = _Fields(data, file, "")
        if f.data.get("schema") != RECORD_SCHEMA:
            raise VerifyError(
                f"{file} is not a hermetic build record",
                f"schema is {f.data.get('schema')!r}, expected {RECORD_SCHEMA!r}",
                "pass the record.json written by `hermetic build`",
            )
        pruned = f.opt_obj("pruned")
        toolchain = f.opt_obj("toolchain")
        toolchain_id = f.opt_obj("toolchain_id")
        cache = f.opt_obj("compile_cache")
        distributed = f.opt_obj("distributed")
        return cls(
            toolchain_id=ToolchainRef.from_json(toolchain_id) if toolchain_id else None,
            recipe=RecipeRef.from_json(f.obj("recipe")),
            variant=f.string("variant"),
            options=f.str_map("options"),
            inputs_digest=f.string("inputs_digest"),
            sources=tuple(SourceOrigin.from_json(s) for s in f.objs("sources")),
            source_archive=SourceArchive.from_json(f.obj("source_archive")),
            pruned=PrunedSource.from_json(pruned) if pruned else None,
            prefix=f.string("prefix"),
            source_date_epoch=f.integer("source_date_epoch"),
            offline=Offline.from_json(f.obj("offline")),
            toolchain=ToolchainVersions.from_json(toolchain) if toolchain else None,
            jobs=f.integer("jobs"),
            wall_time_s=f.number("wall_time_s"),
            started=f.opt_string("started"),
            finished=f.opt_string("finished"),
            build_commands=f.opt_integer("build_commands"),
            test_package=TestPackage.from_json(f.obj("test_package")),
            install_root=f.string("install_root"),
            tree=Tree.from_json(f.obj("tree")),
            arch=f.opt_string("arch"),
            substituted=f.opt_string("substituted"),
            substitute_refused=f.opt_string("substitute_refused"),
            compile_cache=CompileCacheUse.from_json(cache) if cache else None,
            distributed=DistributedCompiles.from_json(distributed) if distributed else None,
        )

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": self.schema,
            "recipe": self.recipe.as_json(),
            "variant": self.variant,
            "options": dict(self.options),
            "inputs_digest": self.inputs_digest,
            "sources": [s.as_json() for s in self.sources],
            "source_archive": self.source_archive.as_json(),
            "pruned": self.pruned.as_json() if self.pruned else None,
            "prefix": self.prefix,
            "source_date_epoch": self.source_date_epoch,
            "offline": self.offline.as_json(),
            "toolchain": self.toolchain.as_json() if self.toolchain else None,
            "toolchain_id": self.toolchain_id.as_json() if self.toolchain_id else None,
            "arch": self.arch,
            "jobs": self.jobs,
            "wall_time_s": self.wall_time_s,
            "started": self.started,
            "finished": self.finished,
            "build_commands": self.build_commands,
            "test_package": self.test_package.as_json(),
            "install_root": self.install_root,
            "tree": self.tree.as_json(),
            "substituted": self.substituted,
            "substitute_refused": self.substitute_refused,
            "compile_cache": self.compile_cache.as_json() if self.compile_cache else None,
            "distributed": self.distributed.as_json() if self.distributed else None,
        }
        # absent from records written before they existed, and from builds that had no substitute or compile cache
        for late in ("toolchain", "toolchain_id", "arch", "started", "finished", "substituted", "substitute_refused",
                     "compile_cache", "distributed"):
            if out[late] is None:
                del out[late]
        return out

    def digest(self) -> str:
        return _digest(self.as_json())

    @property
    def install_dir(self) -> Path:
        """Where the prefix lies on this machine: install_root + prefix."""
        return Path(self.install_root) / self.prefix.lstrip("/")


@dataclass(frozen=True)
class Auditwheel:
    """What `auditwheel show --json` said about the wheel (the fields hermetic keeps)."""

    overall_tag: str | None
    sym_tag: str | None
    external_libs: tuple[tuple[str, str | None], ...] | None

    @classmethod
    def from_json(cls, f: _Fields) -> Auditwheel:
        libs = f.str_map("external_libs", nullable=True) if f.data.get("external_libs") is not None else None
        return cls(f.opt_string("overall_tag"), f.opt_string("sym_tag"), libs)

    def as_json(self) -> dict[str, Any]:
        libs = dict(self.external_libs) if self.external_libs is not None else None
        return {"overall_tag": self.overall_tag, "sym_tag": self.sym_tag, "external_libs": libs}


@dataclass(frozen=True)
class PlatformTag:
    tag: str
    source: str  # JSON "from": "auditwheel" or why not
    auditwheel: Auditwheel | None
    built_as: str  # the tag the build backend gave

    @classmethod
    def from_json(cls, f: _Fields) -> PlatformTag:
        audit = f.opt_obj("auditwheel")
        return cls(f.string("tag"), f.string("from"), Auditwheel.from_json(audit) if audit else None, f.string("built_as"))

    def as_json(self) -> dict[str, Any]:
        return {"tag": self.tag, "from": self.source, "auditwheel": self.auditwheel.as_json() if self.auditwheel else None,
                "built_as": self.built_as}


@dataclass(frozen=True)
class PythonInfo:
    version: str
    implementation: str
    tag: str
    executable: str | None = None  # the wheel's interpreter; absent from records written before it existed
    # A cross-built wheel's: the architecture of `executable` (run under qemu-user) and this machine's Python
    # that ran the build venv. Absent from native builds and records written before cross builds.
    arch: str | None = None
    build_executable: str | None = None

    @classmethod
    def from_json(cls, f: _Fields) -> PythonInfo:
        return cls(f.string("version"), f.string("implementation"), f.string("tag"), f.opt_string("executable"),
                   f.opt_string("arch"), f.opt_string("build_executable"))

    def as_json(self) -> dict[str, Any]:
        out = {"version": self.version, "implementation": self.implementation, "tag": self.tag}
        extra = {"executable": self.executable, "arch": self.arch, "build_executable": self.build_executable}
        return out | {k: v for k, v in extra.items() if v is not None}


@dataclass(frozen=True)
class SdistRef:
    """The release sdist a third-party wheel was built from, as its recipe pins it."""

    name: str
    version: str
    file: str
    sha256: str
    url: str
    origin: str  # where the cached copy came from: mirror:PATH or url:URL

    @classmethod
    def from_json(cls, f: _Fields) -> SdistRef:
        return cls(f.string("name"), f.string("version"), f.string("file"), f.string("sha256"), f.string("url"),
                   f.string("origin"))

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "file": self.file, "sha256": self.sha256, "url": self.url,
                "origin": self.origin}


@dataclass(frozen=True)
class ProjectRef:
    name: str
    path: str  # the project directory, or the cached sdist
    recipe: str = "compiler"  # recipes/RECIPE/wheel.yml
    sdist: SdistRef | None = None

    @classmethod
    def from_json(cls, f: _Fields) -> ProjectRef:
        sdist = f.opt_obj("sdist")
        return cls(f.string("name"), f.string("path"), f.opt_string("recipe") or "compiler",
                   SdistRef.from_json(sdist) if sdist else None)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "path": self.path}
        if self.recipe != "compiler" or self.sdist is not None:
            out |= {"recipe": self.recipe} | ({"sdist": self.sdist.as_json()} if self.sdist else {})
        return out


@dataclass(frozen=True)
class LLVMRecordRef:
    """The hermetic build record of the LLVM a wheel was built against."""

    path: str
    variant: str
    inputs_digest: str
    tree_digest: str

    @classmethod
    def from_json(cls, f: _Fields) -> LLVMRecordRef:
        return cls(f.string("path"), f.string("variant"), f.string("inputs_digest"), f.string("tree_digest"))

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "variant": self.variant, "inputs_digest": self.inputs_digest,
                "tree_digest": self.tree_digest}


@dataclass(frozen=True)
class WheelLLVM:
    prefix: str
    cmake_dir: str
    version: str
    record: LLVMRecordRef | None  # None: not built by hermetic (or its record is gone)

    @classmethod
    def from_json(cls, f: _Fields) -> WheelLLVM:
        ref = f.opt_obj("record")
        return cls(f.string("prefix"), f.string("cmake_dir"), f.string("version"), LLVMRecordRef.from_json(ref) if ref else None)

    def as_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "cmake_dir": self.cmake_dir, "version": self.version,
                "record": self.record.as_json() if self.record else None}


@dataclass(frozen=True)
class PinnedRequirement:
    name: str
    version: str
    sha256: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "sha256": list(self.sha256)}


@dataclass(frozen=True)
class BuildRequirements:
    file: str
    digest: str
    pinned: tuple[PinnedRequirement, ...]

    @classmethod
    def from_json(cls, f: _Fields) -> BuildRequirements:
        pinned = tuple(PinnedRequirement(p.string("name"), p.string("version"), p.strs("sha256")) for p in f.objs("pinned"))
        return cls(f.string("file"), f.string("digest"), pinned)

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "digest": self.digest, "pinned": [p.as_json() for p in self.pinned]}


@dataclass(frozen=True)
class WheelTimings:
    total: float
    venv: float | None = None
    venv_reused: bool | None = None
    build: float | None = None
    tag_and_repack: float | None = None

    @classmethod
    def from_json(cls, f: _Fields) -> WheelTimings:
        def opt(key: str) -> float | None:
            return None if f.data.get(key) is None else f.number(key)

        reused = None if f.data.get("venv_reused") is None else f.boolean("venv_reused")
        return cls(f.number("total"), opt("venv"), reused, opt("build"), opt("tag_and_repack"))

    def as_json(self) -> dict[str, Any]:
        out = {"venv": self.venv, "venv_reused": self.venv_reused, "build": self.build,
               "tag_and_repack": self.tag_and_repack, "total": self.total}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class WheelRecord:
    """What `hermetic wheel` built: <output>/wheel-record.json beside the wheel."""

    wheel: str  # file name
    sha256: str
    size: int
    tag: str
    platform_tag: PlatformTag
    glibc_required: str | None
    symbol_versions: tuple[tuple[str, str], ...]
    python: PythonInfo
    project: ProjectRef
    llvm: WheelLLVM
    source_date_epoch: int
    build_requirements: BuildRequirements
    wheelhouse: str
    recipe_digest: str
    offline: Offline
    machine: str
    toolchain: ToolchainVersions | None
    started: str | None
    finished: str | None
    timings_s: WheelTimings
    schema: str = WHEEL_RECORD_SCHEMA
    toolchain_id: ToolchainRef | None = None  # None: a record written before it existed (host)

    @property
    def toolchain_ref(self) -> ToolchainRef:
        """The pinned toolchain the wheel was compiled with; a record without `toolchain_id` was built by the host's."""
        return self.toolchain_id or HOST_TOOLCHAIN

    @classmethod
    def from_json(cls, data: object, file: str = "<wheel record>") -> WheelRecord:
        f = _Fields(data, file, "", "build the wheel again (`hermetic wheel`), or restore the file")
        if f.data.get("schema") != WHEEL_RECORD_SCHEMA:
            raise UsageError(f"{file} is not a hermetic wheel record", f"expected schema {WHEEL_RECORD_SCHEMA}", "")
        toolchain = f.opt_obj("toolchain")
        toolchain_id = f.opt_obj("toolchain_id")
        return cls(
            toolchain_id=ToolchainRef.from_json(toolchain_id) if toolchain_id else None,
            wheel=f.string("wheel"),
            sha256=f.string("sha256"),
            size=f.integer("size"),
            tag=f.string("tag"),
            platform_tag=PlatformTag.from_json(f.obj("platform_tag")),
            glibc_required=f.opt_string("glibc_required"),
            symbol_versions=f.str_map("symbol_versions"),
            python=PythonInfo.from_json(f.obj("python")),
            project=ProjectRef.from_json(f.obj("project")),
            llvm=WheelLLVM.from_json(f.obj("llvm")),
            source_date_epoch=f.integer("source_date_epoch"),
            build_requirements=BuildRequirements.from_json(f.obj("build_requirements")),
            wheelhouse=f.string("wheelhouse"),
            recipe_digest=f.string("recipe_digest"),
            offline=Offline.from_json(f.obj("offline")),
            machine=f.string("machine"),
            toolchain=ToolchainVersions.from_json(toolchain) if toolchain else None,
            started=f.opt_string("started"),
            finished=f.opt_string("finished"),
            timings_s=WheelTimings.from_json(f.obj("timings_s")),
        )

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": self.schema,
            "wheel": self.wheel,
            "sha256": self.sha256,
            "size": self.size,
            "tag": self.tag,
            "platform_tag": self.platform_tag.as_json(),
            "glibc_required": self.glibc_required,
            "symbol_versions": dict(self.symbol_versions),
            "python": self.python.as_json(),
            "project": self.project.as_json(),
            "llvm": self.llvm.as_json(),
            "source_date_epoch": self.source_date_epoch,
            "build_requirements": self.build_requirements.as_json(),
            "wheelhouse": self.wheelhouse,
            "recipe_digest": self.recipe_digest,
            "offline": self.offline.as_json(),
            "machine": self.machine,
            "toolchain": self.toolchain.as_json() if self.toolchain else None,
            "toolchain_id": self.toolchain_id.as_json() if self.toolchain_id else None,
            "started": self.started,
            "finished": self.finished,
            "timings_s": self.timings_s.as_json(),
        }
        for late in ("toolchain", "toolchain_id", "started", "finished"):
            if out[late] is None:
                del out[late]
        return out

    def digest(self) -> str:
        return _digest(self.as_json())


def _read(path: Path, what: str, fix: str) -> object:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise VerifyError(f"no {what} at {path}", "the file does not exist", fix) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VerifyError(f"{what} {path} is not valid JSON", str(exc), fix) from exc


def load_build_record(path: Path) -> BuildRecord:
    data = _read(path, "build record", "run `hermetic build llvm` (with --force to replace a damaged record)")
    return BuildRecord.from_json(data, str(path))


def load_wheel_record(path: Path) -> WheelRecord:
    return WheelRecord.from_json(_read(path, "wheel record", "build the wheel again (`hermetic wheel`)"), str(path))


def write_record(path: Path, rec: BuildRecord | WheelRecord | PrunedSource) -> None:
    """Atomic write of a typed record, as JSON that readers without hermetic understand."""
    write_json(path, rec.as_json())
