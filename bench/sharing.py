"""The real parts the sharing benches start and the steps they time alike: Redis on a Unix socket, distccd
compile hosts, a registry to publish to and substitute from, and builds run as another user.

compile_cache_bench, distribute_bench, substitute_bench and scale_bench use these; each keeps only what it
measures and reports.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from helpers import OTHER_UID, as_user, user_cache, user_dir  # noqa: E402  (tests/helpers: a plain module)

__all__ = ["OTHER_UID", "as_user", "user_cache", "user_dir"]


def free_port(addr: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


# --- Redis ----------------------------------------------------------------------------------------------


def start_redis(base: Path, perm: str = "700") -> tuple[subprocess.Popen[bytes], Path]:
    """Debian's redis-server on a Unix socket only (port 0), no persistence; `perm`: unixsocketperm."""
    base.mkdir(parents=True, exist_ok=True)
    sock = base / "redis.sock"
    proc = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", perm,
                             "--save", "", "--appendonly", "no", "--dir", str(base)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not sock.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            sys.exit(f"redis-server did not start on {sock}")
        time.sleep(0.1)
    return proc, sock


# --- distccd compile hosts ------------------------------------------------------------------------------


def compile_host(base: Path, toolchain: str, env: dict[str, str], extra: tuple[str, ...] | list[str] = ()) -> Path:
    """`hermetic toolchain compile-host BASE [EXTRA]`: the compilers' directory for distccd's PATH (EXTRA: where
    the pinned toolchain is found, --mirror DIR, --no-urls)."""
    base.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "hermetic", "toolchain", "compile-host", str(base), "--toolchain", toolchain,
                    "--quiet", *extra], env=env, check=True, cwd=base.parent, stdout=subprocess.DEVNULL)
    return base / "bin"


def start_distccd(addr: str, bin_dir: Path, log: Path, slots: int) -> tuple[subprocess.Popen[bytes], int, int]:
    port, stats = free_port(addr), free_port(addr)
    # distccd will not run as root (it switches to user distcc, which cannot read root's cache): in a user
    # namespace of its own it is uid 65534 there and keeps the file access of the user who started it. Where
    # no user namespace can be made, it is told to switch to nobody, who reads the compile host's files
    # (mode 0755 directories) and nothing of root's.
    userns: list[str] = []
    switch: list[str] = []
    if os.geteuid() == 0:
        if subprocess.run(["unshare", "--user", "true"], capture_output=True).returncode == 0:
            userns = ["unshare", "--user"]
        else:
            switch = ["--user", "nobody"]
            log.touch()
            log.chmod(0o666)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.Popen(
        [*userns, "distccd", "--daemon", "--no-detach", "--listen", addr, "--port", str(port), "--allow", "127.0.0.0/8",
         "--jobs", str(slots), "--log-file", str(log), "--log-level", "info", "--enable-tcp-insecure",
         "--stats", "--stats-port", str(stats), *switch],
        env=env, start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection((addr, port), timeout=1).close()
            return proc, port, stats
        except OSError:
            time.sleep(0.1)
    sys.exit(f"distccd on {addr}:{port} did not start: {log.read_text() if log.exists() else ''}")


def start_distccds(base: Path, bin_dir: Path, hosts: int, slots: int) -> list[tuple[str, subprocess.Popen[bytes], int, int]]:
    """distccd on 127.0.0.2, .3, …: (address, process, port, statistics port) each."""
    out = []
    for i in range(hosts):
        addr = f"127.0.0.{2 + i}"
        proc, port, stats = start_distccd(addr, bin_dir, base / f"distccd-{addr}.log", slots)
        out.append((addr, proc, port, stats))
    return out


def stop_distccds(daemons: list[tuple[str, subprocess.Popen[bytes], int, int]]) -> None:
    for _, proc, _, _ in daemons:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def daemon_stats(addr: str, port: int) -> dict[str, str]:
    """distccd's statistics page (dcc_compile_ok, …)."""
    with socket.create_connection((addr, port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    out = {}
    for line in data.decode(errors="replace").splitlines():
        k, _, v = line.partition(" ")
        if k.startswith("dcc_"):
            out[k] = v.strip()
    return out


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


def start_registry_here(base: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Debian's docker-registry on 127.0.0.1 (oci_bench's starter)."""
    from oci_bench import start_registry

    return start_registry(base)


def which(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        sys.exit(f"{name} not found: .ci/setup installs it")
    return exe
