"""Hash-pinned requirement files and the wheelhouse that must hold every pinned wheel."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from hermetic.core.digests import file_sha256
from hermetic.core.errors import RecipeError, SourceError

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
