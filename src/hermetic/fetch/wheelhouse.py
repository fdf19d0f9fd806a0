"""Hash-pinned build requirements and the wheelhouse that holds them.

`toolchain/build-requirements.txt` names every build requirement of the
compiler core, transitive ones included, as `name==version --hash=sha256:…`.
`fetch_wheelhouse` downloads exactly those files (binary only) into the cache
once; builds then install from there with `--no-index`, so nothing needs the
network at build time and the wheelhouse can be carried to an offline runner.

Every look at the wheelhouse hashes each file again (`check_wheelhouse`): a
wheel is only ever counted as present when its bytes match a pinned sha256
right now, and a fill removes files that claim a pinned name but do not.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.core.digests import file_sha256
from hermetic.core.errors import EnvironmentError_, RecipeError, SourceError, disk_full

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.settings import Settings

# CPython versions whose build venvs the wheelhouse must serve: this machine's and the GPU runner's.
TARGET_PYTHONS = ("3.11", "3.12")

_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[A-Za-z0-9.+!_-]+$")
_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})$")


def normalize_name(name: str) -> str:
    """PEP 503 normalisation: `Scikit_Build.Core` and `scikit-build-core` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Requirement:
    name: str  # normalised
    version: str
    hashes: tuple[str, ...]  # sha256 hex digests, sorted

    def line(self) -> str:
        return f"{self.name}=={self.version} " + " ".join(f"--hash=sha256:{h}" for h in self.hashes)


@dataclass(frozen=True)
class Requirements:
    path: Path
    items: tuple[Requirement, ...]

    def digest(self) -> str:
        """Content digest of the pinned set (independent of comments and layout)."""
        text = "\n".join(r.line() for r in sorted(self.items, key=lambda r: r.name))
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, name: str) -> Requirement | None:
        key = normalize_name(name)
        return next((r for r in self.items if r.name == key), None)

    def as_json(self) -> list[dict[str, object]]:
        return [{"name": r.name, "version": r.version, "sha256": list(r.hashes)} for r in self.items]


def parse_requirements(text: str, source: str = "<requirements>") -> tuple[Requirement, ...]:
    """Parse a hash-pinned requirements file; anything not `name==version --hash=sha256:…` is refused."""
    logical: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = lineno
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            logical.append((start, pending.strip()))
        pending = ""
    if pending.strip():
        raise RecipeError(f"{source}:{start}: line continues past the end of the file", "a trailing backslash", "remove it")

    out: dict[str, Requirement] = {}
    for lineno, line in logical:
        where = f"{source}:{lineno}"
        spec, *opts = line.split()
        if spec.startswith("-"):
            raise RecipeError(
                f"{where}: option {spec!r} is not allowed in the build requirements",
                "only pinned requirements with hashes belong here; pip options are set by hermetic",
                "write each requirement as NAME==VERSION --hash=sha256:HEX",
            )
        name, sep, version = spec.partition("==")
        if not sep or not _NAME.match(name) or not version or not _VERSION.match(version) or "=" in version:
            raise RecipeError(
                f"{where}: {spec!r} is not pinned with ==",
                "every build requirement must name one exact version so the wheelhouse is fixed",
                "write NAME==VERSION (no ranges, markers, extras or URLs)",
            )
        hashes: list[str] = []
        for opt in opts:
            m = _HASH.match(opt)
            if not m:
                raise RecipeError(
                    f"{where}: unexpected {opt!r} after {spec}",
                    "only --hash=sha256:<64 lowercase hex digits> may follow a requirement",
                    "fix the hash option or remove the extra text",
                )
            hashes.append(m.group(1))
        if not hashes:
            raise RecipeError(
                f"{where}: {spec} has no --hash",
                "every file must be verified before it is installed (pip --require-hashes)",
                f"add --hash=sha256:… for each file of {spec} (sha256sum of the downloaded wheel)",
            )
        key = normalize_name(name)
        if key in out:
            raise RecipeError(f"{where}: {key} is listed twice", "one pin per project", "merge the two lines")
        out[key] = Requirement(key, version, tuple(sorted(set(hashes))))
    if not out:
        raise RecipeError(f"{source} lists no requirements", "the file is empty", "restore it from git")
    return tuple(sorted(out.values(), key=lambda r: r.name))


