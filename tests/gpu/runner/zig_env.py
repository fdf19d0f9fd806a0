"""Print `export NAME=VALUE` lines for the pinned zig toolchain's compiler wrappers, for a build that
is not a hermetic one (a third-party sdist on the runner) to compile with the very compiler and C++
library the LLVM tree was built with: libraries built against zig's libc++ do not link with code
compiled against the machine's libstdc++.

    eval "$(python3 zig_env.py REPO CACHE_DIR OUT_DIR ZIG_CACHE [MIRROR])"
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def main() -> int:
    repo, cache, out, zig_cache = (Path(a) for a in sys.argv[1:5])
    mirrors = tuple(Path(m) for m in sys.argv[5:6] if m)
    sys.path.insert(0, str(repo / "src"))
    from hermetic import toolchain

    tc = toolchain.select(toolchain.load(repo / "toolchain"), "zig")
    zig_root = toolchain.ensure(cache, tc, mirrors, False)
    prepared = toolchain.prepare(tc, zig_root, out, repo / "toolchain", zig_cache)
    for name, value in sorted(prepared.env.items()):
        print(f"export {name}={shlex.quote(value)}")
    print(f"# {tc.label}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
