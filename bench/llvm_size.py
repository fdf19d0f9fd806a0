"""How slim is a variant? Commands, installed size and compressed size, side by side.

    python3 -m bench.llvm_size build/llvm/nvptx/record.json [--source ARCHIVE] [--json reports/llvm-size-nvptx.json]
         [--compare-prefix /usr/lib/llvm-22]

Configures LLVM's default configuration of the record's release (all targets,
tools on; configure only) from the full source archive and counts its build
commands with `ninja -t commands`, beside the variant's count from its build
record. The compressed size is the gzip OCI layer our image step writes (left
out when the tree is not on this machine: a record brought back from a runner).
`--compare-prefix` sums a distribution's build of the same release (Debian's
llvm-NN-dev: every target, static libraries and headers) beside the variant's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from hermetic.core.digests import file_sha256
from hermetic.fetch import sources
from hermetic.model import recipe
from hermetic.model.record import load_build_record
from hermetic.model.settings import find_root
from hermetic.oci.layer import write_layer


class _Count:
    """A sink that only counts bytes."""

    def __init__(self) -> None:
        self.n = 0

    def write(self, data: bytes) -> int:
        self.n += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def default_config_commands(archive: Path, strip_root: str, version: str) -> tuple[int, float]:
    """Commands of LLVM's default configuration: all targets, tools on, configure only."""
    with tempfile.TemporaryDirectory(prefix="llvm-default-") as tmp:
        root = Path(tmp)
        keep = ("llvm/", "cmake/", "third-party/")
        prefix = strip_root.rstrip("/") + "/"
        with tarfile.open(archive) as tar:
            members = [
                m for m in tar
                if m.name.startswith(prefix) and m.name[len(prefix):].startswith(keep)
                and (m.isfile() or m.isdir() or m.issym())
            ]
            for m in members:
                m.name = m.name[len(prefix):]
            tar.extractall(root / "src", members=members, filter="data")
        started = time.monotonic()
        subprocess.run(
            ["cmake", "-G", "Ninja", "-S", str(root / "src" / "llvm"), "-B", str(root / "b"),
             "-DCMAKE_BUILD_TYPE=Release"],
            check=True, capture_output=True, text=True,
        )
        seconds = time.monotonic() - started
        out = subprocess.run(["ninja", "-C", str(root / "b"), "-t", "commands"], check=True, capture_output=True, text=True)
        return len(out.stdout.splitlines()), seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record", type=Path)
    ap.add_argument("--source", type=Path, help="full source archive (default: the cached one)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "hermetic")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--install-root", type=Path, help="the staged tree, when it was moved since the build")
    ap.add_argument("--compare-prefix", type=Path, help="a distribution's LLVM of the same release (/usr/lib/llvm-22)")
    args = ap.parse_args()

    rec = load_build_record(args.record)
    llvm = recipe.load(find_root(Path.cwd()) / "recipes", version=rec.recipe.version)
    if args.source:
        archive_path = args.source
        digest = file_sha256(archive_path)
        match = [a for a in llvm.archives if a.sha256 == digest]
        if not match:
            print(f"{archive_path} is not a pinned archive of LLVM {llvm.version}", file=sys.stderr)
            return 2
        archive = match[0]
    else:
        hit = sources.cached(args.cache, llvm)
        if hit is None:
            print("no cached source archive: run `hermetic fetch` or pass --source", file=sys.stderr)
            return 2
        archive_path, archive = hit.path, hit.archive

    default_cmds, configure_s = default_config_commands(archive_path, archive.strip_root, llvm.version)
    sink = _Count()
    install_root = args.install_root or Path(rec.install_root)
    layer_size = None
    if (install_root / rec.prefix.lstrip("/")).is_dir():
        layer_size = write_layer(sink, install_root, rec.prefix.lstrip("/"), rec.source_date_epoch).size  # type: ignore[arg-type]
    figures: dict[str, Any] = {
        "variant": rec.variant,
        "llvm": llvm.version,
        "machine": f"{platform.system().lower()}-{platform.machine()}",
        "variant_commands": rec.build_commands,
        "default_config_commands": default_cmds,
        "default_configure_s": round(configure_s, 1),
        "commands_ratio": round((rec.build_commands or 0) / default_cmds, 3),
        "installed_bytes": rec.tree.size,
        "installed_files": sum(1 for f in rec.tree.files if f.kind == "file"),
        "lib_bytes": sum(f.size for f in rec.tree.files if "/lib/" in f.path and f.kind == "file"),
        "include_bytes": sum(f.size for f in rec.tree.files if "/include/" in f.path and f.kind == "file"),
        "layer_gzip_bytes": layer_size,
        "tree_digest": rec.tree.digest,
        "build_wall_s": rec.wall_time_s,
        "build_jobs": rec.jobs,
    }
    print(f"LLVM {llvm.version} variant {rec.variant}")
    print(f"  build commands      {rec.build_commands!s:>8}   default configuration {default_cmds}   ratio {figures['commands_ratio']}")
    print(f"  installed           {rec.tree.size / 1e6:>8.1f} MB  (lib {figures['lib_bytes'] / 1e6:.1f} MB, include {figures['include_bytes'] / 1e6:.1f} MB)")
    if layer_size is not None:
        print(f"  OCI layer (gzip)    {layer_size / 1e6:>8.1f} MB   vs 950 MB community tarball: ratio {layer_size / 950e6:.3f}")
    if args.compare_prefix:
        static = sum(f.stat().st_size for f in (args.compare_prefix / "lib").glob("libLLVM*.a"))
        # Debian's include/ holds symlinks to /usr/include/llvm-NN/...: follow them
        headers = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(args.compare_prefix / "include",
                                                                                    followlinks=True) for n in names)
        figures["compare"] = {
            "prefix": str(args.compare_prefix), "static_libraries": len(list((args.compare_prefix / "lib").glob("libLLVM*.a"))),
            "static_lib_bytes": static, "include_bytes": headers,
            "variant_static_libraries": sum(1 for f in rec.tree.files if f.kind == "file" and f.path.endswith(".a")),
            "lib_ratio": round(figures["lib_bytes"] / static, 3) if static else None,
        }
        print(f"  vs {args.compare_prefix}: static libraries {static / 1e6:.1f} MB ({figures['compare']['static_libraries']} "
              f"archives) against {figures['lib_bytes'] / 1e6:.1f} MB ({figures['compare']['variant_static_libraries']}): "
              f"ratio {figures['compare']['lib_ratio']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