def load_requirements(path: Path) -> Requirements:
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise RecipeError(
            f"build requirements {path} do not exist", "the wheel build installs exactly what this file pins",
            "restore toolchain/build-requirements.txt from git",
        ) from exc
    return Requirements(path, parse_requirements(text, str(path)))


def wheelhouse_dir(settings: Settings) -> Path:
    return settings.wheelhouse or settings.cache_dir / "wheelhouse"


def wheel_project(filename: str) -> tuple[str, str] | None:
    """(normalised name, version) of a wheel file name, None for anything else."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6):
        return None
    return normalize_name(parts[0]), parts[1]


@dataclass(frozen=True)
class Check:
    """What the wheelhouse holds for each requirement."""

    found: dict[str, list[Path]]  # requirement name → verified files
    missing: tuple[str, ...]  # name==version with no verified file
    bad: tuple[str, ...]  # files that claim a requirement but whose hash is not pinned
    # file name → (its sha256 now, the pinned ones) for each of `bad`
    bad_digests: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    def describe_bad(self, directory: Path) -> str:
        return "; ".join(
            f"{directory / name}: expected sha256 {' or '.join(pinned)}, got {actual}"
            for name, (actual, pinned) in sorted(self.bad_digests.items())
        ) or ", ".join(self.bad)


def check_wheelhouse(directory: Path, reqs: Requirements) -> Check:
    """What `directory` holds of `reqs`, every file hashed now (no memo: a wheel is read whole anyway)."""
    found: dict[str, list[Path]] = {r.name: [] for r in reqs.items}
    bad: dict[str, tuple[str, tuple[str, ...]]] = {}
    files = sorted(directory.glob("*.whl")) if directory.is_dir() else []
    for f in files:
        proj = wheel_project(f.name)
        req = reqs.get(proj[0]) if proj else None
        if req is None or proj is None or proj[1] != req.version:
            continue
        actual = file_sha256(f)
        if actual in req.hashes:
            found[req.name].append(f)
        else:
            bad[f.name] = (actual, req.hashes)
    missing = tuple(f"{r.name}=={r.version}" for r in reqs.items if not found[r.name])
    return Check(found, missing, tuple(bad), bad)


def require_wheelhouse(directory: Path, reqs: Requirements) -> Check:
    """The check, or a SourceError saying how to fill the wheelhouse."""
    check = check_wheelhouse(directory, reqs)
    if check.missing or check.bad:
        problems = []
        if check.missing:
            problems.append(f"missing: {', '.join(check.missing)}")
        if check.bad:
            problems.append(f"hash not pinned in {reqs.path.name}: {check.describe_bad(directory)}")
        raise SourceError(
            f"the wheelhouse {directory} does not hold the pinned build requirements",
            "; ".join(problems),
            "run `hermetic fetch` where PyPI is reachable (it fills <cache>/wheelhouse), then copy that "
            "directory to this machine and pass --wheelhouse DIR or --cache",
        )
    return check


def _platforms(machine: str) -> list[str]:
    return [f"manylinux_2_17_{machine}", f"manylinux2014_{machine}"]


def download_argv(
    python: str, requirements: Path, dest: Path, py_version: str, machine: str
) -> list[str]:
    """The pip download command for one target CPython version."""
    argv = [
        python, "-m", "pip", "download", "--disable-pip-version-check", "--no-cache-dir",
        "--only-binary=:all:", "--require-hashes", "--no-deps", "-r", str(requirements), "-d", str(dest),
        "--python-version", py_version, "--implementation", "cp",
    ]
    for plat in _platforms(machine):
        argv += ["--platform", plat]
    return argv


def fetch_wheelhouse(
    settings: Settings,
    log: Log,
    requirements: Path | None = None,
    dest: Path | None = None,
    pythons: Sequence[str] = TARGET_PYTHONS,
    python: str = sys.executable,
) -> Path:
    """Fill the wheelhouse with every pinned build requirement; a no-op when it is complete.

    Downloading goes through `pip download` from PyPI (or PIP_INDEX_URL): a URL
    origin, so `settings.use_urls` (--no-urls) turns it off and an incomplete
    wheelhouse is then an error saying what is missing. apt has no part here.
    """
    import platform

    reqs = load_requirements(requirements or settings.toolchain_dir / "build-requirements.txt")
    out = dest or wheelhouse_dir(settings)
    check = check_wheelhouse(out, reqs)
    if not check.missing and not check.bad:
        log(f"wheelhouse: {len(reqs.items)} build requirements already in {out} (verified)")
        return out
    for name in check.bad:
        # A file of the right name with an unpinned hash: never keep what cannot be verified.
        actual, pinned = check.bad_digests[name]
        log(f"wheelhouse: removed {out / name}: expected sha256 {' or '.join(pinned)}, got {actual}")
        (out / name).unlink(missing_ok=True)
    if not settings.use_urls:
        raise SourceError(
            f"the wheelhouse {out} lacks {len(check.missing)} pinned build requirements and downloads are off (--no-urls)",
            f"missing: {', '.join(check.missing)}"
            + (f"; removed as damaged: {check.describe_bad(out)}" if check.bad else ""),
            f"rerun without --no-urls (and HERMETIC_USE_URLS unset) where PyPI is reachable, or put those wheels, "
            f"with the sha256 pinned in {reqs.path}, into {out}",
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        _download(reqs, out, pythons, python, platform.machine(), log)
        final = require_wheelhouse(out, reqs)
        manifest = {r.name: [p.name for p in final.found[r.name]] for r in reqs.items}
        # one manifest for the directory, which may hold several pinned sets (a wheel recipe's own beside the
        # LLVM build's): each fill adds its files and names its set
        path = out / "wheelhouse.json"
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = {}
        files = (old.get("files") if isinstance(old.get("files"), dict) else {}) | manifest
        sets = sorted({*(old.get("sets") or []), reqs.digest()})
        _write_atomic(path, json.dumps({"requirements": reqs.digest(), "sets": sets, "files": files}, indent=2,
                                       sort_keys=True) + "\n")
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(exc.filename or out), exc) from exc
        raise
    log(f"wheelhouse: {sum(len(v) for v in final.found.values())} verified files in {out}")
    return out


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _download(reqs: Requirements, out: Path, pythons: Sequence[str], python: str, machine: str, log: Log) -> None:
    """pip download into a staging dir inside `out`; only verified files are moved in, the rest is removed."""
    log(f"wheelhouse: downloading {len(reqs.items)} pinned build requirements for CPython {', '.join(pythons)}")
    with tempfile.TemporaryDirectory(prefix=".download-", dir=out) as tmp:
        staging = Path(tmp)
        for py in pythons:
            argv = download_argv(python, reqs.path, staging, py, machine)
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800)
            except FileNotFoundError as exc:
                raise EnvironmentError_(f"{python} cannot run", str(exc), "install Python with pip") from exc
            except subprocess.TimeoutExpired as exc:
                raise SourceError("downloading the build requirements timed out", str(exc), "retry") from exc
            if proc.returncode != 0:
                output = proc.stdout + proc.stderr
                if "No space left on device" in output:
                    raise disk_full(str(staging), OSError(errno.ENOSPC, "No space left on device (pip download)"))
                tail = "\n    | ".join(output.strip().splitlines()[-12:])
                raise SourceError(
                    f"cannot download the build requirements for CPython {py}",
                    f"`pip download` exited with {proc.returncode}:\n    | {tail}",
                    "check that PyPI (or your PIP_INDEX_URL mirror) is reachable; offline, copy a filled "
                    f"wheelhouse to {out} (`hermetic wheel` also takes --wheelhouse DIR)",
                )
        # pip verified the hashes; check again ourselves before anything enters the cache.
        staged = check_wheelhouse(staging, reqs)
        if staged.missing or staged.bad:
            raise SourceError(
                "the downloaded build requirements do not match their pins",
                f"missing {list(staged.missing)}, unpinned {staged.describe_bad(staging)}",
                f"update the hashes in {reqs.path} only if the new files are trusted",
            )
        for files in staged.found.values():
            for f in files:
                if not (out / f.name).is_file():
                    os.replace(f, out / f.name)  # same directory tree: a rename, never a partial copy
