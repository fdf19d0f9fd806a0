"""A pinned toolchain as a value: what it is and targets, and its identity, which every inputs digest names.

Its own module under core (model.toolchains loads and selects them): the build mechanisms that take a
toolchain (the wrappers, distcc's compilers) sit below the model, and this is all of it they read.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

TARGET = re.compile(r"^(?P<arch>[a-z0-9_]+)-linux-gnu(?:\.(?P<glibc>2\.\d+))?$")


UNPACK_LAYOUT = 1  # bump when the unpacked selection (keep_member) changes


WRAPPERS_VERSION = 3  # bump when the generated wrappers or profile change what a build compiles


@dataclass(frozen=True)
class SlimPin:
    """The pinned slim archive derived from the wheel: another carrier of the same unpacked tree."""

    file: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Toolchain:
    name: str
    kind: str  # zig | host
    description: str = ""
    version: str = ""
    package: str = ""
    file: str = ""
    sha256: str = ""
    clang_version: str = ""
    target: str = ""  # e.g. x86_64-linux-gnu.2.28; empty for host
    arches: tuple[str, ...] = ()
    glibc_min: str = ""
    source_date_epoch: int = 0
    # Not in identity(): a build from the slim archive and one from the wheel have the same inputs.
    slim: SlimPin | None = None

    @property
    def arch(self) -> str:
        return self.target.split("-", 1)[0] if self.target else ""

    @property
    def glibc(self) -> str:
        m = TARGET.match(self.target)
        return (m.group("glibc") or "") if m else ""

    @property
    def label(self) -> str:
        """How plans and logs name it: `zig 0.17.1 x86_64-linux-gnu.2.28`, `host`."""
        return f"{self.name} {self.version} {self.target}" if self.kind == "zig" else self.name

    def identity(self) -> dict[str, str]:
        """What makes two builds' compilers the same: goes into every inputs digest."""
        if self.kind == "host":
            return {"name": self.name, "kind": self.kind}
        return {
            "name": self.name,
            "kind": self.kind,
            "version": self.version,
            "file": self.file,
            "sha256": self.sha256,
            "target": self.target,
            "unpack_layout": str(UNPACK_LAYOUT),
            "wrappers": str(WRAPPERS_VERSION),
        }

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()
