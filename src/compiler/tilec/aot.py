"""Ahead-of-time kernels as C sources: `tilec aot` and `tilec aot-link`.

`compile()` compiles one kernel (one specialization) for a CUDA target with no GPU
present and gives a `.c`/`.h` pair: the cubin embedded as a byte array (PTX too,
optionally, as the driver-JIT fallback), and a launcher that loads the module
lazily, exactly once and thread-safely (pthread_once), caches the CUfunction,
checks every driver call, and launches through a typed C signature taking the
stream and the grid. Names and the header carry the specialization.

`link()` puts several AOT kernels into one library and adds, per kernel, a
dispatcher taking all of the kernel's parameters that picks the most specific
specialization that fits the runtime arguments (and the device, when several
archs are linked), and fails with CUDA_ERROR_NOT_FOUND and a message naming the
arguments and the compiled specializations when none fits.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llvmlite.ir

from .compiler import compile as compile_kernel
from .errors import AotError, BackendError
from .kernel import CompiledKernel, __version__
from .settings import Settings
from .specialize import Constant, ParamRef

FORMAT = "tilec-aot/1"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INT_BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}
_C_TYPES = {
    "i8": "int8_t",
    "i16": "int16_t",
    "i32": "int32_t",
    "i64": "int64_t",
    "float": "float",
    "double": "double",
}
_SM = re.compile(r"^sm_(\d+)(a?)$")
_LAUNCH_ARGS = (
    "CUstream stream",
    "unsigned int grid_x",
    "unsigned int grid_y",
    "unsigned int grid_z",
)


def c_type(llvm_type: str) -> str:
    if llvm_type == "ptr" or llvm_type.startswith("ptr "):
        return "CUdeviceptr"
    try:
        return _C_TYPES[llvm_type]
    except KeyError:
        raise AotError(f"no C type for kernel parameter type {llvm_type!r}") from None


@dataclass(frozen=True)
class AotParam:
    name: str
    llvm_type: str

    @property
    def c_type(self) -> str:
        return c_type(self.llvm_type)

    def decl(self) -> str:
        return f"{self.c_type} {self.name}"


def _dim3(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    dims = [value] if isinstance(value, int) else list(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d >= 1 for d in dims):
        raise AotError(f"{what} must be 1 to 3 positive ints, got {value!r}")
    dims += [1] * (3 - len(dims))
    if dims[0] * dims[1] * dims[2] > 1024:
        raise AotError(f"{what} {tuple(dims)} has more than 1024 threads")
    return dims[0], dims[1], dims[2]


@dataclass(frozen=True)
class AotKernel:
    """One compiled specialization with what its C launcher needs (see `to_json`)."""

    name: str  # the C launcher's name
    entry: str  # the cubin's entry point (the specialization's kernel name)
    kernel: str  # the kernel it was specialized from
    target: str  # "cuda:sm_90"
    arch: str  # "sm_90"
    params: tuple[AotParam, ...]  # the launcher's kernel parameters
    base_params: tuple[AotParam, ...]  # all of the kernel's parameters
    constants: tuple[tuple[str, Constant], ...]  # fixed at compile time (by base param name)
    multiple_of: tuple[tuple[str, int], ...]  # assumed multiples
    block: tuple[int, int, int]
    shared_mem: int
    cubin: bytes
    ptx: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    # -- description -------------------------------------------------------------
    def conditions(self) -> list[str]:
        return [f"{n} == {v!r}" for n, v in self.constants] + [
            f"{n} % {k} == 0" for n, k in self.multiple_of
        ]

    @property
    def spec_text(self) -> str:
        parts = [f"{n}={v!r}" for n, v in self.constants] + [
            f"{n}%{k}==0" for n, k in self.multiple_of
        ]
        return ",".join(parts) or "generic"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "tilec_version": __version__,
            "name": self.name,
            "entry": self.entry,
            "kernel": self.kernel,
            "target": self.target,
            "arch": self.arch,
            "params": [[p.name, p.llvm_type] for p in self.params],
            "base_params": [[p.name, p.llvm_type] for p in self.base_params],
            "constants": [[n, v] for n, v in self.constants],
            "multiple_of": [[n, k] for n, k in self.multiple_of],
            "block": list(self.block),
            "shared_mem": self.shared_mem,
            "cubin_b64": base64.b64encode(self.cubin).decode(),
            "ptx": self.ptx,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], origin: str = "<json>") -> AotKernel:
        if data.get("format") != FORMAT:
            raise AotError(f"{origin}: not a tilec AOT description (format {data.get('format')!r})")
        try:
            return cls(
                name=str(data["name"]),
                entry=str(data["entry"]),
                kernel=str(data["kernel"]),
                target=str(data["target"]),
                arch=str(data["arch"]),
                params=tuple(AotParam(str(n), str(t)) for n, t in data["params"]),
                base_params=tuple(AotParam(str(n), str(t)) for n, t in data["base_params"]),
                constants=tuple((str(n), v) for n, v in data["constants"]),
                multiple_of=tuple((str(n), int(k)) for n, k in data["multiple_of"]),
                block=_dim3(list(data["block"]), "block"),
                shared_mem=int(data["shared_mem"]),
                cubin=base64.b64decode(data["cubin_b64"]),
                ptx=data.get("ptx"),
                metadata=dict(data.get("metadata") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise AotError(f"{origin}: malformed tilec AOT description: {exc!r}") from exc

    @classmethod
    def load(cls, path: str | Path) -> AotKernel:
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise AotError(f"cannot read AOT description {p}: {exc}") from exc
        return cls.from_json(data, str(p))

    # -- C -----------------------------------------------------------------------
    def header(self) -> str:
        return _header(self.name, [self], {}, f"tilec aot ({self.target})")

    def source(self) -> str:
        return _source(self.name, f"{self.name}.h", [self], {})

    def write(self, directory: str | Path) -> list[Path]:
        """Write `<name>.h`, `<name>.c` and `<name>.json` (the input of `tilec aot-link`)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        files = {
            out / f"{self.name}.h": self.header(),
            out / f"{self.name}.c": self.source(),
            out / f"{self.name}.json": json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n",
        }
        for path, text in files.items():
            path.write_text(text)
        return list(files)


