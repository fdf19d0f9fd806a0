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
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.core.errors import EnvironmentError_, SourceError, disk_full
from hermetic.model.requirements import check_wheelhouse, load_requirements, require_wheelhouse
from hermetic.model.wheels import requirement_files

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.requirements import Requirements
    from hermetic.model.settings import Settings
    from hermetic.model.wheels import WheelRecipe

# CPython versions whose build venvs the wheelhouse must serve: this machine's and the GPU runner's.
TARGET_PYTHONS = ("3.11", "3.12")



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
    out = dest or settings.wheelhouse_dir
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


def fetch_wheelhouses(settings: Settings, log: Log, recipes: list[WheelRecipe] | None = None,
                      dest: Path | None = None) -> Path:
    """Fill the wheelhouse with every requirement_files() pin; returns the wheelhouse."""
    out = dest or settings.wheelhouse_dir
    for path in requirement_files(settings, recipes):
        fetch_wheelhouse(settings, log, requirements=path, dest=out)
    return out
