"""What an interpreter (the runner's venv, the host's Python) imports: prints one JSON line, exits 1 when a module
named on the command line does not import.

    VENV/bin/python tests/gpu/runner/venv_probe.py [MODULE ...]     (run from /, without PYTHONPATH)
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import sys

PACKAGES = ("tilec", "torch", "cuda-bindings", "llvmlite", "numpy", "pytest", "scikit-build-core", "nanobind", "pip")


def main() -> int:
    out: dict[str, object] = {"python": sys.version.split()[0], "executable": sys.executable,
                              "in_a_venv": sys.prefix != sys.base_prefix}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    missing = {}
    for module in sys.argv[1:]:
        try:
            mod = importlib.import_module(module)
            out[f"{module}.__file__"] = getattr(mod, "__file__", None)
        except Exception as exc:  # what failed is the answer
            missing[module] = f"{type(exc).__name__}: {exc}"
    out["missing"] = missing
    print(json.dumps(out))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
