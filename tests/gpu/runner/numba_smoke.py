"""Numba, built from its release sdist on the runner, compiling with the llvmlite wheel `hermetic wheel --recipe
llvmlite` built against hermetic's LLVM 22: a few @njit functions checked against Python and NumPy. Writes JSON.

    python numba_smoke.py OUT.json      (run by the llvmlite venv's python)
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path


def main() -> int:
    import llvmlite
    import llvmlite.binding as llvm
    import numba
    import numpy as np
    from numba import njit

    where = {"numba": numba.__file__, "llvmlite": llvmlite.__file__, "prefix": sys.prefix}
    # the venv's own builds, not the machine's numba and llvmlite (the venv also sees the system site-packages)
    inside = all(Path(p).resolve().is_relative_to(Path(sys.prefix).resolve()) for p in (numba.__file__, llvmlite.__file__))

    @njit(cache=False)
    def add(a: int, b: int) -> int:
        return a + b

    @njit(cache=False)
    def dot(x: np.ndarray, y: np.ndarray) -> float:
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] * y[i]
        return s

    @njit(cache=False)
    def expsin(x: np.ndarray) -> np.ndarray:
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = math.exp(math.sin(x[i]))
        return out

    x = np.linspace(-3.0, 3.0, 10001)
    y = np.cos(x)
    t0 = time.perf_counter()
    got_add = add(40, 2)
    t_add = time.perf_counter() - t0
    got_dot = dot(x, y)
    got_expsin = expsin(x)
    checks = {
        "add": got_add == 42,
        "dot": bool(np.isclose(got_dot, float(np.dot(x, y)), rtol=1e-12, atol=1e-9)),
        "expsin": bool(np.allclose(got_expsin, np.exp(np.sin(x)), rtol=1e-14, atol=0.0)),
    }
    result = {
        "numba": numba.__version__, "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)), "numpy": np.__version__,
        "paths": where, "from_the_venv": inside, "checks": checks,
        "first_compile_and_call_s": round(t_add, 3),
        "passed": inside and all(checks.values()),
    }
    Path(sys.argv[1]).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
