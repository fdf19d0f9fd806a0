"""hermetic's options as one table: each setting's flags, environment variable, [tool.hermetic] key, default and parser.

From the table are made the argparse options (cli/common.py), the command line's values (the dispatcher), the
reading of the environment and of pyproject.toml (`resolve`), the help and the docs' settings page.
Precedence: command line > environment > `[tool.hermetic]` in the checkout's pyproject.toml > default.
"""

from __future__ import annotations

import enum
import os
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermetic.core.errors import UsageError
from hermetic.model import settings as s
from hermetic.model.settings import Settings


class Kind(enum.Enum):
    VALUE = "value"  # --flag VALUE
    LIST = "list"  # --flag VALUE, repeatable
    ON = "on"  # --flag turns the setting on
    OFF = "off"  # --flag turns the setting off


@dataclass(frozen=True)
class Origin:
    """What a parser may need besides the raw value: the checkout, where hermetic runs, its environment."""

    root: Path
    cwd: Path
    environ: Mapping[str, str]


# The raw value of the first layer that gives one (None where none does) -> the setting's value.
Parse = Callable[[Any, Origin], Any]

# The option groups, in the order of --help: name -> the title argparse shows.
GROUPS = {
    "common": "common options",
    "build": "build options",
    "substitution": "substitution",
    "compile cache": "shared compile cache",
    "distribution": "distributed compilation",
    "signing": "signing",
}


@dataclass(frozen=True)
class Option:
    """One row: a setting and every way to give it."""

    name: str  # the key of the command line's values
    title: str  # what it is in a few words (the settings page)
    flags: tuple[str, ...]
    help: str  # without the environment variable and the default: help_text() adds them
    group: str  # a key of GROUPS: which commands take it
    parse: Parse
    default: str  # as --help and the docs say it; the parser makes the value
    env: str | None = None
    env_form: str = ""  # how a list is written in the environment, where a flag repeats
    key: str | None = None  # in [tool.hermetic]
    kind: Kind = Kind.VALUE
    field: str = ""  # the Settings field where it is not `name`
    dest: str = ""  # argparse's dest where it is not `name`
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    convert: Callable[[str], Any] | None = None  # argparse's `type`
    negation: str = ""  # a flag that unsets the setting, whatever the environment and pyproject say
    negation_help: str = ""
    directory: bool = False  # a file in its place is refused before a plan is made

    @property
    def setting(self) -> str:
        return self.field or self.name

    @property
    def destination(self) -> str:
        return self.dest or self.name

    @property
    def negation_dest(self) -> str:
        return self.negation.lstrip("-").replace("-", "_")

    def help_text(self, help: str | None = None) -> str:
        """The help as --help prints it (or a command's own `help`), with the environment variable and the default."""
        text = self.help if help is None else help
        if self.kind in (Kind.ON, Kind.OFF):
            return f"{text} ({self.env}={int(self.kind is Kind.ON)})" if self.env else text
        where = f"{self.env}{'=' + self.env_form if self.env_form else ''}; " if self.env else ""
        return f"{text} ({where}default: {self.default})"

    def negation_help_text(self) -> str:
        said = " or ".join(x for x in (self.env, f"[tool.hermetic] {self.key}" if self.key else "") if x)
        return f"{self.negation_help}, whatever {said} say" if said else self.negation_help


def _refuse_duplicates(rows: Iterable[Option]) -> None:
    rows = tuple(rows)
    kinds: dict[str, list[str]] = {
        "name": [r.name for r in rows],
        "setting": [r.setting for r in rows],
        "dest": [r.destination for r in rows] + [r.negation_dest for r in rows if r.negation],
        "flag": [f for r in rows for f in (*r.flags, *((r.negation,) if r.negation else ()))],
        "environment variable": [r.env for r in rows if r.env],
        "[tool.hermetic] key": [r.key for r in rows if r.key],
    }
    for kind, names in kinds.items():
        twice = sorted(n for n, count in Counter(names).items() if count > 1)
        if twice:
            raise ValueError(f"the options table names the {kind} {', '.join(twice)} more than once")
    unknown = sorted({r.group for r in rows} - set(GROUPS))
    if unknown:
        raise ValueError(f"the options table names unknown groups: {', '.join(unknown)}")


def _pyproject_table(root: Path) -> Mapping[str, Any]:
    path = root / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"cannot read {path}", str(exc), "fix the TOML syntax") from exc
    table = data.get("tool", {}).get("hermetic", {})
    return table if isinstance(table, dict) else {}


