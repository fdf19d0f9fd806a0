"""What every command group shares: the common options, output helpers, the handler type."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.attest import signing, simple_signing
from hermetic.cli import guide
from hermetic.core.errors import RecipeError, UsageError
from hermetic.model.options import GROUPS, OPTIONS, Kind, Option, Table
from hermetic.model.settings import Settings
from hermetic.oci.http import DEFAULT_MAX_DOCUMENT
from hermetic.oci.types import Reference

if TYPE_CHECKING:
    from hermetic.attest.signing import SigningKey

Handler = Callable[[argparse.Namespace, Settings], int]
Subparsers = Any  # argparse's _SubParsersAction is private
_WIDTH = 100


@dataclass(frozen=True)
class Common:
    """The option sets commands inherit: `base` for every command, `build` for those that fetch or build."""

    base: argparse.ArgumentParser
    build: argparse.ArgumentParser


def common_parsers() -> Common:
    base = argparse.ArgumentParser(add_help=False)
    add_options(base, "common")
    build = argparse.ArgumentParser(add_help=False, parents=[base])
    add_options(build, "build")
    return Common(base, build)


def add_options(parser: argparse.ArgumentParser, *groups: str, table: Table = OPTIONS) -> None:
    """The options of these groups of the table, each group under its title."""
    for group in groups:
        g = parser.add_argument_group(GROUPS[group])
        for row in table.group(group):
            _add_row(g, row)


def add_setting(parser: Any, name: str, help: str | None = None, table: Table = OPTIONS) -> None:
    """One row's option alone (`image llvm --variant`), with a help of the command's own if given."""
    _add_row(parser, table.row(name), help)


def _add_row(g: Any, row: Option, help: str | None = None) -> None:
    # SUPPRESS keeps options the user did not give out of the namespace, so env and pyproject can fill them.
    s = argparse.SUPPRESS
    if row.negation:  # --substitute and --no-substitute: one or the other
        g = g.add_mutually_exclusive_group()
    text = row.help_text(help).replace("%", "%%")
    if row.kind in (Kind.ON, Kind.OFF):
        action = "store_true" if row.kind is Kind.ON else "store_false"
        g.add_argument(*row.flags, dest=row.destination, action=action, default=s, help=text)
    else:
        g.add_argument(*row.flags, dest=row.destination, action="append" if row.kind is Kind.LIST else "store",
                       default=s, metavar=row.metavar, choices=row.choices or None, type=row.convert, help=text)
    if row.negation:
        g.add_argument(row.negation, dest=row.negation_dest, action="store_true", default=s,
                       help=row.negation_help_text().replace("%", "%%"))


def add_command(
    subparsers: Subparsers, name: str, help: str, parents: Sequence[argparse.ArgumentParser] = ()
) -> argparse.ArgumentParser:
    """A subcommand whose `--help` starts with what it does and ends with examples (cli/guide.py)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, parents=list(parents), help=help, allow_abbrev=False,
        # raw, so the examples keep their lines; the description is wrapped here instead
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(help[:1].upper() + help[1:] + ".", width=_WIDTH),
    )
    parser.epilog = guide.epilog(parser.prog.removeprefix("hermetic "))
    return parser


def add_group(subparsers: Subparsers, name: str, help: str, dest: str) -> Subparsers:
    """A command with subcommands (`build llvm`); without one it is a usage error naming them."""
    group = add_command(subparsers, name, help)
    sub = group.add_subparsers(dest=dest, metavar="ACTION", required=True)
    return sub


def _platform_arch(value: str) -> str:
    """`linux/arm64` (or `linux/arm64/v8`) as an architecture; images here are Linux only."""
    parts = value.split("/")
    if len(parts) not in (2, 3) or parts[0] != "linux" or not parts[1]:
        raise argparse.ArgumentTypeError(f"{value!r} is not a Linux platform: use linux/ARCH, e.g. linux/arm64")
    return parts[1]


