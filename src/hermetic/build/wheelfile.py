"""The wheel file as a format: names and tags, deterministic re-packing with a regenerated RECORD, and the
platform tag and glibc symbol versions its binaries need (from auditwheel and the ELF symbol tables)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermetic.core.errors import BuildError

# zip cannot store times before 1980; a wheel's entries get max(SOURCE_DATE_EPOCH, this).
ZIP_EPOCH_MIN = 315532800
_SKIP_IN_REPACK = ("RECORD", "RECORD.jws", "RECORD.p7s")



# --- wheel names and deterministic re-packing --------------------------------------------------


@dataclass(frozen=True)
class WheelName:
    distribution: str
    version: str
    build: str
    python: str
    abi: str
    platform: str

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        parts = filename.removesuffix(".whl").split("-") if filename.endswith(".whl") else []
        if len(parts) == 5:
            return cls(parts[0], parts[1], "", *parts[2:])
        if len(parts) == 6:
            return cls(*parts)
        raise BuildError(f"{filename!r} is not a wheel file name", "expected NAME-VERSION[-BUILD]-PY-ABI-PLATFORM.whl", "")

    @property
    def tag(self) -> str:
        return f"{self.python}-{self.abi}-{self.platform}"

    def filename(self) -> str:
        build = f"-{self.build}" if self.build else ""
        return f"{self.distribution}-{self.version}{build}-{self.tag}.whl"

    @property
    def dist_info(self) -> str:
        return f"{self.distribution}-{self.version}.dist-info"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _retag_wheel_file(text: str, platform_tag: str) -> str:
    out: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        if line.startswith("Tag:"):
            py, abi, _ = line.split(":", 1)[1].strip().split("-")
            line = f"Tag: {py}-{abi}-{platform_tag}"
            if line in seen:
                continue
            seen.add(line)
        out.append(line)
    return "\n".join(out) + "\n"


def _entry_mode(info: zipfile.ZipInfo) -> int:
    return 0o755 if (info.external_attr >> 16) & 0o111 else 0o644


def repack(src: Path, dest_dir: Path, epoch: int, platform_tag: str | None = None) -> Path:
    """Write src again into dest_dir, byte-for-byte determined by its contents and epoch.

    Entries sorted (the .dist-info directory last, RECORD at the very end), every timestamp
    the epoch, modes 0644 or 0755, deflate level 9, RECORD regenerated; a platform_tag
    renames the file and rewrites the Tag lines of WHEEL.
    """
    name = WheelName.parse(src.name)
    if platform_tag:
        name = WheelName(name.distribution, name.version, name.build, name.python, name.abi, platform_tag)
    dist_info = name.dist_info
    entries: dict[str, tuple[bytes, int]] = {}
    with zipfile.ZipFile(src) as zin:
        for info in zin.infolist():
            path = info.filename
            if info.is_dir():
                continue
            if path.startswith("/") or ".." in path.split("/") or "\\" in path:
                raise BuildError(f"{src.name} has an unsafe entry {path!r}", "entries must stay inside the wheel", "")
            if path in (f"{dist_info}/{s}" for s in _SKIP_IN_REPACK):
                continue
            data = zin.read(info)
            if path == f"{dist_info}/WHEEL" and platform_tag:
                data = _retag_wheel_file(data.decode(), platform_tag).encode()
            entries[path] = (data, _entry_mode(info))
    if f"{dist_info}/WHEEL" not in entries:
        raise BuildError(f"{src.name} has no {dist_info}/WHEEL", "not a valid wheel", "check the build backend's output")
    record_path = f"{dist_info}/RECORD"
    order = sorted(entries, key=lambda p: (p.startswith(dist_info + "/"), p))

    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for p in order:
        writer.writerow([p, _record_hash(entries[p][0]), len(entries[p][0])])
    writer.writerow([record_path, "", ""])
    entries[record_path] = (rows.getvalue().encode(), 0o644)
    order.append(record_path)

    date_time = time.gmtime(max(epoch, ZIP_EPOCH_MIN))[:6]
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / name.filename()
    tmp = dest.with_name(f".{dest.name}.tmp")
    with zipfile.ZipFile(tmp, "w") as zout:
        for p in order:
            data, mode = entries[p]
            info = zipfile.ZipInfo(p, date_time)
            info.create_system = 3  # unix, so external_attr carries the mode
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    os.chmod(tmp, 0o644)
    os.replace(tmp, dest)
    return dest


def verify_record(wheel: Path) -> list[str]:
    """Problems with a wheel's RECORD (empty when every entry is listed with the right hash and size)."""
    name = WheelName.parse(wheel.name)
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as z:
        names = [i.filename for i in z.infolist() if not i.is_dir()]
        record_path = f"{name.dist_info}/RECORD"
        if record_path not in names:
            return [f"no {record_path}"]
        rows = {r[0]: r for r in csv.reader(io.StringIO(z.read(record_path).decode())) if r}
        for n in names:
            if n == record_path:
                continue
            row = rows.pop(n, None)
            if row is None:
                problems.append(f"not in RECORD: {n}")
                continue
            data = z.read(n)
            if row[1] != _record_hash(data) or row[2] != str(len(data)):
                problems.append(f"RECORD mismatch: {n}")
        rows.pop(record_path, None)
        problems += [f"in RECORD but not in the wheel: {n}" for n in rows]
    return problems


