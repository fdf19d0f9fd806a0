"""Helpers shared by the test tiers (a plain module, so any tier can import it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the gpu tier loads this module where hermetic is not installed
    from hermetic.model.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def hermetic(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, check: bool = True, clean: bool = False,
    umask: int = -1,
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a user would, this checkout's sources first on PYTHONPATH (whatever an editable
    install points at). `clean`: without the caller's HERMETIC_* settings, so only `args` and `env` decide."""
    base = {k: v for k, v in os.environ.items() if not (clean and k.startswith("HERMETIC_"))}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), base.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "hermetic", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        umask=umask,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"hermetic {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_hermetic(*args: str, cwd: Path, umask: int = 0o022, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`hermetic` without the caller's HERMETIC_* settings, under `umask` (the wheel builds' tests)."""
    return hermetic(*args, cwd=cwd, umask=umask, check=check, clean=True)


def resolve_in_project(tmp_path: Path, cli: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                       table: str = "") -> Settings:
    """Settings resolved in a fresh project under tmp_path: this checkout's recipes, `table` as its [tool.hermetic]."""
    from hermetic.model.options import resolve

    root = tmp_path / "proj"
    shutil.copytree(ROOT / "recipes", root / "recipes")
    (root / "pyproject.toml").write_text(f"[tool.hermetic]\n{table}\n")
    return resolve({"root": str(root), **(cli or {})}, env or {}, tmp_path)


# --- real builds, each made once per session --------------------------------------------------------------

TINY = ROOT / "tests" / "recipes" / "tiny"


class SharedBuilds:
    """Builds of a session, each made at most once: keyed by the build's inputs digest, as hermetic's plan
    computes it, so two fixtures asking for the same inputs share one build (and its work dir)."""

    def __init__(self, factory: Any, cache: Path) -> None:
        self.factory, self.cache = factory, cache
        self.made: dict[str, Path] = {}

    def inputs_digest(self, recipe_dir: Path, variant: str, toolchain: str, arch: str | None, version: str | None) -> str:
        from hermetic.build import llvm
        from hermetic.core import platforms
        from hermetic.model import recipe, toolchains

        rec = recipe.load_at(recipe_dir, version, ROOT)
        var = recipe.resolve_variant(rec, variant)
        tc = toolchains.select(toolchains.load(ROOT / "toolchain"), toolchain, None, platforms.zig_arch(arch or platforms.machine_arch()))
        return llvm.inputs_digest(rec, var, llvm.source_identity("pruned"), tc)

    def get(self, recipe_dir: Path, variant: str, toolchain: str, *, arch: str | None = None,
            version: str | None = None, extra: tuple[str, ...] = (), label: str = "") -> Path:
        """The record.json of the build (made now if this session has none with these inputs).

        `extra` options (a compile cache, compile hosts) never change a digest, so they are not part of the
        key: the first asker's build, with its options, serves every later one."""
        key = self.inputs_digest(recipe_dir, variant, toolchain, arch, version)
        if key not in self.made:
            work = self.factory.mktemp(label or f"{recipe_dir.name}-{variant}-{toolchain}-{arch or 'native'}")
            hermetic(
                "build", "llvm", "--llvm-recipe", str(recipe_dir), "--variant", variant, "--toolchain", toolchain,
                *(("--arch", arch) if arch else ()), *(("--llvm-version", version) if version else ()),
                "--work-dir", str(work), "--cache", str(self.cache), "--jobs", str(os.cpu_count() or 2),
                "--offline", "auto", "--quiet", *extra,
            )
            from hermetic.model import recipe

            rec = recipe.load_at(recipe_dir, version, ROOT)
            self.made[key] = work / rec.build_path(variant) / "record.json"
        return self.made[key]


def in_toto_verify(evidence: Path, *owners: Path) -> subprocess.CompletedProcess[str]:
    """The in-toto project's own verifier on evidence written by `hermetic intoto links/layout`."""
    import pytest

    exe = shutil.which("in-toto-verify")
    if exe is None:
        pytest.fail("in-toto-verify is missing: pip install the test extra (in-toto is pinned there)")
    return subprocess.run(
        [exe, "--layout", "root.layout", "--verification-keys", *map(str, owners), "--link-dir", "links",
         "--inspection-timeout", "120", "-v"],
        cwd=evidence, capture_output=True, text=True, timeout=300,
    )


def tampered_record(record: Path, base: Path) -> Path:
    """A record of a copy of the record's tree with one byte of one header changed (what a tamperer would
    publish), under base."""
    import json

    rec = json.loads(record.read_text())
    tree = base / "evil-tree"
    shutil.copytree(rec["install_root"], tree, symlinks=True)
    header = next(p for p in sorted(tree.rglob("*.h")) if p.is_file())
    data = bytearray(header.read_bytes())
    data[-2] ^= 1
    header.write_bytes(bytes(data))
    evil = base / "record.json"
    evil.write_text(json.dumps(rec | {"install_root": str(tree)}))
    return evil


def swap_in_tampered_image(record: Path, evidence: Path, tmp_path: Path) -> None:
    """Replace evidence/image with an image written, consistently, from the record's tree with one byte
    changed: well-formed, but not what the build step made."""
    from hermetic.oci.image import spec_from_record, write_image

    evil = write_image(spec_from_record(tampered_record(record, tmp_path)), tmp_path / "evil-image").layout
    shutil.rmtree(evidence / "image")
    shutil.copytree(evil, evidence / "image")
