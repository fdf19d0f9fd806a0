"""`hermetic toolchain list` and `hermetic toolchain slim`: the pinned compilers and their carriers."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.build import distribute
from hermetic.cli.common import add_command, add_group, out
from hermetic.core import platforms
from hermetic.core.digests import file_sha256
from hermetic.core.errors import UsageError, VerifyError
from hermetic.core.log import stderr_log
from hermetic.fetch import toolchain
from hermetic.model import toolchains

if TYPE_CHECKING:
    from hermetic.cli.common import Common, Subparsers
    from hermetic.model.settings import Settings


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    cat = toolchains.load(settings.toolchain_dir)
    for tc in cat.toolchains:
        mark = " (default)" if tc.name == cat.default else ""
        if tc.kind == "host":
            out(f"{tc.name}{mark}: {tc.description}")
            continue
        out(f"{tc.name}{mark}: {tc.package} {tc.version} (clang {tc.clang_version}), target {tc.target}, "
            f"arches {' '.join(tc.arches)}, glibc floor {tc.glibc_min} and up")
        out(f"    wheel {tc.file}  sha256 {tc.sha256}")
        if tc.slim is not None:
            out(f"    slim  {tc.slim.file}  sha256 {tc.slim.sha256}  ({tc.slim.size} bytes)")
    return 0


def _zig(settings: Settings) -> toolchains.Toolchain:
    """--toolchain when given, else the one zig toolchain that pins a slim archive (the default if it does)."""
    cat = toolchains.load(settings.toolchain_dir)
    zigs = [t for t in cat.toolchains if t.kind == "zig"]
    if settings.toolchain:
        tc = toolchains.select(cat, settings.toolchain)
    else:
        pinned = [t for t in zigs if t.slim is not None] or zigs
        chosen = [t for t in pinned if t.name == cat.default] or pinned
        if len(chosen) != 1:
            raise UsageError(
                "which toolchain's slim archive?", f"{cat.path} has {len(chosen)} candidates",
                f"pass --toolchain NAME, one of: {', '.join(t.name for t in pinned) or 'none'}",
            )
        tc = chosen[0]
    if tc.kind != "zig":
        raise UsageError(
            f"toolchain {tc.name} has no slim archive", "it is the machine's compiler, not a pinned file",
            f"pass --toolchain {' or '.join(t.name for t in zigs) or 'NAME of a zig toolchain'}",
        )
    return tc


def _matches_pin(out_dir: Path, tc: toolchains.Toolchain) -> bool:
    """Whether DIR already holds the pinned archive and its slim.json (deriving it again takes minutes)."""
    if tc.slim is None:
        return False
    dest, meta = out_dir / tc.slim.file, out_dir / "slim.json"
    try:
        described = json.loads(meta.read_text()).get("sha256")
    except (OSError, ValueError, AttributeError):
        return False
    return (described == tc.slim.sha256 and dest.is_file() and dest.stat().st_size == tc.slim.size
            and file_sha256(dest) == tc.slim.sha256)


def cmd_slim(args: argparse.Namespace, settings: Settings) -> int:
    log = stderr_log(settings.quiet)
    tc = _zig(settings)
    out_dir = Path(args.output).absolute() if args.output else settings.work_dir / "toolchains"
    dest = out_dir / toolchains.slim_name(tc)
    if _matches_pin(out_dir, tc):
        log(f"toolchain: {dest} is already there and matches its pin")
        out(str(dest))
        return 0
    wheel = toolchain.fetch(settings.cache_dir, tc, settings.mirrors, settings.use_urls, log)
    log(f"toolchain: deriving {dest.name} from {tc.file} (the real wheel takes about 15 minutes)")
    meta = toolchain.slim_archive(wheel, tc, out_dir, log)
    if tc.slim is None:
        log(f"toolchain: {tc.name} pins no slim archive; to pin this one, add to its entry in {settings.toolchain_dir}"
            f"/toolchains.yml:\n    slim:\n      file: {meta['file']}\n      sha256: {meta['sha256']}\n"
            f"      size: {meta['size']}")
    elif meta["sha256"] != tc.slim.sha256 or meta["size"] != tc.slim.size:
        raise VerifyError(
            f"the slim archive derived from {tc.file} does not match its pin",
            f"toolchains.yml pins sha256 {tc.slim.sha256} ({tc.slim.size} bytes); "
            f"derived sha256 {meta['sha256']} ({meta['size']} bytes)",
            f"{dest} and slim.json are kept for inspection: compare them with an archive derived elsewhere "
            "(diffoscope); if the selection changed on purpose (keep_member, UNPACK_LAYOUT), update the pin",
        )
    else:
        log(f"toolchain: {dest.name} matches its pin (sha256 {tc.slim.sha256})")
    out(str(dest))
    return 0


def cmd_compile_host(args: argparse.Namespace, settings: Settings) -> int:
    """Set this machine up as a compile host of distributed builds: the pinned toolchain and its named wrappers."""
    log = stderr_log(settings.quiet)
    # --arch: the compilers of builds for that target (a cross build sends its target's compiles); one
    # host may serve several targets, one command each, into the same DIR
    arch = platforms.zig_arch(settings.arch) if settings.arch else None
    tc = toolchains.select(toolchains.load(settings.toolchain_dir), settings.toolchain, settings.glibc, arch)
    if tc.kind != "zig":
        raise UsageError(f"toolchain {tc.name} cannot serve distributed builds", "it is the machine's compiler, not a pinned file",
                         "pass --toolchain NAME of a zig toolchain (the default)")
    base = Path(args.dir).absolute()
    zig_root = toolchain.ensure(settings.cache_dir, tc, settings.mirrors, settings.use_urls, log)
    if zig_root is None:
        raise UsageError(f"toolchain {tc.name} is not unpacked", "", "run `hermetic fetch`")
    wrappers = distribute.write_wrappers(tc, zig_root, base / "zig-cache", base / "bin")
    log(f"toolchain: {tc.label} from {zig_root}; compilers {', '.join(p.name for p in wrappers.values())} in {base / 'bin'}")
    log(f"run distccd with them on its PATH, e.g.: PATH={base / 'bin'}:$PATH distccd --daemon --allow NETWORK/BITS; "
        "distccd runs only compilers named in /usr/lib/distcc: "
        + "; ".join(f"ln -sf {p} /usr/lib/distcc/{p.name}" for p in wrappers.values())
        + f" (distccd runs as user distcc: it must read {zig_root} and write {base / 'zig-cache'})")
    out(json.dumps({"toolchain": tc.label, "bin": str(base / "bin"), "compilers": [p.name for p in wrappers.values()]}))
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    sub = add_group(subparsers, "toolchain", "the pinned compilers: list them, derive the slim archive", "toolchain_command")
    p = add_command(sub, "list", "list the pinned toolchains with their files and sha256", [common.base])
    p.set_defaults(func=cmd_list)
    p = add_command(
        sub, "slim",
        "derive the slim archive of a zig toolchain from its verified wheel and check it against its pin",
        [common.build],
    )
    p.add_argument("--output", metavar="DIR",
                   help="where the archive and slim.json go; carry DIR and pass --mirror DIR (default: WORK_DIR/toolchains)")
    p.set_defaults(func=cmd_slim)
    p = add_command(
        sub, "compile-host",
        "make this machine a compile host of distributed builds (--distribute): the verified pinned toolchain "
        "and its identity-named compilers for distccd",
        [common.build],
    )
    p.add_argument("dir", metavar="DIR", help="where the compilers (DIR/bin, for distccd's PATH) and zig's cache go")
    p.set_defaults(func=cmd_compile_host)