# --- platform tag and glibc --------------------------------------------------------------------

_GLIBC = re.compile(r"\b(GLIBC|GLIBCXX|CXXABI)_([0-9]+(?:\.[0-9]+)+)\b")


def version_key(v: str) -> tuple[int, ...]:
    """`2.28` as (2, 28): versions compare as numbers, not text."""
    return tuple(int(x) for x in v.split("."))


def max_symbol_versions(text: str) -> dict[str, str]:
    """Highest GLIBC_/GLIBCXX_/CXXABI_ version named in readelf/objdump output."""
    best: dict[str, str] = {}
    for lib, ver in _GLIBC.findall(text):
        if lib not in best or version_key(ver) > version_key(best[lib]):
            best[lib] = ver
    return best


def symbol_versions(binary: Path) -> dict[str, str]:
    """The versions of glibc / libstdc++ the binary needs, read from its version-needs section."""
    for argv in (["readelf", "--version-info", "--wide", str(binary)], ["objdump", "-T", str(binary)]):
        if shutil.which(argv[0]) is None:
            continue
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace")
        if proc.returncode == 0:
            text = proc.stdout
            if argv[0] == "readelf":
                # only the needs, not the definitions a library might export
                text = text.split("Version needs section", 1)[-1] if "Version needs section" in text else ""
            return max_symbol_versions(text)
    raise BuildError(
        f"cannot read the symbol versions of {binary.name}", "neither readelf nor objdump is installed",
        "install binutils",
    )


