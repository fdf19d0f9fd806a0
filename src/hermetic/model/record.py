"""Build records: what was built, from what, how, and every file it produced.

A record is plain JSON that tools without hermetic read; its install-tree digest covers paths, types,
modes, link targets and contents, not timestamps. Inside hermetic it is typed: BuildRecord (record.json),
WheelRecord (wheel-record.json), PrunedSource (pruned.json), frozen dataclasses whose fields, in the order
of their JSON keys, are the one statement of those keys (core/codec.py reads, checks and writes them).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from hermetic.core import codec
from hermetic.core.codec import OMIT_EMPTY, OMIT_NONE
from hermetic.core.digests import file_sha256
from hermetic.core.errors import UsageError, VerifyError

RECORD_SCHEMA = "hermetic.build-record/1"
# A build record as an OCI artifact (a referrer of the image holding its tree), for substituting machines.
RECORD_MEDIA_TYPE = "application/vnd.hermetic.build-record.v1+json"
WHEEL_RECORD_SCHEMA = "hermetic.wheel-record/1"
_REBUILD = "rebuild to regenerate it (`hermetic build llvm --force`, `hermetic wheel`), or restore the file"


class _Record:
    """A record type read at the edge (from_json names the file and the field that is wrong) and written
    back as exactly the JSON hermetic has always written (as_json); both by its fields' annotations."""

    _file: ClassVar[str] = "<record>"  # the file an error names when the caller gives none
    _fix: ClassVar[str] = _REBUILD

    @classmethod
    def from_json(cls, data: object, file: str = "", where: str = "") -> Self:
        try:
            return codec.decode(cls, data, where)
        except codec.Invalid as exc:
            why = f"field {exc.path} {exc.why}" if exc.path else f"the record {exc.why}"
            raise VerifyError(f"{file or cls._file} is malformed", why, cls._fix) from None

    def as_json(self) -> dict[str, Any]:
        return codec.encode(self)


class _Document(_Record):
    """A record that is a whole file (record.json, wheel-record.json, pruned.json), with a digest of its JSON."""

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.as_json(), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class TreeEntry(_Record):
    """One entry of an install tree; which keys it has depends on its type, so it reads and writes itself."""

    path: str  # relative, '/'-separated
    kind: str  # JSON "type": "file" | "dir" | "symlink"
    mode: int  # permission bits only, JSON an octal string
    size: int = 0
    sha256: str = ""
    target: str = ""  # symlink target

    def json_encode(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "type": self.kind, "mode": f"{self.mode:04o}"}
        if self.kind == "file":
            out["size"] = self.size
            out["sha256"] = self.sha256
        if self.kind == "symlink":
            out["target"] = self.target
        return out

    @classmethod
    def json_decode(cls, data: dict[str, Any], where: str) -> TreeEntry:
        def get(key: str, tp: type = str) -> Any:
            return codec.read(data, key, tp, where)

        if (kind := get("type")) not in ("file", "dir", "symlink"):
            raise codec.Invalid(codec.join(where, "type"), f"is {kind!r}, expected file, dir or symlink")
        try:
            mode = int(mode_text := get("mode"), 8)
        except ValueError:
            why = f"is {mode_text!r}, expected octal permission bits like '0644'"
            raise codec.Invalid(codec.join(where, "mode"), why) from None
        file = kind == "file"
        return cls(get("path"), kind, mode, get("size", int) if file else 0, get("sha256") if file else "",
                   get("target") if kind == "symlink" else "")


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
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # two processes writing the same file never share one
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


# -- typed records: a field's annotation is what its JSON must be; keys that records written before they
# existed lack read as the field's default (None, ""), and OMIT_NONE / OMIT_EMPTY leave them out again.


@dataclass(frozen=True)
class SourceOrigin(_Record):
    """A release archive and where it came from (sources.CachedArchive.as_json)."""

    file: str
    sha256: str
    origin: str


@dataclass(frozen=True)
class SourceArchive(_Record):
    """The archive a build consumed (release or pruned)."""

    file: str
    sha256: str


@dataclass(frozen=True)
class PrunedSource(_Document):
    """A pruned source archive: its pruned.json, and the `pruned` part of a build record."""

    _file, _fix = "pruned.json", "prune again (`hermetic source prune`)"

    file: str
    path: str
    sha256: str
    size: int
    key: str
    source: SourceOrigin = field(metadata=codec.options(key="from"))  # the release archive it was pruned from
    variant: str