# -- compiling -------------------------------------------------------------------------
def _default_name(entry: str, arch: str) -> str:
    # Single underscores: C++ reserves names with "__" anywhere.
    return re.sub(r"_+", "_", f"{entry}_{arch.replace('sm_', 'sm')}")


def from_kernel(
    kernel: CompiledKernel,
    *,
    block: int | Sequence[int] = 128,
    shared_mem: int = 0,
    name: str | None = None,
    embed_ptx: bool = False,
) -> AotKernel:
    """The AOT description of an already compiled `cuda` kernel."""
    backend = kernel.backend
    if backend is None or backend.binary_format != "cubin":
        what = f"backend {backend.name!r} ({backend.binary_format})" if backend else "this kernel"
        raise BackendError(f"AOT C launchers need cubins; {what} does not make them")
    cubin = kernel.asm.get("cubin")
    if not cubin:
        raise AotError(
            "AOT needs the cubin, and no ptxas was found (or use_ptxas=False): set TILEC_PTXAS "
            "or CUDA_HOME, or pip install nvidia-cuda-nvcc"
        )
    md = kernel.metadata
    if name is None:
        name = _default_name(md.name, md.target)
    if not _IDENT.match(name) or "__" in name:
        raise AotError(f"launcher name {name!r} must be a C identifier without '__'")
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or shared_mem < 0:
        raise AotError(f"shared_mem must be a non-negative int, got {shared_mem!r}")
    spec = md.specialization or {}
    return AotKernel(
        name=name,
        entry=md.name,
        kernel=md.base_kernel or md.name,
        target=str(kernel.target) if kernel.target is not None else md.target,
        arch=md.target,
        params=tuple(AotParam(n, t) for n, t in zip(md.param_names, md.signature, strict=True)),
        base_params=tuple(
            AotParam(n, t) for n, t in zip(md.base_param_names, md.base_signature, strict=True)
        ),
        constants=tuple((str(n), v) for n, v in dict(spec.get("constants", {})).items()),
        multiple_of=tuple((str(n), int(k)) for n, k in dict(spec.get("multiple_of", {})).items()),
        block=_dim3(block, "block"),
        shared_mem=shared_mem,
        cubin=bytes(cubin),
        ptx=str(kernel.asm["ptx"]) if embed_ptx else None,
        metadata={
            "registers": md.registers,
            "shared_bytes": md.shared_bytes,
            "spill_stores": md.spill_stores,
            "spill_loads": md.spill_loads,
            "ptxas_version": md.ptxas_version,
            "llvm_version": md.llvm_version,
            "cache_key": kernel.key,
        },
    )


