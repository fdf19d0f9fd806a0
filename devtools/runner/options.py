"""The runner's options as one table (the fields of Options), from which argparse, the environment and the help are made."""

from __future__ import annotations

import argparse
import enum
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

ENV_PREFIX = "HERMETIC_RUNNER_"
CARRIED = ("source", "wheelhouse", "mirror")  # what a bundle holds instead


class Kind(enum.Enum):
    PATH = "path"
    TEXT = "text"
    INT = "int"
    ON = "on"  # a switch that turns something on: --bench, HERMETIC_RUNNER_BENCH=1
    OFF = "off"  # a switch that turns something off: --no-pack, HERMETIC_RUNNER_PACK=0


@dataclass(frozen=True)
class InCheckout:
    """A default path in the checkout (where device.sh carries files); `if_there`: none unless it exists."""

    rel: str
    if_there: bool = False

    def __call__(self, repo: Path) -> Path | None:
        path = repo / self.rel
        return path if path.exists() or not self.if_there else None

    def __str__(self) -> str:
        return f"CHECKOUT/{self.rel}" + (" if it is there" if self.if_there else "")


def all_cores(repo: Path) -> int:
    return os.cpu_count() or 1


Default = object | Callable[[Path], object]  # a value, or one computed from the checkout


@dataclass(frozen=True)
class Spec:
    flag: str
    kind: Kind
    help: str
    default: Default = None
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    short: str | None = None


def _row(flag: str, kind: Kind, help: str, default: Default = None, *, metavar: str | None = None,
         choices: tuple[str, ...] = (), short: str | None = None) -> dict[str, Spec]:
    """A field's metadata: its row of the table."""
    return {"spec": Spec(flag, kind, help, default, metavar, choices, short)}