def load_pruned(path: Path) -> PrunedSource:
    return PrunedSource.from_json(_read(path, "pruned source description", PrunedSource._fix), str(path))


@dataclass(frozen=True)
class RecipeRef(_Record):
    name: str
    version: str
    digest: str


@dataclass(frozen=True)
class Offline(_Record):
    """How the build was kept offline (sandbox.OfflineStatus.as_json)."""

    enforced: bool
    method: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class ToolchainVersions(_Record):
    """The first `--version` line of each build tool, the Python version and the machine.

    conan and machine are absent from wheel records of hand-made or pre-release shape; detected_at is
    set only when the versions were detected later (at attestation), not recorded by the build.
    """

    cc: str
    cxx: str
    cmake: str
    ninja: str
    conan: str | None = field(default=None, metadata=OMIT_NONE)
    python: str
    machine: str | None = field(default=None, metadata=OMIT_NONE)
    detected_at: str | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def from_mapping(cls, data: Mapping[str, str]) -> ToolchainVersions:
        return cls.from_json(dict(data), "<toolchain versions>", "toolchain")


@dataclass(frozen=True)
class ToolchainRef(_Record):
    """The pinned toolchain a build used: `Toolchain.identity()` as a typed value (JSON `toolchain_id`),
    its empty fields left out as there.

    Records written before it existed lack the key; every such build used the host compiler, so they
    read as `HOST_TOOLCHAIN` (BuildRecord.toolchain_ref) while as_json still leaves the key out.
    """

    name: str = field(metadata=OMIT_EMPTY)
    kind: str = field(metadata=OMIT_EMPTY)  # zig | host
    version: str = field(default="", metadata=OMIT_EMPTY)
    file: str = field(default="", metadata=OMIT_EMPTY)
    sha256: str = field(default="", metadata=OMIT_EMPTY)
    target: str = field(default="", metadata=OMIT_EMPTY)  # e.g. x86_64-linux-gnu.2.28; empty for host
    unpack_layout: str = field(default="", metadata=OMIT_EMPTY)
    wrappers: str = field(default="", metadata=OMIT_EMPTY)

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
        return cls.from_json(dict(data), "<toolchain identity>", "toolchain_id")


HOST_TOOLCHAIN = ToolchainRef(name="host", kind="host")


@dataclass(frozen=True)
class PtxFile(_Record):
    file: str
    sha256: str


@dataclass(frozen=True)
class TestPackage(_Record):
    """The recipe's test_package run: find_package(LLVM) and a .ll lowered to PTX.

    `output` is what its program printed (records written before it existed lack it); `emulator` is
    how a cross build ran it (`qemu-aarch64-static -L /usr/aarch64-linux-gnu`), absent for a native run.
    """

    __test__ = False  # not a pytest class

    ran: bool
    ptx: tuple[PtxFile, ...]
    output: str | None = field(default=None, metadata=OMIT_NONE)
    emulator: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Tree(_Record):
    """An install tree: its digest (tree_digest), total file size and every entry."""

    digest: str
    size: int
    files: tuple[TreeEntry, ...]

    @classmethod
    def from_entries(cls, entries: Iterable[TreeEntry]) -> Tree:
        files = tuple(entries)
        return cls(tree_digest(files), tree_size(files), files)


@dataclass(frozen=True)
class CacheStats(_Record):
    """ccache's counters for one build, as build/compile_cache.parse_stats reads them from `ccache --print-stats`."""

    hits: int
    misses: int
    hit_rate: float
    remote_hits: int
    remote_misses: int
    remote_errors: int
    uncacheable: int


@dataclass(frozen=True)
class CompileCacheUse(_Record):
    """The shared compile cache a build ran its compiles through (--compile-cache): never an input of the tree."""

    url: str  # without a password
    reachable: str  # what the build could reach of it: a Unix socket, a directory, or a TCP address without isolation
    answered: bool  # whether it answered before the build started (else every compile ran, counted as remote errors)
    ccache: str  # the ccache that ran the compiles: path and version
    ccache_version: str
    stats: CacheStats | None  # None when ccache's statistics could not be read
    # Where the cache failed the build (down at the start, gone during it): how many compiles ran without it.
    note: str = field(default="", metadata=OMIT_EMPTY)
    # The compile hosts behind the cache (--distribute too): its misses were compiled there, through distcc.
    misses_to: str = field(default="", metadata=OMIT_EMPTY)


