"""`tilec` command line: aot, aot-link, compile (with stage dumps), backends, assembler.

Parsing only; the work is done by tilec.compiler, tilec.backends and tilec.aot.
User errors print one message and exit 1 (usage errors: 2), without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llvmlite.ir

from . import aot as aot_mod
from .backends.registry import registry_for
from .compiler import Compiler
from .errors import CacheError, TilecError, ToolNotFoundError
from .kernel import CompileOptions, __version__
from .settings import Settings
from .specialize import Specialization

if TYPE_CHECKING:
    from .backends.cuda.nvptxcompiler import Library


class _UsageError(TilecError):
    pass


def load_source(spec: str) -> str | bytes | llvmlite.ir.Module:
    """IR from `kernel.ll`, `kernel.bc`, or `file.py:function` / `package.module:function`.

    A function is called with no arguments and returns IR text, bitcode or a
    llvmlite.ir.Module.
    """
    path = Path(spec)
    if path.suffix in (".ll", ".bc") or (path.is_file() and ":" not in spec):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise _UsageError(f"cannot read {spec}: {exc}") from exc
        return data if data[:4] == b"BC\xc0\xde" else data.decode()
    where, sep, func = spec.rpartition(":")
    if not sep or not func:
        raise _UsageError(
            f"{spec!r}: give an IR file (.ll, .bc) or file.py:function / module:function"
        )
    try:
        if where.endswith(".py"):
            mspec = importlib.util.spec_from_file_location("_tilec_cli_source", where)
            if mspec is None or mspec.loader is None:
                raise _UsageError(f"cannot load {where}")
            module: Any = importlib.util.module_from_spec(mspec)
            mspec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
        result = getattr(module, func)()
    except TilecError:
        raise
    except Exception as exc:
        raise _UsageError(f"{spec}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(result, (str, bytes, llvmlite.ir.Module)):
        raise _UsageError(
            f"{spec} returned {type(result).__name__}; expected IR text, bitcode or a "
            "llvmlite.ir.Module"
        )
    return result


def _value(text: str) -> int | float:
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise _UsageError(f"{text!r} is not a number") from None


def _pairs(items: Sequence[str], what: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise _UsageError(f"{what} takes NAME=VALUE, got {item!r}")
        out.append((name, value))
    return out


def _specialization(args: argparse.Namespace) -> Specialization:
    constants = [(n, _value(v)) for n, v in _pairs(args.constant, "--constant")]
    multiples = []
    for n, v in _pairs(args.multiple_of, "--multiple-of"):
        k = _value(v)
        if not isinstance(k, int):
            raise _UsageError(f"--multiple-of {n}={v}: k must be an integer")
        multiples.append((n, k))
    return Specialization.make(constants, multiples)


def _dims(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or X,Y,Z, got {text!r}") from None


def _add_compile_args(p: argparse.ArgumentParser, default_target: str) -> None:
    p.add_argument("source", help="kernel.ll, kernel.bc, file.py:function or module:function")
    p.add_argument("-t", "--target", default=default_target, help=f"default {default_target}")
    p.add_argument("-k", "--kernel", help="the kernel, when the module defines several")
    p.add_argument(
        "-C",
        "--constant",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fix a parameter (name or index) at compile time; repeatable",
    )
    p.add_argument(
        "-M",
        "--multiple-of",
        action="append",
        default=[],
        metavar="NAME=K",
        help="let the kernel assume an integer parameter is a multiple of K; repeatable",
    )
    p.add_argument("-O", "--opt-level", type=int, default=3, choices=(0, 1, 2, 3))
    p.add_argument("--ptx-version", type=int, help="PTX ISA version, e.g. 80 (cuda)")
    p.add_argument("--ftz", action="store_true", help="flush denormals in libdevice (cuda)")
    p.add_argument(
        "--assembler",
        choices=("auto", "ptxas", "nvptxcompiler", "nvjitlink"),
        help="PTX -> cubin (cuda; default: TILEC_ASSEMBLER, else auto)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tilec", description="tilec kernel compiler")
    parser.add_argument("--version", action="version", version=f"tilec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    a = sub.add_parser("aot", help="compile a kernel into a C launcher (.c/.h) with the cubin")
    _add_compile_args(a, "cuda:90")
    a.add_argument("--block", type=_dims, default=(128,), help="threads per block: N or X,Y,Z")
    a.add_argument("--shared-mem", type=int, default=0, help="dynamic shared memory (bytes)")
    a.add_argument("--name", help="the launcher's C name (default: <entry>_<arch>)")
    a.add_argument("--embed-ptx", action="store_true", help="also embed PTX (driver-JIT fallback)")
    a.add_argument("-o", "--output", type=Path, default=Path("."), help="output directory")

    link = sub.add_parser("aot-link", help="combine AOT kernels into one library with dispatchers")
    link.add_argument("specs", nargs="+", type=Path, help="<name>.json files written by tilec aot")
    link.add_argument("--name", required=True, help="library name (<name>.c, <name>.h)")
    link.add_argument(
        "--dispatch",
        action="append",
        default=[],
        metavar="KERNEL=NAME",
        help="C name of a kernel's dispatcher (default: the kernel's name)",
    )
    link.add_argument("-o", "--output", type=Path, default=Path("."), help="output directory")

    c = sub.add_parser("compile", help="compile a kernel; print its stages and write dumps")
    _add_compile_args(c, "cuda:90")
    c.add_argument("--dump-dir", type=Path, help="write every stage here (default: TILEC_DUMP_DIR)")
    c.add_argument("--dump-passes", action="store_true", help="also the IR after every LLVM pass")

    sub.add_parser("backends", help="list backends and where they come from; check plugins")
    asm = sub.add_parser("assembler", help="which PTX -> cubin assembler cuda uses here, and why")
    asm.add_argument("-t", "--target", default="cuda:90", help="default cuda:90")
    asm.add_argument("--assembler", choices=("auto", "ptxas", "nvptxcompiler", "nvjitlink"))
    asm.add_argument(
        "--link",
        action="store_true",
        help="link the nvPTXCompiler shim now, under the cache's tools/, as the first in-process "
        "compile would (say, in an image's build step)",
    )
    return parser


def _backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """The cuda flags given, so that a backend without them is not handed them."""
    out: dict[str, Any] = {}
    if args.ptx_version is not None:
        out["ptx_version"] = args.ptx_version
    if args.ftz:
        out["ftz"] = True
    if getattr(args, "assembler", None):
        out["assembler"] = args.assembler
    return out


def _cmd_aot(args: argparse.Namespace, settings: Settings) -> int:
    spec = _specialization(args)
    kernel = aot_mod.compile(
        load_source(args.source),
        args.target,
        kernel=args.kernel,
        constants=spec.constants,
        multiple_of=spec.multiple_of,
        block=args.block,
        shared_mem=args.shared_mem,
        name=args.name,
        embed_ptx=args.embed_ptx,
        opt_level=args.opt_level,
        ptx_version=args.ptx_version,
        ftz=args.ftz,
        assembler=args.assembler,
        settings=settings,
    )
    for path in kernel.write(args.output):
        print(path)
    return 0


def _cmd_link(args: argparse.Namespace) -> int:
    names = dict(_pairs(args.dispatch, "--dispatch"))
    lib = aot_mod.link(args.specs, args.name, names)
    for path in lib.write(args.output):
        print(path)
    for dname, group in lib.dispatchers.items():
        print(f"{dname}: " + ", ".join(k.name for k in group))
    return 0


def _cmd_compile(args: argparse.Namespace, settings: Settings) -> int:
    spec = _specialization(args)
    opts = CompileOptions(
        target=args.target,
        opt_level=args.opt_level,
        kernel=args.kernel,
        constants=spec.constants,
        multiple_of=spec.multiple_of,
        backend_options=_backend_options(args),
    )
    compiler = Compiler(settings)
    k = compiler.compile(
        load_source(args.source), opts, dump_dir=args.dump_dir, dump_passes=args.dump_passes or None
    )
    print(f"{k.name} for {k.target} (cache: {k.cache_status}, key {k.key[:16]})")
    for stage, value in k.asm.items():
        size = len(value) if isinstance(value, bytes) else len(value.encode())
        print(f"  {stage:10s} {size:9d} bytes")
    if k.passes:
        print(f"  {len(k.passes)} pass dumps")
    out = args.dump_dir or settings.debug_dump_dir
    if out is not None:
        print(f"dumps: {out / f'{k.name}-{k.key[:12]}'}")
    return 0


def _cmd_backends(settings: Settings) -> int:
    broken = 0
    for st in registry_for(settings.plugin_dirs).status():
        if st.backend is not None:
            b = st.backend
            print(f"{st.name}: {b.binary_format} via stage {b.binary_stage!r}; {st.origin}")
        else:
            broken += 1
            print(f"{st.name}: BROKEN: {st.error}")
    return 1 if broken else 0


def _cmd_assembler(args: argparse.Namespace, settings: Settings) -> int:
    """What `auto` (or the assembler named) makes of this machine's tools, without compiling."""
    from .backends.cuda import backend, heap, nvptxcompiler, toolchain

    own = {"assembler": args.assembler} if args.assembler else {}
    opts = CompileOptions(target=args.target, backend_options=own)
    cuda, target = registry_for(settings.plugin_dirs).resolve(opts.target, opts)
    if not isinstance(cuda, backend.CudaBackend):
        raise _UsageError(f"{args.target}: assemblers are the cuda backend's")
    tools = toolchain.identity(settings)
    choice = cuda.assembler(target, cuda.options(opts), settings, tools)
    print(f"{target}: {choice.name}" + (f" ({choice.note})" if choice.note else ""))
    print(f"ptxas: {' '.join(tools['ptxas']) if tools['ptxas'] else 'none found'}")
    found = tools["nvptxcompiler"]
    print(f"nvPTXCompiler: {found[1] + ' ' + found[0] if found else 'none found'}")
    if found:
        lib = nvptxcompiler.library(Path(found[0]), found[1], found[2])
        shim = nvptxcompiler.shim_path(lib, toolchain.memo_dir(settings))
        if args.link:
            _link_shim(lib, shim, settings)
        built = "built" if shim.is_file() else "linked at its first use"
        print(f"  its shim: {shim} ({built})")
        print(f"  linked with: {nvptxcompiler.find_cxx(settings) or 'no C or C++ compiler found'}")
    elif args.link:
        raise ToolNotFoundError(f"--link: no nvPTXCompiler library found: {nvptxcompiler.INSTALL}")
    print(f"heap: {heap.state(settings)}")
    return 0


def _link_shim(lib: Library, shim: Path, settings: Settings) -> None:
    """`tilec assembler --link`: the shim linked and kept where later processes find it; one that
    could only be linked for this process (the cache's tools/ not writable) is an error here."""
    from .backends.cuda import nvptxcompiler

    loaded = nvptxcompiler.load(lib, settings, shim.parent)
    if loaded.path != shim:
        raise CacheError(
            f"--link: {shim.parent} cannot be written, so the shim was linked for this process "
            "only; set TILEC_CACHE_DIR to a directory tilec may write"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    try:
        if args.command == "aot":
            return _cmd_aot(args, settings)
        if args.command == "aot-link":
            return _cmd_link(args)
        if args.command == "compile":
            return _cmd_compile(args, settings)
        if args.command == "assembler":
            return _cmd_assembler(args, settings)
        return _cmd_backends(settings)
    except TilecError as exc:
        print(f"tilec {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (`tilec assembler | head -1`): nothing more to say, and no traceback
        # when Python flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
