"""`hermetic` (and `python -m hermetic`): parse arguments into Settings once, run the command, map every failure
to a classed exit. The command modules are hermetic/cli/*; this is the one module above them.

Also the process's edges: a reader that goes away (`| head`) and interrupts (SIGINT, SIGTERM, SIGHUP).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from hermetic import __version__
from hermetic.cli import artifacts, build, bundle, intoto, oci, sign, toolchain, wheel
from hermetic.cli.common import common_parsers
from hermetic.cli.guide import START_HERE
from hermetic.core.errors import EnvironmentError_, HermeticError, UsageError, VerifyError, disk_full
from hermetic.model.options import OPTIONS, resolve

if TYPE_CHECKING:
    from hermetic.cli.common import Handler

# Each group's `register(subparsers, common)`, in the order of `hermetic --help`.
_GROUPS = (build.register, toolchain.register, oci.register, wheel.register, bundle.register, artifacts.register_verify,
           artifacts.register_attest, sign.register, intoto.register, artifacts.register_inspect)

# Commands whose output is a read-only listing: a reader that stops early (`| head`) is no failure of theirs.
_LISTINGS: frozenset[Handler] = frozenset({build.cmd_variants, toolchain.cmd_list, artifacts.cmd_inspect})
# A job whose result lines could not be written: the exit status of a command killed by SIGPIPE.
OUTPUT_LOST = 128 + signal.SIGPIPE
_INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A signal that asks hermetic to stop; a KeyboardInterrupt, so every cleanup path already handles it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Guarded:
    """stdout or stderr that survives its reader going away.

    The first EPIPE points the descriptor at /dev/null (so children and the final flush write there), marks
    the stream lost and lets the command go on: work is never cut short by a reader that left. Whether a lost
    stdout matters is decided at the end (a listing's does not, a job's result lines do).
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lost = False

    def _broken(self) -> None:
        if self.lost:
            return
        self.lost = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as exc:  # BrokenPipeError, or EPIPE by another name
            if exc.errno != errno.EPIPE:
                raise
            self._broken()
        return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            self._broken()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextmanager
def process_edges() -> Iterator[tuple[_Guarded, _Guarded]]:
    """Guarded stdout/stderr and signal handlers for the length of one command; the old ones afterwards."""
    out, err = _Guarded(sys.stdout), _Guarded(sys.stderr)
    saved_streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    saved: dict[int, Any] = {}
    seen: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        if len(seen) == 1:  # later ones wait: the cleanup the first one started must run to its end
            raise Interrupted(signum)

    try:
        for sig in _INTERRUPTS:
            saved[sig] = signal.signal(sig, on_signal)
    except ValueError:
        pass  # not the main thread (a test calling main): signals stay as they are
    try:
        yield out, err
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        sys.stdout, sys.stderr = saved_streams


def build_parser() -> argparse.ArgumentParser:
    common = common_parsers()
    parser = argparse.ArgumentParser(
        prog="hermetic",
        # no abbreviations: `--llvm` of `hermetic wheel` would otherwise be ambiguous with --llvm-version and
        # --llvm-recipe, and a prefix that works today breaks when an option is added
        allow_abbrev=False,
        description="Reproducible, offline builds of slim LLVM toolchains and the GPU compiler wheels built on them.",
        epilog=START_HERE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common.build],
    )
    parser.add_argument("--version", action="version", version=f"hermetic {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _GROUPS:
        register(sub, common)
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
    if exc.errno == errno.ENAMETOOLONG:
        return UsageError(f"name too long: {str(where)[:80]}…", str(exc), "check the argument: it is no usable path")
    return EnvironmentError_(f"cannot use {where}", exc.strerror or str(exc), "check that path and the machine's state")


def _check_root(cli_values: dict[str, Any]) -> None:
    root = cli_values.get("root")
    if root and not Path(root).is_dir():
        raise UsageError(
            f"--root {root}: no such directory",
            "--root names the hermetic checkout, the directory holding recipes/ and toolchain/",
            "pass the checkout's directory, or leave --root out inside a checkout",
        )


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def _run(argv: Sequence[str] | None) -> tuple[int, Handler | None]:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        # no command: the first screen is where to start, not every option
        print("usage: hermetic [options] COMMAND [ARGS]\n\n" + (parser.description or "") + "\n\n" + START_HERE
              + "\n\ncommands: " + ", ".join(_commands(parser)))
        return 2, None
    cli_values = OPTIONS.cli_values(vars(args))
    _check_root(cli_values)
    settings = resolve(cli_values, os.environ, Path.cwd())
    if len(settings.arches) > 1 and not getattr(args, "multi_arch", False):
        raise UsageError(
            f"--arch {','.join(settings.arches)}: `hermetic {args.command}` builds for one architecture",
            "only `hermetic all` builds several (one after the other) and merges their images into one index",
            "give one architecture, or run `hermetic all --arch " + ",".join(settings.arches) + "`",
        )
    return func(args, settings), func


def main(argv: Sequence[str] | None = None) -> int:
    with process_edges() as (out, _):
        try:
            rc, func = _run(argv)
        except HermeticError as exc:
            failure: HermeticError = exc
        except KeyboardInterrupt as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            print(
                f"hermetic: interrupted ({signal.Signals(signum).name}): the running step was stopped and what it "
                "had half written removed; rerun the command to start again",
                file=sys.stderr, flush=True,
            )
            return 128 + signum
        except json.JSONDecodeError as exc:
            failure = VerifyError("a JSON file hermetic reads is damaged", str(exc), "rebuild or refetch what wrote it")
        except RecursionError:
            failure = VerifyError(
                "a JSON document hermetic read is nested too deeply", "no file hermetic writes looks like this",
                "rebuild or refetch what wrote it; if it came from a registry, the registry serves damaged data",
            )
        except OSError as exc:
            failure = _os_error(exc)
        else:
            if out.lost and rc == 0 and func not in _LISTINGS:
                print(
                    "error: the results could not be written: standard output was closed before the end\n"
                    "  why: its reader went away (`| head`?); the work itself finished\n"
                    "  fix: read the whole output, or send it to a file", file=sys.stderr, flush=True,
                )
                return OUTPUT_LOST
            return rc
        print(failure.render(), file=sys.stderr, flush=True)
        return failure.exit_code


if __name__ == "__main__":
    sys.exit(main())
