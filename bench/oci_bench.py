"""OCI bench: layer size, time to write the image, push/pull throughput against a local registry.

    python bench/oci_bench.py build/llvm/support/record.json [--json reports/oci-support.json]

Starts Debian's docker-registry on 127.0.0.1 (a free port, storage in a temp
dir), writes the image twice (the second run in another directory must give
the same manifest digest), pushes it (monolithic and chunked), pulls it back
and unpacks it. Anchors for the compressed size are printed beside ours.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from hermetic.oci.layout import Layout, spec_from_record, write_image
from hermetic.oci.registry import RegistryClient, parse_reference, pull_layout, push_layout
from hermetic.oci.unpack import unpack_layout, verify_tree

ANCHORS_MB = {
    "Triton's former community LLVM (compressed)": 950.0,
    "Triton's 2026 trimmed build (compressed)": 350.0,
    "hand-made slim build incl. MLIR (compressed)": 130.0,
}


def start_registry(base: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = base / "config.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {base / 'storage'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    exe = shutil.which("docker-registry")
    if exe is None:
        sys.exit("docker-registry not found: apt-get install docker-registry")
    proc = subprocess.Popen([exe, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    host = f"127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://{host}/v2/", timeout=1):
                return proc, host
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("docker-registry did not start")


def bench(record: Path, work: Path, chunk: int) -> dict[str, Any]:
    spec = spec_from_record(record)
    t = time.monotonic()
    first = write_image(spec, work / "a" / "layout")
    write_s = time.monotonic() - t
    second = write_image(spec, work / "b" / "elsewhere")
    out: dict[str, Any] = {
        "image": spec.name,
        "manifest_digest": first.manifest.digest,
        "stable_across_dirs": first.manifest.digest == second.manifest.digest,
        "tar_mb": first.layer.tar_size / 1e6,
        "gzip_mb": first.layer.size / 1e6,
        "zstd_mb": None,  # not offered: no stdlib zstd on Python < 3.14
        "entries": first.layer.entries,
        "write_s": write_s,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    proc, host = start_registry(work)
    try:
        mb = first.layer.size / 1e6
        for mode, size in (("monolithic", 1 << 40), ("chunked", chunk)):
            with RegistryClient(host, insecure=True) as client:
                t = time.monotonic()
                push_layout(
                    client,
                    Layout(first.layout),
                    parse_reference(f"{host}/bench-{mode}/{spec.title}:1"),
                    chunk_size=size,
                )
                secs = time.monotonic() - t
            out[f"push_{mode}_s"] = secs
            out[f"push_{mode}_mb_s"] = mb / secs
        with RegistryClient(host, insecure=True) as client:
            t = time.monotonic()
            pull_layout(client, parse_reference(f"{host}/bench-chunked/{spec.title}:1"), work / "pulled")
            out["pull_s"] = time.monotonic() - t
            out["pull_mb_s"] = mb / out["pull_s"]
        t = time.monotonic()
        unpack_layout(Layout(work / "pulled"), work / "root")
        out["unpack_s"] = time.monotonic() - t
        out["unpacked_equals_record"] = verify_tree(work / "root", record) == []
    finally:
        proc.terminate()
        proc.wait(10)
    out["anchors_mb"] = ANCHORS_MB
    return out


def table(r: dict[str, Any]) -> str:
    rows = [
        ("image", r["image"]),
        ("manifest digest", r["manifest_digest"]),
        ("same digest in another dir", r["stable_across_dirs"]),
        ("layer tar", f"{r['tar_mb']:.1f} MB ({r['entries']} entries)"),
        ("layer tar+gzip", f"{r['gzip_mb']:.1f} MB"),
        ("layer tar+zstd", "not offered (no stdlib zstd before Python 3.14)"),
        ("write image", f"{r['write_s']:.2f} s"),
        ("push, monolithic", f"{r['push_monolithic_s']:.2f} s  {r['push_monolithic_mb_s']:.1f} MB/s"),
        ("push, chunked", f"{r['push_chunked_s']:.2f} s  {r['push_chunked_mb_s']:.1f} MB/s"),
        ("pull", f"{r['pull_s']:.2f} s  {r['pull_mb_s']:.1f} MB/s"),
        ("unpack", f"{r['unpack_s']:.2f} s, equals record: {r['unpacked_equals_record']}"),
    ]
    rows += [(name, f"{mb:.0f} MB  (ours is {r['gzip_mb'] / mb:.3f}x)") for name, mb in r["anchors_mb"].items()]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record", type=Path, help="record.json of a build (WORK_DIR/llvm/<variant>/record.json)")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    ap.add_argument("--chunk-size", type=int, default=16 << 20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oci-bench-") as tmp:
        result = bench(args.record.resolve(), Path(tmp), args.chunk_size)
    print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