class UsageError(Exception):
    """A bad option or option value: exit 2, before anything is made or removed."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.what, self.fix = what, fix


P, T, N, ON, OFF = Kind.PATH, Kind.TEXT, Kind.INT, Kind.ON, Kind.OFF


@dataclass(frozen=True)
class Options:
    """Every option of the runner: one field each, flag, kind, help and default in its row; the environment variable
    is HERMETIC_RUNNER_<FIELD>. A flag wins over the variable, the variable over the default; an empty variable is
    unset."""

    source: Path | None = field(metadata=_row(
        "--source", P, "the pruned archive, its pruned.json beside it",
        InCheckout(".carry/llvm-project-19.1.7.src-nvptx.tar.xz"), metavar="ARCHIVE"))
    bundle: Path | None = field(metadata=_row(
        "--bundle", P, "a `hermetic bundle` layout to build from instead of --source, --wheelhouse and --mirror: "
        "every LLVM and wheel build runs `hermetic ... --bundle DIR` (device.sh joins one carried in parts)",
        metavar="DIR"))
    checkout_compiler: bool = field(metadata=_row(
        "--checkout-compiler", ON, "with --bundle: tilec's wheel from this checkout's src/compiler, not the bundle's "
        "(with the bundle's requirements and toolchain), to try a compiler change without making a bundle again",
        False))
    out: Path = field(metadata=_row(
        "--out", P, "report, logs, records, PTX, junit xml, wheel, install-tree parts",
        Path("/tmp/hermetic-runner/out"), metavar="DIR"))
    work: Path = field(metadata=_row(
        "--work", P, "build directories, venvs, private site-packages", Path("/tmp/hermetic-runner/work"), metavar="DIR"))
    jobs: int = field(metadata=_row(
        "--jobs", N, "parallel build jobs", all_cores, short="-j", metavar="N"))
    wheelhouse: Path | None = field(metadata=_row(
        "--wheelhouse", P, "the hash-pinned build requirements (`hermetic wheelhouse`)", InCheckout(".carry/wheelhouse", if_there=True),
        metavar="DIR"))
    wheels: Path = field(metadata=_row(
        "--wheels", P, "wheels installed first into a private target: conan and what the machine lacks",
        InCheckout(".whl"), metavar="DIR"))
    pack: bool = field(metadata=_row("--no-pack", OFF, "do not tar the install tree into 15 MiB parts", True))
    variant: str = field(metadata=_row(
        "--variant", T, "the LLVM variant (another than nvptx only tries the runner itself)", "nvptx"))
    llvm_recipe: str | None = field(metadata=_row(
        "--llvm-recipe", T, "the recipe of the trees, a name under recipes/ or a directory (llvm; tests/recipes/tiny "
        "tries the runner itself in seconds)", metavar="NAME|DIR"))
    llvm_version: str | None = field(metadata=_row(
        "--llvm-version", T, "the LLVM release to build (the recipe's default_version)", metavar="V"))
    wheel: bool = field(metadata=_row("--no-wheel", OFF, "no tilec wheel and no gpu tier", True))
    llvmlite: Path | None = field(metadata=_row(
        "--llvmlite", P, "llvmlite's release sdist: its wheel twice (the same sha256), its own test suite against it",
        metavar="SDIST"))
    numba: Path | None = field(metadata=_row(
        "--numba", P, "with --llvmlite: Numba's sdist built on that llvmlite, a @njit smoke test", metavar="SDIST"))
    arch: str | None = field(metadata=_row(
        "--arch", T, "build LLVM for this architecture; another than the runner's is cross-built, its test_package "
        "run under qemu-user, with no wheel or gpu tier", choices=("amd64", "arm64")))
    qemu: Path | None = field(metadata=_row(
        "--qemu", P, "for a cross build without Debian's qemu-user-static and libc6-*-cross: a directory with "
        "qemu-ARCH.tar.xz (tests/gpu/runner/qemu-carry.sh writes it)", InCheckout(".qemu", if_there=True), metavar="DIR"))
    toolchain: str | None = field(metadata=_row(
        "--toolchain", T, "the compiler, a name in toolchain/toolchains.yml (its default)", metavar="NAME"))
    mirror: Path | None = field(metadata=_row(
        "--mirror", P, "where the pinned toolchain is found: the zig wheel or its slim archive", InCheckout(".zig", if_there=True),
        metavar="DIR"))
    support: bool = field(metadata=_row("--no-support", OFF, "skip the `support` build", True))
    again: bool = field(metadata=_row(
        "--again", ON, "build the wheel a second time in another work dir, umask 077 and cwd; the same sha256 required",
        False))
    tilec_bench: bool = field(metadata=_row(
        "--tilec-bench", ON, "bench/tilec_gpu.sh with the wheel: tilec against Triton and raw cuda-python "
        "(OUT/tilec-bench)", False))
    baseline_src: Path | None = field(metadata=_row(
        "--baseline-src", P, "another tilec source (`git archive REV src/compiler`): its wheel against the same tree, "
        "measured beside this one's", metavar="DIR"))
    cold_ab: bool = field(metadata=_row(
        "--cold-ab", ON, "with --baseline-src: tilec's cold compile with this wheel and the baseline's, taking turns "
        "(OUT/cold-this, OUT/cold-baseline)", False))
    compare_host: bool = field(metadata=_row(
        "--compare-host", ON, "the variant again with the host compiler, tilec's wheel against it, and tilec's cold "
        "compile with each wheel, taking turns", False))
    cold_rounds: int = field(metadata=_row("--cold-rounds", N, "rounds of the cold-compile comparisons", 4, metavar="N"))
    cold_reps: int = field(metadata=_row("--cold-reps", N, "compiles per kernel in each round", 9, metavar="N"))
    bench: bool = field(metadata=_row(
        "--bench", ON, "last, bench/toolchain_build.py: the bench variant built two ways side by side", False))
    bench_compare: str = field(metadata=_row(
        "--bench-compare", T, "what --bench compares: toolchain (host, zig) or arch (native, cross)", "toolchain",
        choices=("toolchain", "arch")))
    bench_variant: str = field(metadata=_row("--bench-variant", T, "the variant --bench builds twice", "support"))
    scale: bool = field(metadata=_row(
        "--scale", ON, "instead of the builds: bench/scale_bench.py on the variant (cold, warm, another user, "
        "distributed, substituted)", False))
    scale_tools: Path | None = field(metadata=_row(
        "--scale-tools", P, "a directory with scale-tools.tar.xz (tests/gpu/runner/scale-carry.sh writes it), for a "
        "runner without redis-server, ccache, distcc and docker-registry", InCheckout(".scale", if_there=True), metavar="DIR"))
    scale_runs: str | None = field(metadata=_row(
        "--scale-runs", T, "scale_bench's --runs: which runs, in which order (all five)", metavar="LIST"))
    scale_hosts: int = field(metadata=_row("--scale-hosts", N, "distccd daemons of --scale", 2, metavar="N"))
    scale_slots: int | None = field(metadata=_row(
        "--scale-slots", N, "jobs each distccd of --scale takes (half the jobs)", metavar="N"))
    sign_key: Path | None = field(metadata=_row(
        "--sign-key", P, "as a second builder: each variant's image (`hermetic image llvm`), signed with this ECDSA "
        "P-256 key as --identity, and its in-toto links (OUT/evidence); needs --identity", metavar="FILE"))
    gpg_key: Path | None = field(metadata=_row(
        "--gpg-key", P, "with --sign-key: the image signed with this OpenPGP key too, the signature Debian's containers "
        "tools enforce, into --lookaside", metavar="FILE"))
    lookaside: Path | None = field(metadata=_row(
        "--lookaside", P, "where --gpg-key's signature goes (OUT/lookaside)", metavar="DIR"))
    identity: str | None = field(metadata=_row(
        "--identity", T, "the reference an image is signed as, the one it is pulled by; {variant} in it names each variant's "
        "(without it, only --variant's image is signed)", metavar="REGISTRY/REPO:TAG"))
    commit: str | None = field(metadata=_row(
        "--commit", T, "the commit the report names (git rev-parse HEAD, with +changes where the tree differs from it)",
        metavar="REV"))
    golden: Path = field(metadata=_row(
        "--golden", P, "the digests the built trees are compared with",
        InCheckout("tests/golden/digests.json"), metavar="FILE"))
    dry_run: bool = field(metadata=_row(
        "--dry-run", ON, "print the steps, each run or skip with its reason and its commands; run nothing", False))


def specs() -> list[tuple[str, Spec]]:
    """The table: (field name, its row), in the order of Options."""
    return [(f.name, f.metadata["spec"]) for f in fields(Options)]


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m devtools.runner",
        description="The GPU runner: build `support` and the variant from the carried pruned source with the pinned "
                    "toolchain, offline; check the test_package PTX with ptxas; build the tilec wheel against it; "
                    "install it into a fresh venv; run the gpu tier; write OUT/report.json (also when a step fails).",
        epilog="Every option also reads HERMETIC_RUNNER_<NAME>; a flag wins over the variable.")
    for name, s in specs():
        flags = [s.flag, *([s.short] if s.short else [])]
        default = "all cores" if s.default is all_cores else s.default
        shown = {Kind.ON: "off", Kind.OFF: "on"}.get(s.kind, default)
        text = f"{s.help} ({env_name(name)}; default: {shown})"
        if s.kind in (Kind.ON, Kind.OFF):
            p.add_argument(*flags, dest=name, action="store_true" if s.kind is Kind.ON else "store_false", default=None,
                           help=text)
        else:
            p.add_argument(*flags, dest=name, default=None, metavar=s.metavar, choices=s.choices or None, help=text)
    return p


def _value(name: str, s: Spec, raw: str, where: str) -> object:
    if s.kind in (Kind.ON, Kind.OFF):
        low = raw.strip().lower()
        if low not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            raise UsageError(f"{where}={raw!r} is not a switch value", f"set {where} to 1 or 0")
        return low in ("1", "true", "yes", "on")
    if s.choices and raw not in s.choices:
        raise UsageError(f"{where}={raw!r} is not one of {', '.join(s.choices)}", f"pick one of {', '.join(s.choices)}")
    if s.kind is Kind.INT:
        try:
            return int(raw)
        except ValueError:
            raise UsageError(f"{where}={raw!r} is not a whole number", f"give {where} a number") from None
    if s.kind is Kind.PATH:
        return Path(raw).expanduser().absolute()  # the steps run from directories of their own
    return raw


def resolve(argv: Sequence[str], env: Mapping[str, str], repo: Path) -> Options:
    """Options from the command line, then the environment, then the defaults; checks across options."""
    got = parser().parse_args(list(argv))
    values: dict[str, object] = {}
    given: list[str] = []
    for name, s in specs():
        flag_value = getattr(got, name)
        if flag_value is not None:
            values[name] = flag_value if s.kind in (Kind.ON, Kind.OFF) else _value(name, s, flag_value, s.flag)
        elif env.get(env_name(name), "") != "":
            values[name] = _value(name, s, env[env_name(name)], env_name(name))
        else:
            values[name] = s.default(repo) if callable(s.default) else s.default
            continue
        given.append(name)
    opts = Options(**values)  # type: ignore[arg-type]  # the table's kinds type each value
    if opts.bundle is not None:
        opts = _with_bundle(opts, given)
    if opts.checkout_compiler and opts.bundle is None:
        raise UsageError("--checkout-compiler picks this checkout's compiler over a bundle's, and no --bundle is given",
                         "drop --checkout-compiler: without --bundle tilec's wheel is built from the checkout's "
                         "src/compiler already")
    if opts.cold_ab and opts.baseline_src is None:
        raise UsageError("--cold-ab compares with the baseline, and none is given",
                         "give the baseline's source with --baseline-src DIR (HERMETIC_RUNNER_BASELINE_SRC)")
    if opts.sign_key is not None and not opts.identity:
        raise UsageError("--sign-key signs the image as the reference it is pulled by, and no --identity is given",
                         "pass --identity REGISTRY/REPO:TAG (HERMETIC_RUNNER_IDENTITY)")
    if (opts.gpg_key or opts.identity) and opts.sign_key is None:
        raise UsageError("--gpg-key and --identity sign as a second builder, and no --sign-key is given",
                         "pass --sign-key FILE (`hermetic key generate` writes one)")
    if opts.gpg_key and opts.lookaside is None:
        opts = replace(opts, lookaside=opts.out / "lookaside")
    if opts.jobs < 1:
        raise UsageError(f"--jobs {opts.jobs}: at least one job", "pass --jobs N with N >= 1")
    return opts


def _with_bundle(opts: Options, given: Sequence[str]) -> Options:
    """A bundle holds the source, the toolchain and the wheelhouse: none of the carried ones is used."""
    both = [dict(specs())[n].flag for n in CARRIED if n in given]
    if both:
        raise UsageError(f"--bundle holds the source, the toolchain and the wheelhouse, and {', '.join(both)} is given too",
                         f"drop {', '.join(both)} (or --bundle)")
    apart = [flag for flag, on in (("--scale", opts.scale), ("--bench", opts.bench)) if on]
    if apart:
        raise UsageError(f"{', '.join(apart)} builds from the carried source, toolchain and wheelhouse, not a bundle",
                         f"run {', '.join(apart)} without --bundle, carrying .carry and .zig")
    return replace(opts, source=None, wheelhouse=None, mirror=None)


def shown(opts: Options) -> dict[str, object]:
    """The resolved options as the report records them."""
    return {name: str(v) if isinstance(v, Path) else v for name, v in vars(opts).items()}