@dataclass(frozen=True)
class CompileHostUse(_Record):
    """One compile host of a distributed build: what it was asked, what it compiled."""

    address: str  # host:port as declared
    slots: int  # jobs it was given at once
    answered: bool  # whether it accepted a connection before the build started
    seen: str  # how that probe went
    compiles: int  # compiles it completed (distcc's client log)
    refused: int  # connections it did not accept during the build (the relay's count; 0 without one)
    failed: int  # jobs it was sent that did not come back from it (distcc's log): compiled elsewhere or here


@dataclass(frozen=True)
class DistributedCompiles(_Record):
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


@dataclass(frozen=True, kw_only=True)
class BuildRecord(_Document):
    """What `hermetic build llvm` built, from what, how: WORK_DIR/llvm/<variant>/record.json (a field left out
    when None is absent from records written before it existed, or from builds without what it tells)."""

    _file = "<build record>"

    schema: str = RECORD_SCHEMA
    recipe: RecipeRef
    variant: str
    options: tuple[tuple[str, str], ...]  # the resolved recipe options, sorted (JSON an object)
    inputs_digest: str
    sources: tuple[SourceOrigin, ...]  # the release archives the source came from
    source_archive: SourceArchive  # what the build consumed
    pruned: PrunedSource | None  # when that was a pruned archive
    prefix: str  # install prefix, e.g. /usr/lib64/llvm-nvptx-19.1.7
    source_date_epoch: int
    offline: Offline
    toolchain: ToolchainVersions | None = field(metadata=OMIT_NONE)
    toolchain_id: ToolchainRef | None = field(default=None, metadata=OMIT_NONE)  # None: written before it existed (host)
    arch: str | None = field(default=None, metadata=OMIT_NONE)  # the tree's OCI architecture (amd64, arm64)
    jobs: int
    wall_time_s: float
    started: str | None = field(metadata=OMIT_NONE)
    finished: str | None = field(metadata=OMIT_NONE)
    build_commands: int | None
    test_package: TestPackage
    install_root: str  # the directory holding the tree (prefix below it)
    tree: Tree
    # "REGISTRY/REPO@sha256:…" when the tree was pulled from a substitute rather than built here: the rest of
    # the record is then the building machine's (its wall time, jobs, toolchain versions, test_package run).
    substituted: str | None = field(default=None, metadata=OMIT_NONE)
    # Why a substitute found for these inputs was not used (this record is then of a build made here).
    substitute_refused: str | None = field(default=None, metadata=OMIT_NONE)
    # The shared compile cache the compiles ran through (--compile-cache), with its statistics for this build.
    compile_cache: CompileCacheUse | None = field(default=None, metadata=OMIT_NONE)
    # The compile hosts the compiles were spread over (--distribute), with what each compiled.
    distributed: DistributedCompiles | None = field(default=None, metadata=OMIT_NONE)

    @property
    def toolchain_ref(self) -> ToolchainRef:
        """The pinned toolchain the build used; a record without `toolchain_id` was built by the host's."""
        return self.toolchain_id or HOST_TOOLCHAIN

    @classmethod
    def from_json(cls, data: object, file: str = "", where: str = "") -> Self:
        if isinstance(data, dict) and data.get("schema") != RECORD_SCHEMA:
            raise VerifyError(
                f"{file or cls._file} is not a hermetic build record",
                f"schema is {data.get('schema')!r}, expected {RECORD_SCHEMA!r}",
                "pass the record.json written by `hermetic build`",
            )
        return super().from_json(data, file, where)

    @property
    def install_dir(self) -> Path:
        """Where the prefix lies on this machine: install_root + prefix."""
        return Path(self.install_root) / self.prefix.lstrip("/")


@dataclass(frozen=True)
class Auditwheel(_Record):
    """What `auditwheel show --json` said about the wheel (the fields hermetic keeps)."""

    overall_tag: str | None
    sym_tag: str | None
    external_libs: tuple[tuple[str, str | None], ...] | None  # JSON an object


