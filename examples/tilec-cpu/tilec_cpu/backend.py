"""Backend `cpu`: GPU-style kernels lowered through the tilec core's X86 target to a shared object.

Targets: `cpu` / `cpu:x86-64` (portable), `cpu:native` (this machine's processor),
or any X86 processor LLVM knows (`cpu:x86-64-v3`, `cpu:znver4`, ...).

Stages: `llir` (tilec's front end: kernel chosen, specialized, host data layout),
`llir_host` (the NVVM special registers read from a per-thread launch context,
libdevice `__nv_*` calls mapped to libm, and a launch function that runs every
thread of every block in turn), `llir_opt`, `asm`, `obj`, and `so` (linked with
the system C compiler driver). Launching loads the `.so` once with ctypes.

Threads run one after another, so kernels that synchronise threads (barriers)
are refused at compile time.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from tilec import native
from tilec.backends import Backend, Stage, StageContext, Target, front_end
from tilec.errors import (
    CompileError,
    LaunchArgumentError,
    LaunchValueError,
    TargetError,
    ToolError,
    ToolNotFoundError,
)
from tilec.kernel import CompiledKernel, CompileOptions
from tilec.launch import pack_args
from tilec.settings import Settings

TRIPLE = "x86_64-unknown-linux-gnu"
LAUNCH_PREFIX = "tilec_cpu_launch_"
_SREG = re.compile(r"@llvm\.nvvm\.read\.ptx\.sreg\.(tid|ntid|ctaid|nctaid)\.([xyz])\b")
_SREG_DECL = re.compile(r"^declare [^\n]*@llvm\.nvvm\.read\.ptx\.sreg\.[a-z.]+\([^\n]*\n", re.M)
_NVVM = re.compile(r"@(llvm\.nvvm\.[A-Za-z0-9_.]+)")
_LIBDEVICE = re.compile(r"@__nv_([A-Za-z0-9_]+)\b")
# Launch context slots: tid, ntid, ctaid, nctaid (x, y, z each).
_SLOT = {
    (reg, axis): 3 * r + a for r, reg in enumerate(("tid", "ntid", "ctaid", "nctaid")) for a, axis in enumerate("xyz")
}


def _quote(name: str) -> str:
    return '@"' + name.replace("\\", "\\5C").replace('"', "\\22") + '"'


def _launch_function(kernel: str, param_types: tuple[str, ...]) -> str:
    """`void tilec_cpu_launch_<kernel>(void **args, uint32_t dims[6])`: the whole grid."""
    lines = [
        f"define void {_quote(LAUNCH_PREFIX + kernel)}(ptr %args, ptr %dims) {{",
        "entry:",
    ]
    for i in range(6):
        lines += [
            f"  %dp{i} = getelementptr inbounds i32, ptr %dims, i64 {i}",
            f"  %d{i} = load i32, ptr %dp{i}",
        ]
    for axis, i in zip("xyz", range(3), strict=True):
        lines += [
            f"  store i32 %d{3 + i}, ptr getelementptr inbounds "
            f"([12 x i32], ptr @__tilec_cpu_ctx, i64 0, i64 {_SLOT[('ntid', axis)]})",
            f"  store i32 %d{i}, ptr getelementptr inbounds "
            f"([12 x i32], ptr @__tilec_cpu_ctx, i64 0, i64 {_SLOT[('nctaid', axis)]})",
        ]
    for i, ty in enumerate(param_types):
        lines += [
            f"  %ap{i} = getelementptr inbounds ptr, ptr %args, i64 {i}",
            f"  %aq{i} = load ptr, ptr %ap{i}",
            f"  %a{i} = load {ty}, ptr %aq{i}",
        ]
    # Blocks z, y, x, then threads z, y, x; each level stores its index into the context.
    levels = [("ctaid", "z", 2), ("ctaid", "y", 1), ("ctaid", "x", 0)]
    levels += [("tid", "z", 5), ("tid", "y", 4), ("tid", "x", 3)]
    pred = "entry"
    lines.append("  br label %L0.head")
    for k, (reg, axis, dim) in enumerate(levels):
        lines += [
            f"L{k}.head:",
            f"  %v{k} = phi i32 [ 0, %{pred} ], [ %v{k}.next, %L{k}.latch ]",
            f"  %c{k} = icmp ult i32 %v{k}, %d{dim}",
            f"  br i1 %c{k}, label %L{k}.body, label %L{k}.exit",
            f"L{k}.body:",
            f"  store i32 %v{k}, ptr getelementptr inbounds "
            f"([12 x i32], ptr @__tilec_cpu_ctx, i64 0, i64 {_SLOT[(reg, axis)]})",
        ]
        pred = f"L{k}.body"
        if k + 1 < len(levels):
            lines.append(f"  br label %L{k + 1}.head")
    args = ", ".join(f"{ty} %a{i}" for i, ty in enumerate(param_types))
    lines += [f"  call void {_quote(kernel)}({args})", f"  br label %L{len(levels) - 1}.latch"]
    for k in reversed(range(len(levels))):
        lines += [
            f"L{k}.latch:",
            f"  %v{k}.next = add nuw i32 %v{k}, 1",
            f"  br label %L{k}.head",
            f"L{k}.exit:",
        ]
        lines.append(f"  br label %L{k - 1}.latch" if k > 0 else "  ret void")
    lines.append("}")
    return "\n".join(lines)


def _context_functions() -> str:
    out = ["@__tilec_cpu_ctx = internal thread_local global [12 x i32] zeroinitializer, align 4"]
    for (reg, axis), slot in sorted(_SLOT.items(), key=lambda kv: kv[1]):
        out += [
            f"define internal i32 @__tilec_cpu_{reg}_{axis}() alwaysinline nounwind {{",
            f"  %v = load i32, ptr getelementptr inbounds ([12 x i32], ptr @__tilec_cpu_ctx, i64 0, i64 {slot})",
            "  ret i32 %v",
            "}",
        ]
    return "\n".join(out)


def lower_to_host(text: str, kernel: str, param_types: tuple[str, ...]) -> str:
    """The front end's module with GPU intrinsics replaced and the launch function added."""
    if re.search(r"@llvm\.nvvm\.(barrier|bar\.|bar_)", text):
        raise CompileError(
            f"kernel {kernel!r} synchronises threads (llvm.nvvm.barrier*); the cpu backend runs "
            "threads one after another and cannot honour barriers"
        )
    text = _SREG_DECL.sub("", text)
    text = "\n".join(re.sub(r"\)\s*#\d+\s*$", ")", line) if _SREG.search(line) else line for line in text.split("\n"))
    text = _SREG.sub(lambda m: f"@__tilec_cpu_{m.group(1)}_{m.group(2)}", text)
    left = sorted(set(_NVVM.findall(text)))
    if left:
        raise CompileError(f"kernel {kernel!r} uses NVVM intrinsics the cpu backend does not lower: " + ", ".join(left))
    text = _LIBDEVICE.sub(lambda m: f"@{m.group(1)}", text)  # __nv_expf -> expf (libm)
    text = text.replace("ptx_kernel ", "")
    return f"{text}\n{_context_functions()}\n{_launch_function(kernel, param_types)}\n"


