"""SPDX licence expressions: checked against the pinned SPDX License List, found in metadata or pinned data.

The list (data/spdx-licenses.json) is the SPDX License List 3.29's identifiers
and exceptions; the table (data/licences.json) gives the expression of each
part hermetic's SBOMs name whose own metadata has none in SPDX form, with
where it was read. A package's own `License-Expression` wins when it is valid.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.parser import HeaderParser
from importlib import resources
from typing import Any

UNKNOWN = "LicenseRef-hermetic-unknown"
_TOKEN = re.compile(r"\s*(\(|\)|[A-Za-z0-9.+:-]+)")
# License classifiers (trove) that name exactly one SPDX licence; the others say too little.
_CLASSIFIERS = {
    "License :: OSI Approved :: MIT License": "MIT",
    "License :: OSI Approved :: Apache Software License": "Apache-2.0",
    "License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "License :: OSI Approved :: ISC License (ISCL)": "ISC",
    "License :: OSI Approved :: Python Software Foundation License": "PSF-2.0",
    "License :: OSI Approved :: The Unlicense (Unlicense)": "Unlicense",
}


@functools.cache
def spdx_list() -> dict[str, Any]:
    return dict(json.loads(resources.files("hermetic").joinpath("data/spdx-licenses.json").read_text()))


@functools.cache
def table() -> dict[str, Any]:
    return dict(json.loads(resources.files("hermetic").joinpath("data/licences.json").read_text()))


class _Parser:
    """SPDX license-expression grammar (SPDX 2.3 annex D): ids, `+`, WITH, AND, OR, parentheses, LicenseRef-."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0
        self.problems: list[str] = []
        known = spdx_list()
        self.licences = set(known["licenses"]) | set(known["deprecatedLicenses"])
        self.deprecated = set(known["deprecatedLicenses"]) | set(known["deprecatedExceptions"])
        self.exceptions = set(known["exceptions"]) | set(known["deprecatedExceptions"])

    def peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

    def take(self) -> str:
        tok = self.peek()
        self.pos += 1
        return tok

    def expression(self) -> None:
        self.term()
        while self.peek().upper() == "OR":
            self.take()
            self.term()

    def term(self) -> None:
        self.factor()
        while self.peek().upper() == "AND":
            self.take()
            self.factor()

    def factor(self) -> None:
        tok = self.take()
        if tok == "(":
            self.expression()
            if self.take() != ")":
                self.problems.append("unbalanced parenthesis")
            return
        self.licence(tok)
        if self.peek().upper() == "WITH":
            self.take()
            exc = self.take()
            if exc not in self.exceptions:
                self.problems.append(f"{exc!r} is not an SPDX licence exception")
            elif exc in self.deprecated:
                self.problems.append(f"{exc!r} is a deprecated SPDX identifier")

    def licence(self, tok: str) -> None:
        ident = tok.removesuffix("+")
        if not ident or ident in ("(", ")") or ident.upper() in ("AND", "OR", "WITH"):
            self.problems.append(f"expected a licence identifier, found {tok or 'the end'!r}")
        elif ident.startswith(("LicenseRef-", "DocumentRef-")):
            return
        elif ident not in self.licences:
            self.problems.append(f"{ident!r} is not on the SPDX License List {spdx_list()['licenseListVersion']}")
        elif ident in self.deprecated:
            self.problems.append(f"{ident!r} is a deprecated SPDX identifier")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if m is None:
            return [*out, "\0"]  # a character no SPDX expression has
        out.append(m.group(1))
        pos = m.end()
    return out


def problems(expression: str) -> list[str]:
    """Why `expression` is not a valid SPDX expression of listed, current identifiers; empty when it is."""
    if not expression.strip():
        return ["empty"]
    p = _Parser(expression)
    p.expression()
    if p.pos < len(p.tokens):
        p.problems.append(f"unexpected {p.tokens[p.pos]!r}")
    return p.problems


def is_valid(expression: str) -> bool:
    return not problems(expression)


@dataclass(frozen=True)
class Found:
    expression: str
    source: str  # where it was read: "METADATA License-Expression", the pinned table's note, ...


def from_metadata(text: str) -> Found | None:
    """A wheel's or sdist's METADATA/PKG-INFO: License-Expression, else a License or classifier that is SPDX."""
    headers = HeaderParser().parsestr(text)
    for field in ("License-Expression", "License"):
        value = str(headers.get(field) or "").strip()
        if value and "\n" not in value and is_valid(value):
            return Found(value, f"its metadata's {field}")
    stated = [str(c) for c in headers.get_all("Classifier") or [] if str(c).startswith("License ::")]
    if len(stated) == 1 and stated[0] in _CLASSIFIERS:  # two licence classifiers do not say which applies to what
        return Found(_CLASSIFIERS[stated[0]], "its metadata's licence classifier")
    return None


def pinned(name: str) -> Found | None:
    entry = table()["packages"].get(name.lower().replace("_", "-"))
    return Found(entry["expression"], f"pinned: {entry['from']}") if entry else None


def of_package(name: str, metadata: Mapping[str, str] | None = None) -> Found:
    """The package's licence: from its own metadata when it states one in SPDX form, else the pinned table."""
    text = (metadata or {}).get(name.lower().replace("_", "-"), "")
    found = (from_metadata(text) if text else None) or pinned(name)
    return found or Found(UNKNOWN, "neither its metadata nor hermetic's pinned table names its licence")


def of_compiler(version_line: str, toolchain_kind: str) -> Found:
    """The licence of the compiler that printed `version_line` (zig's clang, Debian's gcc, a host clang)."""
    kind = "zig" if toolchain_kind == "zig" else ("clang" if "clang" in version_line else "gcc")
    if kind == "gcc" and not re.search(r"\b(gcc|g\+\+|cc|c\+\+)\b", version_line):
        return Found(UNKNOWN, f"an unknown compiler: {version_line!r}")
    entry = table()["compilers"][kind]
    return Found(entry["expression"], f"pinned: {entry['from']}")


def runtime_parts(toolchain_kind: str, version_line: str = "") -> list[dict[str, str]]:
    """What the compiler links into every binary it makes (its runtime libraries, the C library's start files)."""
    kind = "zig" if toolchain_kind == "zig" else ("clang" if "clang" in version_line else "gcc")
    return [dict(p) for p in table()["runtime"][kind]]