def compile(
    src: str | bytes | llvmlite.ir.Module,
    target: str = "cuda:90",
    *,
    kernel: str | None = None,
    constants: Mapping[ParamRef, Constant] | Iterable[tuple[ParamRef, Constant]] | None = None,
    multiple_of: Mapping[ParamRef, int] | Iterable[tuple[ParamRef, int]] | None = None,
    block: int | Sequence[int] = 128,
    shared_mem: int = 0,
    name: str | None = None,
    embed_ptx: bool = False,
    opt_level: int = 3,
    ptx_version: int | None = None,
    ftz: bool = False,
    ptxas_options: Sequence[str] = (),
    settings: Settings | None = None,
) -> AotKernel:
    """Compile one kernel (specialization) for `target` ("cuda:90") into an AOT description.

    Needs no GPU; needs ptxas. `block` is fixed into the launcher; `shared_mem` is
    the dynamic shared memory each launch asks for. `.write(dir)` gives the C files.
    """
    # The JIT's compile, with ptxas required: AOT embeds a cubin.
    compiled = compile_kernel(
        src, target, ptx_version, opt_level, ftz=ftz, kernel=kernel,
        ptxas_options=tuple(ptxas_options), use_ptxas=True,
        constants=constants, multiple_of=multiple_of, settings=settings,
    )
    return from_kernel(compiled, block=block, shared_mem=shared_mem, name=name, embed_ptx=embed_ptx)


# -- linking ---------------------------------------------------------------------------
def _arch_number(arch: str) -> tuple[int, bool]:
    m = _SM.match(arch)
    if not m:
        raise AotError(f"unexpected CUDA arch {arch!r}")
    return int(m.group(1)), bool(m.group(2))


def _specificity(k: AotKernel) -> tuple[int, float, int]:
    return (
        -len(k.constants),
        -sum(math.log2(m) for _, m in k.multiple_of),
        -_arch_number(k.arch)[0],
    )


@dataclass(frozen=True)
class AotLibrary:
    """Several AOT kernels in one `.c`/`.h`, with one dispatcher per kernel."""

    name: str
    kernels: tuple[AotKernel, ...]
    dispatchers: Mapping[str, tuple[AotKernel, ...]]  # dispatcher name -> most specific first

    def header(self) -> str:
        return _header(self.name, list(self.kernels), self.dispatchers, "tilec aot-link")

    def source(self) -> str:
        return _source(self.name, f"{self.name}.h", list(self.kernels), self.dispatchers)

    def write(self, directory: str | Path) -> list[Path]:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        h, c = out / f"{self.name}.h", out / f"{self.name}.c"
        h.write_text(self.header())
        c.write_text(self.source())
        return [h, c]