def add_platform(parser: argparse.ArgumentParser, what: str) -> None:
    """--arch ARCH or --platform linux/ARCH (docker's spelling), both into args.arch."""
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--arch", help=f"the architecture {what} (default: this machine's)")
    g.add_argument("--platform", dest="arch", type=_platform_arch, metavar="linux/ARCH", help="the same as --arch ARCH")


def out(text: str) -> None:
    """A result line on stdout (what scripts read); flushed so it precedes any error on stderr."""
    print(text, flush=True)


def out_json(data: Mapping[str, Any] | Sequence[Any], sort_keys: bool = False) -> None:
    print(json.dumps(data, indent=2, sort_keys=sort_keys))
    sys.stdout.flush()


def say(settings: Settings, text: str) -> None:
    """A progress or note line on stderr, unless --quiet."""
    if not settings.quiet:
        print(text, file=sys.stderr, flush=True)


def overrides(pairs: Sequence[str] | None) -> dict[str, str]:
    """--option KEY=VALUE pairs."""
    got: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep:
            raise RecipeError(f"bad --option {pair!r}", "expected KEY=VALUE", "e.g. --option targets=NVPTX;X86")
        got[key.strip()] = value.strip()
    return got


def signing_key(settings: Settings, required: bool = False) -> SigningKey | None:
    key = signing.load_signing_key(settings.sign_key, os.environ.get(signing.KEY_PASSWORD_ENV))
    if key is None and required:
        raise UsageError(
            "no signing key", f"neither --sign-key nor ${OPTIONS.row('sign_key').env} is set",
            "make one with `hermetic key generate PREFIX` and pass --sign-key PREFIX.key",
        )
    return key


def add_sign_key(parser: argparse.ArgumentParser, images: bool = True) -> None:
    g = parser.add_argument_group(GROUPS["signing"])
    for row in OPTIONS.group("signing"):
        _add_row(g, row)
    if not images:
        return
    g.add_argument(
        "--gpg-key", metavar="FILE",
        help=f"also sign with this OpenPGP key (${simple_signing.KEY_FILE_ENV}): the signature Debian 12's skopeo, "
             "buildah and podman enforce (policy.json signedBy); needs --lookaside",
    )
    g.add_argument("--lookaside", metavar="DIR",
                   help="where OpenPGP signatures go (registries.d `lookaside: file:///DIR`, or served over http)")


def gpg_sign(args: argparse.Namespace, ref: Reference, digests: list[str]) -> list[Path]:
    """OpenPGP signatures of the digests as ref, into the lookaside store; none without a key."""
    key = simple_signing.load_key(getattr(args, "gpg_key", None), os.environ)
    if key is None:
        return []
    if not args.lookaside:
        raise UsageError("--gpg-key needs --lookaside DIR", "OpenPGP signatures live in a lookaside store, not the registry",
                         "pass --lookaside DIR and point the consumers' registries.d at it")
    return [simple_signing.store(Path(args.lookaside), ref.repository, d,
                                 simple_signing.sign(key, identity_of(ref), d)) for d in digests]


def identity_of(ref: Reference) -> str:
    """The docker reference a signature names: REGISTRY/REPO:TAG (what a policy's default identity rule matches)."""
    return f"{ref.registry}/{ref.repository}:{ref.tag}" if ref.tag else f"{ref.registry}/{ref.repository}"


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    """How to reach a registry: plain http, a private CA, the size cap on manifests."""
    g = parser.add_argument_group("registry")
    g.add_argument(
        "--insecure", action="store_true",
        help="plain http to the registry (one on this machine); also lets blob downloads be redirected to http",
    )
    g.add_argument(
        "--ca", metavar="FILE",
        help="PEM certificates of a private certificate authority to trust besides the system's (or set SSL_CERT_FILE)",
    )
    g.add_argument(
        "--max-manifest-size", type=parse_size, default=DEFAULT_MAX_DOCUMENT, metavar="SIZE",
        help="refuse manifests, indexes and image configs larger than this (default 4M)",
    )


def add_bundle(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bundle", metavar="REF|DIR",
        help="build from this bundle alone (`hermetic bundle`; a layout, or REGISTRY/REPO:TAG to pull): its inputs "
             "feed a cache of their own under WORK_DIR/bundle, and no mirror, URL, apt or other cache is used",
    )


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in "KMG" else ""
    try:
        value = int(t[: len(t) - len(unit)]) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (use bytes or 512K, 16M, 1G)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: must be positive")
    return value


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
