"""The settings' value types and the parsers that make them; model/options.py says where each value is read from.

Nothing below the CLI reads os.environ or TOML for hermetic's own settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# the value types of --compile-cache and --distribute live in core (the mechanisms below the model take them)
from hermetic.core.compiles import DEFAULT_PORT, DEFAULT_SLOTS, LOCAL_SCHEMES, SCHEMES
from hermetic.core.compiles import CompileCache as CompileCache
from hermetic.core.compiles import CompileHost as CompileHost
from hermetic.core.compiles import Distribution as Distribution
from hermetic.core.errors import UsageError
from hermetic.core.names import looks_like_registry, valid_repository
from hermetic.core.platforms import PLATFORMS, machine_arch

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


# -- the value types of settings: parsed here, used by the mechanisms that take them -------------------

_CACHE_EXAMPLES = "e.g. --compile-cache redis+unix:/run/redis/redis.sock or --compile-cache file:///srv/ccache"


def parse_compile_cache(text: str) -> CompileCache:
    """`redis+unix:/path/sock`, `file:///dir`, or (only without isolation) `redis://host:port`, `http://host/…`.

    ccache's own attributes may follow the URL after `|` (`file:///dir|umask=002`); they are passed on as given.
    """
    raw = str(text).strip()
    base = raw.partition("|")[0]
    scheme = base.partition(":")[0].lower()
    if scheme not in SCHEMES:
        raise UsageError(
            f"invalid compile cache {text!r}",
            f"the scheme must be one of {', '.join(s + ':' for s in SCHEMES)} (ccache's remote storage)",
            _CACHE_EXAMPLES,
        )
    parts = urlsplit(base)
    if scheme in LOCAL_SCHEMES:
        # redis+unix:/path and redis+unix:///path are both ccache's spelling; file: wants file:///path
        path = parts.path
        if parts.netloc or not path.startswith("/") or parts.query or parts.fragment or (scheme == "file" and not base.startswith("file:///")):
            raise UsageError(
                f"invalid compile cache {text!r}",
                f"a {scheme} cache names an absolute path on this machine",
                "use redis+unix:/ABSOLUTE/redis.sock or file:///ABSOLUTE/DIR",
            )
        return CompileCache(raw, scheme, path)
    if not parts.hostname:
        raise UsageError(f"invalid compile cache {text!r}", "a network cache needs a host", "e.g. redis://HOST:6379")
    try:
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"invalid compile cache {text!r}", str(exc), "e.g. redis://HOST:6379") from exc
    address = parts.hostname + (f":{port}" if port else "")
    return CompileCache(raw, scheme, "", address)


def parse_compile_cache_setting(value: Any) -> CompileCache | None:
    """--compile-cache, HERMETIC_COMPILE_CACHE or [tool.hermetic] compile_cache; empty means none."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise UsageError(f"invalid compile cache {value!r}", "expected one URL as a string", _CACHE_EXAMPLES)
    return parse_compile_cache(value)


_HOSTS_EXAMPLES = "e.g. --distribute 10.0.0.5,10.0.0.6:3632/8 (HOST[:PORT][/SLOTS], comma or space separated)"
_HOST = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?))"
                   r"(?::(?P<port>\d+))?(?:/(?P<slots>\d+))?$")


def parse_host(text: str) -> CompileHost:
    m = _HOST.match(text)
    if not m:
        raise UsageError(f"invalid compile host {text!r}", "expected HOST[:PORT][/SLOTS]", _HOSTS_EXAMPLES)
    host = m.group("v6") or m.group("name")
    if host.lower() == "localhost":
        raise UsageError(
            f"invalid compile host {text!r}",
            "distcc reads `localhost` as compiling here without a daemon, which is what a build without --distribute does",
            "name a daemon by address: a distccd on this machine is 127.0.0.1 (or 127.0.0.2, …, where it listens)",
        )
    port = int(m.group("port")) if m.group("port") else DEFAULT_PORT
    slots = int(m.group("slots")) if m.group("slots") else DEFAULT_SLOTS
    if not 0 < port < 65536:
        raise UsageError(f"invalid compile host {text!r}", f"port {port} is out of range", _HOSTS_EXAMPLES)
    if not 0 < slots <= 256:
        raise UsageError(f"invalid compile host {text!r}", f"{slots} slots: expected 1 to 256", _HOSTS_EXAMPLES)
    return CompileHost(host, port, slots)