def link(
    kernels: Sequence[AotKernel | str | Path],
    name: str,
    dispatch_names: Mapping[str, str] | None = None,
) -> AotLibrary:
    """Combine AOT kernels into one library.

    `dispatch_names` names the dispatchers (kernel -> C name; default: the kernel's name).
    """
    if not _IDENT.match(name) or "__" in name:
        raise AotError(f"library name {name!r} must be a C identifier without '__'")
    loaded = [k if isinstance(k, AotKernel) else AotKernel.load(k) for k in kernels]
    if not loaded:
        raise AotError("aot-link needs at least one AOT kernel")
    seen: dict[str, AotKernel] = {}
    for k in loaded:
        if k.name in seen:
            raise AotError(
                f"two AOT kernels are both named {k.name!r}; rename one (tilec aot --name)"
            )
        seen[k.name] = k
    groups: dict[str, list[AotKernel]] = {}
    for k in loaded:
        groups.setdefault(k.kernel, []).append(k)
    names = dict(dispatch_names or {})
    unknown = set(names) - set(groups)
    if unknown:
        raise AotError(f"no AOT kernel made from {sorted(unknown)}; kernels: {sorted(groups)}")
    dispatchers: dict[str, tuple[AotKernel, ...]] = {}
    for base, group in groups.items():
        first = group[0]
        for other in group[1:]:
            if other.base_params != first.base_params:
                raise AotError(
                    f"specializations of {base!r} disagree on its parameters: {first.name} has "
                    f"({_plist(first.base_params)}), {other.name} has ({_plist(other.base_params)})"
                )
            if other.block != first.block or other.shared_mem != first.shared_mem:
                raise AotError(
                    f"specializations of {base!r} must share block and dynamic shared memory "
                    "(the caller sizes the grid): "
                    f"{first.name} has {first.block}/{first.shared_mem}, "
                    f"{other.name} has {other.block}/{other.shared_mem}"
                )
        keys: dict[tuple[Any, ...], AotKernel] = {}
        for k in group:
            sig = (tuple(sorted(k.constants)), tuple(sorted(k.multiple_of)), k.arch)
            if sig in keys:
                raise AotError(
                    f"{keys[sig].name} and {k.name} are the same specialization of {base!r} "
                    f"({k.spec_text}, {k.arch}); link one of them"
                )
            keys[sig] = k
        dname = names.get(base, re.sub(r"_+", "_", base))
        if not _IDENT.match(dname):
            raise AotError(f"dispatcher name {dname!r} for {base!r} is not a C identifier")
        if dname in seen or dname in dispatchers:
            raise AotError(
                f"the dispatcher of {base!r} would be called {dname!r}, which is taken; "
                f"name it with --dispatch {base}=<name>"
            )
        ordered = sorted(enumerate(group), key=lambda ik: (_specificity(ik[1]), ik[0]))
        dispatchers[dname] = tuple(k for _, k in ordered)
    return AotLibrary(name, tuple(loaded), dispatchers)


def _plist(params: Sequence[AotParam]) -> str:
    return ", ".join(f"{p.llvm_type} {p.name}" for p in params)


# -- C generation -----------------------------------------------------------------------
def _upper(name: str) -> str:
    return name.upper()


def _proto(name: str, params: Sequence[AotParam]) -> str:
    return f"CUresult {name}({', '.join([*_LAUNCH_ARGS, *(p.decl() for p in params)])})"


def _bytes_c(data: bytes, indent: str = "  ") -> str:
    lines = []
    for i in range(0, len(data), 16):
        lines.append(indent + ", ".join(f"0x{b:02x}" for b in data[i : i + 16]) + ",")
    return "\n".join(lines)


