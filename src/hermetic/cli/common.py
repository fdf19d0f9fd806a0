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
    # SUPPRESS keeps options the user did not give out of the namespace, so env and pyproject can fill them.
    s = argparse.SUPPRESS
    base = argparse.ArgumentParser(add_help=False)
    g = base.add_argument_group("common options")
    g.add_argument("--root", default=s, help="hermetic checkout holding recipes/ and toolchain/")
    g.add_argument("--cache", dest="cache_dir", default=s, help="source cache (HERMETIC_CACHE; ~/.cache/hermetic)")
    g.add_argument("--work-dir", dest="work_dir", default=s, help="where builds happen (HERMETIC_WORK_DIR; ./build)")
    g.add_argument("-q", "--quiet", action="store_true", default=s, help="no progress output")
    build = argparse.ArgumentParser(add_help=False, parents=[base])
    g = build.add_argument_group("build options")
    g.add_argument("--variant", default=s, help="recipe variant (HERMETIC_VARIANT; the recipe's default)")
    g.add_argument("--llvm-version", dest="llvm_version", default=s,
                   help="LLVM release to build, one conandata.yml pins (HERMETIC_LLVM_VERSION; the recipe's default_version)")
    g.add_argument("--llvm-recipe", dest="llvm_recipe", default=s, metavar="NAME|DIR",
                   help="the recipe of the trees built: a name under recipes/ or a recipe directory "
                        "(HERMETIC_LLVM_RECIPE; llvm)")
    g.add_argument("--mirror", dest="mirrors", action="append", default=s, help="directory holding source archives; repeatable")
    g.add_argument("--offline", choices=("auto", "require", "off"), default=s, help="network isolation of build steps (auto)")
    g.add_argument("-j", "--jobs", type=int, default=s, help="parallel build jobs (all cores)")
    g.add_argument("--no-apt", dest="use_apt", action="store_false", default=s, help="do not fetch through apt")
    g.add_argument("--toolchain", default=s, help="pinned compiler: zig (default) or host (HERMETIC_TOOLCHAIN)")
    g.add_argument("--glibc", default=s, help="glibc floor of the zig target, 2.NN (HERMETIC_GLIBC; 2.28)")
    # dest target_arch: image, pull, attest and inspect have an --arch of their own (a platform to pick, any name).
    g.add_argument("--arch", dest="target_arch", default=s,
                   help="architecture to build for, amd64 or arm64 (only `hermetic all` takes two, comma-separated: amd64,arm64); another than this machine's is cross-built with zig "
                        "(HERMETIC_ARCH; this machine's)")
    g.add_argument("--wheelhouse", metavar="DIR", default=s,
                   help="the hash-pinned build requirements: CMake, Ninja, the wheel's (HERMETIC_WHEELHOUSE; CACHE/wheelhouse)")
    g.add_argument("--no-urls", dest="use_urls", action="store_false", default=s, help="do not download from URLs")
    return Common(base, build)


def add_substitute(parser: argparse.ArgumentParser) -> None:
    """--substitute / --no-substitute: the commands that build an LLVM tree (`build llvm`, `all`)."""
    g = parser.add_argument_group("substitution").add_mutually_exclusive_group()
    g.add_argument(
        "--substitute", dest="substitutes", action="append", default=argparse.SUPPRESS, metavar="REGISTRY/REPO",
        help="before building, pull a verified image with the same inputs digest from this repository "
             "(http://REGISTRY/REPO for plain http); repeatable, tried in order (HERMETIC_SUBSTITUTES)",
    )
    g.add_argument("--no-substitute", dest="no_substitute", action="store_true", default=argparse.SUPPRESS,
                   help="build without asking any substitute, whatever HERMETIC_SUBSTITUTES or pyproject say")


def add_compile_cache(parser: argparse.ArgumentParser) -> None:
    """--compile-cache / --no-compile-cache: the commands that build an LLVM tree (`build llvm`, `all`)."""
    g = parser.add_argument_group("shared compile cache").add_mutually_exclusive_group()
    g.add_argument(
        "--compile-cache", dest="compile_cache", default=argparse.SUPPRESS, metavar="URL",
        help="run the compiles through ccache with this remote storage: redis+unix:/PATH/redis.sock or file:///DIR "
             "(redis://HOST:PORT only with --offline=off); never changes a digest (HERMETIC_COMPILE_CACHE)",
    )
    g.add_argument("--no-compile-cache", dest="no_compile_cache", action="store_true", default=argparse.SUPPRESS,
                   help="compile without a shared cache, whatever HERMETIC_COMPILE_CACHE or pyproject say")


def add_distribute(parser: argparse.ArgumentParser) -> None:
    """--distribute / --no-distribute: the commands that build an LLVM tree (`build llvm`, `all`)."""
    g = parser.add_argument_group("distributed compilation").add_mutually_exclusive_group()
    g.add_argument(
        "--distribute", dest="distribute", default=argparse.SUPPRESS, metavar="HOSTS",
        help="spread the compiles over these distccd compile hosts, HOST[:PORT][/SLOTS] separated by commas; "
             "each needs the identical pinned toolchain (`hermetic toolchain compile-host`); the build reaches "
             "them and nothing else; never changes a digest (HERMETIC_DISTRIBUTE)",
    )
    g.add_argument("--no-distribute", dest="no_distribute", action="store_true", default=argparse.SUPPRESS,
                   help="compile on this machine only, whatever HERMETIC_DISTRIBUTE or pyproject say")


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
            "no signing key", f"neither --sign-key nor ${signing.KEY_FILE_ENV} is set",
            "make one with `hermetic key generate PREFIX` and pass --sign-key PREFIX.key",
        )
    return key


def add_sign_key(parser: argparse.ArgumentParser, images: bool = True) -> None:
    g = parser.add_argument_group("signing")
    g.add_argument(
        "--sign-key", dest="sign_key", metavar="FILE", default=argparse.SUPPRESS,
        help=f"ECDSA P-256 private key (PEM) to sign with (${signing.KEY_FILE_ENV}); without one nothing is signed",
    )
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