@dataclass(frozen=True)
class PlatformTag(_Record):
    tag: str
    source: str = field(metadata=codec.options(key="from"))  # "auditwheel" or why not
    auditwheel: Auditwheel | None
    built_as: str  # the tag the build backend gave


@dataclass(frozen=True)
class PythonInfo(_Record):
    version: str
    implementation: str
    tag: str
    # the wheel's interpreter; absent from records written before it existed
    executable: str | None = field(default=None, metadata=OMIT_NONE)
    # A cross-built wheel's: the architecture of `executable` (run under qemu-user) and this machine's Python
    # that ran the build venv. Absent from native builds and records written before cross builds.
    arch: str | None = field(default=None, metadata=OMIT_NONE)
    build_executable: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class SdistRef(_Record):
    """The release sdist a third-party wheel was built from, as its recipe pins it."""

    name: str
    version: str
    file: str
    sha256: str
    url: str
    origin: str  # where the cached copy came from: mirror:PATH or url:URL


@dataclass(frozen=True)
class ProjectRef(_Record):
    name: str
    path: str  # the project directory, or the cached sdist
    # recipes/RECIPE/wheel.yml; left out for the compiler's own wheel, as records before other recipes had it
    recipe: str = field(default="compiler", metadata=codec.options(omit=lambda r, ref: r == "compiler" and ref.sdist is None))
    sdist: SdistRef | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class LLVMRecordRef(_Record):
    """The hermetic build record of the LLVM a wheel was built against."""

    path: str
    variant: str
    inputs_digest: str
    tree_digest: str


@dataclass(frozen=True)
class WheelLLVM(_Record):
    prefix: str
    cmake_dir: str
    version: str
    record: LLVMRecordRef | None  # None: not built by hermetic (or its record is gone)


@dataclass(frozen=True)
class PinnedRequirement(_Record):
    name: str
    version: str
    sha256: tuple[str, ...]


@dataclass(frozen=True)
class BuildRequirements(_Record):
    file: str
    digest: str
    pinned: tuple[PinnedRequirement, ...]


@dataclass(frozen=True, kw_only=True)
class WheelTimings(_Record):
    venv: float | None = field(default=None, metadata=OMIT_NONE)
    venv_reused: bool | None = field(default=None, metadata=OMIT_NONE)
    build: float | None = field(default=None, metadata=OMIT_NONE)
    tag_and_repack: float | None = field(default=None, metadata=OMIT_NONE)
    total: float


@dataclass(frozen=True, kw_only=True)
class WheelRecord(_Document):
    """What `hermetic wheel` built: <output>/wheel-record.json beside the wheel."""

    _file, _fix = "<wheel record>", "build the wheel again (`hermetic wheel`), or restore the file"

    schema: str = WHEEL_RECORD_SCHEMA
    wheel: str  # file name
    sha256: str
    size: int
    tag: str
    platform_tag: PlatformTag
    glibc_required: str | None
    symbol_versions: tuple[tuple[str, str], ...]  # JSON an object
    python: PythonInfo
    project: ProjectRef
    llvm: WheelLLVM
    source_date_epoch: int
    build_requirements: BuildRequirements
    wheelhouse: str
    recipe_digest: str
    offline: Offline
    machine: str
    toolchain: ToolchainVersions | None = field(metadata=OMIT_NONE)
    toolchain_id: ToolchainRef | None = field(default=None, metadata=OMIT_NONE)  # None: written before it existed (host)
    started: str | None = field(metadata=OMIT_NONE)
    finished: str | None = field(metadata=OMIT_NONE)
    timings_s: WheelTimings

    @property
    def toolchain_ref(self) -> ToolchainRef:
        """The pinned toolchain the wheel was compiled with; a record without `toolchain_id` was built by the host's."""
        return self.toolchain_id or HOST_TOOLCHAIN

    @classmethod
    def from_json(cls, data: object, file: str = "", where: str = "") -> Self:
        if isinstance(data, dict) and data.get("schema") != WHEEL_RECORD_SCHEMA:
            raise UsageError(f"{file or cls._file} is not a hermetic wheel record", f"expected schema {WHEEL_RECORD_SCHEMA}", "")
        return super().from_json(data, file, where)


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