def _kernel_doc(k: AotKernel) -> list[str]:
    md = k.metadata
    fixed = ", ".join(f"{n} = {v!r}" for n, v in k.constants) or "none"
    assumed = ", ".join(f"{n} % {m} == 0" for n, m in k.multiple_of) or "none"
    lines = [
        f"{k.name}: kernel {k.kernel} as entry {k.entry} for {k.target}",
        f"  fixed at compile time (not parameters below): {fixed}",
        f"  assumed by the compiled code: {assumed}",
        f"  block ({k.block[0]}, {k.block[1]}, {k.block[2]}), dynamic shared memory "
        f"{k.shared_mem} bytes; cubin {len(k.cubin)} bytes; PTX fallback: "
        f"{'embedded' if k.ptx else 'no'}",
    ]
    if md.get("registers") is not None:
        lines.append(
            f"  resources: {md.get('registers')} registers, {md.get('shared_bytes')} bytes static "
            f"shared, {md.get('spill_stores')}/{md.get('spill_loads')} bytes spilled (st/ld)"
        )
    return lines


def _comment(lines: Iterable[str]) -> str:
    body = "\n".join(f" * {line}".rstrip() for line in lines)
    return f"/*\n{body}\n */"


def _header(
    prefix: str,
    kernels: Sequence[AotKernel],
    dispatchers: Mapping[str, Sequence[AotKernel]],
    tool: str,
) -> str:
    guard = f"TILEC_AOT_{_upper(prefix)}_H"
    out = [
        f"/* Generated by tilec {__version__} ({tool}); do not edit. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <cuda.h>",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        _comment(
            [
                "Every function returns a CUresult and checks every driver call; on failure",
                f"{prefix}_last_error() gives this thread's last message. A launcher loads its",
                "module on first use, once per process, into the context current then",
                "(pthread_once): make a context current first, e.g. with the CUDA runtime.",
                "Launchers take the stream and the grid; the block is fixed below.",
            ]
        ),
        f"const char *{prefix}_last_error(void);",
        "",
    ]
    for k in kernels:
        up = _upper(k.name)
        out += [
            _comment(_kernel_doc(k)),
            f"#define {up}_BLOCK_X {k.block[0]}",
            f"#define {up}_BLOCK_Y {k.block[1]}",
            f"#define {up}_BLOCK_Z {k.block[2]}",
            f"#define {up}_SHARED_MEM {k.shared_mem}",
            f'#define {up}_TARGET "{k.target}"',
            f'#define {up}_SPECIALIZATION "{k.spec_text}"',
            "/* Loads the module now (optional: the launcher loads on first use). */",
            f"CUresult {k.name}_load(void);",
            "/* The cached CUfunction (loads first), e.g. for cuFuncGetAttribute. */",
            f"CUresult {k.name}_function(CUfunction *function);",
            _proto(k.name, k.params) + ";",
            "",
        ]
    for dname, group in dispatchers.items():
        first = group[0]
        up = _upper(dname)
        lines = [
            f"{dname}: dispatches kernel {first.kernel} to the first specialization that fits:",
        ]
        for k in group:
            conds = k.conditions() + ([f"device fits {k.arch}"] if _multi_arch(group) else [])
            lines.append(f"  {k.name}: {' && '.join(conds) or 'always'}")
        lines.append("Returns CUDA_ERROR_NOT_FOUND when none fits (see last_error).")
        out += [
            _comment(lines),
            f"#define {up}_BLOCK_X {first.block[0]}",
            f"#define {up}_BLOCK_Y {first.block[1]}",
            f"#define {up}_BLOCK_Z {first.block[2]}",
            _proto(dname, first.base_params) + ";",
            "",
        ]
    out += ["#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */", ""]
    return "\n".join(out)


def _multi_arch(group: Sequence[AotKernel]) -> bool:
    return len({k.arch for k in group}) > 1


def _c_string(text: str) -> str:
    return json.dumps(text)  # a valid C string literal for printable ASCII names