@dataclass(frozen=True)
class Table:
    """The rows, checked: no name, flag, environment variable or key twice."""

    rows: tuple[Option, ...]

    def __post_init__(self) -> None:
        _refuse_duplicates(self.rows)

    def add(self, row: Option) -> Table:
        return Table((*self.rows, row))

    def row(self, name: str) -> Option:
        return next(r for r in self.rows if r.name == name)

    def group(self, name: str) -> tuple[Option, ...]:
        return tuple(r for r in self.rows if r.group == name)

    def keys(self) -> list[str]:
        return sorted(r.key for r in self.rows if r.key)

    def cli_values(self, parsed: Mapping[str, Any]) -> dict[str, Any]:
        """The settings given on the command line, from argparse's values (those not given are absent)."""
        got = {r.name: parsed[r.destination] for r in self.rows if r.destination in parsed}
        negated = [r.negation_dest for r in self.rows if r.negation]
        return got | {dest: parsed[dest] for dest in negated if dest in parsed}

    def values(self, cli: Mapping[str, Any], environ: Mapping[str, str], cwd: Path) -> dict[str, Any]:
        """Each setting's value by its Settings field; `cli` holds only the options the user actually gave."""
        root = Path(cli["root"]).resolve() if cli.get("root") else s.find_root(cwd.resolve())
        table = _pyproject_table(root)
        unknown = sorted(set(table) - set(self.keys()))
        if unknown:
            raise UsageError(
                f"unknown keys in [tool.hermetic]: {', '.join(unknown)}",
                "hermetic does not know these settings",
                f"valid keys: {', '.join(self.keys())}",
            )
        origin = Origin(root, cwd, environ)
        got: dict[str, Any] = {}
        for row in self.rows:
            # a --no-… flag wins over the environment and pyproject, as any flag does
            raw = None if row.negation and cli.get(row.negation_dest) else _given(row, cli, environ, table)
            value = row.parse(raw, origin)
            if row.directory and value.exists() and not value.is_dir():
                # caught here, before a plan is made, rather than as ENOTDIR deep inside a step
                raise UsageError(f"{row.flags[-1]} ({row.env}) {value} is not a directory", "it exists as a file",
                                 "point it at a directory")
            got[row.setting] = value
        return got


def _given(row: Option, cli: Mapping[str, Any], environ: Mapping[str, str], table: Mapping[str, Any]) -> Any:
    if cli.get(row.name) is not None:
        return cli[row.name]
    if row.env and row.env in environ:
        return environ[row.env]
    if row.key and row.key in table:
        return table[row.key]
    return None


def resolve(cli: Mapping[str, Any], environ: Mapping[str, str], cwd: Path) -> Settings:
    """The settings of one run; `cli` holds only the options the user actually gave."""
    got = OPTIONS.values(cli, environ, cwd)
    return Settings(**got, arch=got["arches"][0])  # `arch` is the first (the only one but for `hermetic all`)


# -- the parsers that need more than the value (settings.py holds the others) --------------------------------

def _root(value: Any, origin: Origin) -> Path:
    return origin.root


def _cache_dir(value: Any, origin: Origin) -> Path:
    xdg = origin.environ.get("XDG_CACHE_HOME")
    home = Path(origin.environ.get("HOME", str(Path.home())))
    default = Path(xdg) / "hermetic" if xdg else home / ".cache" / "hermetic"
    return Path(value or default).expanduser().resolve()


def _work_dir(value: Any, origin: Origin) -> Path:
    return Path(value or origin.root / "build").expanduser().resolve()


def _plain(parse: Callable[[Any], Any]) -> Parse:
    return lambda value, origin: parse(value)


def _switch(name: str, default: bool) -> Parse:
    return lambda value, origin: s.parse_bool(name, value, default)


