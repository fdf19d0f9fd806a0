"""Commands run as another user of the machine (a uid with no account), and that user's own cache and directories."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

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
