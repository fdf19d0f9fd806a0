"""tilec's cold compile in processes of different states, side by side: does what else a process holds slow it?

    PYTHONPATH=<a tilec site>:. python3 -m bench.tilec_process_state [--rounds 3] [--reps 20] [--out DIR]
        [--target sm_90] [--states bare,thread,torch,triton]

The cold bench (bench/tilec_compile.py) compiles in a process that holds torch, a CUDA context and Triton;
the assembler bench (bench/tilec_assembler_floor.py) in one that holds only tilec, and there the same
nvPTXCompiler call took about half the time on the same runner. Each round runs one fresh process per state,
taking turns which goes first; each compiles every bench kernel (vadd, vadd_v8, expsin: tilec_kernels.py)
--reps times back to back, cache off, tilec's default assembler (bench/tilec_heap_pad.py's child), after the
state is set up:

    bare     nothing else
    thread        one more Python thread, idle (glibc's malloc and locks take their multi-threaded paths)
    torch-import  torch imported, no CUDA context
    cuda          the device's primary CUDA context made current through cuda-bindings, no torch
    torch         torch imported and a CUDA context made through it (needs a GPU, as the next)
    triton        torch's state, then one Triton kernel compiled (the cold bench's process)

With --compile-thread each process runs its compiles on one new thread instead of its main thread (glibc
gives a new thread its own malloc arena).

Prints per kernel the median compile and stages of each state over the rounds and the ratio to `bare`;
writes OUT/bench-process-state.json. Kernels and stages are timed as tilec_heap_pad times them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
from typing import Any

from bench import tilec_benchlib as lib
from bench.tilec_heap_pad import KERNELS
from bench.tilec_heap_pad import child as compile_loop

STATES = ("bare", "thread", "torch-import", "cuda", "torch", "triton")


def set_up(state: str) -> Any:
    """Put this process in `state`; returns what must stay alive (the idle thread's stop event)."""
    if state == "bare":
        return None
    if state == "thread":
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        return stop
    if state == "cuda":
        from cuda.bindings import driver

        def ok(res: Any) -> Any:
            if res[0] != driver.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"CUDA driver: {res[0]}")
            return res[1] if len(res) > 1 else None

        ok(driver.cuInit(0))
        ok(driver.cuCtxSetCurrent(ok(driver.cuDevicePrimaryCtxRetain(ok(driver.cuDeviceGet(0))))))
        return None
    import torch

    if state == "torch-import":
        return None
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    if state == "triton":
        from bench import tilec_triton

        t = torch.randn(4096, device="cuda")
        tilec_triton.vadd_warmup_only.warmup(t, t, 4096, BLOCK=256, grid=(1,))
    return None


def child(state: str, reps: int, target: str, on_thread: bool) -> dict[str, Any]:
    keep = set_up(state)
    out: dict[str, Any] = {}

    def work() -> None:
        out.update({kernel: compile_loop(kernel, reps, target) for kernel in KERNELS})

    if on_thread:
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        if len(out) != len(KERNELS):
            raise RuntimeError("the compile thread failed (its traceback is above)")
    else:
        work()
    out["threads"] = threading.active_count()
    del keep
    return out


def run_child(state: str, reps: int, target: str, on_thread: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.tilec_process_state", "--child", state, "--reps", str(reps), "--target", target]
    cmd += ["--compile-thread"] if on_thread else []
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the {state} process failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--states", default=",".join(STATES), help="comma-separated, of: " + ", ".join(STATES))
    ap.add_argument("--compile-thread", action="store_true", help="compile on a new thread in each process")
    ap.add_argument("--child", choices=STATES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.reps, args.target, args.compile_thread)))
        return 0
    states = [s for s in args.states.split(",") if s]
    unknown = [s for s in states if s not in STATES]
    if unknown or "bare" not in states:
        ap.error(f"--states takes {', '.join(STATES)} and must include bare; got {args.states!r}")
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        order = states if r % 2 == 0 else states[::-1]
        print(f"== round {r + 1} of {args.rounds}: {', '.join(order)}", flush=True)
        rounds.append({s: run_child(s, args.reps, args.target, args.compile_thread) for s in order})
    res: dict[str, Any] = {"bench": "tilec-process-state", "machine": lib.machine(), "target": args.target,
                           "reps": args.reps, "compile_thread": args.compile_thread, "states": states, "rounds": rounds, "medians": {}}
    for kernel in KERNELS:
        print(f"\n{kernel}: median over {args.rounds} rounds of each process's median compile (ms)")
        med: dict[str, Any] = {}
        for s in states:
            whole = statistics.median(rd[s][kernel]["compile_ms"] for rd in rounds)
            stage_names = rounds[0][s][kernel]["stages_ms"]
            stages = {n: statistics.median(rd[s][kernel]["stages_ms"][n] for rd in rounds) for n in stage_names}
            med[s] = {"compile_ms": whole, "stages_ms": stages}
        res["medians"][kernel] = med
        rows = [[s, m["compile_ms"], sum(v for n, v in m["stages_ms"].items() if n != "cubin"),
                 m["stages_ms"].get("cubin"), m["compile_ms"] / med["bare"]["compile_ms"]] for s, m in med.items()]
        print(lib.table(["process", "compile", "LLVM stages", "cubin", "compile / bare"], rows))
    print()
    lib.save(args.out, "bench-process-state.json", res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