Row, K = Option, Kind
OPTIONS = Table((
    Row("root", "checkout", ("--root",), "hermetic checkout holding recipes/ and toolchain/", "common", _root,
        "the nearest directory above holding recipes/llvm"),
    Row("cache_dir", "source cache", ("--cache",), "source cache", "common", _cache_dir,
        "$XDG_CACHE_HOME/hermetic, else ~/.cache/hermetic", env="HERMETIC_CACHE", key="cache_dir", directory=True),
    Row("work_dir", "work directory", ("--work-dir",), "where builds happen", "common", _work_dir,
        "build/ in the checkout", env="HERMETIC_WORK_DIR", key="work_dir", directory=True),
    Row("quiet", "progress output off", ("-q", "--quiet"), "no progress output", "common", _switch("quiet", False),
        "off", env="HERMETIC_QUIET", key="quiet", kind=K.ON),
    Row("variant", "variant", ("--variant",), "recipe variant", "build", _plain(s.parse_text),
        "the recipe's default variant", env="HERMETIC_VARIANT", key="variant"),
    Row("llvm_version", "LLVM release", ("--llvm-version",), "LLVM release to build, one conandata.yml pins", "build",
        _plain(s.parse_stripped), "the recipe's default_version", env="HERMETIC_LLVM_VERSION", key="llvm_version"),
    Row("llvm_recipe", "recipe of the trees", ("--llvm-recipe",),
        "the recipe of the trees built: a name under recipes/ or a recipe directory", "build",
        lambda value, origin: s.parse_recipe(value, origin.cwd), "llvm", env="HERMETIC_LLVM_RECIPE",
        key="llvm_recipe", metavar="NAME|DIR"),
    Row("mirrors", "mirror directories", ("--mirror",), "directory holding source archives; repeatable", "build",
        _plain(s.parse_mirrors), "none", env="HERMETIC_MIRRORS", env_form=f"DIR{os.pathsep}DIR", key="mirrors",
        kind=K.LIST),
    Row("offline", "network isolation", ("--offline",), "network isolation of build steps", "build",
        _plain(s.parse_offline), "auto", env="HERMETIC_OFFLINE", key="offline", choices=s.OFFLINE_MODES),
    Row("jobs", "parallel jobs", ("-j", "--jobs"), "parallel build jobs", "build", _plain(s.parse_jobs), "all cores",
        env="HERMETIC_JOBS", key="jobs", convert=int),
    Row("use_apt", "fetch through apt", ("--no-apt",), "do not fetch through apt", "build",
        _switch("use_apt", True), "on", env="HERMETIC_USE_APT", key="use_apt", kind=K.OFF),
    Row("toolchain", "toolchain", ("--toolchain",), "pinned compiler: zig or host", "build", _plain(s.parse_text),
        "toolchains.yml's default, zig", env="HERMETIC_TOOLCHAIN", key="toolchain"),
    Row("glibc", "glibc floor (zig)", ("--glibc",), "glibc floor of the zig target, 2.NN", "build",
        _plain(s.parse_glibc), "the toolchain's (2.28)", env="HERMETIC_GLIBC", key="glibc"),
    # dest target_arch: image, pull, attest and inspect have an --arch of their own (a platform to pick, any name)
    Row("arch", "architecture", ("--arch",),
        "architecture to build for, amd64 or arm64 (only `hermetic all` takes two, comma-separated: amd64,arm64); "
        "another than this machine's is "
        "cross-built with zig", "build", _plain(s.parse_arches), "this machine's",
        env="HERMETIC_ARCH", key="arch", field="arches", dest="target_arch"),
    Row("wheelhouse", "wheelhouse", ("--wheelhouse",), "the hash-pinned build requirements: CMake, Ninja, the wheel's",
        "build", _plain(s.parse_path), "CACHE/wheelhouse", env="HERMETIC_WHEELHOUSE", key="wheelhouse", metavar="DIR"),
    Row("use_urls", "download from URLs", ("--no-urls",), "do not download from URLs", "build",
        _switch("use_urls", True), "on", env="HERMETIC_USE_URLS", key="use_urls", kind=K.OFF),
    Row("substitutes", "substitutes", ("--substitute",),
        "before building, pull a verified image with the same inputs digest from this repository "
        "(http://REGISTRY/REPO for plain http); repeatable, tried in order", "substitution",
        _plain(s.parse_substitutes), "none", env="HERMETIC_SUBSTITUTES", env_form="REPO,REPO", key="substitutes",
        kind=K.LIST, metavar="REGISTRY/REPO",
        negation="--no-substitute", negation_help="build without asking any substitute"),
    Row("compile_cache", "compile cache", ("--compile-cache",),
        "run the compiles through ccache with this remote storage: redis+unix:/PATH/redis.sock or file:///DIR "
        "(redis://HOST:PORT only with --offline=off); never changes a digest", "compile cache",
        _plain(s.parse_compile_cache_setting), "none", env="HERMETIC_COMPILE_CACHE", key="compile_cache",
        metavar="URL", negation="--no-compile-cache", negation_help="compile without a shared cache"),
    Row("distribute", "compile hosts", ("--distribute",),
        "spread the compiles over these distccd compile hosts, HOST[:PORT][/SLOTS] separated by commas; each needs "
        "the identical pinned toolchain (`hermetic toolchain compile-host`); the build reaches them and nothing else; "
        "never changes a digest", "distribution",
        _plain(s.parse_distribute_setting), "none", env="HERMETIC_DISTRIBUTE", env_form="HOST,HOST", key="distribute",
        metavar="HOSTS", negation="--no-distribute", negation_help="compile on this machine only"),
    Row("sign_key", "signing key", ("--sign-key",),
        "ECDSA P-256 private key (PEM) to sign with; without one nothing is signed", "signing",
        _plain(s.parse_path), "none", env="HERMETIC_SIGNING_KEY_FILE", key="sign_key", metavar="FILE"),
))