def _cc(settings: Settings) -> Path:
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name, path=settings.path or os.defpath)
        if found:
            return Path(found)
    raise ToolNotFoundError("the cpu backend links with a C compiler driver (cc, gcc or clang); none on PATH")


def link_shared(settings: Settings, obj: bytes) -> bytes:
    cc = _cc(settings)
    with tempfile.TemporaryDirectory(prefix="tilec-cpu-") as tmp:
        o, so = Path(tmp) / "kernel.o", Path(tmp) / "kernel.so"
        o.write_bytes(obj)
        cmd = [str(cc), "-shared", "-o", str(so), str(o), "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        if proc.returncode != 0 or not so.is_file():
            raise ToolError("linking the host shared object", cmd, proc.returncode, proc.stdout + proc.stderr)
        return so.read_bytes()


def host_pointer(value: Any, where: str) -> int:
    """A host address: NumPy arrays (__array_interface__), ctypes arrays/pointers, ints, None."""
    if value is None:
        return 0
    if hasattr(value, "__cuda_array_interface__") and not hasattr(value, "__array_interface__"):
        raise LaunchArgumentError(f"{where}: device memory cannot be passed to the cpu backend")
    iface = getattr(value, "__array_interface__", None)
    if iface is not None:
        return int(iface["data"][0])
    if isinstance(value, (ctypes.Array, ctypes.Structure)):
        return ctypes.addressof(value)
    if isinstance(value, ctypes._Pointer | ctypes.c_void_p):
        return int(ctypes.cast(value, ctypes.c_void_p).value or 0)
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < 2**64:
            raise LaunchValueError(f"{where}: pointer value {value:#x} is outside 0..2**64-1")
        return value
    raise LaunchArgumentError(
        f"{where}: expected host memory (a NumPy array, a ctypes array or pointer, or an int), "
        f"got {type(value).__name__}"
    )


class CPUKernel(CompiledKernel):
    """Loads the shared object once (ctypes) and calls its launch function."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._lib: ctypes.CDLL | None = None
        self._fn: Any = None

    def _entry(self) -> Any:
        with self._lock:
            if self._fn is None:
                fd, path = tempfile.mkstemp(prefix=f"tilec-cpu-{self.name[:40]}-", suffix=".so")
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(self.asm["so"])
                    self._lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
                finally:
                    os.unlink(path)  # the mapping stays valid
                fn = getattr(self._lib, LAUNCH_PREFIX + self.name)
                fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
                fn.restype = None
                self._fn = fn
            return self._fn

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        stream: Any = None,
        shared_mem: int = 0,
    ) -> None:
        if stream is not None:
            raise LaunchArgumentError("the cpu backend runs synchronously; pass no stream")
        if shared_mem:
            raise LaunchValueError("the cpu backend has no dynamic shared memory")
        packed = pack_args(self.signature, args, pointer=host_pointer)
        dims = (ctypes.c_uint32 * 6)(*grid, *block)
        self._entry()(packed.address, ctypes.addressof(dims))

    def close(self) -> None:
        with self._lock:
            self._fn = None
            self._lib = None  # ctypes keeps no dlclose; the mapping goes with the process


class CPUBackend(Backend):
    name = "cpu"
    version = "1"
    description = "kernels on the host CPU through LLVM's X86 target (example plugin)"
    binary_stage = "so"
    binary_format = "elf-shared-object"
    kernel_class = CPUKernel
    default_arch = "x86-64"

    def parse_target(self, arch: str, options: CompileOptions) -> Target:
        if "x86-64" not in native.registered_targets():
            raise TargetError(
                "this tilec core was built without LLVM's X86 target; rebuild it with "
                "-Ccmake.define.TILEC_WITH_X86=ON against an LLVM that has X86"
            )
        if arch == "native":
            return Target(self.name, native.host_cpu(), native.host_features())
        procs = native.target_info(TRIPLE).processors
        if arch not in procs:
            raise TargetError(
                f"unknown target 'cpu:{arch}'; use cpu:native or an X86 processor, e.g. "
                + ", ".join(p for p in ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4") if p in procs)
            )
        return Target(self.name, arch, "")

    def stages(self, target: Target, options: CompileOptions, settings: Settings) -> dict[str, Stage]:
        cpu, feats, level = target.arch, target.features, options.opt_level

        def llir_host(src: str, ctx: StageContext) -> str:
            text = lower_to_host(src, ctx.metadata.name, ctx.metadata.signature)
            with native.NativeModule(text, name="<tilec-cpu llir_host>") as mod:
                mod.verify()
                return mod.to_text()

        def llir_opt(src: str, ctx: StageContext) -> str:
            with native.NativeModule(src, name="<tilec-cpu llir_host>") as mod:
                ctx.passes += mod.optimize(cpu, feats, level, triple=TRIPLE, dump_passes=ctx.dump_passes)
                return mod.to_text()

        def asm(src: str, ctx: StageContext) -> str:
            with native.NativeModule(src, name="<tilec-cpu llir_opt>") as mod:
                return mod.emit_assembly(cpu, feats, level, triple=TRIPLE, pic=True)

        def obj(src: str, ctx: StageContext) -> bytes:
            # From the optimized IR (an earlier stage), not from the assembly text.
            with native.NativeModule(ctx.outputs["llir_opt"], name="<tilec-cpu llir_opt>") as mod:
                return mod.emit_object(cpu, feats, level, triple=TRIPLE, pic=True)

        return {
            "llir": lambda src, ctx: front_end(src, ctx, TRIPLE, cpu, feats),
            "llir_host": llir_host,
            "llir_opt": llir_opt,
            "asm": asm,
            "obj": obj,
            "so": lambda o, ctx: link_shared(ctx.settings, o),
        }

    def cache_key(self, target: Target, options: CompileOptions, settings: Settings) -> Any:
        try:
            cc = _cc(settings)
        except ToolNotFoundError:
            return {"cc": None}
        proc = subprocess.run([str(cc), "--version"], capture_output=True, text=True, check=False)
        return {"cc": [str(cc), proc.stdout.splitlines()[0] if proc.stdout else ""]}
