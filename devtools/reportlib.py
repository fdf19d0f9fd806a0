"""What the build benches do last: print the report, write it where --json says, keep or remove the scratch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_facts(script: str, machine: str | None, load_before: tuple[float, float, float]) -> dict[str, Any]:
    """What every build bench's report says about its run: the command, the machine, the load before and after."""
    import platform

    return {
        "command": f"python3 -m bench.{Path(script).stem} " + " ".join(sys.argv[1:]),
        "machine": machine or f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def emit(report: dict[str, Any], json_path: Path | None, base: Path, keep: bool) -> None:
    text = json.dumps(report, indent=2) + "\n"
    print(text)
    if json_path:
        json_path.write_text(text)
    if keep:
        print(f"kept {base}", file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)


def timed_build(work: Path, common: list[str], env: dict[str, str], extra: list[str], entry: str,
                as_user: Callable[[list[str]], list[str]] | None = None) -> dict[str, Any]:
    """`hermetic build llvm COMMON --work-dir WORK EXTRA`, timed; its record's digests and `entry` (the
    mechanism the bench measures: compile_cache, distributed, ...). common[1] is the variant. `as_user`
    turns the command into one run as another user (sharing.as_user), whose WORK's parent must exist."""
    work.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    args = ["build", "llvm", *common, "--work-dir", str(work), *extra]
    argv = [python(), "-m", "hermetic", *args]
    proc = subprocess.run(as_user(argv) if as_user else argv, cwd=work.parent, env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"hermetic {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    rec = json.loads((work / "llvm" / common[1] / "record.json").read_text())
    return {"work_dir": str(work), "wall_s": round(took, 1), "build_wall_time_s": rec["wall_time_s"], "jobs": rec["jobs"],
            "tree_digest": rec["tree"]["digest"], "inputs_digest": rec["inputs_digest"], entry: rec.get(entry)}


def python() -> str:
    """This interpreter for another process (another user's too): a venv's by its own path (resolving the link
    would leave the venv and its packages behind), any other by its real path."""
    return sys.executable if sys.prefix != sys.base_prefix else os.path.realpath(sys.executable)


def clean_env(root: Path) -> dict[str, str]:
    """The environment a bench runs hermetic in: none of the caller's HERMETIC_ settings but the cache,
    and this checkout's src first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_") or k == "HERMETIC_CACHE"}
    env["PYTHONPATH"] = str(root / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env
