"""`hermetic`: parse arguments into Settings once, run the command, map every failure to a classed exit."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from ..errors import EnvironmentError_, HermeticError, UsageError, VerifyError, disk_full
from ..settings import resolve
from . import attest, build, bundle, inspect, intoto, oci, sign, toolchain, verify, wheel
from .common import Handler, common_parsers

# Each group has `register(subparsers, common)`; the order is the order of `hermetic --help`.
_GROUPS = (build, toolchain, oci, wheel, bundle, verify, attest, sign, intoto, inspect)

_SETTING_KEYS = ("root", "cache_dir", "work_dir", "variant", "llvm_version", "mirrors", "offline", "jobs", "quiet", "use_apt", "use_urls",
                 "toolchain", "glibc", "wheelhouse", "arch", "substitutes", "no_substitute", "compile_cache",
                 "no_compile_cache", "distribute", "no_distribute", "sign_key")
# Options whose argparse dest differs from the setting's name (common.py says why).
_DESTS = {"arch": "target_arch"}


def build_parser() -> argparse.ArgumentParser:
    common = common_parsers()
    parser = argparse.ArgumentParser(
        prog="hermetic",
        description="Reproducible, offline builds of slim LLVM toolchains and the GPU compiler wheels built on them.",
        parents=[common.build],
    )
    parser.add_argument("--version", action="version", version=f"hermetic {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in _GROUPS:
        group.register(sub, common)
    return parser


def _os_error(exc: OSError) -> HermeticError:
    where = exc.filename or "?"
    if exc.errno == errno.ENOSPC:
        return disk_full(str(where), exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return EnvironmentError_(
            f"permission denied: {where}", str(exc), "check ownership of that path or choose another --work-dir/--cache"
        )
    if exc.errno == errno.ENOTDIR:
        return UsageError(f"not a directory: {where}", str(exc), "point the option at a directory, not a file")
    if exc.errno == errno.ENOENT:
        return UsageError(f"no such file or directory: {where}", str(exc), "check the path")
    return EnvironmentError_(f"cannot use {where}", exc.strerror or str(exc), "check that path and the machine's state")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        cli_values = {k: getattr(args, _DESTS.get(k, k)) for k in _SETTING_KEYS if hasattr(args, _DESTS.get(k, k))}
        settings = resolve(cli_values, os.environ, Path.cwd())
        if len(settings.arches) > 1 and not getattr(args, "multi_arch", False):
            raise UsageError(
                f"--arch {','.join(settings.arches)}: `hermetic {args.command}` builds for one architecture",
                "only `hermetic all` builds several (one after the other) and merges their images into one index",
                "give one architecture, or run `hermetic all --arch " + ",".join(settings.arches) + "`",
            )
        return func(args, settings)
    except HermeticError as exc:
        err: HermeticError = exc
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): not an error of ours. Point stdout at /dev/null so the
        # interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except json.JSONDecodeError as exc:
        err = VerifyError("a JSON file hermetic reads is damaged", str(exc), "rebuild or refetch what wrote it")
    except OSError as exc:
        err = _os_error(exc)
    print(err.render(), file=sys.stderr)
    return err.exit_code