_PRELUDE = """\
/* Generated by tilec {version}; do not edit. Build: cc -std=c11 -c {prefix}.c -I<cuda>/include */
#include "{header}"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char {prefix}_error_buf[1024];

const char *{prefix}_last_error(void) {{ return {prefix}_error_buf; }}

static void {prefix}_set_error(const char *fmt, ...) {{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf({prefix}_error_buf, sizeof {prefix}_error_buf, fmt, ap);
  va_end(ap);
}}

/* "<what>: <call> failed: <NAME> (<code>): <description>" into buf; returns rc. */
static CUresult {prefix}_fail(CUresult rc, const char *what, const char *call, char *buf,
                              size_t size) {{
  const char *name = NULL;
  const char *desc = NULL;
  if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == NULL) name = "CUresult";
  if (cuGetErrorString(rc, &desc) != CUDA_SUCCESS || desc == NULL) desc = "unknown error";
  snprintf(buf, size, "%s: %s failed: %s (%d): %s", what, call, name, (int)rc, desc);
  return rc;
}}
"""

_DEVICE_CC = """
/* Compute capability (major * 10 + minor) of the current context's device. */
static CUresult {prefix}_device_cc(int *cc) {{
  static _Thread_local CUcontext last_ctx = NULL;
  static _Thread_local int last_cc = 0;
  CUcontext ctx = NULL;
  CUdevice dev = 0;
  int major = 0, minor = 0;
  CUresult rc = cuCtxGetCurrent(&ctx);
  if (rc != CUDA_SUCCESS)
    return {prefix}_fail(rc, "{prefix}", "cuCtxGetCurrent", {prefix}_error_buf,
                         sizeof {prefix}_error_buf);
  if (ctx == NULL) {{
    {prefix}_set_error("{prefix}: no current CUDA context on this thread");
    return CUDA_ERROR_INVALID_CONTEXT;
  }}
  if (ctx == last_ctx) {{
    *cc = last_cc;
    return CUDA_SUCCESS;
  }}
  rc = cuCtxGetDevice(&dev);
  if (rc != CUDA_SUCCESS)
    return {prefix}_fail(rc, "{prefix}", "cuCtxGetDevice", {prefix}_error_buf,
                         sizeof {prefix}_error_buf);
  rc = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (rc == CUDA_SUCCESS)
    rc = cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (rc != CUDA_SUCCESS)
    return {prefix}_fail(rc, "{prefix}", "cuDeviceGetAttribute", {prefix}_error_buf,
                         sizeof {prefix}_error_buf);
  last_ctx = ctx;
  last_cc = major * 10 + minor;
  *cc = last_cc;
  return CUDA_SUCCESS;
}}

/* A cubin for sm_XY runs on X.Y..X.9 ("a" targets: X.Y only); PTX JITs to any later one. */
static int {prefix}_fits(int cc, int arch, int exact, int has_ptx) {{
  if (exact) return cc == arch;
  if (cc / 10 == arch / 10 && cc >= arch) return 1;
  return has_ptx && cc >= arch;
}}
"""


