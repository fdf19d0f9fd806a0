"""Where a build's compiles may go beyond this machine, as the settings parse them (model.settings): a shared
compile cache (--compile-cache) and compile hosts (--distribute).

Plain values in core: the mechanisms that take them (build.compile_cache, build.distribute) sit under
build.env, below the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

SCHEMES = ("redis+unix", "file", "redis", "http")
LOCAL_SCHEMES = ("redis+unix", "file")  # reached through the file system: fine inside the network namespace


@dataclass(frozen=True)
class CompileCache:
    """A parsed --compile-cache URL: what ccache is given (`url`) and what it names."""

    url: str  # as ccache takes it, attributes (`|umask=002`, `|read-only`) included
    scheme: str
    path: str  # the socket or directory of a local cache; "" for a network one
    address: str = ""  # host:port of a network cache

    @property
    def local(self) -> bool:
        return self.scheme in LOCAL_SCHEMES

    @property
    def shown(self) -> str:
        """The URL without a password, as plans and records name it."""
        base, bar, attrs = self.url.partition("|")
        parts = urlsplit(base)
        if parts.password is None:
            return self.url
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc)) + bar + attrs


DEFAULT_PORT = 3632  # distccd's
DEFAULT_SLOTS = 4  # distcc's default limit of jobs a TCP host is given at once


@dataclass(frozen=True)
class CompileHost:
    host: str
    port: int = DEFAULT_PORT
    slots: int = DEFAULT_SLOTS

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def spec(self) -> str:
        return f"{self.address}/{self.slots}"


@dataclass(frozen=True)
class Distribution:
    """The parsed --distribute: the compile hosts, in the order given."""

    hosts: tuple[CompileHost, ...]

    @property
    def shown(self) -> str:
        return " ".join(h.spec for h in self.hosts)

    @property
    def slots(self) -> int:
        return sum(h.slots for h in self.hosts)
