"""A built wheel's platform tag: its extensions checked, the tag vouched for by auditwheel."""

from __future__ import annotations

import shlex
import shutil
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hermetic.build import sandbox
from hermetic.build.wheelfile import WheelName
from hermetic.core.errors import BuildError, EnvironmentError_, SubprocessFailed
from hermetic.model import record


def extract_binaries(wheel: Path, dest: Path) -> list[Path]:
    out: list[Path] = []
    with zipfile.ZipFile(wheel) as z:
        for n in sorted(z.namelist()):
            base = n.rsplit("/", 1)[-1]
            if base.endswith(".so") or ".so." in base:
                target = dest / base
                target.write_bytes(z.read(n))
                out.append(target)
    return out



# auditwheel as a program, from the build venv's site-packages, run by another interpreter.
_AUDITWHEEL_MAIN = "import sys; sys.path[:0] = [{site!r}]; sys.argv[0] = 'auditwheel'; from auditwheel.main import main; sys.exit(main())"


def foreign_auditwheel(venv: Path, arch: str, python: str, runner: tuple[str, ...]) -> tuple[str, ...]:
    """The build venv's auditwheel run by the wheel's own interpreter under qemu-user.

    `auditwheel repair` offers the policies of the machine it runs on (platform.machine()), so a wheel of
    another architecture is tagged by the same pinned auditwheel as it runs there: the target's Python under
    qemu-user, which says aarch64. auditwheel and its dependencies are pure Python. `runner`: how `python` runs
    here (interpreter.interpreter_runner).
    """
    sites = sorted(venv.glob("lib/python*/site-packages"))
    if len(sites) != 1 or not (sites[0] / "auditwheel").is_dir():
        raise EnvironmentError_(
            f"the build venv {venv} has no auditwheel package to tag the {arch} wheel with",
            "a cross-built wheel gets its manylinux tag from the pinned auditwheel, run under qemu-user",
            "keep auditwheel in toolchain/build-requirements.txt and remove the venv so that it is made again",
        )
    return (*runner, python, "-I", "-B", "-c", _AUDITWHEEL_MAIN.format(site=str(sites[0])))


def auditwheel_repair(
    tool: str | None, raw: Path, plat: str, dest: Path, env: Mapping[str, str], prefix: tuple[str, ...], log_path: Path,
    runner: tuple[str, ...] | None = None,
) -> Path:
    """The wheel as `auditwheel repair --plat PLAT` writes it: accepted for that policy, or a BuildError.

    --only-plat: exactly the toolchain's floor, not a newer tag auditwheel might also allow; --patcher none:
    a self-contained extension needs no grafted library, so nothing may be patched (that would fail).
    `runner` runs auditwheel instead of `tool` (another architecture's wheel: see foreign_auditwheel).
    """
    if runner is not None:
        tool = shlex.join(runner)
    if tool is None:
        raise EnvironmentError_(
            "auditwheel is not available to vouch for the platform tag",
            "a wheel built with a pinned glibc floor gets its manylinux tag only where auditwheel's policy accepts it",
            "keep auditwheel in toolchain/build-requirements.txt (the build venv installs it)",
        )
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    try:
        argv = [*(runner or (tool,)), "repair", "--plat", plat, "--only-plat", "--patcher", "none", "-w", str(dest), str(raw)]
        sandbox.run(argv,
                    what=f"tag the wheel {plat} with auditwheel repair", env=env, cwd=dest.parent, prefix=prefix,
                    log_path=log_path, quiet=True)
    except SubprocessFailed as exc:
        said = [line.strip() for line in exc.output_tail.splitlines() if line.strip()]
        raise BuildError(
            f"auditwheel does not accept {raw.name} as {plat}",
            " ".join(said[-3:]) or exc.why,
            f"`{tool} show {raw}` says what it needs (a newer glibc, or a library outside the {plat} policy); "
            f"repro: {exc.repro}",
        ) from exc
    out = sorted(dest.glob("*.whl"))
    # auditwheel names a policy with its aliases (manylinux2014_x86_64.manylinux_2_17_x86_64): one of them must be plat
    if len(out) != 1 or plat not in WheelName.parse(out[0].name).platform.split("."):
        raise BuildError(f"auditwheel repair --plat {plat} wrote {[p.name for p in out]}", "expected one wheel of that tag",
                         f"see {log_path}")
    return out[0]


def audit_facts(audit: Mapping[str, Any]) -> record.Auditwheel:
    """The parts of auditwheel's report the record keeps."""

    def text(value: object) -> str | None:
        return None if value is None else str(value)

    libs = audit.get("external_libs")
    return record.Auditwheel(
        overall_tag=text(audit.get("overall_tag")),
        sym_tag=text(audit.get("sym_tag")),
        external_libs=tuple(sorted((str(k), text(v)) for k, v in libs.items())) if isinstance(libs, dict) else None,
    )