def _kernel_c(prefix: str, k: AotKernel) -> str:
    n = k.name
    err = f"{prefix}_error_buf, sizeof {prefix}_error_buf"
    msg = f"{n}_message, sizeof {n}_message"
    out = [
        "",
        f"/* ---- {n}: {k.entry} for {k.target} ({k.spec_text}) ---- */",
        f"static const unsigned char {n}_cubin[{len(k.cubin)}] __attribute__((aligned(8))) = {{",
        _bytes_c(k.cubin),
        "};",
    ]
    if k.ptx is not None:
        data = k.ptx.encode() + b"\0"
        out += [
            f"static const unsigned char {n}_ptx[{len(data)}] = {{",
            _bytes_c(data),
            "};",
        ]
    out += [
        f"static pthread_once_t {n}_once = PTHREAD_ONCE_INIT;",
        f"static CUmodule {n}_module;",
        f"static CUfunction {n}_fn;",
        f"static CUresult {n}_status = CUDA_ERROR_NOT_INITIALIZED;",
        f"static char {n}_message[768];",
        "",
        f"static void {n}_init(void) {{",
        "  CUcontext ctx = NULL;",
        "  CUresult rc = cuCtxGetCurrent(&ctx);",
        "  if (rc != CUDA_SUCCESS) {",
        f'    {n}_status = {prefix}_fail(rc, "{n}: loading", "cuCtxGetCurrent", {msg});',
        "    return;",
        "  }",
        "  if (ctx == NULL) {",
        f"    snprintf({msg},",
        f'             "{n}: loading: no current CUDA context on this thread (make one current '
        'first, e.g. cuDevicePrimaryCtxRetain + cuCtxSetCurrent, or any CUDA runtime call)");',
        f"    {n}_status = CUDA_ERROR_INVALID_CONTEXT;",
        "    return;",
        "  }",
        f"  rc = cuModuleLoadData(&{n}_module, {n}_cubin);",
    ]
    what = f"{n}: loading the {k.arch} cubin"
    if k.ptx is not None:
        out += [
            "  if (rc == CUDA_ERROR_NO_BINARY_FOR_GPU || rc == CUDA_ERROR_INVALID_IMAGE ||",
            "      rc == CUDA_ERROR_INVALID_SOURCE || rc == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)",
            f"    rc = cuModuleLoadData(&{n}_module, {n}_ptx); /* the driver JITs the PTX */",
        ]
        what += " (and its PTX)"
    out += [
        "  if (rc != CUDA_SUCCESS) {",
        f'    {n}_status = {prefix}_fail(rc, "{what}", "cuModuleLoadData", {msg});',
        "    return;",
        "  }",
        f"  rc = cuModuleGetFunction(&{n}_fn, {n}_module, {_c_string(k.entry)});",
        "  if (rc != CUDA_SUCCESS) {",
        f'    {n}_status = {prefix}_fail(rc, "{n}: loading", "cuModuleGetFunction", {msg});',
        f"    (void)cuModuleUnload({n}_module);",
        "    return;",
        "  }",
    ]
    if k.shared_mem > 48 * 1024:
        out += [
            f"  rc = cuFuncSetAttribute({n}_fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "
            f"{k.shared_mem});",
            "  if (rc != CUDA_SUCCESS) {",
            f'    {n}_status = {prefix}_fail(rc, "{n}: loading", "cuFuncSetAttribute", {msg});',
            "    return;",
            "  }",
        ]
    args = ", ".join(f"&{p.name}" for p in k.params)
    out += [
        f"  {n}_status = CUDA_SUCCESS;",
        "}",
        "",
        f"CUresult {n}_load(void) {{",
        f"  if (pthread_once(&{n}_once, {n}_init) != 0) {{",
        f'    {prefix}_set_error("{n}: pthread_once failed");',
        "    return CUDA_ERROR_UNKNOWN;",
        "  }",
        f"  if ({n}_status != CUDA_SUCCESS) {{",
        f'    {prefix}_set_error("%s", {n}_message);',
        f"    return {n}_status;",
        "  }",
        "  return CUDA_SUCCESS;",
        "}",
        "",
        f"CUresult {n}_function(CUfunction *function) {{",
        f"  CUresult rc = {n}_load();",
        f"  if (rc == CUDA_SUCCESS) *function = {n}_fn;",
        "  return rc;",
        "}",
        "",
        _proto(n, k.params) + " {",
        f"  CUresult rc = {n}_load();",
        "  if (rc != CUDA_SUCCESS) return rc;",
        f"  void *args[] = {{{args}}};" if k.params else "  void **args = NULL;",
        f"  rc = cuLaunchKernel({n}_fn, grid_x, grid_y, grid_z, {k.block[0]}, {k.block[1]}, "
        f"{k.block[2]}, {k.shared_mem}, stream, args, NULL);",
        "  if (rc != CUDA_SUCCESS)",
        f'    return {prefix}_fail(rc, "{n}", "cuLaunchKernel", {err});',
        "  return CUDA_SUCCESS;",
        "}",
    ]
    return "\n".join(out)


