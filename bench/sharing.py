"""The steps the sharing benches time alike: compile hosts, publishing to a registry and substituting from it.

compile_cache_bench, distribute_bench, substitute_bench and scale_bench use these with the servers of
devtools.servers (Redis, distccd, docker-registry) and devtools.users (builds run as another user); each keeps
only what it measures and reports.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devtools.servers import Distccd

ROOT = Path(__file__).resolve().parents[1]


# --- distccd compile hosts ------------------------------------------------------------------------------


def compile_host(base: Path, toolchain: str, env: dict[str, str], extra: tuple[str, ...] | list[str] = ()) -> Path:
    """`hermetic toolchain compile-host BASE [EXTRA]`: the compilers' directory for distccd's PATH (EXTRA: where
    the pinned toolchain is found, --mirror DIR, --no-urls)."""
    base.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "hermetic", "toolchain", "compile-host", str(base), "--toolchain", toolchain,
                    "--quiet", *extra], env=env, check=True, cwd=base.parent, stdout=subprocess.DEVNULL)
    return base / "bin"


def start_distccds(base: Path, bin_dir: Path, hosts: int, slots: int) -> list[Distccd]:
    """distccd on 127.0.0.2, .3, …, each taking `slots` jobs."""
    return [Distccd(f"127.0.0.{2 + i}", base, bin_dir, slots) for i in range(hosts)]


def stop_distccds(daemons: list[Distccd]) -> None:
    for d in daemons:
        d.stop()


# --- publish and substitute -----------------------------------------------------------------------------


def hermetic_timed(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "hermetic", *args], cwd=cwd, env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"hermetic {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return took, proc


def publish(work: Path, variant: str, registry: str, env: dict[str, str]) -> dict[str, Any]:
    """`hermetic image llvm` of the build in WORK, then `hermetic push` to REGISTRY/cache/llvm-VARIANT."""
    image_s, proc = hermetic_timed(["image", "llvm", "--variant", variant, "--work-dir", str(work), "--quiet"], ROOT, env)
    name, digest, layout = proc.stdout.split()[:3]
    repo = f"{registry}/cache/llvm-{variant}"
    push_s, _ = hermetic_timed(["push", layout, f"{repo}:19.1.7", "--insecure", "--quiet"], ROOT, env)
    return {"name": name, "digest": digest, "repo": repo, "image_llvm_s": round(image_s, 2), "push_s": round(push_s, 2)}


def substitute(b: Path, common: list[str], repo: str, env: dict[str, str]) -> dict[str, Any]:
    """Machine B: a fresh work dir, an empty cache, another cwd and HOME, downloads off; `--substitute http://REPO`."""
    (b / "cwd").mkdir(parents=True)
    took, proc = hermetic_timed(
        ["build", "llvm", *common, "--work-dir", str(b / "work"), "--cache", str(b / "cache"), "--no-urls", "--no-apt",
         "--substitute", f"http://{repo}"], b / "cwd", env | {"HOME": str(b)},
    )
    got = json.loads(proc.stdout)
    if not got.get("substituted"):
        sys.exit(f"not substituted:\n{proc.stdout}\n{proc.stderr}")
    return {"wall_s": round(took, 2), "tree_digest": got["tree_digest"], "substituted": got["substituted"],
            "work_dir": str(b / "work")}


def which(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        sys.exit(f"{name} not found: .ci/setup installs it")
    return exe
