"""Does nvJitLink answer PTX -> cubin from a cache? Timed compiles of the same PTX, of PTX that
differs by a comment only, and of PTX whose entry point is renamed, each kind in fresh processes,
with the environment as it is, with CUDA_CACHE_DISABLE=1, and with nvJitLink's `-no-cache`.

    python3 -m bench.nvjitlink_cache --ptx-dir DIR [--arch sm_90] [--reps 5] [--json OUT.json]

DIR holds `<name>.ptx` files (bench/tilec_assembler.py's kernels, lowered by tilec). Why: on a GPU
runner, nvJitLink compiled the bench kernels in 0.2-0.3 ms where the same PTX took it 10-20 ms
elsewhere, also with a comment making each PTX unique, so cold-compile figures taken through
nvJitLink may be a cache's, not a compiler's. Uses cuda-bindings' `cuda.bindings.nvjitlink`, the
library tilec's `assembler="nvjitlink"` loads. Lists the files under ~/.nv before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import tilec_benchlib as lib

ROOT = Path(__file__).resolve().parents[1]  # children run as `-m bench.NAME` from the checkout

CHILD = "--child"
KINDS = ("same", "comment", "renamed")
SETTINGS: dict[str, tuple[dict[str, str], list[str]]] = {
    "as is": ({}, []),
    "CUDA_CACHE_DISABLE=1": ({"CUDA_CACHE_DISABLE": "1"}, []),
    "-no-cache": ({}, ["-no-cache"]),
}


def variant(ptx: str, kind: str, rep: int) -> str:
    if kind == "same":
        return ptx
    if kind == "comment":
        return ptx + f"\n// rep {rep}\n"
    entry = re.search(r"\.entry\s+(\w+)", ptx)
    assert entry, "no .entry in the PTX"
    return re.sub(rf"\b{entry.group(1)}\b", f"{entry.group(1)}_r{rep}", ptx)


def child(ptx_file: str, kind: str, arch: str, reps: int, extra: list[str]) -> dict[str, Any]:
    # cuda-bindings' API directly, not tilec's nvjitlink.assemble: the probe runs where no tilec is installed
    from cuda.bindings import nvjitlink as nj

    ptx = Path(ptx_file).read_text()
    opts = [f"-arch={arch}", "-O3", *extra]
    times = []
    for rep in range(reps + 1):
        data = variant(ptx, kind, rep).encode()
        t0 = time.perf_counter()
        h = nj.create(len(opts), opts)
        nj.add_data(h, nj.InputType.PTX, data, len(data), "k.ptx")
        nj.complete(h)
        size = nj.get_linked_cubin_size(h)
        nj.destroy(h)
        times.append(time.perf_counter() - t0)
        assert size > 0
    # the first compile loads and initialises the library: reported apart
    return {"first_ms": times[0] * 1e3, "ms": [t * 1e3 for t in times[1:]], "library": lib.loaded_nvjitlink()}


def nv_files() -> list[str]:
    root = Path.home() / ".nv"
    if not root.is_dir():
        return []
    return sorted(f"{p.relative_to(root)} {p.stat().st_size}" for p in root.rglob("*") if p.is_file())[:50]


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        ptx_file, kind, arch, reps, extra = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6:]
        print("RESULT " + json.dumps(child(ptx_file, kind, arch, reps, extra)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ptx-dir", required=True)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    res: dict[str, Any] = {"nv_before": nv_files(), "runs": {}}
    for ptx_file in sorted(Path(a.ptx_dir).glob("*.ptx")):
        for label, (env, extra) in SETTINGS.items():
            for kind in KINDS:
                cmd = [sys.executable, "-m", "bench.nvjitlink_cache", CHILD, str(ptx_file), kind, a.arch, str(a.reps), *extra]
                proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=600, cwd=ROOT)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                if not lines:
                    res["runs"][f"{ptx_file.stem} | {label} | {kind}"] = {"error": proc.stderr[-1500:]}
                    continue
                r = json.loads(lines[-1][len("RESULT ") :])
                r["median_ms"] = lib.stats(r["ms"])["median"]
                res["runs"][f"{ptx_file.stem} | {label} | {kind}"] = r
                print(f"{ptx_file.stem:10s} {label:22s} {kind:8s} first {r['first_ms']:7.2f} ms, then median {r['median_ms']:7.2f} ms")
    res["nv_after"] = nv_files()
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