def parse_auditwheel(output: str) -> dict[str, Any]:
    """The JSON report of `auditwheel show --json` (pretty-printed, maybe among log lines)."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^\{", output, re.MULTILINE):
        try:
            data, _ = decoder.raw_decode(output, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "overall_tag" in data:
            return data
    raise BuildError("auditwheel show gave no JSON report", output[-2000:], "run `auditwheel show --json WHEEL` by hand")


def platform_from_audit(audit: Mapping[str, Any], current: str) -> str:
    """The manylinux tag auditwheel calls consistent; otherwise the current (linux_*) tag stays."""
    tag = str(audit.get("overall_tag", ""))
    if tag.startswith(("manylinux", "musllinux")):
        return tag
    return current




# --- a self-contained extension: what a wheel compiled with the pinned zig toolchain must be ----------

# zig links its libc++, libc++abi and libunwind statically: the extension must not need them as shared
# libraries (nor the host's libstdc++, which would mean the host compiler slipped in).
_CXX_RUNTIME_LIBS = re.compile(r"^lib(?:stdc\+\+|c\+\+|c\+\+abi|unwind)\.so(?:\.|$)")
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library:\s*\[([^\]]+)\]")
# Symbols of the statically linked C++ runtime. Exported, they would bind against (or be bound by) another
# extension's libc++ or the interpreter's libstdc++ in the same process: two runtimes, one symbol.
_CXX_RUNTIME_SYMBOL = re.compile(r"(?:^|[^A-Za-z0-9_:])(?:std::|__1::)|^(?:__cxa_|__gxx_personality|__cxxabi|_Unwind_)")


def needed_libraries(readelf_dynamic: str) -> list[str]:
    """DT_NEEDED entries from `readelf -d` output."""
    return _NEEDED.findall(readelf_dynamic)


def defined_dynamic_symbols(nm_output: str) -> list[str]:
    """Names from `nm -D --defined-only --demangle` output (`ADDRESS TYPE NAME`, names may hold spaces)."""
    names = []
    for line in nm_output.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3:
            names.append(parts[2])
    return names


def cxx_runtime_exports(names: list[str]) -> list[str]:
    """The demangled names that belong to the C++ standard library or its ABI/unwind runtime."""
    return [n for n in names if _CXX_RUNTIME_SYMBOL.search(n)]


def debug_sections(readelf_sections: str) -> list[str]:
    """`.debug_*` section names from `readelf -S --wide` output."""
    return sorted(set(re.findall(r"\]\s+(\.debug_[A-Za-z0-9_.]+)\s", readelf_sections)))


def _binutils(argv: list[str], binary: Path) -> str:
    if shutil.which(argv[0]) is None:
        raise BuildError(f"cannot inspect {binary.name}", f"{argv[0]} is not installed", "install binutils")
    proc = subprocess.run([*argv, str(binary)], capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        raise BuildError(f"cannot inspect {binary.name}", f"`{' '.join(argv)}` failed: {proc.stderr.strip()[-500:]}",
                         "check that the file is an ELF shared object")
    return proc.stdout


def extension_problems(binary: Path, glibc_floor: str) -> list[str]:
    """Why `binary` is not a self-contained extension for glibc >= glibc_floor (empty when it is)."""
    problems: list[str] = []
    cxx_libs = [lib for lib in needed_libraries(_binutils(["readelf", "-d", "--wide"], binary))
                if _CXX_RUNTIME_LIBS.match(lib)]
    if cxx_libs:
        problems.append(f"needs {', '.join(cxx_libs)} (the C++ runtime must be linked in statically)")
    exported = cxx_runtime_exports(defined_dynamic_symbols(_binutils(["nm", "-D", "--defined-only", "--demangle"], binary)))
    if exported:
        shown = "; ".join(exported[:3]) + (f"; … {len(exported) - 3} more" if len(exported) > 3 else "")
        problems.append(f"exports {len(exported)} symbol(s) of the C++ standard library or its runtime: {shown}")
    versions = symbol_versions(binary)
    glibc = versions.get("GLIBC")
    if glibc and version_key(glibc) > version_key(glibc_floor):
        problems.append(f"needs GLIBC_{glibc}, above the target's floor {glibc_floor}")
    for lib in ("GLIBCXX", "CXXABI"):
        if lib in versions:
            problems.append(f"needs {lib}_{versions[lib]} (the host's libstdc++)")
    debug = debug_sections(_binutils(["readelf", "-S", "--wide"], binary))
    if debug:
        problems.append(f"carries debug sections {', '.join(debug)} (they name build and cache paths)")
    return problems


def manylinux_platform(glibc_floor: str, arch: str) -> str:
    """The PEP 600 tag of a glibc floor: 2.28 on x86_64 is manylinux_2_28_x86_64."""
    major, minor = glibc_floor.split(".")
    return f"manylinux_{int(major)}_{int(minor)}_{arch}"
