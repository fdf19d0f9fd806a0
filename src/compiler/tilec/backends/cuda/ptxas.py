"""PTX -> cubin with ptxas, and the resource usage it reports with -v."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...errors import PtxasError


@dataclass(frozen=True)
class Resources:
    registers: int
    shared_bytes: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    barriers: int


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARS = re.compile(r"used (\d+) barriers")


def parse_verbose(output: str) -> dict[str, Resources]:
    """Per-function resources from `ptxas -v` output."""
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in output.splitlines():
        m = _ENTRY.search(line) or _PROPS.search(line)
        if m:
            current = m.group(1)
            found.setdefault(current, {})
            continue
        if current is None:
            continue
        rec = found[current]
        if m := _FRAME.search(line):
            rec["stack"], rec["spill_stores"], rec["spill_loads"] = map(int, m.groups())
        if m := _USED.search(line):
            rec["registers"] = int(m.group(1))
            if s := _SMEM.search(line):
                rec["shared"] = int(s.group(1))
            if b := _BARS.search(line):
                rec["barriers"] = int(b.group(1))
    return {
        name: Resources(
            registers=r.get("registers", 0),
            shared_bytes=r.get("shared", 0),
            spill_stores=r.get("spill_stores", 0),
            spill_loads=r.get("spill_loads", 0),
            stack_bytes=r.get("stack", 0),
            barriers=r.get("barriers", 0),
        )
        for name, r in found.items()
    }


def assemble(
    ptxas: Path, ptx: str, arch: str, options: tuple[str, ...] = (), opt_level: int = 3
) -> tuple[bytes, str]:
    """Run ptxas; returns (cubin, verbose output). On failure the PTX is kept for the repro."""
    workdir = Path(tempfile.mkdtemp(prefix="tilec-ptxas-"))
    src = workdir / "kernel.ptx"
    out = workdir / "kernel.cubin"
    src.write_text(ptx)
    cmd = [str(ptxas), f"-arch={arch}", f"-O{opt_level}", "-v", *options, str(src), "-o", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    except OSError as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        raise PtxasError("ptxas", cmd, -1, str(exc)) from exc
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 or not out.is_file():
        # Keep kernel.ptx so the repro line works.
        raise PtxasError("ptxas", cmd, proc.returncode, log, repro=shlex.join(cmd))
    cubin = out.read_bytes()
    shutil.rmtree(workdir, ignore_errors=True)
    return cubin, log
