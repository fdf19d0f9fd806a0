"""One typed settings model, resolved once at the edge.

Precedence: command line > `HERMETIC_*` environment > `[tool.hermetic]` in the
project's pyproject.toml > defaults. Nothing below the CLI reads os.environ or
TOML for hermetic's own settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermetic.build.compile_cache import CompileCache, parse_setting
from hermetic.build.distribute import Distribution
from hermetic.build.distribute import parse_setting as parse_distribute
from hermetic.core.errors import UsageError
from hermetic.fetch.toolchain import PLATFORMS, machine_arch
from hermetic.oci.reference import Substitute, parse_substitute

OFFLINE_MODES = ("auto", "require", "off")
_GLIBC = re.compile(r"^2\.\d+$")


def find_root(start: Path) -> Path:
    """The project root: the nearest directory holding recipes/llvm, else the package's checkout."""
    for d in (start, *start.parents):
        if (d / "recipes" / "llvm" / "conanfile.py").is_file():
            return d
    here = Path(__file__).resolve().parents[3]
    if (here / "recipes" / "llvm" / "conanfile.py").is_file():
        return here
    raise UsageError(
        "cannot find the hermetic recipes",
        f"no recipes/llvm/conanfile.py above {start} or beside the installed package",
        "run hermetic inside a hermetic checkout, or pass --root DIR",
    )


@dataclass(frozen=True)
class Settings:
    root: Path
    cache_dir: Path
    work_dir: Path
    variant: str | None = None  # None: the recipe's default (variants.yml `default:`)
    llvm_version: str | None = None  # None: the recipe's default (conandata.yml `default_version:`)
    # The recipe of the trees built: a name under recipes/ or an absolute directory (the tests' tiny recipe);
    # None: recipes/llvm.
    llvm_recipe: str | None = None
    mirrors: tuple[Path, ...] = ()
    offline: str = "auto"
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    quiet: bool = False
    use_apt: bool = True
    use_urls: bool = True
    toolchain: str | None = None  # None: toolchain/toolchains.yml's `default:`
    glibc: str | None = None  # glibc floor of a zig target (2.NN); None: the toolchain's own
    wheelhouse: Path | None = None  # the pinned build requirements; None: <cache>/wheelhouse
    arch: str | None = None  # OCI architecture to build for (amd64, arm64); None: this machine's
    # Every architecture asked for, in order (`--arch amd64,arm64`); only `hermetic all` takes more
    # than one (it builds each and writes one image index). `arch` is the first.
    arches: tuple[str, ...] = ()
    substitutes: tuple[Substitute, ...] = ()  # registries asked for a finished build before building, in order
    # The shared compile cache the LLVM compiles run through (ccache's remote storage); never an input.
    compile_cache: CompileCache | None = None
    # The compile hosts (distccd) the LLVM compiles are spread over; never an input either.
    distribute: Distribution | None = None
    # The builder's signing key (ECDSA P-256, PEM): attestations are signed with it; None leaves them unsigned.
    sign_key: Path | None = None

    def digest(self) -> str:
        data = {k: str(v) for k, v in dataclasses.asdict(self).items()}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    @property
    def recipes_dir(self) -> Path:
        return self.root / "recipes"

    @property
    def llvm_recipe_dir(self) -> Path:
        value = self.llvm_recipe or "llvm"
        return Path(value) if os.sep in value else self.recipes_dir / value

    @property
    def toolchain_dir(self) -> Path:
        return self.root / "toolchain"


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


_KEYS = {
    "cache_dir": "CACHE",
    "work_dir": "WORK_DIR",
    "variant": "VARIANT",
    "llvm_version": "LLVM_VERSION",
    "llvm_recipe": "LLVM_RECIPE",
    "mirrors": "MIRRORS",
    "offline": "OFFLINE",
    "jobs": "JOBS",
    "quiet": "QUIET",
    "use_apt": "USE_APT",
    "use_urls": "USE_URLS",
    "toolchain": "TOOLCHAIN",
    "glibc": "GLIBC",
    "wheelhouse": "WHEELHOUSE",
    "arch": "ARCH",
    "substitutes": "SUBSTITUTES",
    "compile_cache": "COMPILE_CACHE",
    "distribute": "DISTRIBUTE",
    "sign_key": "SIGNING_KEY_FILE",
}


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise UsageError(f"invalid value for {name}: {value!r}", "expected a boolean", "use 1/0, true/false")