def _float_literal(value: float, llvm_type: str) -> str:
    return value.hex() + ("f" if llvm_type == "float" else "")


def _condition(k: AotKernel, by_name: Mapping[str, AotParam]) -> list[str]:
    conds: list[str] = []
    for pname, value in k.constants:
        p = by_name[pname]
        if p.llvm_type in _INT_BITS:
            bits = _INT_BITS[p.llvm_type]
            u = f"uint{bits}_t"
            conds.append(f"({u}){pname} == ({u}){int(value) & (2**bits - 1)}ull")
        else:
            conds.append(f"{pname} == {_float_literal(float(value), p.llvm_type)}")
    for pname, m in k.multiple_of:
        bits = _INT_BITS[by_name[pname].llvm_type]
        conds.append(f"(uint{bits}_t){pname} % {m}u == 0")
    return conds


def _dispatcher_c(prefix: str, dname: str, group: Sequence[AotKernel]) -> str:
    first = group[0]
    by_name = {p.name: p for p in first.base_params}
    multi = _multi_arch(group)
    out = [
        "",
        f"/* ---- {dname}: dispatcher of {first.kernel} ---- */",
        _proto(dname, first.base_params) + " {",
    ]
    if multi:
        out += [
            "  int cc = 0;",
            f"  CUresult rc = {prefix}_device_cc(&cc);",
            "  if (rc != CUDA_SUCCESS) return rc;",
        ]
    for k in group:
        conds = _condition(k, by_name)
        if multi:
            num, exact = _arch_number(k.arch)
            conds.append(f"{prefix}_fits(cc, {num}, {int(exact)}, {int(k.ptx is not None)})")
        call = ", ".join(["stream", "grid_x", "grid_y", "grid_z", *(p.name for p in k.params)])
        if conds:
            out.append(f"  if ({' && '.join(conds)})")
            out.append(f"    return {k.name}({call});")
        else:
            out.append(f"  return {k.name}({call});")
            break
    else:
        used = [
            p
            for p in first.base_params
            if any(p.name == n for k in group for n, _ in (*k.constants, *k.multiple_of))
        ]
        fmt_parts, fmt_args = [], []
        for p in used:
            if p.llvm_type in _INT_BITS:
                fmt_parts.append(f"{p.name}=%lld")
                fmt_args.append(f"(long long){p.name}")
            else:
                fmt_parts.append(f"{p.name}=%.9g")
                fmt_args.append(f"(double){p.name}")
        if multi:
            fmt_parts.append("device sm_%d")
            fmt_args.append("cc")
        compiled = []
        for k in group:
            what = " && ".join(k.conditions() + ([k.arch] if multi else [])) or "always"
            compiled.append(f"{k.name} [{what}]".replace("%", "%%"))
        fits = ", ".join(fmt_parts) or "these arguments"
        fmt = (
            f"{dname}: no specialization of {first.kernel} fits {fits} "
            f"(compiled: {'; '.join(compiled)})"
        )
        out.append(f"  {prefix}_set_error({_c_string(fmt)}{''.join(', ' + a for a in fmt_args)});")
        out.append("  return CUDA_ERROR_NOT_FOUND;")
    out.append("}")
    return "\n".join(out)


def _source(
    prefix: str,
    header: str,
    kernels: Sequence[AotKernel],
    dispatchers: Mapping[str, Sequence[AotKernel]],
) -> str:
    parts = [_PRELUDE.format(version=__version__, prefix=prefix, header=header)]
    if any(_multi_arch(g) for g in dispatchers.values()):
        parts.append(_DEVICE_CC.format(prefix=prefix))
    parts += [_kernel_c(prefix, k) for k in kernels]
    parts += [_dispatcher_c(prefix, d, g) for d, g in dispatchers.items()]
    return "\n".join(parts) + "\n"
