"""Helpers shared by the test tiers (a plain module, so any tier can import it)."""

from __future__ import annotations

import os
import shlex
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
    from hermetic.model.settings import resolve

    root = tmp_path / "proj"
    shutil.copytree(ROOT / "recipes", root / "recipes")
    (root / "pyproject.toml").write_text(f"[tool.hermetic]\n{table}\n")
    return resolve({"root": str(root), **(cli or {})}, env or {}, tmp_path)


# --- another user ---------------------------------------------------------------------------------------

OTHER_UID = 64123  # a uid with no account: nothing of the machine's users is touched


def _blocked(path: Path, uid: int) -> Path | None:
    """The highest directory above `path` that `uid` may not pass through (no search permission), if any."""
    for d in reversed([path, *path.parents]):
        st = d.stat()
        if d.is_dir() and st.st_uid != uid and not st.st_mode & 0o001:
            return d
    return None


def as_user(argv: list[str], uid: int = OTHER_UID, reach: tuple[Path, ...] = ()) -> list[str]:
    """`argv` run as `uid` (gid the same, no groups) with the paths in `reach` reachable where they are.

    A directory such as /root (mode 0700) hides this Python or the checkout from another user. Rather than
    opening it up, a private mount namespace covers each such directory with an empty one (mode 0755) and
    binds back just the paths in `reach`: the other user then reaches those paths, with their own
    permissions, and nothing else of what was hidden. Needs root (the tests run as root, as CI does).
    """
    if os.geteuid() != 0:
        raise RuntimeError("running a command as another user needs root (setpriv, mount): run the tests as root, as CI does")
    binds: list[tuple[Path, Path]] = []  # (the path, the directory that hides it)
    for p in dict.fromkeys(Path(os.path.realpath(x)) for x in reach):
        top = _blocked(p, uid)
        if top is not None:
            binds.append((p, top))
    user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]
    if not binds:
        return user
    script = ["set -e", 'keep=$(mktemp -d /tmp/hermetic-view-XXXXXX)']
    for i, (p, _) in enumerate(binds):
        script += [f'mkdir "$keep/{i}"', f'mount --bind {shlex.quote(str(p))} "$keep/{i}"']
    for top in dict.fromkeys(t for _, t in binds):
        script.append(f"mount -t tmpfs -o mode=0755 hermetic-view {shlex.quote(str(top))}")
    for i, (p, _) in enumerate(binds):
        script += [f"mkdir -p {shlex.quote(str(p))}", f'mount --bind "$keep/{i}" {shlex.quote(str(p))}']
    # not exec: the kept binds are undone and their directories removed afterwards (they are in the real /tmp)
    script.append('set +e; "$@"; rc=$?')
    script += [f'umount "$keep/{i}" && rmdir "$keep/{i}"' for i in range(len(binds))]
    script.append('rmdir "$keep"; exit $rc')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "\n".join(script), "as-user", *user]


def user_cache(src: Path, dst: Path, uid: int = OTHER_UID, parts: tuple[str, ...] = (
        "sources", "pruned", "toolchains", "buildtools", "wheelhouse")) -> Path:
    """A source cache of another user's own, as a second user of the machine would have filled it: `src`'s
    files hard-linked (so still root's, read-only to it), its directories its own (mode 0755)."""
    for part in parts:
        top = src / part
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            here = dst / Path(dirpath).relative_to(src)
            here.mkdir(parents=True, exist_ok=True)
            os.chmod(here, 0o755)
            os.chown(here, uid, uid)
            for name in [*filenames, *(d for d in dirnames if os.path.islink(os.path.join(dirpath, d)))]:
                s = os.path.join(dirpath, name)
                if os.path.islink(s):
                    os.symlink(os.readlink(s), here / name)
                    os.lchown(here / name, uid, uid)
                else:
                    os.link(s, here / name)
    os.chown(dst, uid, uid)
    return dst


def user_dir(path: Path, uid: int = OTHER_UID) -> Path:
    """A fresh directory owned by `uid` (its work dir, home, cwd)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, uid)
    return path


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
        from hermetic.fetch import toolchain as tc_mod
        from hermetic.model import recipe

        rec = recipe.load_at(recipe_dir, version, ROOT)
        var = recipe.resolve_variant(rec, variant)
        tc = tc_mod.select(tc_mod.load(ROOT / "toolchain"), toolchain, None, tc_mod.zig_arch(arch or tc_mod.machine_arch()))
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
