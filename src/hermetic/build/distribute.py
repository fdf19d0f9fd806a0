"""Distributed compilation: the LLVM compiles spread over compile hosts that run distccd.

Why distcc and not icecream. Our compiler is the pinned zig toolchain, run through generated
wrapper scripts (`zig c++ -target … "$@" -g0`); its identity is a wheel's sha256, not a compiler
binary. icecream ships the compiler to the nodes as a tarball made by icecc-create-env, which knows
gcc and clang binaries and their shared libraries, not zig's driver with its bundled headers; it also
needs a scheduler and root (for its chroot) on every node. distcc sends preprocessed source to plain daemons
(`distccd --listen ADDR --port N`), which run the compiler *by name*. So hermetic names the compiler
by its identity: `hermetic-<toolchain>-<digest>-c++`, the digest over the pinned toolchain's
identity and the wrapper's text. A compile host has that name only if it set up the identical
toolchain (`hermetic toolchain compile-host DIR`: the verified, pinned wheel unpacked there and the
identity-named wrappers written); one that lacks it fails the job, and distcc compiles it locally. A
different compiler can never answer to the name.

What the remote side runs. distcc preprocesses here (with the local wrapper of the same name) and
sends `distccd_*.ii`. zig does not take a preprocessed file for a glibc-versioned target (`-target
x86_64-linux-gnu.2.28` is passed on to clang verbatim for .ii), and an object's STT_FILE symbol is
the input's file name; so the wrapper copies a preprocessed input under the name of its first line
marker (the original source's basename) and compiles it as C/C++: the very object the local compile
makes. zig also takes another path with a dependency file (-MD), with differently laid out objects;
distcc strips -MD before sending, so the launcher passes `--hermetic-depfile` along and the remote
wrapper asks for a (thrown away) dependency file too. Never an input: the tree digest of a
distributed build is the tree digest of a local one, and `verify` rebuilds locally.

Reachability: see netrelay.py. Inside the build's network namespace each compile host is
127.0.0.1:PORT, relayed to a Unix socket that hermetic connects to that host only. Without
isolation (--offline=off, or no namespaces on the machine) distcc connects to the hosts directly
and the record says the network was reachable.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.build.wrapper_text import render_scripts
from hermetic.core.errors import EnvironmentError_, UsageError

if TYPE_CHECKING:
    from hermetic.core.compiles import CompileHost, Distribution
    from hermetic.core.toolchain import Toolchain

INSIDE_PORT = 3632  # the first relayed port inside the namespace: 127.0.0.1:3632, :3633, …
DEPFILE_FLAG = "--hermetic-depfile"


def check_usable(dist: Distribution, tc: Toolchain) -> None:
    """Refuse, before anything runs, what a distributed build cannot do."""
    if tc.kind == "host":
        raise UsageError(
            "--distribute needs a pinned toolchain",
            "the compile hosts must run the identical compiler, and the machine's compiler (--toolchain host) has no "
            "identity they can be checked against",
            "build with the pinned zig toolchain (the default) or without --distribute",
        )


# --- the compiler the hosts run: named by its identity -----------------------------------------------


LANGS = ("cc", "c++")


def wrapper_script(tc: Toolchain, zig_root: Path, cache_root: Path, lang: str) -> str:
    """The toolchain's wrapper for `lang`, also taking the preprocessed files a compile host is sent."""
    base = render_scripts(tc.name, tc.label, tc.target, zig_root, cache_root)[lang].rstrip("\n").splitlines()
    head = [ln for ln in base if ln.startswith("#") or "; export " in ln]
    body = [ln for ln in base[len(head):] if not ln.startswith("exec ")]
    run = next(ln for ln in base if ln.startswith("exec "))
    pre = [
        "# A compile host gets distcc's preprocessed file (distccd_*.ii): compiled under its original name (the first",
        "# line marker's), as the source language, with a dependency file if the build asked for one (zig lays",
        "# out the object differently with one): the same object as the build machine's compile.",
        "tmp= deps=",
        "for a do shift",
        "  case $a in",
        f"  {DEPFILE_FLAG}) deps=1; continue ;;",
        "  *.ii|*.i)",
        '    if [ -z "$tmp" ] && [ -f "$a" ]; then',
        '      case $a in *.ii) x=c++ ;; *) x=c ;; esac',
        '      name=; IFS= read -r first < "$a" || first=',
        """      case $first in '# 1 "'*) name=${first#'# 1 "'}; name=${name%%'"'*}; name=${name##*/} ;; esac""",
        "      case $name in ''|.|..) ;; *)",
        '        tmp=$(mktemp -d) || exit 1',
        '        cp "$a" "$tmp/$name" || { rm -rf "$tmp"; exit 1; }',
        '        set -- "$@" -x "$x" "$tmp/$name"; continue ;;',
        "      esac",
        "    fi ;;",
        "  esac",
        '  set -- "$@" "$a"',
        "done",
        '[ -n "$tmp" ] && [ -n "$deps" ] && set -- "$@" -MD -MF "$tmp/deps.d"',
        "# its line markers are what -pedantic calls a GNU extension: a warning per header, nothing in the object",
        '[ -n "$tmp" ] && set -- "$@" -Wno-gnu-line-marker',
    ]
    tail = [f'[ -n "$tmp" ] || {run}', f'{run[len("exec "):]}; rc=$?; rm -rf "$tmp"; exit $rc', ""]
    return "\n".join([*head, *pre, *body, *tail])