def resolve(
    cli: Mapping[str, Any],
    environ: Mapping[str, str],
    cwd: Path,
) -> Settings:
    """Merge the layers; `cli` holds only the options the user actually gave."""
    root = Path(cli["root"]).resolve() if cli.get("root") else find_root(cwd.resolve())
    table = _pyproject_table(root)
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise UsageError(
            f"unknown keys in [tool.hermetic]: {', '.join(unknown)}",
            "hermetic does not know these settings",
            f"valid keys: {', '.join(sorted(_KEYS))}",
        )
    merged: dict[str, Any] = {}
    for key, env in _KEYS.items():
        if cli.get(key) is not None:
            merged[key] = cli[key]
        elif f"HERMETIC_{env}" in environ:
            merged[key] = environ[f"HERMETIC_{env}"]
        elif key in table:
            merged[key] = table[key]

    home = Path(environ.get("HOME", str(Path.home())))
    xdg = environ.get("XDG_CACHE_HOME")
    cache = Path(merged.get("cache_dir") or (Path(xdg) / "hermetic" if xdg else home / ".cache" / "hermetic"))
    work = Path(merged.get("work_dir") or root / "build")

    for name, path in (("--work-dir (HERMETIC_WORK_DIR)", work), ("--cache (HERMETIC_CACHE)", cache)):
        # Caught here, before a plan is made, rather than as ENOTDIR deep inside a step.
        if path.expanduser().exists() and not path.expanduser().is_dir():
            raise UsageError(f"{name} {path} is not a directory", "it exists as a file", "point it at a directory")

    mirrors_raw = merged.get("mirrors", ())
    if isinstance(mirrors_raw, str):
        mirrors_raw = [m for m in mirrors_raw.split(os.pathsep) if m]
    mirrors = tuple(Path(m).expanduser().resolve() for m in mirrors_raw)

    offline = str(merged.get("offline", "auto"))
    if offline not in OFFLINE_MODES:
        raise UsageError(
            f"invalid offline mode {offline!r}", "", f"use one of: {', '.join(OFFLINE_MODES)}"
        )
    try:
        jobs = int(merged.get("jobs", os.cpu_count() or 1))
    except ValueError as exc:
        raise UsageError(f"invalid job count {merged.get('jobs')!r}", "", "give a positive integer") from exc
    if jobs < 1:
        raise UsageError(f"invalid job count {jobs}", "", "give a positive integer")

    glibc = str(merged["glibc"]).strip() if merged.get("glibc") else None
    if glibc is not None and not _GLIBC.match(glibc):
        raise UsageError(f"invalid glibc floor {glibc!r}", "expected 2.NN", "e.g. --glibc 2.28 (or 2.17)")

    arches = _arches(merged.get("arch"))

    if cli.get("no_substitute"):
        # --no-substitute wins over HERMETIC_SUBSTITUTES and [tool.hermetic], as any flag does
        substitutes: tuple[Substitute, ...] = ()
    else:
        substitutes = parse_substitutes(merged.get("substitutes", ()))
    # --no-compile-cache wins over HERMETIC_COMPILE_CACHE and [tool.hermetic] the same way
    compile_cache = None if cli.get("no_compile_cache") else parse_setting(merged.get("compile_cache"))
    distribute = None if cli.get("no_distribute") else parse_distribute(merged.get("distribute"))

    return Settings(
        root=root,
        cache_dir=cache.expanduser().resolve(),
        work_dir=work.expanduser().resolve(),
        variant=str(merged["variant"]) if merged.get("variant") else None,
        llvm_version=str(merged["llvm_version"]).strip() if merged.get("llvm_version") else None,
        llvm_recipe=_recipe(merged.get("llvm_recipe"), cwd),
        mirrors=mirrors,
        offline=offline,
        jobs=jobs,
        quiet=_as_bool("quiet", merged.get("quiet", False)),
        use_apt=_as_bool("use_apt", merged.get("use_apt", True)),
        use_urls=_as_bool("use_urls", merged.get("use_urls", True)),
        toolchain=str(merged["toolchain"]) if merged.get("toolchain") else None,
        glibc=glibc,
        wheelhouse=Path(str(merged["wheelhouse"])).expanduser().resolve() if merged.get("wheelhouse") else None,
        arch=arches[0],
        arches=arches,
        substitutes=substitutes,
        compile_cache=compile_cache,
        distribute=distribute,
        sign_key=Path(str(merged["sign_key"])).expanduser().resolve() if merged.get("sign_key") else None,
    )


def _recipe(value: Any, cwd: Path) -> str | None:
    """A recipe name (recipes/NAME) as given; a path (anything with a `/`) made absolute."""
    if not value:
        return None
    text = str(value).strip()
    if "/" not in text:
        return text
    return str((cwd / Path(text).expanduser()).resolve())


def _arches(value: Any) -> tuple[str, ...]:
    """`amd64`, `amd64,arm64` (or a TOML list) as OCI names, in order, each once; default this machine's.

    The OCI names, as images carry them; toolchain.PLATFORMS maps them to zig's and Conan's.
    """
    if not value:
        return (machine_arch(),)
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    names = tuple(dict.fromkeys(str(a).strip() for a in items if str(a).strip()))
    bad = [a for a in names if a not in PLATFORMS]
    if bad or not names:
        raise UsageError(f"invalid architecture {', '.join(bad) or repr(value)}", "",
                         f"use one of: {', '.join(PLATFORMS)} (OCI names), or a comma-separated list for `hermetic all`")
    return names


def parse_substitutes(value: Any) -> tuple[Substitute, ...]:
    """A list (CLI, TOML) or a comma/space separated string (HERMETIC_SUBSTITUTES); duplicates dropped, order kept."""
    if isinstance(value, str):
        items = value.replace(",", " ").split()
    elif isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    else:
        raise UsageError(
            f"invalid substitutes {value!r}", "expected a list of REGISTRY/REPO", 'e.g. substitutes = ["registry.example.com/llvm-cache"]'
        )
    out: list[Substitute] = []
    for item in items:
        if not item:
            continue
        sub = parse_substitute(item)
        if sub not in out:
            out.append(sub)
    return tuple(out)
