"""OCI bench: layer size, time to write the image, push/pull throughput against a local registry.

    python3 -m bench.oci_bench build/llvm/support/record.json [--json reports/oci-support.json]
    python3 -m bench.oci_bench build/llvm/support/record.json --compression [--json reports/oci-zstd-support.json]

Starts Debian's docker-registry on 127.0.0.1 (a free port, storage in a temp
dir), writes the image twice (the second run in another directory must give
the same manifest digest), pushes it (monolithic and chunked), pulls it back
and unpacks it. Anchors for the compressed size are printed beside ours.

--compression writes the same tree's image with gzip and with zstd side by
side in one run (each twice, alternating; the best time counts), unpacks
each, and compresses the layer's tar at other zstd levels with the layer's
frame parameters, to show what the fixed level buys; no registry.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zstandard

from devtools.servers import Registry
from hermetic.oci.image import ImageSpec, spec_from_record, write_image
from hermetic.oci.layer import ZSTD_LEVEL, compressor_version, write_tar
from hermetic.oci.layout import Layout
from hermetic.oci.registry import RegistryClient
from hermetic.oci.transfer import pull_layout, push_layout
from hermetic.oci.types import parse_reference
from hermetic.oci.unpack import unpack_layout, verify_tree

ANCHORS_MB = {
    "Triton's former community LLVM (compressed)": 950.0,
    "Triton's 2026 trimmed build (compressed)": 350.0,
    "hand-made slim build incl. MLIR (compressed)": 130.0,
}


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
        "entries": first.layer.entries,
        "write_s": write_s,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    registry = Registry(work)
    registry.start()
    host = registry.host
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
        registry.stop()
    out["anchors_mb"] = ANCHORS_MB
    return out


def best_of(n: int, fn: Any) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(n):
        t = time.monotonic()
        result = fn()
        best = min(best, time.monotonic() - t)
    return best, result


def level_sweep(spec: ImageSpec, work: Path, levels: list[int]) -> list[dict[str, Any]]:
    """The layer's tar compressed at each level, with the layer's frame parameters otherwise."""
    tar_path = work / "layer.tar"
    with open(tar_path, "wb") as f:
        write_tar(f, spec.install_root, spec.prefix, spec.epoch)
    tar = tar_path.read_bytes()
    rows = []
    for level in levels:
        cctx = zstandard.ZstdCompressor(
            level=level, write_checksum=True, write_content_size=False, write_dict_id=False, threads=0
        )

        def streamed(c: zstandard.ZstdCompressor = cctx) -> bytes:
            chunks = c.compressobj()
            return b"".join([chunks.compress(tar), chunks.flush()])

        secs, blob = best_of(1, streamed)
        frame = zstandard.get_frame_parameters(blob)
        t = time.monotonic()
        zstandard.ZstdDecompressor().decompressobj().decompress(blob)
        rows.append(
            {
                "level": level,
                "mb": len(blob) / 1e6,
                "ratio_to_tar": len(blob) / len(tar),
                "compress_s": secs,
                "decompress_s": time.monotonic() - t,
                "window_mib": frame.window_size / (1 << 20),
                "is_layer_level": level == ZSTD_LEVEL,
            }
        )
    return rows


def compare(record: Path, work: Path, levels: list[int]) -> dict[str, Any]:
    spec = spec_from_record(record)
    out: dict[str, Any] = {"image": spec.name, "cpus": os.cpu_count(), "machine": platform.machine()}
    results = {}
    times: dict[str, float] = {"gzip": float("inf"), "zstd": float("inf")}
    for i in range(2):  # alternate, so a busy neighbour slows both alike
        for comp in ("gzip", "zstd"):
            t = time.monotonic()
            r = write_image(spec, work / f"{comp}-{i}" / "layout", comp)
            times[comp] = min(times[comp], time.monotonic() - t)
            if comp in results:
                assert r.manifest.digest == results[comp].manifest.digest, f"{comp} image differs between runs"
            results[comp] = r
    gz, zs = results["gzip"], results["zstd"]
    for comp, r in results.items():
        secs, _ = best_of(1, lambda r=r, comp=comp: unpack_layout(Layout(r.layout), work / f"root-{comp}"))
        out[comp] = {
            "compressor": compressor_version(comp),
            "media_type": r.layer.media_type,
            "layer_digest": r.layer.digest,
            "manifest_digest": r.manifest.digest,
            "mb": r.layer.size / 1e6,
            "ratio_to_tar": r.layer.size / r.layer.tar_size,
            "write_image_s": times[comp],
            "unpack_s": secs,
            "unpacked_equals_record": verify_tree(work / f"root-{comp}", record) == [],
            "stable_across_runs": True,
        }
    out["tar_mb"] = gz.layer.tar_size / 1e6
    out["entries"] = gz.layer.entries
    out["same_diff_id"] = gz.layer.diff_id == zs.layer.diff_id
    out["diff_id"] = gz.layer.diff_id
    out["zstd_to_gzip"] = zs.layer.size / gz.layer.size
    out["zstd_levels"] = level_sweep(spec, work, levels)
    return out


def compare_table(r: dict[str, Any]) -> str:
    gz, zs = r["gzip"], r["zstd"]
    rows = [
        ("image", r["image"]),
        ("layer tar", f"{r['tar_mb']:.2f} MB ({r['entries']} entries), diff_id equal: {r['same_diff_id']}"),
        ("layer tar+gzip", f"{gz['mb']:.2f} MB ({gz['ratio_to_tar']:.3f} of tar)  {gz['compressor']}"),
        ("layer tar+zstd", f"{zs['mb']:.2f} MB ({zs['ratio_to_tar']:.3f} of tar)  {zs['compressor']}"),
        ("zstd / gzip", f"{r['zstd_to_gzip']:.3f}"),
        ("write image gzip / zstd", f"{gz['write_image_s']:.2f} s / {zs['write_image_s']:.2f} s"),
        ("unpack gzip / zstd", f"{gz['unpack_s']:.2f} s / {zs['unpack_s']:.2f} s"),
        ("unpacked equals record", f"gzip {gz['unpacked_equals_record']}, zstd {zs['unpacked_equals_record']}"),
    ]
    for lv in r["zstd_levels"]:
        rows.append(
            (
                f"zstd level {lv['level']}{' (layers)' if lv['is_layer_level'] else ''}",
                f"{lv['mb']:.3f} MB  compress {lv['compress_s']:.2f} s  decompress {lv['decompress_s']:.3f} s  "
                f"window {lv['window_mib']:g} MiB",
            )
        )
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def table(r: dict[str, Any]) -> str:
    rows = [
        ("image", r["image"]),
        ("manifest digest", r["manifest_digest"]),
        ("same digest in another dir", r["stable_across_dirs"]),
        ("layer tar", f"{r['tar_mb']:.1f} MB ({r['entries']} entries)"),
        ("layer tar+gzip", f"{r['gzip_mb']:.1f} MB"),
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
    ap.add_argument("--compression", action="store_true", help="gzip and zstd side by side, and a zstd level sweep")
    ap.add_argument("--levels", default="3,9,15,19,20,22", help="zstd levels for the sweep (with --compression)")
    ap.add_argument("--note", default="", help="with --compression: where it ran, stored in the JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="oci-bench-") as tmp:
        if args.compression:
            result = compare(args.record.resolve(), Path(tmp), [int(x) for x in args.levels.split(",")])
            result["note"] = args.note
            print(compare_table(result))
        else:
            result = bench(args.record.resolve(), Path(tmp), args.chunk_size)
            print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