def compiler_name(tc: Toolchain, lang: str) -> str:
    """`hermetic-zig-<16 hex>-c++`: the toolchain's identity and the wrapper's text (with fixed paths)."""
    h = hashlib.sha256(json.dumps(tc.identity(), sort_keys=True).encode())
    h.update(wrapper_script(tc, Path("/zig"), Path("/zig-cache"), lang).encode())
    return f"hermetic-{tc.name}-{h.hexdigest()[:16]}-{lang}"


def write_wrappers(tc: Toolchain, zig_root: Path, cache_root: Path, bin_dir: Path) -> dict[str, Path]:
    """The identity-named wrappers in `bin_dir` (a build's own, or a compile host's on distccd's PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for lang in LANGS:
        p = bin_dir / compiler_name(tc, lang)
        p.write_text(wrapper_script(tc, zig_root, cache_root, lang))
        p.chmod(0o755)
        out[lang] = p
    return out


def launcher_script(distcc: str, compilers: Mapping[Path, str]) -> str:
    """The build's compiler launcher (CMake's, or ccache's prefix_command behind a compile cache): each of the
    build's compilers (`compilers`: its path -> the identity name it goes out as) is sent through distcc; any
    other command runs as it is."""
    cases = [f"  {_q(str(path))}) name={_q(name)} ;;" for path, name in compilers.items()]
    return "\n".join([
        "#!/bin/sh",
        "# Generated by hermetic for a distributed build (distcc): do not edit.",
        'case "$1" in',
        *cases,
        '  *) exec "$@" ;;  # e.g. a nested build with another compiler: local',
        "esac",
        "# CMake's configure checks run here: their answers decide the configuration, and a host compiling",
        "# preprocessed source can answer a warning check (-Werror) differently. Known by their directory: in",
        "# the arguments, or (behind ccache, which makes paths below its base_dir relative) the current one.",
        'case "$PWD/ $*" in */CMakeFiles/CMakeScratch/*|*/CMakeFiles/CMakeTmp/*) exec "$@" ;; esac',
        "shift",
        f"deps=; for a do case $a in -MD|-MMD) deps={DEPFILE_FLAG} ;; esac; done",
        f'exec {_q(distcc)} "$name" $deps "$@"',
        "",
    ])


def _q(s: str) -> str:
    return shlex.quote(s)


# --- distcc itself --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Distcc:
    path: str
    version: str


def find_distcc(path_env: str | None) -> Distcc:
    exe = shutil.which("distcc", path=path_env)
    if exe is None:
        raise EnvironmentError_(
            "distcc is not installed",
            "--distribute sends the compiles to the compile hosts with distcc, and none is on PATH",
            "install it (Debian: apt-get install distcc) or build without --distribute",
        )
    try:
        text = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentError_(f"cannot run {exe} --version", str(exc), "check the distcc installation") from exc
    m = re.search(r"distcc (\d+\.\d+(?:\.\d+)?)", text)
    return Distcc(exe, m.group(1) if m else "unknown")


def probe(host: CompileHost, timeout: float = 2.0) -> tuple[bool, str]:
    """Whether the host accepts a connection before the build starts; never raises."""
    try:
        with socket.create_connection((host.host, host.port), timeout=timeout):
            return True, f"{host.address} accepted a connection"
    except OSError as exc:
        return False, f"{host.address}: {exc.strerror or exc}"


def distcc_hosts(dist: Distribution, relayed: bool) -> str:
    """DISTCC_HOSTS: the relayed loopback ports inside the namespace, or the hosts themselves; lzo-compressed."""
    # --randomize: spread the jobs over all hosts rather than filling the first one's slots first
    if relayed:
        return "--randomize " + " ".join(f"127.0.0.1:{INSIDE_PORT + i}/{h.slots},lzo" for i, h in enumerate(dist.hosts))
    return "--randomize " + " ".join(f"{h.address}/{h.slots},lzo" for h in dist.hosts)


def client_env(dist: Distribution, relayed: bool, state: Path, log: Path) -> dict[str, str]:
    """distcc's client settings for the build: its own state directory (host backoff) and log."""
    state.mkdir(parents=True, exist_ok=True)
    return {
        "DISTCC_HOSTS": distcc_hosts(dist, relayed),
        "DISTCC_DIR": str(state),
        "DISTCC_LOG": str(log),
        "DISTCC_FALLBACK": "1",  # a compile whose host is unreachable or fails runs here
        "DISTCC_BACKOFF_PERIOD": "60",
    }