def parse_distribute_setting(value: Any) -> Distribution | None:
    """--distribute, HERMETIC_DISTRIBUTE or [tool.hermetic] distribute: hosts separated by commas or spaces (or a
    TOML list); empty means none. A host named twice is refused: its slots would be counted twice."""
    if value is None:
        return None
    if isinstance(value, str):
        items = value.replace(",", " ").split()
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        items = [i for v in value for i in str(v).replace(",", " ").split()]
    else:
        raise UsageError(f"invalid compile hosts {value!r}", "expected a string or a list of strings", _HOSTS_EXAMPLES)
    if not items:
        return None
    hosts = tuple(parse_host(i) for i in items)
    seen: set[str] = set()
    for h in hosts:
        if h.address in seen:
            raise UsageError(f"compile host {h.address} is named twice", "each daemon is one host with its slots",
                             "name it once, with /SLOTS for how many jobs it takes")
        seen.add(h.address)
    return Distribution(hosts)


@dataclass(frozen=True)
class Substitute:
    """A repository that may hold finished builds, found by their inputs digest (`--substitute`)."""

    registry: str
    repository: str
    insecure: bool = False  # plain http: written as http://REGISTRY/REPO

    def __str__(self) -> str:
        return f"{'http://' if self.insecure else ''}{self.registry}/{self.repository}"


def parse_substitute(text: str) -> Substitute:
    """`REGISTRY/REPO`, or `http://REGISTRY/REPO` for a plain-http registry (one on this machine).

    No tag or digest: the tag is derived from each build's inputs digest. The registry must be named,
    since a lookup on Docker Hub by default would be a surprise.
    """
    raw = text.strip()
    insecure = raw.startswith("http://")
    rest = raw.removeprefix("http://").removeprefix("https://")
    first, slash, path = rest.partition("/")
    if not slash or not looks_like_registry(first) or not valid_repository(path) or any(c.isspace() for c in rest):
        raise UsageError(
            f"invalid substitute {text!r}",
            "expected REGISTRY/REPOSITORY (https) or http://REGISTRY/REPOSITORY (plain http), without a tag or digest",
            "for example --substitute registry.example.com/llvm-cache or --substitute http://127.0.0.1:5000/llvm-cache",
        )
    return Substitute(first, path, insecure)


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
    def wheelhouse_dir(self) -> Path:
        """The pinned build requirements' wheels: `wheelhouse`, else <cache>/wheelhouse."""
        return self.wheelhouse or self.cache_dir / "wheelhouse"

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


# -- the parsers of the plain settings: the raw value of the first layer that gives one (None if none) -> the value

def parse_bool(name: str, value: Any, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise UsageError(f"invalid value for {name}: {value!r}", "expected a boolean", "use 1/0, true/false")


def parse_text(value: Any) -> str | None:
    """A name (variant, toolchain); empty means the default."""
    return str(value) if value else None


def parse_stripped(value: Any) -> str | None:
    return str(value).strip() if value else None


def parse_path(value: Any) -> Path | None:
    """A file or directory made absolute; empty means none."""
    return Path(str(value)).expanduser().resolve() if value else None


def parse_mirrors(value: Any) -> tuple[Path, ...]:
    """A list (CLI, TOML) or an os.pathsep-separated string (HERMETIC_MIRRORS)."""
    items = value or ()
    if isinstance(items, str):
        items = [m for m in items.split(os.pathsep) if m]
    return tuple(Path(m).expanduser().resolve() for m in items)


def parse_offline(value: Any) -> str:
    offline = "auto" if value is None else str(value)
    if offline not in OFFLINE_MODES:
        raise UsageError(f"invalid offline mode {offline!r}", "", f"use one of: {', '.join(OFFLINE_MODES)}")
    return offline


def parse_jobs(value: Any) -> int:
    try:
        jobs = int((os.cpu_count() or 1) if value is None else value)
    except ValueError as exc:
        raise UsageError(f"invalid job count {value!r}", "", "give a positive integer") from exc
    if jobs < 1:
        raise UsageError(f"invalid job count {jobs}", "", "give a positive integer")
    return jobs


def parse_glibc(value: Any) -> str | None:
    glibc = str(value).strip() if value else None
    if glibc is not None and not _GLIBC.match(glibc):
        raise UsageError(f"invalid glibc floor {glibc!r}", "expected 2.NN", "e.g. --glibc 2.28 (or 2.17)")
    return glibc


def parse_recipe(value: Any, cwd: Path) -> str | None:
    """A recipe name (recipes/NAME) as given; a path (anything with a `/`) made absolute."""
    if not value:
        return None
    text = str(value).strip()
    if "/" not in text:
        return text
    return str((cwd / Path(text).expanduser()).resolve())


def parse_arches(value: Any) -> tuple[str, ...]:
    """`amd64`, `amd64,arm64` (or a TOML list) as OCI names, in order, each once; default this machine's.

    The OCI names, as images carry them; platforms.PLATFORMS maps them to zig's and Conan's.
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
    if value is None:
        return ()
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
