"""A root of another architecture's Debian packages (an arm64 Python 3.11, say), made with Debian's own tools.

apt resolves the packages' closure for that architecture from an empty package database, in a private
state directory under the root's parent (the machine's dpkg is not touched: no `dpkg --add-architecture`),
with the machine's own apt sources and keys (/etc/apt); `apt-get --download-only` fetches the .debs and
`dpkg-deb -x` unpacks each into the root. Maintainer scripts never run: the root is for `qemu-user -L ROOT`
and for the headers, not a system to boot. The list of what was unpacked (package, version, architecture,
sha256 of the .deb) is written to ROOT/../<name>.packages.json.

    python3 -m devtools.debian_root --arch arm64 /work/arm64-root    # python3.11 + libpython3.11-dev

Used by the tests of the arm64 wheel and by bench/arm64_wheel_report.py; README, "The arm64 wheel".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# A Python that runs under qemu-user, with the headers a wheel is compiled against; libstdc++ for
# manylinux wheels of C++ (llvmlite's) that link it, as manylinux allows.
PYTHON_PACKAGES = ("python3.11", "libpython3.11-dev", "libstdc++6")
MARKER = ".debian-root.json"


class RootError(RuntimeError):
    pass


def _apt_options(state: Path, arch: str) -> list[str]:
    return [
        "-o", f"Dir::State={state / 'state'}",
        "-o", f"Dir::State::status={state / 'status'}",
        "-o", f"Dir::Cache={state / 'cache'}",
        "-o", f"APT::Architecture={arch}",
        "-o", f"APT::Architectures::={arch}",
        "-o", "Debug::NoLocking=1",  # the private state has its own lists and archives, nothing shared to lock
        "-o", "APT::Get::AllowUnauthenticated=false",
    ]


def _run(argv: list[str], what: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, env=os.environ | {"LC_ALL": "C"})
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise RootError(f"{what} failed ({proc.returncode}): {' '.join(argv)}\n{tail}")
    return proc.stdout


def make_root(dest: Path, arch: str = "arm64", packages: tuple[str, ...] = PYTHON_PACKAGES) -> Path:
    """`dest` holding `packages` of `arch` and everything they depend on; reused when already made for them."""
    marker = dest / MARKER
    want = {"arch": arch, "packages": sorted(packages)}
    if marker.is_file() and {k: v for k, v in json.loads(marker.read_text()).items() if k in want} == want:
        return dest
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise RootError(f"{tool} is not on PATH: a Debian root is made with Debian's apt and dpkg")
    state = dest.parent / f".{dest.name}.apt"
    shutil.rmtree(state, ignore_errors=True)
    for d in ("state/lists/partial", "cache/archives/partial"):
        (state / d).mkdir(parents=True)
    (state / "status").write_text("")
    opts = _apt_options(state, arch)
    _run(["apt-get", *opts, "-q", "update"], f"apt-get update for {arch} (the machine's sources)")
    _run(["apt-get", *opts, "-q", "-y", "--no-install-recommends", "--download-only", "install", *packages],
         f"apt-get --download-only of {' '.join(packages)} for {arch}")
    debs = sorted((state / "cache" / "archives").glob("*.deb"))
    if not debs:
        raise RootError(f"apt downloaded no .deb for {arch} into {state / 'cache' / 'archives'}")
    tmp = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    unpacked = []
    for deb in debs:
        fields = _run(["dpkg-deb", "--showformat=${Package}\t${Version}\t${Architecture}", "--show", str(deb)], "dpkg-deb --show")
        name, version, deb_arch = fields.strip().split("\t")
        _run(["dpkg-deb", "-x", str(deb), str(tmp)], f"dpkg-deb -x {deb.name}")
        unpacked.append({"package": name, "version": version, "architecture": deb_arch,
                         "sha256": hashlib.sha256(deb.read_bytes()).hexdigest()})
    (tmp / MARKER).write_text(json.dumps(want | {"debs": len(unpacked)}, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    (dest.parent / f"{dest.name}.packages.json").write_text(json.dumps(unpacked, indent=2) + "\n")
    shutil.rmtree(state, ignore_errors=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dest", type=Path, help="the root to make (replaced if it exists for other packages)")
    p.add_argument("--arch", default="arm64", help="Debian architecture (default: arm64)")
    p.add_argument("packages", nargs="*", default=list(PYTHON_PACKAGES), help="default: " + " ".join(PYTHON_PACKAGES))
    args = p.parse_args(argv)
    try:
        root = make_root(args.dest.absolute(), args.arch, tuple(args.packages))
    except RootError as exc:
        print(f"error: cannot make the {args.arch} root {args.dest}\n  why: {exc}\n"
              "  fix: check that apt works here (apt-get update) and that its sources serve this architecture",
              file=sys.stderr)
        return 1
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
