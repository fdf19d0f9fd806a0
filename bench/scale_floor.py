"""Where a scale report's builds spend their time: the floor analysis of a warm rebuild.

    python3 -m bench.scale_floor REPORT.json LOGS.tar.xz [--json OUT.json]

REPORT is bench/scale_bench.py's report, LOGS what `tests/gpu/runner/device.sh collect scale` packed
(scale-logs.tar.xz: each run's record.json and ninja log, and times.txt / zig-cache-times.txt, the
modification times of the configure's, ninja's and zig's outputs). For each built run it splits the
command's wall time into phases, from the record's start and finish (whole seconds) and those file times:

- outside the build: the command's wall time less the record's (plan, digests, printing);
- before configure: record start to Conan's conan_toolchain.cmake (export, source unpack, profiles);
- configure: to build.ninja (CMake's checks; zig builds its own runtimes on the first link);
- ninja: to the ninja log's last write (the build; ccache answers the compiles);
- after: to the record's finish (install, tree digest, test_package).

Inside ninja it sums the edges of each kind (compile, tablegen, archive, link, install, other) from the
ninja log: how many, their seconds added up, and the seconds at least one of them was running. And it
counts what zig built into the run's own zig-cache (files, MB, first and last, after the record's start).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

from devtools.ninja_log import ninja_breakdown


def seconds(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def floor(report: dict[str, Any], files: dict[str, bytes]) -> dict[str, Any]:
    base = report["runs"]["cold"]["work_dir"].rsplit("/a/work", 1)[0] + "/"
    times: dict[str, float] = {}
    for line in files["./times.txt"].decode().splitlines():
        t, _size, path = line.split(" ", 2)
        times[path.removeprefix(base)] = float(t)
    zig = [(float(t), int(size), path.removeprefix(base))
           for t, size, path in (line.split(" ", 2) for line in files["./zig-cache-times.txt"].decode().splitlines())]
    out: dict[str, Any] = {}
    for name, run in report["runs"].items():
        rel = run["work_dir"].removeprefix(base)
        rec_name = f"./{rel}/llvm/{report['variant']}/record.json"
        logs = [k for k in files if k.startswith(f"./{rel}/") and k.endswith("/.ninja_log")]
        if rec_name not in files or not logs:
            continue  # substituted: nothing built
        rec = json.loads(files[rec_name])
        t0, t1 = seconds(rec["started"]), seconds(rec["finished"])

        def mtime(suffix: str, rel: str = rel) -> float:
            return next(v for k, v in times.items() if k.startswith(rel + "/") and k.endswith(suffix))

        toolchain_file, ninja_file, ninja_log = mtime("/conan_toolchain.cmake"), mtime("/build.ninja"), mtime("/.ninja_log")
        built = [(t, size) for t, size, path in zig if path.startswith(rel + "/")]
        out[name] = {
            "wall_s": run["wall_s"],
            "record_wall_time_s": rec["wall_time_s"],
            "phases_s": {
                "outside_the_build": round(run["wall_s"] - rec["wall_time_s"], 1),
                "before_configure": round(toolchain_file - t0, 1),
                "configure": round(ninja_file - toolchain_file, 1),
                "ninja": round(ninja_log - ninja_file, 1),
                "after": round(t1 - ninja_log, 1),
            },
            "ninja": ninja_breakdown(files[logs[0]].decode()),
            "zig_cache": {"files": len(built), "mb": round(sum(s for _, s in built) / 1e6, 1),
                          "first_s": round(min(t for t, _ in built) - t0, 1) if built else None,
                          "last_s": round(max(t for t, _ in built) - t0, 1) if built else None,
                          # zig's runtimes (libc++, libc++abi, libunwind, compiler-rt, ...): when each was done
                          "archives_s": {path.rsplit("/", 1)[1]: round(t - t0, 1) for t, _, path in sorted(zig)
                                         if path.startswith(rel + "/") and "/global/" in path and path.endswith(".a")}},
            "ccache": (run.get("compile_cache") or {}).get("stats"),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("logs", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    report = json.loads(args.report.read_text())
    with tarfile.open(args.logs) as tar:
        files = {m.name if m.name.startswith("./") else "./" + m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                 for m in tar.getmembers() if m.isfile()}
    result = {
        "what": "where each built run of a scale report spent its time (bench/scale_floor.py)",
        "command": "python3 -m bench.scale_floor " + " ".join(sys.argv[1:]),
        "report": str(args.report),
        "note": "phase edges are file modification times and the record's start and finish (whole seconds): "
                "each phase is good to about a second",
        "runs": floor(report, files),
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.json:
        args.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