_EXEC = re.compile(r"^distcc\[(?P<pid>\d+)\] exec on (?P<host>[^\s:]+(?::\d+)?)[/:\s]")
_DONE = re.compile(r"^distcc\[(?P<pid>\d+)\] compile (?P<src>\S+) on (?P<host>\S+) completed ok\s*$")
_FELLBACK = re.compile(r"^distcc\[(?P<pid>\d+)\] .*failed to distribute")
_RETRIED = re.compile(r"^distcc\[(?P<pid>\d+)\] .*remote compilation of .* failed, retrying locally")


@dataclass(frozen=True)
class ClientCounts:
    remote: dict[str, int]  # compiles completed, per DISTCC_HOSTS address (host:port)
    local: int  # compiles that ran on this machine (fallbacks and retries included)
    fallbacks: int  # compiles meant for a host that ran here instead: the host was unreachable, gone or backed off
    retried: int  # compiles that failed on a host and ran again here (a compile error, or a host without the compiler)
    rerouted: int = 0  # compiles whose host failed them (went away, refused) and that another host compiled
    failed: dict[str, int] = field(default_factory=dict)  # jobs sent to a host that did not come back from it


def parse_client_log(text: str) -> ClientCounts:
    """distcc's client log (DISTCC_LOG): where each compile went and completed, which came back and why.

    One distcc process compiles one file, so its pid ties the attempts of one compile together:
    Debian's distcc sends a compile whose host fails to another host, and only then compiles it here.
    """
    remote: dict[str, int] = {}
    local = 0
    fell: set[str] = set()
    retried: set[str] = set()
    sent: dict[str, list[str]] = {}
    done: dict[str, str] = {}
    for line in text.splitlines():
        if m := _EXEC.match(line):
            if m.group("host") != "localhost":
                sent.setdefault(m.group("pid"), []).append(m.group("host"))
        elif m := _DONE.match(line):
            host = m.group("host").split("/", 1)[0]
            done[m.group("pid")] = host
            if host == "localhost":
                local += 1
            else:
                remote[host] = remote.get(host, 0) + 1
        elif m := _RETRIED.match(line):
            retried.add(m.group("pid"))
        elif m := _FELLBACK.match(line):
            fell.add(m.group("pid"))
    failed: dict[str, int] = {}
    rerouted = 0
    for pid, hosts in sent.items():
        finished = done.get(pid)
        lost = hosts[:-1] if finished == hosts[-1] else hosts
        for h in lost:
            failed[h] = failed.get(h, 0) + 1
        if lost and finished not in (None, "localhost"):
            rerouted += 1
    return ClientCounts(remote, local, len(fell - retried), len(retried), rerouted, failed)
